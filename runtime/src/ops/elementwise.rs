//! Elementwise ops: binary arithmetic with broadcasting and type promotion, unary math,
//! comparisons, `where`, and the operator impls.

use super::{broadcast_shape, check_same_device};
use crate::amp;
use crate::autograd::{SavedTensor, record};
use crate::storage::op::{BinaryFloatOp, BinaryOp, Cmp, UnaryOp};
use crate::{DType, Tensor};
use ferrograd_kernels::cpu::unary_map;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
use ferrograd_kernels::{Element, NumElement, Real, with_dtype};

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

/// A binary op type: its CPU function and its CUDA kernels (out of place, in place).
macro_rules! binary_kernel {
    ($name:ident, $cuda:ident, $cuda_inplace:ident, |$a:ident, $b:ident| $body:expr) => {
        pub(crate) struct $name;
        impl BinaryOp for $name {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::$cuda, &kernels::$cuda_inplace]);
            #[inline(always)]
            fn apply<A: NumElement>(&self, $a: A, $b: A) -> A {
                $body
            }
        }
    };
}

binary_kernel!(AddK, ADD, ADD_INPLACE, |a, b| a + b);
binary_kernel!(SubK, SUB, SUB_INPLACE, |a, b| a - b);
binary_kernel!(MulK, MUL, MUL_INPLACE, |a, b| a * b);
binary_kernel!(DivK, DIV, DIV_INPLACE, |a, b| a / b);

binary_kernel!(
    MaxK,
    MAXIMUM,
    MAXIMUM_INPLACE,
    |a, b| if a.partial_cmp(&a).is_none() || a > b {
        a
    } else {
        b
    }
);

binary_kernel!(
    MinK,
    MINIMUM,
    MINIMUM_INPLACE,
    |a, b| if a.partial_cmp(&a).is_none() || a < b {
        a
    } else {
        b
    }
);

struct PowK;
impl BinaryFloatOp for PowK {
    const CUDA: Option<[&'static CudaKernel; 2]> = Some([&kernels::POW, &kernels::POW_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, a: A, b: A) -> A {
        a.powf(b)
    }
}

/// `atan2(a, b)`: the angle of the point `(b, a)`, in `(-pi, pi]`.
struct Atan2K;
impl BinaryFloatOp for Atan2K {
    const CUDA: Option<[&'static CudaKernel; 2]> = Some([&kernels::ATAN2, &kernels::ATAN2_INPLACE]);
    #[inline(always)]
    fn apply<A: Real>(&self, a: A, b: A) -> A {
        a.atan2(b)
    }
}

impl Tensor {
    /// Runs a float kernel over this tensor (ints are promoted to f32 first, as in PyTorch).
    #[track_caller]
    pub(crate) fn map_float<K: UnaryOp>(&self, op: &'static str, kernel: &K) -> Tensor {
        if !self.dtype().is_float() {
            return self.to_dtype(DType::F32).map_float(op, kernel);
        }
        let out = self.read_storage().unary(self.layout(), kernel, op);
        Tensor::from_backend(op, self.shape(), out)
    }

    /// The inputs of a binary op converted to their common dtype, and the broadcast shape.
    #[track_caller]
    fn promote_pair(
        &self,
        other: &Tensor,
        op: &str,
        float_result: bool,
    ) -> (Tensor, Tensor, ferrograd_kernels::Dims) {
        check_same_device(op, &[self, other]);
        let shape = broadcast_shape(op, self, other);
        let mut dtype = DType::promote(self.dtype(), other.dtype());
        if float_result && !dtype.is_float() {
            dtype = DType::F32;
        }
        (self.to_dtype(dtype), other.to_dtype(dtype), shape)
    }

    #[track_caller]
    fn binary_raw<K: BinaryOp>(
        a: &Tensor,
        b: &Tensor,
        shape: &[usize],
        op: &str,
        kernel: &K,
    ) -> Tensor {
        assert!(
            a.dtype() != DType::Bool,
            "{op}: not supported for bool tensors (shapes {:?} and {:?})",
            a.shape(),
            b.shape()
        );
        let la = a.layout().broadcast_to(shape);
        let lb = b.layout().broadcast_to(shape);
        let out = a
            .read_storage()
            .binary(&la, &b.read_storage(), &lb, kernel, op);
        Tensor::from_backend(op, shape, out)
    }

