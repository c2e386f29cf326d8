//! Activations (`relu`, `gelu`, `silu`, `leaky_relu`, `elu`, `softplus`, `hardsigmoid`,
//! `hardswish`, `mish`, `hardtanh`, `relu6`, `clamp`): the op types (CPU function and
//! CUDA kernels, branch-free selects where the op has a kink) and the methods with their
//! PyTorch gradients.

use super::c;
use crate::Tensor;
use crate::autograd::is_grad_enabled;
use crate::storage::op::{BinaryFloatOp, IntMap, UnaryOp};
use ferrograd_kernels::Real;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};

unary_kernel!(ReluK, RELU, RELU_INPLACE, |x| if x > A::zero() {
    x
} else {
    A::zero()
});
unary_kernel!(
    /// `x Φ(x)`, the normal CDF from `Real::normal_cdf`.
    GeluErfK, GELU, GELU_INPLACE, |x, FMA| x * x.normal_cdf::<FMA>()
);
unary_kernel!(GeluTanhK, GELU_TANH, GELU_TANH_INPLACE, |x| {
    let inner = c::<A>((2.0 / std::f64::consts::PI).sqrt()) * (x + c::<A>(0.044715) * x * x * x);
    c::<A>(0.5) * x * (A::one() + inner.tanh_vec())
});
unary_kernel!(
    /// `x σ(x)`, the logistic from `Real::sigmoid_fma`.
    SiluK, SILU, SILU_INPLACE, |x, FMA| x * x.sigmoid_fma::<FMA>()
);
/// `min(max(x, lo), hi)` as two selects, no branch, so the loop vectorises; NaN
/// propagates as in PyTorch (both comparisons are false for it).
#[derive(Clone, Copy)]
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
#[derive(Clone, Copy)]
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
#[derive(Clone, Copy)]
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
#[derive(Clone, Copy)]
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

/// A fused backward: `apply(g, x) = g * f'(x)` in one pass (no intermediate tensors).
/// With `|g, x, FMA|`, the body is generic over a `const FMA: bool` (fused multiply-adds
/// where the CPU's SIMD level has them; see `BinaryFloatOp::apply_fma`).
macro_rules! backward_kernel {
    ($(#[$m:meta])* $name:ident, $cuda:ident, $cuda_inplace:ident, |$g:ident, $x:ident, $fma:ident| $body:expr) => {
        $(#[$m])*
        struct $name;
        impl BinaryFloatOp for $name {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::$cuda, &kernels::$cuda_inplace]);
            const FMA: bool = true;
            #[inline(always)]
            fn apply<A: Real>(&self, g: A, x: A) -> A {
                self.apply_fma::<A, false>(g, x)
            }
            #[inline(always)]
            fn apply_fma<A: Real, const $fma: bool>(&self, $g: A, $x: A) -> A {
                $body
            }
        }
    };
    ($(#[$m:meta])* $name:ident, $cuda:ident, $cuda_inplace:ident, |$g:ident, $x:ident| $body:expr) => {
        $(#[$m])*
        struct $name;
        impl BinaryFloatOp for $name {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::$cuda, &kernels::$cuda_inplace]);
            #[inline(always)]
            fn apply<A: Real>(&self, $g: A, $x: A) -> A {
                $body
            }
        }
    };
}

backward_kernel!(
    /// `g * (Φ(x) + x φ(x))`, both from one exponential (`Real::normal_cdf_pdf`).
    GeluBackwardK, GELU_BACKWARD, GELU_BACKWARD_INPLACE, |g, x, FMA| {
        let (cdf, pdf) = x.normal_cdf_pdf::<FMA>();
        g * (cdf + x * pdf)
    }
);
backward_kernel!(
    /// `g * (½(1 + t) + ½x(1 − t²)·k(1 + 3·0.044715x²))`, `t = tanh(k(x + 0.044715x³))`.
    GeluTanhBackwardK, GELU_TANH_BACKWARD, GELU_TANH_BACKWARD_INPLACE, |g, x| {
        let (k, a) = (c::<A>((2.0 / std::f64::consts::PI).sqrt()), c::<A>(0.044715));
        let half = c::<A>(0.5);
        let t = (k * (x + a * x * x * x)).tanh_vec();
        let inner = k * (A::one() + c::<A>(3.0) * a * x * x);
        g * (half * (A::one() + t) + half * x * (A::one() - t * t) * inner)
    }
);
backward_kernel!(
    /// `g * s(1 + x(1 − s))`, `s = sigmoid(x)` computed without overflow.
    SiluBackwardK, SILU_BACKWARD, SILU_BACKWARD_INPLACE, |g, x, FMA| {
        let s = x.sigmoid_fma::<FMA>();
        g * s * (A::one() + x * (A::one() - s))
    }
);

