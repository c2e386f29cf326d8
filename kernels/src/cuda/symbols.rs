//! Every CUDA entry point the runtime launches, as typed constants: a [`CudaKernel`] is
//! one family of `extern "C"` kernels (`exp_f32`, `exp_f64`, ...), naming its module and
//! its symbol for each dtype it is instantiated for. The symbol names are assembled at
//! compile time (`concat!`), so no launch builds a name, and [`KERNELS`] lists them all
//! for the test that checks each one against the NVRTC-compiled modules.

use super::{ELEMENTWISE, INDEX, KernelModule, ROWS};
use crate::DType;
use crate::fused::{attention, cross_entropy, dropout, layer_norm, optim, pool};

/// One family of CUDA kernels: the same template instantiated per dtype as `BASE_DTYPE`.
///
/// ```
/// use ferrograd_kernels::DType;
/// use ferrograd_kernels::cuda::{EXP, WHERE};
/// assert_eq!(EXP.symbol(DType::BF16), Some("exp_bf16"));
/// assert_eq!(EXP.symbol(DType::I64), None); // float kernels only
/// assert_eq!(WHERE.module().name, "elementwise");
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct CudaKernel {
    module: &'static KernelModule,
    base: &'static str,
    /// The entry point per dtype, indexed by `DType as usize` (the order of `FOR_ALL` in
    /// common.cuh); `None` where the family has no instantiation.
    symbols: [Option<&'static str>; 7],
}

impl CudaKernel {
    /// The module whose source defines this family.
    pub fn module(&self) -> &'static KernelModule {
        self.module
    }

    /// The family's name (the symbols without their dtype suffix).
    pub fn base(&self) -> &'static str {
        self.base
    }

    /// The entry point for `dtype`, or `None` when the family is not instantiated for it.
    pub fn symbol(&self, dtype: DType) -> Option<&'static str> {
        self.symbols[dtype as usize]
    }

    /// Every (dtype, symbol) pair of the family.
    pub fn symbols(&self) -> impl Iterator<Item = (DType, &'static str)> + '_ {
        BY_INDEX
            .iter()
            .zip(self.symbols)
            .filter_map(|(&d, s)| s.map(|s| (d, s)))
    }
}

/// The dtypes in declaration order: the index of a family's symbol table.
const BY_INDEX: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::U8,
    DType::Bool,
];

/// The symbol table of a family over a dtype list (the `FOR_*` lists of common.cuh).
macro_rules! symbols {
    ($base:literal, floats) => {
        [
            Some(concat!($base, "_f32")),
            Some(concat!($base, "_f64")),
            Some(concat!($base, "_f16")),
            Some(concat!($base, "_bf16")),
            None,
            None,
            None,
        ]
    };
    ($base:literal, floats_i64) => {
        [
            Some(concat!($base, "_f32")),
            Some(concat!($base, "_f64")),
            Some(concat!($base, "_f16")),
            Some(concat!($base, "_bf16")),
            Some(concat!($base, "_i64")),
            None,
            None,
        ]
    };
    ($base:literal, nums) => {
        [
            Some(concat!($base, "_f32")),
            Some(concat!($base, "_f64")),
            Some(concat!($base, "_f16")),
            Some(concat!($base, "_bf16")),
            Some(concat!($base, "_i64")),
            Some(concat!($base, "_u8")),
            None,
        ]
    };
    ($base:literal, all) => {
        [
            Some(concat!($base, "_f32")),
            Some(concat!($base, "_f64")),
            Some(concat!($base, "_f16")),
            Some(concat!($base, "_bf16")),
            Some(concat!($base, "_i64")),
            Some(concat!($base, "_u8")),
            Some(concat!($base, "_bool")),
        ]
    };
    ($base:literal, bool) => {
        [
            None,
            None,
            None,
            None,
            None,
            None,
            Some(concat!($base, "_bool")),
        ]
    };
}