    /// A float-only binary op over the broadcast shape of `a` and `b` (one float dtype).
    #[track_caller]
    fn binary_float_raw<K: BinaryFloatOp>(
        a: &Tensor,
        b: &Tensor,
        shape: &[usize],
        op: &str,
        kernel: &K,
    ) -> Tensor {
        let la = a.layout().broadcast_to(shape);
        let lb = b.layout().broadcast_to(shape);
        let out = a
            .read_storage()
            .binary_float(&la, &b.read_storage(), &lb, kernel, op);
        Tensor::from_backend(op, shape, out)
    }

    /// Elementwise sum with broadcasting (`a + b`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1]);
    /// let b = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], &[3]);
    /// assert_eq!(a.add(&b).shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn add(&self, other: &Tensor) -> Tensor {
        let (a, b, shape) = self.promote_pair(other, "add", false);
        let out = Tensor::binary_raw(&a, &b, &shape, "add", &AddK);
        record(out, "add", &[&a, &b], || {
            let (sa, sb) = (Shape(a.shape().into()), Shape(b.shape().into()));
            move |ctx, g: &Tensor| {
                vec![
                    ctx.needs(0).then(|| g.sum_to_shape(&sa.0)),
                    ctx.needs(1).then(|| g.sum_to_shape(&sb.0)),
                ]
            }
        })
    }

    /// Elementwise difference with broadcasting (`a - b`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![5i64, 7], &[2]);
    /// assert_eq!(a.sub(&Tensor::from_vec(vec![1i64], &[1])).to_vec::<i64>(), vec![4, 6]);
    /// ```
    #[track_caller]
    pub fn sub(&self, other: &Tensor) -> Tensor {
        let (a, b, shape) = self.promote_pair(other, "sub", false);
        let out = Tensor::binary_raw(&a, &b, &shape, "sub", &SubK);
        record(out, "sub", &[&a, &b], || {
            let (sa, sb) = (Shape(a.shape().into()), Shape(b.shape().into()));
            move |ctx, g: &Tensor| {
                vec![
                    ctx.needs(0).then(|| g.sum_to_shape(&sa.0)),
                    ctx.needs(1).then(|| g.neg().sum_to_shape(&sb.0)),
                ]
            }
        })
    }

