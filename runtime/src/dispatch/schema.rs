//! What each op is: its name and attributes, described once. The tracer exports from it
//! (`onnx::export` maps each variant to ONNX nodes), the profiler names its events after
//! it, and user hooks see it through [`OpEvent`](super::OpEvent).

use crate::{DType, Tensor};

/// A unary elementwise function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Unary {
    Relu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Neg,
    Abs,
    Erf,
    Sin,
    Cos,
    Gelu,
    GeluTanh,
    Silu,
    Mish,
    HardSwish,
    HardSigmoid,
    Softplus { beta: f64, threshold: f64 },
    LeakyRelu(f64),
    Elu(f64),
    Clamp(Option<f64>, Option<f64>),
    LogicalNot,
}

/// A binary elementwise function (with broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
}

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

/// One traced op with its concrete arguments.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    /// The output is the input (contiguous, clone, eval-mode dropout).
    Identity,
    Unary(Unary),
    Binary(Binary),
    /// `x op c` (or `c op x` when `reversed`).
    Scalar {
        op: Binary,
        value: f64,
        reversed: bool,
    },
    Cast(DType),
    MatMul,
    /// `F::linear(x, w, b)`.
    Linear,
    /// `conv{1,2}d` and the transposed forms; pads per spatial dim, both sides.
    Conv {
        stride: Vec<usize>,
        padding: Vec<usize>,
        dilation: Vec<usize>,
        groups: usize,
        transposed: bool,
        output_padding: Vec<usize>,
    },
    /// Eval-mode batch norm over inputs `[x, mean, var, weight?, bias?]`.
    BatchNorm {
        eps: f64,
        training: bool,
        has_weight: bool,
        has_bias: bool,
        has_stats: bool,
    },
    LayerNorm {
        ndim: usize,
        eps: f64,
        has_weight: bool,
        has_bias: bool,
    },
    GroupNorm {
        groups: usize,
        eps: f64,
        has_weight: bool,
        has_bias: bool,
    },
    RmsNorm {
        ndim: usize,
        eps: Option<f64>,
        has_weight: bool,
    },
    MaxPool {
        kernel: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
        dilation: Vec<usize>,
        ceil_mode: bool,
    },
    AvgPool {
        kernel: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: Option<usize>,
    },
    AdaptiveAvgPool {
        output: Vec<usize>,
    },
    AdaptiveMaxPool {
        output: Vec<usize>,
    },
    Softmax {
        axis: usize,
        log: bool,
    },
    /// Any view or copy to another shape (the output's shape is the target).
    Reshape,
    Permute {
        perm: Vec<usize>,
    },
    /// Broadcast to the output's shape.
    Expand,
    /// `x.narrow`/slicing along one axis, `start..end` by `step`.
    Slice {
        axis: usize,
        start: usize,
        end: usize,
        step: usize,
    },
    /// `x.select(axis, index)`: the axis is removed.
    Select {
        axis: usize,
        index: usize,
    },
    Cat {
        axis: usize,
    },
    /// Split along `axis` into the outputs' sizes.
    Split {
        axis: usize,
    },
    /// `masked_fill(mask, value)`: inputs `[x, mask]`.
    MaskedFill {
        value: f64,
    },
    Reduce {
        kind: Reduce,
        axes: Vec<usize>,
        keepdim: bool,
    },
    Embedding,
    Dropout {
        training: bool,
        p: f64,
    },
    /// `F::scaled_dot_product_attention`; inputs `[q, k, v, mask?]`.
    Attention {
        causal: bool,
        scale: Option<f64>,
        dropout: f64,
    },
    /// `Tensor::full` (and `zeros`, `ones`): the output's shape, filled with `value`.
    Fill {
        value: f64,
        dtype: DType,
    },
    /// `Tensor::arange(start, end, step)`.
    Arange {
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
    },
    /// `nn::RNN`/`LSTM`/`GRU` over a whole sequence: inputs `[x, h0?, c0?, parameters…]`,
    /// outputs `[y, h_n, c_n?]`.
    Rnn {
        mode: RnnKind,
        layers: usize,
        hidden: usize,
        bidirectional: bool,
        batch_first: bool,
        bias: bool,
        has_state: bool,
        unbatched: bool,
        /// Why this call cannot be exported, if it cannot.
        unsupported: Option<&'static str>,
    },
    /// `where(cond, a, b)`.
    Where,
    /// `F::pad` with a constant value; `pads` in PyTorch order (last dim first).
    Pad {
        pads: Vec<usize>,
        value: f64,
        mode: PadKind,
    },
}