/// Declares each family once and the list of all of them.
macro_rules! kernels {
    ($( $(#[$m:meta])* $name:ident = $module:path, $base:literal $dtypes:ident; )*) => {
        $(
            $(#[$m])*
            pub const $name: CudaKernel = CudaKernel {
                module: &$module,
                base: $base,
                symbols: symbols!($base, $dtypes),
            };
        )*
        /// Every kernel family the runtime may launch.
        pub const KERNELS: &[&CudaKernel] = &[$(&$name),*];
    };
}

kernels! {
    /// `out = a + alpha * b`, strided/broadcast.
    ADD = ELEMENTWISE, "add" nums;
    /// In-place [`ADD`] into a strided region.
    ADD_INPLACE = ELEMENTWISE, "add_inplace" nums;
    /// `out = a - alpha * b`.
    SUB = ELEMENTWISE, "sub" nums;
    /// In-place [`SUB`].
    SUB_INPLACE = ELEMENTWISE, "sub_inplace" nums;
    /// `out = a * (alpha * b)`.
    MUL = ELEMENTWISE, "mul" nums;
    /// In-place [`MUL`].
    MUL_INPLACE = ELEMENTWISE, "mul_inplace" nums;
    /// `out = a / (alpha * b)`.
    DIV = ELEMENTWISE, "div" nums;
    /// In-place [`DIV`].
    DIV_INPLACE = ELEMENTWISE, "div_inplace" nums;
    /// NaN-propagating elementwise maximum.
    MAXIMUM = ELEMENTWISE, "maximum" nums;
    /// In-place [`MAXIMUM`].
    MAXIMUM_INPLACE = ELEMENTWISE, "maximum_inplace" nums;
    /// NaN-propagating elementwise minimum.
    MINIMUM = ELEMENTWISE, "minimum" nums;
    /// In-place [`MINIMUM`].
    MINIMUM_INPLACE = ELEMENTWISE, "minimum_inplace" nums;
    /// `a ** b`.
    POW = ELEMENTWISE, "pow" floats;
    /// In-place [`POW`].
    POW_INPLACE = ELEMENTWISE, "pow_inplace" floats;
    /// `atan2(a, b)`.
    ATAN2 = ELEMENTWISE, "atan2" floats;
    /// In-place [`ATAN2`].
    ATAN2_INPLACE = ELEMENTWISE, "atan2_inplace" floats;
    /// GELU's backward `g * gelu'(x)` (erf form), `a = g`, `b = x`.
    GELU_BACKWARD = ELEMENTWISE, "gelu_backward" floats;
    /// In-place [`GELU_BACKWARD`] (into `g`).
    GELU_BACKWARD_INPLACE = ELEMENTWISE, "gelu_backward_inplace" floats;
    /// GELU's backward with the tanh approximation.
    GELU_TANH_BACKWARD = ELEMENTWISE, "gelu_tanh_backward" floats;
    /// In-place [`GELU_TANH_BACKWARD`].
    GELU_TANH_BACKWARD_INPLACE = ELEMENTWISE, "gelu_tanh_backward_inplace" floats;
    /// SiLU's backward `g * s * (1 + x * (1 - s))`, `s = sigmoid(x)`.
    SILU_BACKWARD = ELEMENTWISE, "silu_backward" floats;
    /// In-place [`SILU_BACKWARD`].
    SILU_BACKWARD_INPLACE = ELEMENTWISE, "silu_backward_inplace" floats;
    /// ReLU's backward `x <= 0 ? 0 : g` (PyTorch's `threshold_backward`).
    RELU_BACKWARD = ELEMENTWISE, "relu_backward" floats;
    /// In-place [`RELU_BACKWARD`].
    RELU_BACKWARD_INPLACE = ELEMENTWISE, "relu_backward_inplace" floats;
    /// `out = alpha * b` (a copy; `a` is ignored).
    ASSIGN = ELEMENTWISE, "assign" all;
    /// In-place [`ASSIGN`]: a strided copy into a region.
    ASSIGN_INPLACE = ELEMENTWISE, "assign_inplace" all;
    /// Logical and of bool tensors.
    LOGICAL_AND = ELEMENTWISE, "logical_and" bool;

    /// `e^x`.
    EXP = ELEMENTWISE, "exp" floats;
    /// In-place [`EXP`].
    EXP_INPLACE = ELEMENTWISE, "exp_inplace" floats;
    /// `ln x`.
    LOG = ELEMENTWISE, "log" floats;
    /// In-place [`LOG`].
    LOG_INPLACE = ELEMENTWISE, "log_inplace" floats;
    /// `sqrt x`.
    SQRT = ELEMENTWISE, "sqrt" floats;
    /// In-place [`SQRT`].
    SQRT_INPLACE = ELEMENTWISE, "sqrt_inplace" floats;
    /// `1 / sqrt x`.
    RSQRT = ELEMENTWISE, "rsqrt" floats;
    /// In-place [`RSQRT`].
    RSQRT_INPLACE = ELEMENTWISE, "rsqrt_inplace" floats;
    /// `sin x`.
    SIN = ELEMENTWISE, "sin" floats;
    /// In-place [`SIN`].
    SIN_INPLACE = ELEMENTWISE, "sin_inplace" floats;
    /// `cos x`.
    COS = ELEMENTWISE, "cos" floats;
    /// In-place [`COS`].
    COS_INPLACE = ELEMENTWISE, "cos_inplace" floats;
    /// `tanh x`.
    TANH = ELEMENTWISE, "tanh" floats;
    /// In-place [`TANH`].
    TANH_INPLACE = ELEMENTWISE, "tanh_inplace" floats;
    /// `-x`.
    NEG = ELEMENTWISE, "neg" floats;
    /// In-place [`NEG`].
    NEG_INPLACE = ELEMENTWISE, "neg_inplace" floats;
    /// `|x|`.
    ABS = ELEMENTWISE, "abs" floats;
    /// In-place [`ABS`].
    ABS_INPLACE = ELEMENTWISE, "abs_inplace" floats;
    /// The sign of x (0 at 0).
    SIGN = ELEMENTWISE, "sign" floats;
    /// In-place [`SIGN`].
    SIGN_INPLACE = ELEMENTWISE, "sign_inplace" floats;
    /// `max(x, 0)`.
    RELU = ELEMENTWISE, "relu" floats;
    /// In-place [`RELU`].
    RELU_INPLACE = ELEMENTWISE, "relu_inplace" floats;
    /// The error function.
    ERF = ELEMENTWISE, "erf" floats;
    /// In-place [`ERF`].
    ERF_INPLACE = ELEMENTWISE, "erf_inplace" floats;
    /// The logistic function.
    SIGMOID = ELEMENTWISE, "sigmoid" floats;
    /// In-place [`SIGMOID`].
    SIGMOID_INPLACE = ELEMENTWISE, "sigmoid_inplace" floats;
    /// `x * sigmoid(x)`.
    SILU = ELEMENTWISE, "silu" floats;
    /// In-place [`SILU`].
    SILU_INPLACE = ELEMENTWISE, "silu_inplace" floats;
    /// GELU with the exact (erf) form.
    GELU = ELEMENTWISE, "gelu" floats;
    /// In-place [`GELU`].
    GELU_INPLACE = ELEMENTWISE, "gelu_inplace" floats;
    /// GELU with the tanh approximation.
    GELU_TANH = ELEMENTWISE, "gelu_tanh" floats;
    /// In-place [`GELU_TANH`].
    GELU_TANH_INPLACE = ELEMENTWISE, "gelu_tanh_inplace" floats;
    /// `x > 0 ? x : p0 * x` (leaky ReLU).
    LEAKY_RELU = ELEMENTWISE, "leaky_relu" floats;
    /// In-place [`LEAKY_RELU`].
    LEAKY_RELU_INPLACE = ELEMENTWISE, "leaky_relu_inplace" floats;
    /// `x > 0 ? x : p0 * (e^x - 1)` (ELU).
    ELU = ELEMENTWISE, "elu" floats;
    /// In-place [`ELU`].
    ELU_INPLACE = ELEMENTWISE, "elu_inplace" floats;
    /// `ln(1 + e^(p0 x)) / p0`, the identity above `p1` (softplus).
    SOFTPLUS = ELEMENTWISE, "softplus" floats;
    /// In-place [`SOFTPLUS`].
    SOFTPLUS_INPLACE = ELEMENTWISE, "softplus_inplace" floats;
    /// `relu6(x + 3) / 6`.
    HARDSIGMOID = ELEMENTWISE, "hardsigmoid" floats;
    /// In-place [`HARDSIGMOID`].
    HARDSIGMOID_INPLACE = ELEMENTWISE, "hardsigmoid_inplace" floats;
    /// `x * relu6(x + 3) / 6`.
    HARDSWISH = ELEMENTWISE, "hardswish" floats;
    /// In-place [`HARDSWISH`].
    HARDSWISH_INPLACE = ELEMENTWISE, "hardswish_inplace" floats;
    /// `x * tanh(ln(1 + e^x))` (Mish).
    MISH = ELEMENTWISE, "mish" floats;
    /// In-place [`MISH`].
    MISH_INPLACE = ELEMENTWISE, "mish_inplace" floats;
    /// `x * p0 + p1`.
    AFFINE = ELEMENTWISE, "affine" floats;
    /// In-place [`AFFINE`].
    AFFINE_INPLACE = ELEMENTWISE, "affine_inplace" floats;
    /// `x / p0`.
    DIV_SCALAR = ELEMENTWISE, "div_scalar" floats;
    /// In-place [`DIV_SCALAR`].
    DIV_SCALAR_INPLACE = ELEMENTWISE, "div_scalar_inplace" floats;
    /// `p0 / x`.
    RDIV_SCALAR = ELEMENTWISE, "rdiv_scalar" floats;
    /// In-place [`RDIV_SCALAR`].
    RDIV_SCALAR_INPLACE = ELEMENTWISE, "rdiv_scalar_inplace" floats;
    /// `x ** p0`.
    POW_SCALAR = ELEMENTWISE, "pow_scalar" floats;
    /// In-place [`POW_SCALAR`].
    POW_SCALAR_INPLACE = ELEMENTWISE, "pow_scalar_inplace" floats;
    /// `min(max(x, p0), p1)`, NaN propagating, branch-free.
    CLAMP = ELEMENTWISE, "clamp" floats;
    /// In-place [`CLAMP`].
    CLAMP_INPLACE = ELEMENTWISE, "clamp_inplace" floats;

    /// `a == b` to bool.
    EQ = ELEMENTWISE, "eq" all;
    /// `a != b` to bool.
    NE = ELEMENTWISE, "ne" all;
    /// `a < b` to bool.
    LT = ELEMENTWISE, "lt" all;
    /// `a <= b` to bool.
    LE = ELEMENTWISE, "le" all;
    /// `a > b` to bool.
    GT = ELEMENTWISE, "gt" all;
    /// `a >= b` to bool.
    GE = ELEMENTWISE, "ge" all;
    /// `cond ? a : b`.
    WHERE = ELEMENTWISE, "where" all;
    /// A strided copy to a contiguous buffer of the same dtype.
    COPY = ELEMENTWISE, "copy" all;
    /// Fill a strided region with one value.
    FILL = ELEMENTWISE, "fill" all;
    /// Philox dropout: output and scaled mask.
    DROPOUT = dropout::CUDA_MODULE, "dropout" floats;

    /// Reduction by sum of contiguous rows.
    SUM_ROWS = ROWS, "sum_rows" floats_i64;
    /// Reduction by sum along a strided middle dim.
    SUM_COLS = ROWS, "sum_cols" floats_i64;
    /// Reduction by product of contiguous rows.
    PROD_ROWS = ROWS, "prod_rows" floats_i64;
    /// Reduction by product along a strided middle dim.
    PROD_COLS = ROWS, "prod_cols" floats_i64;
    /// Sums of chunks of contiguous rows, into accumulator partials.
    SUM_ROW_CHUNKS = ROWS, "sum_row_chunks" floats_i64;
    /// Sums along a middle dim by 32-column tiles, whole or in chunks of it.
    SUM_COLS_TILED = ROWS, "sum_cols_tiled" floats_i64;
    /// Sums of the partials of a split reduction.
    SUM_FINISH = ROWS, "sum_finish" floats_i64;
    /// Products of chunks of contiguous rows, into accumulator partials.
    PROD_ROW_CHUNKS = ROWS, "prod_row_chunks" floats_i64;
    /// Products along a middle dim by 32-column tiles, whole or in chunks of it.
    PROD_COLS_TILED = ROWS, "prod_cols_tiled" floats_i64;
    /// Products of the partials of a split reduction.
    PROD_FINISH = ROWS, "prod_finish" floats_i64;
    /// Max and its first index, rows.
    ARGMAX_ROWS = ROWS, "argmax_rows" all;
    /// Max and its first index, middle dim.
    ARGMAX_COLS = ROWS, "argmax_cols" all;
    /// Min and its first index, rows.
    ARGMIN_ROWS = ROWS, "argmin_rows" all;
    /// Min and its first index, middle dim.
    ARGMIN_COLS = ROWS, "argmin_cols" all;
    /// Softmax of rows.
    SOFTMAX_ROWS = ROWS, "softmax_rows" floats;
    /// Log-softmax of rows.
    LOG_SOFTMAX_ROWS = ROWS, "log_softmax_rows" floats;
    /// Softmax input gradient of rows, from the output and its gradient.
    SOFTMAX_BACKWARD_ROWS = ROWS, "softmax_backward_rows" floats;
    /// Log-softmax input gradient of rows, from the output and its gradient.
    LOG_SOFTMAX_BACKWARD_ROWS = ROWS, "log_softmax_backward_rows" floats;
    /// Inclusive prefix sums along the middle dim.
    CUMSUM_COLS = ROWS, "cumsum_cols" floats_i64;
    /// Fused layer norm forward (output, mean, rstd).
    LAYER_NORM_ROWS = layer_norm::CUDA_MODULE, "layer_norm_rows" floats;
    /// Fused layer norm input gradient.
    LAYER_NORM_BACKWARD_ROWS = layer_norm::CUDA_MODULE, "layer_norm_backward_rows" floats;
    /// Banded partial sums of the layer norm parameter gradients.
    LAYER_NORM_PARAM_PARTIALS = layer_norm::CUDA_MODULE, "layer_norm_param_partials" floats;
    /// Fused cross-entropy forward.
    CROSS_ENTROPY_ROWS = cross_entropy::CUDA_MODULE, "cross_entropy_rows" floats;
    /// Fused cross-entropy logits gradient.
    CROSS_ENTROPY_BACKWARD_ROWS = cross_entropy::CUDA_MODULE, "cross_entropy_backward_rows" floats;

    /// Rows of a contiguous input picked by int64 indices.
    INDEX_SELECT = INDEX, "index_select" all;
    /// `torch.gather` along a dim.
    GATHER = INDEX, "gather" all;
    /// `out[index] += src` along a dim, with atomics.
    SCATTER_ADD = INDEX, "scatter_add" nums;
    /// im2col.
    UNFOLD2D = INDEX, "unfold2d" nums;
    /// col2im, the adjoint of [`UNFOLD2D`].
    FOLD2D = INDEX, "fold2d" nums;
    /// Max pooling with in-plane indices.
    MAX_POOL2D = pool::CUDA_MODULE, "max_pool2d" floats;
    /// Max pooling's input gradient.
    MAX_POOL2D_BACKWARD = pool::CUDA_MODULE, "max_pool2d_backward" floats;
    /// Average pooling.
    AVG_POOL2D = pool::CUDA_MODULE, "avg_pool2d" floats;
    /// Average pooling's input gradient.
    AVG_POOL2D_BACKWARD = pool::CUDA_MODULE, "avg_pool2d_backward" floats;

    /// Fused scaled-dot-product attention forward (output and row log-sum-exp).
    ATTENTION_FORWARD = attention::CUDA_MODULE, "attention_forward" floats;

    /// One Adam/AdamW step of every parameter of a dtype.
    ADAM_MULTI = optim::CUDA_MODULE, "adam_multi" floats;
    /// One SGD step of every parameter of a dtype.
    SGD_MULTI = optim::CUDA_MODULE, "sgd_multi" floats;
    /// One RMSprop step of every parameter of a dtype.
    RMSPROP_MULTI = optim::CUDA_MODULE, "rmsprop_multi" floats;
    /// One Adagrad step of every parameter of a dtype.
    ADAGRAD_MULTI = optim::CUDA_MODULE, "adagrad_multi" floats;
    /// One Adadelta step of every parameter of a dtype.
    ADADELTA_MULTI = optim::CUDA_MODULE, "adadelta_multi" floats;
    /// One Adamax step of every parameter of a dtype.
    ADAMAX_MULTI = optim::CUDA_MODULE, "adamax_multi" floats;
    /// One NAdam step of every parameter of a dtype.
    NADAM_MULTI = optim::CUDA_MODULE, "nadam_multi" floats;
    /// One RAdam step of every parameter of a dtype.
    RADAM_MULTI = optim::CUDA_MODULE, "radam_multi" floats;
}

/// The symbols `cast_S_D` of one source dtype, indexed by destination.
macro_rules! cast_row {
    ($s:literal) => {
        [
            concat!("cast_", $s, "_f32"),
            concat!("cast_", $s, "_f64"),
            concat!("cast_", $s, "_f16"),
            concat!("cast_", $s, "_bf16"),
            concat!("cast_", $s, "_i64"),
            concat!("cast_", $s, "_u8"),
            concat!("cast_", $s, "_bool"),
        ]
    };
}

/// The conversion kernels `cast_S_D` (module [`ELEMENTWISE`]), indexed by source, then
/// destination dtype.
const CASTS: [[&str; 7]; 7] = [
    cast_row!("f32"),
    cast_row!("f64"),
    cast_row!("f16"),
    cast_row!("bf16"),
    cast_row!("i64"),
    cast_row!("u8"),
    cast_row!("bool"),
];

/// The kernel converting `src` elements to `dst` (in module [`ELEMENTWISE`]).
///
/// ```
/// use ferrograd_kernels::DType;
/// assert_eq!(ferrograd_kernels::cuda::cast_symbol(DType::I64, DType::F16), "cast_i64_f16");
/// ```
pub fn cast_symbol(src: DType, dst: DType) -> &'static str {
    CASTS[src as usize][dst as usize]
}

/// Every symbol of module `module` that the runtime may launch.
///
/// ```
/// use ferrograd_kernels::cuda::{ROWS, launched_symbols};
/// assert!(launched_symbols(&ROWS).any(|s| s == "softmax_rows_f32"));
/// ```
pub fn launched_symbols(module: &KernelModule) -> impl Iterator<Item = &'static str> + '_ {
    let families = KERNELS
        .iter()
        .filter(move |k| k.module.name == module.name)
        .flat_map(|k| k.symbols().map(|(_, s)| s));
    let casts = CASTS
        .iter()
        .flatten()
        .copied()
        .filter(move |_| module.name == ELEMENTWISE.name);
    families.chain(casts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_follow_the_dtype_order_of_common_cuh() {
        assert_eq!(ADD.symbol(DType::U8), Some("add_u8"));
        assert_eq!(SUM_ROWS.symbol(DType::I64), Some("sum_rows_i64"));
        assert_eq!(SUM_ROWS.symbol(DType::U8), None);
        assert_eq!(LOGICAL_AND.symbol(DType::Bool), Some("logical_and_bool"));
        assert_eq!(LOGICAL_AND.symbol(DType::F32), None);
        for (i, dtype) in BY_INDEX.into_iter().enumerate() {
            assert_eq!(dtype as usize, i);
            assert_eq!(
                WHERE.symbols().nth(i),
                Some((dtype, WHERE.symbol(dtype).unwrap()))
            );
        }
        assert_eq!(cast_symbol(DType::BF16, DType::Bool), "cast_bf16_bool");
    }

    #[test]
    fn every_family_is_listed_once() {
        let mut names: Vec<&str> = KERNELS.iter().map(|k| k.base()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