    /// Elementwise product with broadcasting (`a * b`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// assert_eq!(a.mul(&a).to_vec::<f32>(), vec![1.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn mul(&self, other: &Tensor) -> Tensor {
        let (a, b, shape) = self.promote_pair(other, "mul", false);
        let out = Tensor::binary_raw(&a, &b, &shape, "mul", &MulK);
        record(out, "mul", &[&a, &b], || {
            let (sa, sb) = (SavedTensor::new(&a), SavedTensor::new(&b));
            move |ctx, g: &Tensor| {
                vec![
                    ctx.needs(0)
                        .then(|| g.mul(&sb.get("mul")).sum_to_shape(sa.shape())),
                    ctx.needs(1)
                        .then(|| g.mul(&sa.get("mul")).sum_to_shape(sb.shape())),
                ]
            }
        })
    }

    /// Elementwise true division with broadcasting (`a / b`); integers divide as floats.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1i64, 3], &[2]);
    /// assert_eq!(a.div(&Tensor::from_vec(vec![2i64], &[1])).to_vec::<f32>(), vec![0.5, 1.5]);
    /// ```
    #[track_caller]
    pub fn div(&self, other: &Tensor) -> Tensor {
        let (a, b, shape) = self.promote_pair(other, "div", true);
        let out = Tensor::binary_raw(&a, &b, &shape, "div", &DivK);
        record(out, "div", &[&a, &b], || {
            let (sa, sb) = (SavedTensor::new(&a), SavedTensor::new(&b));
            move |ctx, g: &Tensor| {
                let b = sb.get("div");
                vec![
                    ctx.needs(0).then(|| g.div(&b).sum_to_shape(sa.shape())),
                    ctx.needs(1).then(|| {
                        g.mul(&sa.get("div"))
                            .div(&b.mul(&b))
                            .neg()
                            .sum_to_shape(sb.shape())
                    }),
                ]
            }
        })
    }

    /// Elementwise power with broadcasting (`a ** b`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![2.0f64, 3.0], &[2]);
    /// assert_eq!(a.pow(&Tensor::from_vec(vec![3.0f64], &[1])).to_vec::<f64>(), vec![8.0, 27.0]);
    /// ```
    #[track_caller]
    pub fn pow(&self, exponent: &Tensor) -> Tensor {
        if let Some([a, b]) = amp::full_precision_all([self, exponent]) {
            return a.pow(&b);
        }
        let (a, b, shape) = self.promote_pair(exponent, "pow", true);
        let out = Tensor::binary_float_raw(&a, &b, &shape, "pow", &PowK);
        record(out.clone(), "pow", &[&a, &b], || {
            let (sa, sb, so) = (
                SavedTensor::new(&a),
                SavedTensor::new(&b),
                SavedTensor::output(&out),
            );
            move |ctx, g: &Tensor| {
                let (x, y) = (sa.get("pow"), sb.get("pow"));
                vec![
                    ctx.needs(0).then(|| {
                        g.mul(&y)
                            .mul(&x.pow(&y.sub_scalar(1.0)))
                            .sum_to_shape(sa.shape())
                    }),
                    ctx.needs(1).then(|| {
                        g.mul(&ctx.output(&so))
                            .mul(&x.log())
                            .sum_to_shape(sb.shape())
                    }),
                ]
            }
        })
    }

    /// Elementwise maximum with broadcasting (`torch.maximum`); ties split the gradient.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f32, 5.0], &[2]);
    /// let b = Tensor::from_vec(vec![3.0f32, 2.0], &[2]);
    /// assert_eq!(a.maximum(&b).to_vec::<f32>(), vec![3.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        self.extremum(other, "maximum", &MaxK, Cmp::Gt)
    }

    /// Elementwise minimum with broadcasting (`torch.minimum`); ties split the gradient.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f32, 5.0], &[2]);
    /// let b = Tensor::from_vec(vec![3.0f32, 2.0], &[2]);
    /// assert_eq!(a.minimum(&b).to_vec::<f32>(), vec![1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        self.extremum(other, "minimum", &MinK, Cmp::Lt)
    }

    #[track_caller]
    fn extremum<K: BinaryOp>(
        &self,
        other: &Tensor,
        op: &'static str,
        kernel: &K,
        wins: Cmp,
    ) -> Tensor {
        let (a, b, shape) = self.promote_pair(other, op, false);
        let out = Tensor::binary_raw(&a, &b, &shape, op, kernel);
        record(out, op, &[&a, &b], || {
            let (sa, sb) = (SavedTensor::new(&a), SavedTensor::new(&b));
            move |ctx, g: &Tensor| {
                let (x, y) = (sa.get(op), sb.get(op));
                let weight_a = x.compare(&y, wins, op).to_dtype(g.dtype()).add(
                    &x.compare(&y, Cmp::Eq, op)
                        .to_dtype(g.dtype())
                        .mul_scalar(0.5),
                );
                vec![
                    ctx.needs(0)
                        .then(|| g.mul(&weight_a).sum_to_shape(sa.shape())),
                    ctx.needs(1)
                        .then(|| g.mul(&weight_a.rsub_scalar(1.0)).sum_to_shape(sb.shape())),
                ]
            }
        })
    }

    /// A 0-d tensor for a Python-style scalar operand: the tensor's dtype, or f32 when a
    /// fractional scalar meets an integer tensor.
    fn scalar_operand(&self, value: f64) -> Tensor {
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
        self.dtype().is_half() || (self.dtype().is_float() && self.device().is_cuda())
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
    fn affine(&self, op: &'static str, mul: f64, add: f64) -> Tensor {
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

    /// Applies a float kernel and records `backward(ctx, x, out, g)`.
    #[track_caller]
    fn unary_op<K: UnaryOp>(
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
            return self.map_storage("neg", |s, l| {
                with_dtype!(s.dtype(), T => T::into_storage(unary_map(s.typed::<T>(), l, |x: T| T::from_f64(-x.to_f64()))))
            });
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
            return self.map_storage("abs", |s, l| {
                with_dtype!(s.dtype(), T => T::into_storage(unary_map(s.typed::<T>(), l, |x: T| T::from_f64(x.to_f64().abs()))))
            });
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

    /// The angle of `(other, self)` elementwise, `atan2(self, other)` in `(-pi, pi]`, with
    /// broadcasting (`torch.atan2`); integers become f32. Differentiable in both.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let y = Tensor::from_vec(vec![1.0f64, -1.0], &[2]);
    /// let x = Tensor::from_vec(vec![0.0f64], &[1]);
    /// let a = y.atan2(&x).to_vec::<f64>();
    /// assert!((a[0] - std::f64::consts::FRAC_PI_2).abs() < 1e-15 && (a[1] + std::f64::consts::FRAC_PI_2).abs() < 1e-15);
    /// ```
    #[track_caller]
    pub fn atan2(&self, other: &Tensor) -> Tensor {
        if let Some([a, b]) = amp::full_precision_all([self, other]) {
            return a.atan2(&b);
        }
        let (a, b, shape) = self.promote_pair(other, "atan2", true);
        let out = Tensor::binary_float_raw(&a, &b, &shape, "atan2", &Atan2K);
        record(out, "atan2", &[&a, &b], || {
            let (sa, sb) = (SavedTensor::new(&a), SavedTensor::new(&b));
            // d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
            move |ctx, g: &Tensor| {
                let (y, x) = (sa.get("atan2"), sb.get("atan2"));
                let scale = g.div(&y.mul(&y).add(&x.mul(&x)));
                vec![
                    ctx.needs(0).then(|| scale.mul(&x).sum_to_shape(sa.shape())),
                    ctx.needs(1)
                        .then(|| scale.mul(&y).neg().sum_to_shape(sb.shape())),
                ]
            }
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
            return self.map_storage("clamp", |s, l| {
                with_dtype!(s.dtype(), T => T::into_storage(unary_map(s.typed::<T>(), l, |x: T| T::from_f64(x.to_f64().clamp(min, max)))))
            });
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

    // ---- comparisons -------------------------------------------------------------------------

    #[track_caller]
    fn compare(&self, other: &Tensor, cmp: Cmp, op: &str) -> Tensor {
        check_same_device(op, &[self, other]);
        let shape = broadcast_shape(op, self, other);
        let dtype = DType::promote(self.dtype(), other.dtype());
        let (a, b) = (
            self.detach().to_dtype(dtype),
            other.detach().to_dtype(dtype),
        );
        let (la, lb) = (
            a.layout().broadcast_to(&shape),
            b.layout().broadcast_to(&shape),
        );
        let out = a
            .read_storage()
            .compare(&la, &b.read_storage(), &lb, cmp, op);
        Tensor::from_backend(op, &shape, out)
    }

    fn compare_scalar(&self, value: f64, cmp: Cmp, op: &str) -> Tensor {
        let scalar = if self.dtype().is_float() || value.fract() == 0.0 {
            Tensor::scalar(
                value,
                if self.dtype() == DType::Bool {
                    DType::I64
                } else {
                    self.dtype()
                },
            )
        } else {
            Tensor::scalar(value, DType::F64)
        };
        self.compare(
            &scalar.to_device(&self.device()).expect("existing device"),
            cmp,
            op,
        )
    }
}

/// A shape captured by a backward closure.
struct Shape(ferrograd_kernels::Dims);

impl SavedTensor {
    fn shape(&self) -> &[usize] {
        self.peek_shape()
    }
}

macro_rules! comparisons {
    ($($name:ident, $scalar:ident, $cmp:ident, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", $doc, "` with broadcasting, as a bool tensor.")]
                ///
                /// ```
                /// # use ferrograd_runtime::prelude::*;
                /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]);
                #[doc = concat!("let m = a.", stringify!($name), "(&Tensor::from_vec(vec![2.0f32], &[1]));")]
                /// assert_eq!(m.dtype(), DType::Bool);
                /// ```
                #[track_caller]
                pub fn $name(&self, other: &Tensor) -> Tensor {
                    self.compare(other, Cmp::$cmp, stringify!($name))
                }

                #[doc = concat!("Elementwise `", $doc, "` against a scalar, as a bool tensor.")]
                ///
                /// ```
                /// # use ferrograd_runtime::prelude::*;
                #[doc = concat!("let m = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).", stringify!($scalar), "(2.0);")]
                /// assert_eq!(m.shape(), &[2]);
                /// ```
                pub fn $scalar(&self, value: f64) -> Tensor {
                    self.compare_scalar(value, Cmp::$cmp, stringify!($name))
                }
            )*
        }
    };
}

comparisons! {
    eq, eq_scalar, Eq, "==";
    ne, ne_scalar, Ne, "!=";
    lt, lt_scalar, Lt, "<";
    le, le_scalar, Le, "<=";
    gt, gt_scalar, Gt, ">";
    ge, ge_scalar, Ge, ">=";
}

impl Tensor {
    /// Elementwise logical and of two bool tensors (with broadcasting).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![true, true, false], &[3]);
    /// let f = Tensor::from_vec(vec![true, false, false], &[3]);
    /// assert_eq!(t.logical_and(&f).to_vec::<bool>(), vec![true, false, false]);
    /// ```
    #[track_caller]
    pub fn logical_and(&self, other: &Tensor) -> Tensor {
        let (a, b) = (self.ne_scalar(0.0), other.ne_scalar(0.0));
        let shape = broadcast_shape("logical_and", &a, &b);
        let (la, lb) = (
            a.layout().broadcast_to(&shape),
            b.layout().broadcast_to(&shape),
        );
        let out = a.read_storage().logical_and(&la, &b.read_storage(), &lb);
        Tensor::from_backend("logical_and", &shape, out)
    }

    /// Elementwise logical not of a bool tensor.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![true, false], &[2]).logical_not().to_vec::<bool>(), vec![false, true]);
    /// ```
    pub fn logical_not(&self) -> Tensor {
        self.eq_scalar(0.0)
    }

    /// `cond ? a : b` elementwise with broadcasting (`torch.where`); differentiable in `a`
    /// and `b`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let cond = Tensor::from_vec(vec![true, false], &[2]);
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// let b = Tensor::zeros(&[1], DType::F32, &Device::Cpu);
    /// assert_eq!(Tensor::where_cond(&cond, &a, &b).to_vec::<f32>(), vec![1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
        check_same_device("where", &[cond, a, b]);
        let cond = if cond.dtype() == DType::Bool {
            cond.clone()
        } else {
            cond.ne_scalar(0.0)
        };
        let (a, b, ab_shape) = a.promote_pair(b, "where", false);
        let shape = ferrograd_kernels::broadcast_shapes(cond.shape(), &ab_shape).unwrap_or_else(|dim| {
            panic!("where: condition of shape {:?} cannot be broadcast with values of shape {:?} (dim {dim})", cond.shape(), ab_shape.as_slice())
        });
        let (lc, la, lb) = (
            cond.layout().broadcast_to(&shape),
            a.layout().broadcast_to(&shape),
            b.layout().broadcast_to(&shape),
        );
        let out =
            cond.read_storage()
                .where_cond(&lc, (&a.read_storage(), &la), (&b.read_storage(), &lb));
        let out = Tensor::from_backend("where", &shape, out);
        record(out, "where", &[&a, &b], || {
            let (sa, sb) = (Shape(a.shape().into()), Shape(b.shape().into()));
            move |ctx, g: &Tensor| {
                let zero = Tensor::zeros(&[], g.dtype(), &g.device());
                vec![
                    ctx.needs(0)
                        .then(|| Tensor::where_cond(&cond, g, &zero).sum_to_shape(&sa.0)),
                    ctx.needs(1)
                        .then(|| Tensor::where_cond(&cond, &zero, g).sum_to_shape(&sb.0)),
                ]
            }
        })
    }

    /// `value` where `mask` is true, `self` elsewhere (`masked_fill`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// let m = Tensor::from_vec(vec![false, true], &[2]);
    /// assert_eq!(t.masked_fill(&m, f64::NEG_INFINITY).to_vec::<f32>(), vec![1.0, f32::NEG_INFINITY]);
    /// ```
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Tensor {
        let fill = Tensor::scalar(value, self.dtype())
            .to_device(&self.device())
            .expect("existing device");
        let out = Tensor::where_cond(mask, &fill, self);
        assert!(
            out.shape() == self.shape(),
            "masked_fill: mask of shape {:?} must broadcast to the tensor's shape {:?}",
            mask.shape(),
            self.shape()
        );
        out
    }

    /// Whether every element satisfies `|self - other| <= atol + rtol * |other|` after
    /// broadcasting (`torch.allclose`); NaNs are never close.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0], &[2]);
    /// assert!(a.allclose(&a.add_scalar(1e-9), 1e-5, 1e-8));
    /// assert!(!a.allclose(&a.add_scalar(1e-3), 1e-5, 1e-8));
    /// ```
    #[track_caller]
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64) -> bool {
        let (a, b) = (
            self.detach().to_dtype(DType::F64),
            other.detach().to_dtype(DType::F64),
        );
        broadcast_shape("allclose", &a, &b);
        let diff = a.sub(&b).abs().to_vec::<f64>();
        let bound = b
            .abs()
            .mul_scalar(rtol)
            .add_scalar(atol)
            .broadcast_to(a.sub(&b).shape())
            .to_vec::<f64>();
        diff.iter().zip(&bound).all(|(d, t)| d <= t)
    }

    /// Sums a broadcast gradient back down to `shape` (the adjoint of broadcasting).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let g = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
    /// assert_eq!(g.sum_to_shape(&[1, 3]).to_vec::<f32>(), vec![2.0, 2.0, 2.0]);
    /// assert_eq!(g.sum_to_shape(&[]).item::<f32>(), 6.0);
    /// ```
    #[track_caller]
    pub fn sum_to_shape(&self, shape: &[usize]) -> Tensor {
        if self.shape() == shape {
            return self.clone();
        }
        let extra = self.dim() - shape.len();
        let mut dims: Vec<isize> = (0..extra as isize).collect();
        for (i, &s) in shape.iter().enumerate() {
            if s == 1 && self.shape()[extra + i] != 1 {
                dims.push((extra + i) as isize);
            }
        }
        let summed = if dims.is_empty() {
            self.clone()
        } else {
            self.sum_same_dtype(&dims, true)
        };
        summed.reshape(shape)
    }
}

