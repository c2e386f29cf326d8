//! Elementwise ops: binary arithmetic with broadcasting and type promotion (here, with
//! the operator impls), unary math and scalar ops ([`unary`]), activations ([`activation`]), comparisons, logical ops
//! and `where` ([`compare`]).

use super::{broadcast_shape, check_same_device};
use crate::autograd::{SavedTensor, record};
use crate::storage::Storage;
use crate::storage::op::{BinaryFloatOp, BinaryOp, Cmp, UnaryOp};
use crate::{DType, Tensor};
use ferrograd_kernels::Layout;
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
use ferrograd_kernels::{NumElement, Real};
use std::borrow::Cow;

/// A float constant in the element type of a kernel.
#[inline(always)]
fn c<A: Real>(v: f64) -> A {
    A::from(v).expect("constant representable in f32")
}

/// A unary op type: its CPU function and its CUDA kernels (out of place, in place).
///
/// With `|x, FMA|` (and doc comments first), the body is generic over a `const FMA:
/// bool`: fused multiply-adds where the CPU's SIMD level has them (see
/// `UnaryOp::apply_fma`).
macro_rules! unary_kernel {
    ($(#[$m:meta])* $name:ident, $cuda:ident, $cuda_inplace:ident, |$x:ident, $fma:ident| $body:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        pub(crate) struct $name;
        impl UnaryOp for $name {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::$cuda, &kernels::$cuda_inplace]);
            const FMA: bool = true;
            #[inline(always)]
            fn apply<A: Real>(&self, x: A) -> A {
                self.apply_fma::<A, false>(x)
            }
            #[inline(always)]
            fn apply_fma<A: Real, const $fma: bool>(&self, $x: A) -> A {
                $body
            }
        }
    };
    ($name:ident, $cuda:ident, $cuda_inplace:ident, |$x:ident| $body:expr) => {
        #[derive(Clone, Copy)]
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

mod activation;
mod compare;
mod unary;

pub(crate) use activation::ClampK;
pub(crate) use unary::AffineK;

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
    fn promote_pair<'a>(
        &'a self,
        other: &'a Tensor,
        op: &str,
        float_result: bool,
    ) -> (Cow<'a, Tensor>, Cow<'a, Tensor>, ferrograd_kernels::Dims) {
        check_same_device(op, &[self, other]);
        let shape = broadcast_shape(op, self, other);
        let mut dtype = DType::promote(self.dtype(), other.dtype());
        if float_result && !dtype.is_float() {
            dtype = DType::F32;
        }
        // Borrowed when no cast is needed: no reference-count traffic on the per-op path.
        let cast = |t: &'a Tensor| {
            if t.dtype() == dtype {
                Cow::Borrowed(t)
            } else {
                Cow::Owned(t.to_dtype(dtype))
            }
        };
        (cast(self), cast(other), shape)
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
        Tensor::broadcast_pair(a, b, shape, op, |sa, la, sb, lb| {
            sa.binary(la, sb, lb, kernel, op)
        })
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
        Tensor::broadcast_pair(a, b, shape, op, |sa, la, sb, lb| {
            sa.binary_float(la, sb, lb, kernel, op)
        })
    }

    /// Runs a two-operand backend op over `a` and `b` viewed at the broadcast `shape`: the
    /// new contiguous result, or a panic naming `op`.
    #[track_caller]
    pub(super) fn broadcast_pair(
        a: &Tensor,
        b: &Tensor,
        shape: &[usize],
        op: &str,
        f: impl FnOnce(&Storage, &Layout, &Storage, &Layout) -> crate::Result<Storage>,
    ) -> Tensor {
        let (la, lb) = (
            a.layout().broadcast_to(shape),
            b.layout().broadcast_to(shape),
        );
        let out = f(&a.read_storage(), &la, &b.read_storage(), &lb);
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
        let entered = crate::dispatch::enter();
        let out = self.add_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Add),
            out,
        )
    }

    #[track_caller]
    fn add_untraced(&self, other: &Tensor) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.sub_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Sub),
            out,
        )
    }

    #[track_caller]
    fn sub_untraced(&self, other: &Tensor) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.mul_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Mul),
            out,
        )
    }

    #[track_caller]
    fn mul_untraced(&self, other: &Tensor) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.div_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Div),
            out,
        )
    }

    #[track_caller]
    fn div_untraced(&self, other: &Tensor) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.pow_untraced(exponent);
        crate::dispatch::finish(
            entered,
            &[self, exponent],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Pow),
            out,
        )
    }

    #[track_caller]
    fn pow_untraced(&self, exponent: &Tensor) -> Tensor {
        if let Some([a, b]) = crate::dispatch::cast("pow", [self, exponent]) {
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
        let entered = crate::dispatch::enter();
        let out = self.maximum_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Max),
            out,
        )
    }

    #[track_caller]
    fn maximum_untraced(&self, other: &Tensor) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.minimum_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::Min),
            out,
        )
    }

    #[track_caller]
    fn minimum_untraced(&self, other: &Tensor) -> Tensor {
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
        let _profiled = crate::dispatch::opaque("atan2", &[self]);
        if let Some([a, b]) = crate::dispatch::cast("atan2", [self, other]) {
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
        let _profiled = crate::dispatch::opaque("sum_to_shape", &[self]);
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

/// A shape captured by a backward closure.
pub(super) struct Shape(ferrograd_kernels::Dims);

impl SavedTensor {
    fn shape(&self) -> &[usize] {
        self.peek_shape()
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
