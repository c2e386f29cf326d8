//! Comparisons to bool (`eq`, `lt`, ... and their scalar forms), logical ops, `where`,
//! `masked_fill` and `allclose`.

use super::super::{broadcast_shape, check_same_device};
use super::Shape;
use crate::autograd::record;
use crate::storage::op::Cmp;
use crate::{DType, Tensor};

impl Tensor {
    // ---- comparisons -------------------------------------------------------------------------

    #[track_caller]
    pub(super) fn compare(&self, other: &Tensor, cmp: Cmp, op: &str) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.compare_untraced(other, cmp, op);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::compare_op(cmp),
            out,
        )
    }

    #[track_caller]
    fn compare_untraced(&self, other: &Tensor, cmp: Cmp, op: &str) -> Tensor {
        check_same_device(op, &[self, other]);
        let shape = broadcast_shape(op, self, other);
        let dtype = DType::promote(self.dtype(), other.dtype());
        let (a, b) = (
            self.detach().to_dtype(dtype),
            other.detach().to_dtype(dtype),
        );
        Tensor::broadcast_pair(&a, &b, &shape, op, |sa, la, sb, lb| {
            sa.compare(la, sb, lb, cmp, op)
        })
    }

    pub(super) fn compare_scalar(&self, value: f64, cmp: Cmp, op: &str) -> Tensor {
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
                #[track_caller]
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
        let entered = crate::dispatch::enter();
        let out = self.logical_and_untraced(other);
        crate::dispatch::finish(
            entered,
            &[self, other],
            || crate::dispatch::Op::Binary(crate::dispatch::Binary::And),
            out,
        )
    }

    #[track_caller]
    fn logical_and_untraced(&self, other: &Tensor) -> Tensor {
        let (a, b) = (self.ne_scalar(0.0), other.ne_scalar(0.0));
        let shape = broadcast_shape("logical_and", &a, &b);
        Tensor::broadcast_pair(&a, &b, &shape, "logical_and", |sa, la, sb, lb| {
            sa.logical_and(la, sb, lb)
        })
    }

    /// Elementwise logical not of a bool tensor.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![true, false], &[2]).logical_not().to_vec::<bool>(), vec![false, true]);
    /// ```
    #[track_caller]
    pub fn logical_not(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.logical_not_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Unary(crate::dispatch::Unary::LogicalNot),
            out,
        )
    }

    #[track_caller]
    fn logical_not_untraced(&self) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = Self::where_cond_untraced(cond, a, b);
        crate::dispatch::finish(entered, &[cond, a, b], || crate::dispatch::Op::Where, out)
    }

    #[track_caller]
    fn where_cond_untraced(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
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
        let entered = crate::dispatch::enter();
        let out = self.masked_fill_untraced(mask, value);
        crate::dispatch::finish(
            entered,
            &[self, mask],
            || crate::dispatch::Op::MaskedFill { value },
            out,
        )
    }

    #[track_caller]
    fn masked_fill_untraced(&self, mask: &Tensor, value: f64) -> Tensor {
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
        let _profiled = crate::dispatch::opaque("allclose", &[self]);
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
}
