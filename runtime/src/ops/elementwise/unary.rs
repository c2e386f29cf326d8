//! Unary math and activations (`exp`, `relu`, `gelu`, `clamp`, `hardtanh`, ...) and the
//! scalar ops (`add_scalar`, `pow_scalar`, ...): the op types (CPU function and CUDA
//! kernels) and the methods with their backward.

use super::c;
use crate::autograd::{SavedTensor, record};
use crate::storage::Storage;
use crate::storage::op::{IntMap, UnaryOp};
use crate::{DType, Tensor};
use ferrograd_kernels::Real;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};

unary_kernel!(ExpK, EXP, EXP_INPLACE, |x| x.exp_vec());
unary_kernel!(LogK, LOG, LOG_INPLACE, |x| x.ln());
unary_kernel!(SqrtK, SQRT, SQRT_INPLACE, |x| x.sqrt());
unary_kernel!(RsqrtK, RSQRT, RSQRT_INPLACE, |x| x.sqrt().recip());
unary_kernel!(SinK, SIN, SIN_INPLACE, |x| x.sin());
unary_kernel!(CosK, COS, COS_INPLACE, |x| x.cos());
unary_kernel!(TanhK, TANH, TANH_INPLACE, |x| x.tanh_vec());
unary_kernel!(SigmoidK, SIGMOID, SIGMOID_INPLACE, |x| x.sigmoid_vec());
unary_kernel!(ErfK, ERF, ERF_INPLACE, |x| x.erf());
unary_kernel!(NegK, NEG, NEG_INPLACE, |x| -x);
unary_kernel!(AbsK, ABS, ABS_INPLACE, |x| x.abs());
unary_kernel!(SignK, SIGN, SIGN_INPLACE, |x| if x > A::zero() {
    A::one()
} else if x < A::zero() {
    -A::one()
} else {
    A::zero()
});

