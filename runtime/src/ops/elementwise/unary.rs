//! Unary math and activations (`exp`, `relu`, `gelu`, `clamp`, `hardtanh`, ...) and the
//! scalar ops (`add_scalar`, `pow_scalar`, ...): the op types (CPU function and CUDA
//! kernels) and the methods with their backward.

use crate::amp;
use crate::autograd::{SavedTensor, record};
use crate::storage::Storage;
use crate::storage::op::{IntMap, UnaryOp};
use crate::{DType, Tensor};
use ferrograd_kernels::Real;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};

#[inline(always)]
fn c<A: Real>(v: f64) -> A {
    A::from(v).expect("constant representable in f32")
}

/// A unary op type: its CPU function and its CUDA kernels (out of place, in place).
macro_rules! unary_kernel {
    ($name:ident, $cuda:ident, $cuda_inplace:ident, |$x:ident| $body:expr) => {
        pub(crate) struct $name;
        impl UnaryOp for $name {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::$cuda, &kernels::$cuda_inplace]);
            #[inline(always)]
            fn apply<A: Real>(&self, $x: A) -> A {
                $body
            }
        }
    };
}

unary_kernel!(ExpK, EXP, EXP_INPLACE, |x| x.exp_vec());
unary_kernel!(LogK, LOG, LOG_INPLACE, |x| x.ln());
unary_kernel!(SqrtK, SQRT, SQRT_INPLACE, |x| x.sqrt());
unary_kernel!(RsqrtK, RSQRT, RSQRT_INPLACE, |x| x.sqrt().recip());
unary_kernel!(SinK, SIN, SIN_INPLACE, |x| x.sin());
unary_kernel!(CosK, COS, COS_INPLACE, |x| x.cos());
unary_kernel!(TanhK, TANH, TANH_INPLACE, |x| x.tanh());
// e^-|x| never overflows, so both branches are stable; the select vectorises.
unary_kernel!(SigmoidK, SIGMOID, SIGMOID_INPLACE, |x| {
    let e = (-x.abs()).exp_vec();
    let r = A::one() / (A::one() + e);
    if x >= A::zero() { r } else { e * r }
});
unary_kernel!(ReluK, RELU, RELU_INPLACE, |x| if x > A::zero() {
    x
} else {
    A::zero()
});
unary_kernel!(ErfK, ERF, ERF_INPLACE, |x| x.erf());
unary_kernel!(GeluErfK, GELU, GELU_INPLACE, |x| c::<A>(0.5)
    * x
    * (A::one() + (x * c::<A>(std::f64::consts::FRAC_1_SQRT_2)).erf()));
unary_kernel!(GeluTanhK, GELU_TANH, GELU_TANH_INPLACE, |x| {
    let inner = c::<A>((2.0 / std::f64::consts::PI).sqrt()) * (x + c::<A>(0.044715) * x * x * x);
    c::<A>(0.5) * x * (A::one() + inner.tanh())
});
unary_kernel!(SiluK, SILU, SILU_INPLACE, |x| x
    / (A::one() + (-x).exp_vec()));
unary_kernel!(NegK, NEG, NEG_INPLACE, |x| -x);
unary_kernel!(AbsK, ABS, ABS_INPLACE, |x| x.abs());
unary_kernel!(SignK, SIGN, SIGN_INPLACE, |x| if x > A::zero() {
    A::one()
} else if x < A::zero() {
    -A::one()
} else {
    A::zero()
});