// ---- operators --------------------------------------------------------------------------------

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $tensor_fn:ident, $scalar_fn:ident, $rscalar:expr) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$tensor_fn(self, rhs)
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$tensor_fn(&self, &rhs)
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$tensor_fn(&self, rhs)
            }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$tensor_fn(self, &rhs)
            }
        }
        impl std::ops::$trait<f64> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                Tensor::$scalar_fn(self, rhs)
            }
        }
        impl std::ops::$trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                Tensor::$scalar_fn(&self, rhs)
            }
        }
        impl std::ops::$trait<&Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                #[allow(clippy::redundant_closure_call)]
                ($rscalar)(rhs, self)
            }
        }
        impl std::ops::$trait<Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                #[allow(clippy::redundant_closure_call)]
                ($rscalar)(&rhs, self)
            }
        }
    };
}

binary_operator!(Add, add, add, add_scalar, |t: &Tensor, s| t.add_scalar(s));
binary_operator!(Sub, sub, sub, sub_scalar, |t: &Tensor, s| t.rsub_scalar(s));
binary_operator!(Mul, mul, mul, mul_scalar, |t: &Tensor, s| t.mul_scalar(s));
binary_operator!(Div, div, div, div_scalar, |t: &Tensor, s| t.rdiv_scalar(s));

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self)
    }
}

impl std::ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self)
    }
}