#[derive(Clone, Copy)]
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
#[derive(Clone, Copy)]
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
#[derive(Clone, Copy)]
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
    #[track_caller]
    pub fn add_scalar(&self, value: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.add_scalar_untraced(value);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Scalar {
                op: crate::dispatch::Binary::Add,
                value,
                reversed: false,
            },
            out,
        )
    }

    #[track_caller]
    fn add_scalar_untraced(&self, value: f64) -> Tensor {
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
    #[track_caller]
    pub fn sub_scalar(&self, value: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.sub_scalar_untraced(value);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Scalar {
                op: crate::dispatch::Binary::Sub,
                value,
                reversed: false,
            },
            out,
        )
    }

    #[track_caller]
    fn sub_scalar_untraced(&self, value: f64) -> Tensor {
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
    #[track_caller]
    pub fn rsub_scalar(&self, value: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.rsub_scalar_untraced(value);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Scalar {
                op: crate::dispatch::Binary::Sub,
                value,
                reversed: true,
            },
            out,
        )
    }

    #[track_caller]
    fn rsub_scalar_untraced(&self, value: f64) -> Tensor {
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
    #[track_caller]
    pub fn mul_scalar(&self, value: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.mul_scalar_untraced(value);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Scalar {
                op: crate::dispatch::Binary::Mul,
                value,
                reversed: false,
            },
            out,
        )
    }

    #[track_caller]
    fn mul_scalar_untraced(&self, value: f64) -> Tensor {
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
    #[track_caller]
    pub fn div_scalar(&self, value: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.div_scalar_untraced(value);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Scalar {
                op: crate::dispatch::Binary::Div,
                value,
                reversed: false,
            },
            out,
        )
    }

    #[track_caller]
    fn div_scalar_untraced(&self, value: f64) -> Tensor {
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
    #[track_caller]
    pub fn rdiv_scalar(&self, value: f64) -> Tensor {
        self.scalar_operand(value).div(self)
    }

    /// `self ** exponent` for a scalar exponent.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![3.0f32], &[1]).pow_scalar(2.0).to_vec::<f32>(), vec![9.0]);
    /// ```
    #[track_caller]
    pub fn pow_scalar(&self, exponent: f64) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.pow_scalar_untraced(exponent);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Scalar {
                op: crate::dispatch::Binary::Pow,
                value: exponent,
                reversed: false,
            },
            out,
        )
    }

    #[track_caller]
    fn pow_scalar_untraced(&self, exponent: f64) -> Tensor {
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
    pub(super) fn int_map(&self, op: IntMap) -> Tensor {
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
    #[track_caller]
    pub fn neg(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.neg_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Neg),
            out,
        )
    }

    #[track_caller]
    fn neg_untraced(&self) -> Tensor {
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
    #[track_caller]
    pub fn abs(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.abs_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Abs),
            out,
        )
    }

    #[track_caller]
    fn abs_untraced(&self) -> Tensor {
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
    #[track_caller]
    pub fn sign(&self) -> Tensor {
        self.detach().map_float("sign", &SignK)
    }

    /// `e^x`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).exp().to_vec::<f32>(), vec![1.0]);
    /// ```
    #[track_caller]
    pub fn exp(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.exp_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Exp),
            out,
        )
    }

    #[track_caller]
    fn exp_untraced(&self) -> Tensor {
        if let Some([x]) = crate::dispatch::cast("exp", [self]) {
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
    #[track_caller]
    pub fn log(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.log_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Log),
            out,
        )
    }

    #[track_caller]
    fn log_untraced(&self) -> Tensor {
        if let Some([x]) = crate::dispatch::cast("log", [self]) {
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
    #[track_caller]
    pub fn sqrt(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.sqrt_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Sqrt),
            out,
        )
    }

    #[track_caller]
    fn sqrt_untraced(&self) -> Tensor {
        self.unary_op("sqrt", SqrtK, |_, out, g| g.div(&out.mul_scalar(2.0)))
    }

    /// `1 / sqrt(x)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![4.0f32], &[1]).rsqrt().to_vec::<f32>(), vec![0.5]);
    /// ```
    #[track_caller]
    pub fn rsqrt(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.rsqrt_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Rsqrt),
            out,
        )
    }

    #[track_caller]
    fn rsqrt_untraced(&self) -> Tensor {
        if let Some([x]) = crate::dispatch::cast("rsqrt", [self]) {
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
    #[track_caller]
    pub fn sin(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.sin_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Sin),
            out,
        )
    }

    #[track_caller]
    fn sin_untraced(&self) -> Tensor {
        self.unary_op("sin", SinK, |x, _, g| g.mul(&x.cos()))
    }

    /// The cosine.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).cos().to_vec::<f32>(), vec![1.0]);
    /// ```
    #[track_caller]
    pub fn cos(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.cos_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Cos),
            out,
        )
    }

    #[track_caller]
    fn cos_untraced(&self) -> Tensor {
        self.unary_op("cos", CosK, |x, _, g| g.mul(&x.sin()).neg())
    }

    /// The hyperbolic tangent.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f32], &[1]).tanh().to_vec::<f32>(), vec![0.0]);
    /// ```
    #[track_caller]
    pub fn tanh(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.tanh_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Tanh),
            out,
        )
    }

    #[track_caller]
    fn tanh_untraced(&self) -> Tensor {
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
    #[track_caller]
    pub fn sigmoid(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.sigmoid_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Sigmoid),
            out,
        )
    }

    #[track_caller]
    fn sigmoid_untraced(&self) -> Tensor {
        self.unary_op("sigmoid", SigmoidK, |_, out, g| {
            g.mul(out).mul(&out.rsub_scalar(1.0))
        })
    }

    /// The error function.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![0.0f64], &[1]).erf().to_vec::<f64>(), vec![0.0]);
    /// ```
    #[track_caller]
    pub fn erf(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.erf_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::Erf),
            out,
        )
    }

    #[track_caller]
    fn erf_untraced(&self) -> Tensor {
        self.unary_op("erf", ErfK, |x, _, g| {
            g.mul(&x.mul(x).neg().exp())
                .mul_scalar(2.0 / std::f64::consts::PI.sqrt())
        })
    }
}