/// The cell of a traced recurrent layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RnnKind {
    Tanh,
    Relu,
    Lstm,
    Gru,
}

/// The padding mode of a traced `pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PadKind {
    Constant,
    Reflect,
    Replicate,
    Circular,
}

impl Op {
    /// A short name for messages.
    pub(crate) fn name(&self) -> String {
        match self {
            Op::Unary(u) => format!("{u:?}"),
            Op::Binary(b) => format!("{b:?}"),
            Op::Scalar { op, .. } => format!("{op:?} (with a scalar)"),
            other => {
                let s = format!("{other:?}");
                s.split([' ', '(', '{']).next().unwrap_or("").to_string()
            }
        }
    }
}

/// The tensors an op returns.
pub(crate) trait Outputs {
    fn tensors(&self) -> Vec<Tensor>;
}

impl Outputs for Tensor {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.clone()]
    }
}

impl Outputs for Vec<Tensor> {
    fn tensors(&self) -> Vec<Tensor> {
        self.clone()
    }
}

impl Outputs for (Tensor, crate::nn::RnnState) {
    fn tensors(&self) -> Vec<Tensor> {
        let mut v = vec![self.0.clone(), self.1.h.clone()];
        v.extend(self.1.c.clone());
        v
    }
}

impl Outputs for (Tensor, Tensor) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone()]
    }
}

impl Op {
    /// The op's name in profiles (`mul`, `conv2d`, `log_softmax`, `sum`, ...).
    pub(crate) fn profile_name(&self) -> String {
        // `GeluTanh` or `LeakyRelu(0.01)` → `gelu_tanh`, `leaky_relu`.
        fn snake(name: &str) -> String {
            let mut out = String::new();
            for (i, c) in name.chars().take_while(|c| c.is_alphanumeric()).enumerate() {
                if c.is_uppercase() {
                    if i > 0 {
                        out.push('_');
                    }
                    out.extend(c.to_lowercase());
                } else {
                    out.push(c);
                }
            }
            out
        }
        match self {
            Op::Scalar { op, .. } => format!("{}_scalar", snake(&format!("{op:?}"))),
            Op::Reduce { kind, .. } => snake(&format!("{kind:?}")),
            Op::Softmax { log: true, .. } => "log_softmax".into(),
            Op::MatMul => "matmul".into(),
            Op::Conv {
                transposed, stride, ..
            } => format!(
                "conv{}{}d",
                if *transposed { "_transpose" } else { "" },
                stride.len()
            ),
            Op::MaxPool { kernel, .. } => format!("max_pool{}d", kernel.len()),
            Op::AvgPool { kernel, .. } => format!("avg_pool{}d", kernel.len()),
            Op::Rnn { mode, .. } => match mode {
                RnnKind::Lstm => "lstm".into(),
                RnnKind::Gru => "gru".into(),
                RnnKind::Tanh | RnnKind::Relu => "rnn".into(),
            },
            _ => snake(&self.name()),
        }
    }
}

/// The permutation swapping `a` and `b` of `rank` axes.
pub(crate) fn swap_perm(rank: usize, a: usize, b: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(a, b);
    perm
}

/// Reduction axes, normalised and sorted; all axes when `dims` is empty.
pub(crate) fn axes(t: &Tensor, dims: &[isize]) -> Vec<usize> {
    if dims.is_empty() {
        return (0..t.dim()).collect();
    }
    let mut v: Vec<usize> = dims.iter().map(|&d| t.normalize_dim("reduce", d)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The traced form of `F::pad_with`.
pub(crate) fn pad_op(pads: &[usize], mode: crate::nn::functional::PadMode) -> Op {
    use crate::nn::functional::PadMode;
    let (mode, value) = match mode {
        PadMode::Constant(v) => (PadKind::Constant, v),
        PadMode::Reflect => (PadKind::Reflect, 0.0),
        PadMode::Replicate => (PadKind::Replicate, 0.0),
        PadMode::Circular => (PadKind::Circular, 0.0),
    };
    Op::Pad {
        pads: pads.to_vec(),
        value,
        mode,
    }
}

/// The traced form of a comparison.
pub(crate) fn compare_op(cmp: crate::storage::op::Cmp) -> Op {
    use crate::storage::op::Cmp;
    Op::Binary(match cmp {
        Cmp::Eq => Binary::Eq,
        Cmp::Ne => Binary::Ne,
        Cmp::Lt => Binary::Lt,
        Cmp::Le => Binary::Le,
        Cmp::Gt => Binary::Gt,
        Cmp::Ge => Binary::Ge,
    })
}