backward_kernel!(
    /// `x <= 0 ? 0 : g` (PyTorch's `threshold_backward`: a NaN input passes its gradient).
    ReluBackwardK, RELU_BACKWARD, RELU_BACKWARD_INPLACE, |g, x| {
        if x <= A::zero() { A::zero() } else { g }
    }
);

/// `gelu(a + b)`, the sum rounded to the element type first as a separate add would
/// round it: a linear layer's bias and the GELU after it in one pass (inference only: no
/// backward, and no CUDA kernel, so the caller takes this on the host alone).
struct BiasGeluK;
impl BinaryFloatOp for BiasGeluK {
    const CUDA: Option<[&'static CudaKernel; 2]> = None;
    const FMA: bool = true;
    #[inline(always)]
    fn apply<A: Real>(&self, a: A, b: A) -> A {
        self.apply_fma::<A, false>(a, b)
    }
    #[inline(always)]
    fn apply_fma<A: Real, const FMA: bool>(&self, a: A, b: A) -> A {
        let z = a + b;
        z * z.normal_cdf::<FMA>()
    }
}

impl Tensor {
    /// `gelu(self + bias)` in one pass over `self`'s shape (`bias` broadcast to it; an
    /// f32 or f64 host tensor, untracked: the caller checked all of that).
    pub(crate) fn bias_gelu_pass(&self, bias: &Tensor) -> Tensor {
        Tensor::binary_float_raw(self, bias, self.shape(), "bias_gelu", &BiasGeluK)
    }
}

impl Tensor {
    /// `g * f'(x)` through a fused backward kernel; under `create_graph` (grad mode on
    /// in the backward) the differentiable `composite` instead.
    fn fused_backward<K: BinaryFloatOp>(
        g: &Tensor,
        x: &Tensor,
        op: &str,
        kernel: &K,
        composite: impl FnOnce() -> Tensor,
    ) -> Tensor {
        if is_grad_enabled() || g.dtype() != x.dtype() || g.shape() != x.shape() {
            return composite();
        }
        Tensor::binary_float_raw(g, x, x.shape(), op, kernel)
    }
}

impl Tensor {
    /// `max(x, 0)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![-1.0f32, 2.0], &[2]).relu().to_vec::<f32>(), vec![0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn relu(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.relu_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Relu),
            out,
        )
    }

    #[track_caller]
    fn relu_untraced(&self) -> Tensor {
        self.unary_op("relu", ReluK, |x, _, g| {
            Tensor::fused_backward(g, x, "relu_backward", &ReluBackwardK, || {
                g.mul(&x.le_scalar(0.0).logical_not().to_dtype(g.dtype()))
            })
        })
    }

    /// GELU with the exact erf form, `x * Φ(x)` (PyTorch's default).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![1.0f64], &[1]).gelu().item::<f64>();
    /// assert!((y - 0.8413447460685429).abs() < 1e-12);
    /// ```
    #[track_caller]
    pub fn gelu(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.gelu_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Gelu),
            out,
        )
    }

    #[track_caller]
    fn gelu_untraced(&self) -> Tensor {
        self.unary_op("gelu", GeluErfK, |x, _, g| {
            Tensor::fused_backward(g, x, "gelu_backward", &GeluBackwardK, || {
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
        })
    }

    /// GELU with the tanh approximation (`approximate='tanh'`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![1.0f64], &[1]).gelu_tanh().item::<f64>();
    /// assert!((y - 0.8411919906082768).abs() < 1e-12);
    /// ```
    #[track_caller]
    pub fn gelu_tanh(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.gelu_tanh_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::GeluTanh),
            out,
        )
    }

    #[track_caller]
    fn gelu_tanh_untraced(&self) -> Tensor {
        self.unary_op("gelu_tanh", GeluTanhK, |x, _, g| {
            Tensor::fused_backward(g, x, "gelu_tanh_backward", &GeluTanhBackwardK, || {
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
        })
    }

    /// SiLU (swish), `x * sigmoid(x)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).silu().to_vec::<f32>(), vec![0.0]);
    /// ```
    #[track_caller]
    pub fn silu(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.silu_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Silu),
            out,
        )
    }

    #[track_caller]
    fn silu_untraced(&self) -> Tensor {
        self.unary_op("silu", SiluK, |x, _, g| {
            Tensor::fused_backward(g, x, "silu_backward", &SiluBackwardK, || {
                let s = x.sigmoid();
                g.mul(&s.mul(&x.mul(&s.rsub_scalar(1.0)).add_scalar(1.0)))
            })
        })
    }

    /// `x > 0 ? x : negative_slope * x` (`F.leaky_relu`; PyTorch's default slope is 0.01).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![-2.0f32, 3.0], &[2]).leaky_relu(0.1);
    /// assert_eq!(y.to_vec::<f32>(), vec![-0.2, 3.0]);
    /// ```
    #[track_caller]
    pub fn leaky_relu(&self, negative_slope: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.leaky_relu_untraced(negative_slope);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::LeakyRelu(negative_slope)),
            out,
        )
    }

    #[track_caller]
    fn leaky_relu_untraced(&self, negative_slope: f64) -> Tensor {
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
    #[track_caller]
    pub fn elu(&self, alpha: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.elu_untraced(alpha);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Elu(alpha)),
            out,
        )
    }

    #[track_caller]
    fn elu_untraced(&self, alpha: f64) -> Tensor {
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
    #[track_caller]
    pub fn softplus(&self, beta: f64, threshold: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.softplus_untraced(beta, threshold);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Softplus { beta, threshold }),
            out,
        )
    }

    #[track_caller]
    fn softplus_untraced(&self, beta: f64, threshold: f64) -> Tensor {
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
    #[track_caller]
    pub fn hardsigmoid(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.hardsigmoid_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::HardSigmoid),
            out,
        )
    }

    #[track_caller]
    fn hardsigmoid_untraced(&self) -> Tensor {
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
    #[track_caller]
    pub fn hardswish(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.hardswish_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::HardSwish),
            out,
        )
    }

    #[track_caller]
    fn hardswish_untraced(&self) -> Tensor {
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
    #[track_caller]
    pub fn mish(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.mish_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Mish),
            out,
        )
    }

    #[track_caller]
    fn mish_untraced(&self) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.hardtanh_untraced(min_val, max_val);
        crate::dispatch::finish(
            entered,
            &[self],
            || {
                crate::dispatch::Op::Unary(crate::dispatch::Unary::Clamp(
                    Some(min_val),
                    Some(max_val),
                ))
            },
            out,
        )
    }

    #[track_caller]
    fn hardtanh_untraced(&self, min_val: f64, max_val: f64) -> Tensor {
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
    #[track_caller]
    pub fn relu6(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.relu6_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Clamp(Some(0.0), Some(6.0))),
            out,
        )
    }

    #[track_caller]
    fn relu6_untraced(&self) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.clamp_untraced(min, max);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Clamp(Some(min), Some(max))),
            out,
        )
    }

    #[track_caller]
    fn clamp_untraced(&self, min: f64, max: f64) -> Tensor {
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
    #[track_caller]
    pub fn clamp_min(&self, min: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.clamp_min_untraced(min);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Clamp(Some(min), None)),
            out,
        )
    }

    #[track_caller]
    fn clamp_min_untraced(&self, min: f64) -> Tensor {
        self.clamp(min, f64::INFINITY)
    }
}