struct PowScalarK(f64);
impl UnaryOp for PowScalarK {
    const CUDA: Option<[&'static CudaKernel; 2]> =
        Some([&kernels::POW_SCALAR, &kernels::POW_SCALAR_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        if self.0 == 2.0 {
            x * x
        } else {
            x.powf(c(self.0))
        }
    }
    fn params(&self) -> (f64, f64) {
        (self.0, 0.0)
    }
}

/// `x * mul + add` with the constants in the accumulation type: for f16/bf16 tensors a
/// scalar operand is not rounded to the tensor's dtype first (PyTorch's opmath rule), so
/// `x * 1e-8` does not become `x * 0`.
pub(crate) struct AffineK {
    pub(crate) mul: f64,
    pub(crate) add: f64,
}
impl UnaryOp for AffineK {
    const CUDA: Option<[&'static CudaKernel; 2]> =
        Some([&kernels::AFFINE, &kernels::AFFINE_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        x * c::<A>(self.mul) + c::<A>(self.add)
    }
    fn params(&self) -> (f64, f64) {
        (self.mul, self.add)
    }
}

/// `x / divisor` in the accumulation type (see [`AffineK`]).
struct DivScalarK(f64);
impl UnaryOp for DivScalarK {
    const CUDA: Option<[&'static CudaKernel; 2]> =
        Some([&kernels::DIV_SCALAR, &kernels::DIV_SCALAR_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        x / c::<A>(self.0)
    }
    fn params(&self) -> (f64, f64) {
        (self.0, 0.0)
    }
}

/// `min(max(x, lo), hi)` as two selects, no branch, so the loop vectorises; NaN
/// propagates as in PyTorch (both comparisons are false for it).
pub(crate) struct ClampK(pub(crate) f64, pub(crate) f64);
impl UnaryOp for ClampK {
    const CUDA: Option<[&'static CudaKernel; 2]> = Some([&kernels::CLAMP, &kernels::CLAMP_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        let (lo, hi) = (c::<A>(self.0), c::<A>(self.1));
        let y = if x < lo { lo } else { x };
        if y > hi { hi } else { y }
    }
    fn params(&self) -> (f64, f64) {
        (self.0, self.1)
    }
}

/// `x > 0 ? x : slope * x`, a select (no branch).
struct LeakyReluK(f64);
impl UnaryOp for LeakyReluK {
    const CUDA: Option<[&'static CudaKernel; 2]> =
        Some([&kernels::LEAKY_RELU, &kernels::LEAKY_RELU_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        if x > A::zero() { x } else { x * c::<A>(self.0) }
    }
    fn params(&self) -> (f64, f64) {
        (self.0, 0.0)
    }
}

/// `x > 0 ? x : alpha * (e^x - 1)`, with `expm1` as PyTorch.
struct EluK(f64);
impl UnaryOp for EluK {
    const CUDA: Option<[&'static CudaKernel; 2]> = Some([&kernels::ELU, &kernels::ELU_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        if x > A::zero() {
            x
        } else {
            c::<A>(self.0) * x.exp_m1()
        }
    }
    fn params(&self) -> (f64, f64) {
        (self.0, 0.0)
    }
}

/// `ln(1 + e^(beta x)) / beta`, and `x` itself where `beta x > threshold` (PyTorch's).
struct SoftplusK {
    beta: f64,
    threshold: f64,
}
impl UnaryOp for SoftplusK {
    const CUDA: Option<[&'static CudaKernel; 2]> =
        Some([&kernels::SOFTPLUS, &kernels::SOFTPLUS_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, x: A) -> A {
        let beta = c::<A>(self.beta);
        let bx = x * beta;
        if bx > c::<A>(self.threshold) {
            x
        } else {
            bx.exp().ln_1p() / beta
        }
    }
    fn params(&self) -> (f64, f64) {
        (self.beta, self.threshold)
    }
}

/// `clamp(x + 3, 0, 6)`, the shared factor of hardsigmoid and hardswish.
#[inline(always)]
fn relu6_shift<A: Real>(x: A) -> A {
    let y = x + c::<A>(3.0);
    let y = if y < A::zero() { A::zero() } else { y };
    if y > c::<A>(6.0) { c::<A>(6.0) } else { y }
}

unary_kernel!(
    HardsigmoidK,
    HARDSIGMOID,
    HARDSIGMOID_INPLACE,
    |x| relu6_shift(x) / c::<A>(6.0)
);
unary_kernel!(HardswishK, HARDSWISH, HARDSWISH_INPLACE, |x| x
    * relu6_shift(x)
    / c::<A>(6.0));
unary_kernel!(MishK, MISH, MISH_INPLACE, |x| x * x.exp().ln_1p().tanh());

impl Tensor {
    /// A 0-d tensor for a Python-style scalar operand: the tensor's dtype, or f32 when a
    /// fractional scalar meets an integer tensor.
    pub(super) fn scalar_operand(&self, value: f64) -> Tensor {
        let dtype = if !self.dtype().is_float() && value.fract() != 0.0 {
            DType::F32
        } else {
            self.dtype()
        };
        let dtype = if dtype == DType::Bool {
            DType::I64
        } else {
            dtype
        };
        Tensor::scalar(value, dtype)
            .to_device(&self.device())
            .expect("scalar on an existing device")
    }

    /// Whether a scalar operand is applied inside a unary kernel (`AffineK`) instead of
    /// as a 0-d tensor: for f16/bf16 (the scalar stays in f32), and for float tensors on a
    /// device (no upload of the scalar). The results are the same for f32/f64.
    pub(crate) fn scalar_in_kernel(&self) -> bool {
        self.dtype().is_half()
            || (self.dtype().is_float() && Storage::scalar_in_kernel(self.device()))
    }

    /// `self + value`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1i64], &[1]).add_scalar(2.0).to_vec::<i64>(), vec![3]);
    /// ```
    pub fn add_scalar(&self, value: f64) -> Tensor {
        if self.scalar_in_kernel() {
            return self.affine("add", 1.0, value);
        }
        self.add(&self.scalar_operand(value))
    }

    /// `self - value`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1.0f32], &[1]).sub_scalar(2.0).to_vec::<f32>(), vec![-1.0]);
    /// ```
    pub fn sub_scalar(&self, value: f64) -> Tensor {
        if self.scalar_in_kernel() {
            return self.affine("sub", 1.0, -value);
        }
        self.sub(&self.scalar_operand(value))
    }

    /// `value - self`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1.0f32], &[1]).rsub_scalar(3.0).to_vec::<f32>(), vec![2.0]);
    /// ```
    pub fn rsub_scalar(&self, value: f64) -> Tensor {
        if self.scalar_in_kernel() {
            return self.affine("rsub", -1.0, value);
        }
        self.scalar_operand(value).sub(self)
    }

    /// `self * value`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1.5f32], &[1]).mul_scalar(2.0).to_vec::<f32>(), vec![3.0]);
    /// ```
    pub fn mul_scalar(&self, value: f64) -> Tensor {
        if self.scalar_in_kernel() {
            return self.affine("mul", value, 0.0);
        }
        self.mul(&self.scalar_operand(value))
    }

    /// `self * mul + add` for f16/bf16 tensors, with the scalars kept in f32.
    pub(super) fn affine(&self, op: &'static str, mul: f64, add: f64) -> Tensor {
        self.unary_op(op, AffineK { mul, add }, move |_, _, g| g.mul_scalar(mul))
    }

    /// `self / value`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![3.0f32], &[1]).div_scalar(2.0).to_vec::<f32>(), vec![1.5]);
    /// ```
    pub fn div_scalar(&self, value: f64) -> Tensor {
        if self.scalar_in_kernel() {
            return self.unary_op("div", DivScalarK(value), move |_, _, g| g.div_scalar(value));
        }
        self.div(&self.scalar_operand(value))
    }

    /// `value / self`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![4.0f32], &[1]).rdiv_scalar(2.0).to_vec::<f32>(), vec![0.5]);
    /// ```
    pub fn rdiv_scalar(&self, value: f64) -> Tensor {
        self.scalar_operand(value).div(self)
    }

    /// `self ** exponent` for a scalar exponent.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![3.0f32], &[1]).pow_scalar(2.0).to_vec::<f32>(), vec![9.0]);
    /// ```
    pub fn pow_scalar(&self, exponent: f64) -> Tensor {
        let out = self.map_float("pow", &PowScalarK(exponent));
        let input = self.to_dtype(out.dtype());
        record(out, "pow", &[&input], || {
            let x = SavedTensor::new(&input);
            move |_, g: &Tensor| {
                let x = x.get("pow");
                vec![Some(if exponent == 2.0 {
                    g.mul(&x).mul_scalar(2.0)
                } else {
                    g.mul(&x.pow_scalar(exponent - 1.0)).mul_scalar(exponent)
                })]
            }
        })
    }

    /// An integer map (no autograd: integer tensors do not require grad).
    fn int_map(&self, op: IntMap) -> Tensor {
        let out = self.read_storage().int_map(self.layout(), op);
        Tensor::from_backend(op.name(), self.shape(), out)
    }

    /// Applies a float kernel and records `backward(ctx, x, out, g)`.
    #[track_caller]
    pub(super) fn unary_op<K: UnaryOp>(
        &self,
        op: &'static str,
        kernel: K,
        backward: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor + Send + Sync + 'static,
    ) -> Tensor {
        let out = self.map_float(op, &kernel);
        let input = self.to_dtype(out.dtype());
        record(out.clone(), op, &[&input], || {
            let (x, o) = (SavedTensor::new(&input), SavedTensor::output(&out));
            move |ctx, g: &Tensor| vec![Some(backward(&x.get(op), &ctx.output(&o), g))]
        })
    }

    /// `-self`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1i64, -2], &[2]).neg().to_vec::<i64>(), vec![-1, 2]);
    /// ```
    pub fn neg(&self) -> Tensor {
        if !self.dtype().is_float() {
            return self.int_map(IntMap::Neg);
        }
        self.unary_op("neg", NegK, |_, _, g| g.neg())
    }

    /// `|self|`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![-1.5f32, 2.0], &[2]).abs().to_vec::<f32>(), vec![1.5, 2.0]);
    /// ```
    pub fn abs(&self) -> Tensor {
        if !self.dtype().is_float() {
            return self.int_map(IntMap::Abs);
        }
        self.unary_op("abs", AbsK, |x, _, g| g.mul(&x.sign()))
    }

    /// The sign of each element: -1, 0 or 1 (not differentiable: zero gradient).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![-3.0f32, 0.0, 2.0], &[3]).sign().to_vec::<f32>(), vec![-1.0, 0.0, 1.0]);
    /// ```
    pub fn sign(&self) -> Tensor {
        self.detach().map_float("sign", &SignK)
    }

    /// `e^x`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).exp().to_vec::<f32>(), vec![1.0]);
    /// ```
    pub fn exp(&self) -> Tensor {
        if let Some(x) = amp::full_precision(self) {
            return x.exp();
        }
        self.unary_op("exp", ExpK, |_, out, g| g.mul(out))
    }

    /// The natural logarithm.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1.0f32], &[1]).log().to_vec::<f32>(), vec![0.0]);
    /// ```
    pub fn log(&self) -> Tensor {
        if let Some(x) = amp::full_precision(self) {
            return x.log();
        }
        self.unary_op("log", LogK, |x, _, g| g.div(x))
    }

    /// The square root.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![9.0f32], &[1]).sqrt().to_vec::<f32>(), vec![3.0]);
    /// ```
    pub fn sqrt(&self) -> Tensor {
        self.unary_op("sqrt", SqrtK, |_, out, g| g.div(&out.mul_scalar(2.0)))
    }

    /// `1 / sqrt(x)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![4.0f32], &[1]).rsqrt().to_vec::<f32>(), vec![0.5]);
    /// ```
    pub fn rsqrt(&self) -> Tensor {
        if let Some(x) = amp::full_precision(self) {
            return x.rsqrt();
        }
        self.unary_op("rsqrt", RsqrtK, |_, out, g| {
            g.mul(&out.pow_scalar(3.0)).mul_scalar(-0.5)
        })
    }

    /// The sine.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).sin().to_vec::<f32>(), vec![0.0]);
    /// ```
    pub fn sin(&self) -> Tensor {
        self.unary_op("sin", SinK, |x, _, g| g.mul(&x.cos()))
    }

    /// The cosine.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).cos().to_vec::<f32>(), vec![1.0]);
    /// ```
    pub fn cos(&self) -> Tensor {
        self.unary_op("cos", CosK, |x, _, g| g.mul(&x.sin()).neg())
    }

    /// The hyperbolic tangent.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).tanh().to_vec::<f32>(), vec![0.0]);
    /// ```
    pub fn tanh(&self) -> Tensor {
        self.unary_op("tanh", TanhK, |_, out, g| {
            g.mul(&out.mul(out).rsub_scalar(1.0))
        })
    }

    /// The logistic sigmoid `1 / (1 + e^-x)`, computed without overflow.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).sigmoid().to_vec::<f32>(), vec![0.5]);
    /// ```
    pub fn sigmoid(&self) -> Tensor {
        self.unary_op("sigmoid", SigmoidK, |_, out, g| {
            g.mul(out).mul(&out.rsub_scalar(1.0))
        })
    }

    /// `max(x, 0)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![-1.0f32, 2.0], &[2]).relu().to_vec::<f32>(), vec![0.0, 2.0]);
    /// ```
    pub fn relu(&self) -> Tensor {
        self.unary_op("relu", ReluK, |x, _, g| {
            g.mul(&x.gt_scalar(0.0).to_dtype(g.dtype()))
        })
    }

    /// The error function.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f64], &[1]).erf().to_vec::<f64>(), vec![0.0]);
    /// ```
    pub fn erf(&self) -> Tensor {
        self.unary_op("erf", ErfK, |x, _, g| {
            g.mul(&x.mul(x).neg().exp())
                .mul_scalar(2.0 / std::f64::consts::PI.sqrt())
        })
    }

    /// GELU with the exact erf form, `x * Φ(x)` (PyTorch's default).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![1.0f64], &[1]).gelu().item::<f64>();
    /// assert!((y - 0.8413447460685429).abs() < 1e-12);
    /// ```
    pub fn gelu(&self) -> Tensor {
        self.unary_op("gelu", GeluErfK, |x, _, g| {
            let cdf = x
                .mul_scalar(std::f64::consts::FRAC_1_SQRT_2)
                .erf()
                .add_scalar(1.0)
                .mul_scalar(0.5);
            let pdf = x
                .mul(x)
                .mul_scalar(-0.5)
                .exp()
                .mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt());
            g.mul(&cdf.add(&x.mul(&pdf)))
        })
    }

    /// GELU with the tanh approximation (`approximate='tanh'`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![1.0f64], &[1]).gelu_tanh().item::<f64>();
    /// assert!((y - 0.8411919906082768).abs() < 1e-12);
    /// ```
    pub fn gelu_tanh(&self) -> Tensor {
        self.unary_op("gelu_tanh", GeluTanhK, |x, _, g| {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let x2 = x.mul(x);
            let t = x.add(&x2.mul(x).mul_scalar(0.044715)).mul_scalar(k).tanh();
            let dinner = x2.mul_scalar(3.0 * 0.044715).add_scalar(1.0).mul_scalar(k);
            let d = t.add_scalar(1.0).mul_scalar(0.5).add(
                &x.mul_scalar(0.5)
                    .mul(&t.mul(&t).rsub_scalar(1.0))
                    .mul(&dinner),
            );
            g.mul(&d)
        })
    }

    /// SiLU (swish), `x * sigmoid(x)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).silu().to_vec::<f32>(), vec![0.0]);
    /// ```
    pub fn silu(&self) -> Tensor {
        self.unary_op("silu", SiluK, |x, _, g| {
            let s = x.sigmoid();
            g.mul(&s.mul(&x.mul(&s.rsub_scalar(1.0)).add_scalar(1.0)))
        })
    }

    /// `x > 0 ? x : negative_slope * x` (`F.leaky_relu`; PyTorch's default slope is 0.01).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![-2.0f32, 3.0], &[2]).leaky_relu(0.1);
    /// assert_eq!(y.to_vec::<f32>(), vec![-0.2, 3.0]);
    /// ```
    pub fn leaky_relu(&self, negative_slope: f64) -> Tensor {
        self.unary_op("leaky_relu", LeakyReluK(negative_slope), move |x, _, g| {
            let positive = x.gt_scalar(0.0).to_dtype(g.dtype());
            g.mul(
                &positive
                    .mul_scalar(1.0 - negative_slope)
                    .add_scalar(negative_slope),
            )
        })
    }

    /// `x > 0 ? x : alpha * (e^x - 1)` (`F.elu`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![0.0f64, 2.0], &[2]).elu(1.0).to_vec::<f64>();
    /// assert_eq!(y, vec![0.0, 2.0]);
    /// ```
    pub fn elu(&self, alpha: f64) -> Tensor {
        self.unary_op("elu", EluK(alpha), move |x, _, g| {
            // exp of min(x, 0): the negative branch never overflows for large x.
            let negative = x.clamp(f64::NEG_INFINITY, 0.0).exp().mul_scalar(alpha);
            let one = Tensor::ones(&[], g.dtype(), &g.device());
            g.mul(&Tensor::where_cond(&x.gt_scalar(0.0), &one, &negative))
        })
    }

    /// `ln(1 + e^(beta x)) / beta`, reverting to `x` where `beta x > threshold`
    /// (`F.softplus(x, beta, threshold)`; PyTorch's defaults are 1 and 20).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![0.0f64, 30.0], &[2]).softplus(1.0, 20.0).to_vec::<f64>();
    /// assert!((y[0] - 2f64.ln()).abs() < 1e-15 && y[1] == 30.0);
    /// ```
    pub fn softplus(&self, beta: f64, threshold: f64) -> Tensor {
        self.unary_op("softplus", SoftplusK { beta, threshold }, move |x, _, g| {
            let bx = x.mul_scalar(beta);
            let one = Tensor::ones(&[], g.dtype(), &g.device());
            g.mul(&Tensor::where_cond(
                &bx.gt_scalar(threshold),
                &one,
                &bx.sigmoid(),
            ))
        })
    }

    /// `relu6(x + 3) / 6` (`F.hardsigmoid`); the gradient is 1/6 strictly inside (-3, 3).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![-4.0f32, 0.0, 4.0], &[3]).hardsigmoid();
    /// assert_eq!(y.to_vec::<f32>(), vec![0.0, 0.5, 1.0]);
    /// ```
    pub fn hardsigmoid(&self) -> Tensor {
        self.unary_op("hardsigmoid", HardsigmoidK, |x, _, g| {
            let inside = x.gt_scalar(-3.0).logical_and(&x.lt_scalar(3.0));
            g.mul(&inside.to_dtype(g.dtype()).mul_scalar(1.0 / 6.0))
        })
    }

    /// `x * relu6(x + 3) / 6` (`F.hardswish`, MobileNetV3's activation).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![-4.0f32, 0.0, 4.0], &[3]).hardswish();
    /// assert_eq!(y.to_vec::<f32>(), vec![0.0, 0.0, 4.0]);
    /// ```
    pub fn hardswish(&self) -> Tensor {
        self.unary_op("hardswish", HardswishK, |x, _, g| {
            // PyTorch's: 0 below -3, x / 3 + 1/2 up to 3 (inclusive), 1 above.
            let zero = Tensor::zeros(&[], g.dtype(), &g.device());
            let one = Tensor::ones(&[], g.dtype(), &g.device());
            let middle = x.mul_scalar(1.0 / 3.0).add_scalar(0.5);
            let upper = Tensor::where_cond(&x.le_scalar(3.0), &middle, &one);
            g.mul(&Tensor::where_cond(&x.lt_scalar(-3.0), &zero, &upper))
        })
    }

    /// `x * tanh(ln(1 + e^x))` (`F.mish`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![0.0f64, 1.0], &[2]).mish().to_vec::<f64>();
    /// assert!(y[0] == 0.0 && (y[1] - 1f64.exp().ln_1p().tanh()).abs() < 1e-15);
    /// ```
    pub fn mish(&self) -> Tensor {
        self.unary_op("mish", MishK, |x, _, g| {
            let t = x.softplus(1.0, 20.0).tanh();
            let s = x.sigmoid();
            let dt = t.mul(&t).rsub_scalar(1.0);
            g.mul(&t.add(&x.mul(&s).mul(&dt)))
        })
    }

    /// `min(max(self, min_val), max_val)` as an activation (`F.hardtanh`): the forward of
    /// [`clamp`](Tensor::clamp), but the gradient passes only strictly inside
    /// `(min_val, max_val)`, as PyTorch's.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![-2.0f32, 0.5, 1.0, 3.0], &[4]);
    /// assert_eq!(t.hardtanh(-1.0, 1.0).to_vec::<f32>(), vec![-1.0, 0.5, 1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn hardtanh(&self, min_val: f64, max_val: f64) -> Tensor {
        assert!(
            min_val <= max_val,
            "hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})"
        );
        self.unary_op("hardtanh", ClampK(min_val, max_val), move |x, _, g| {
            g.mul(
                &x.gt_scalar(min_val)
                    .logical_and(&x.lt_scalar(max_val))
                    .to_dtype(g.dtype()),
            )
        })
    }

    /// `min(max(self, 0), 6)` (`F.relu6`, MobileNet's activation): [`hardtanh`](Tensor::hardtanh)
    /// over `[0, 6]`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![-1.0f32, 2.0, 7.0], &[3]);
    /// assert_eq!(t.relu6().to_vec::<f32>(), vec![0.0, 2.0, 6.0]);
    /// ```
    pub fn relu6(&self) -> Tensor {
        self.hardtanh(0.0, 6.0)
    }

    /// Clamps to `[min, max]` (`torch.clamp`); the gradient passes where the input was inside.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![-2.0f32, 0.5, 3.0], &[3]);
    /// assert_eq!(t.clamp(-1.0, 1.0).to_vec::<f32>(), vec![-1.0, 0.5, 1.0]);
    /// ```
    #[track_caller]
    pub fn clamp(&self, min: f64, max: f64) -> Tensor {
        assert!(min <= max, "clamp: min ({min}) must not exceed max ({max})");
        if !self.dtype().is_float() {
            return self.int_map(IntMap::Clamp(min, max));
        }
        self.unary_op("clamp", ClampK(min, max), move |x, _, g| {
            g.mul(
                &x.ge_scalar(min)
                    .logical_and(&x.le_scalar(max))
                    .to_dtype(g.dtype()),
            )
        })
    }

    /// Clamps from below only.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![-2.0f32, 3.0], &[2]).clamp_min(0.0).to_vec::<f32>(), vec![0.0, 3.0]);
    /// ```
    pub fn clamp_min(&self, min: f64) -> Tensor {
        self.clamp(min, f64::INFINITY)
    }
}
