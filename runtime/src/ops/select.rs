//! Data-dependent selection and NaN handling: `nonzero`, `masked_select`, `unique`,
//! `isnan`/`isinf`/`isfinite`, `nan_to_num`, `where_scalar`, `lerp`. Ops whose output size
//! depends on the values read them on the host once (as PyTorch synchronises for them);
//! the gathers that follow stay on the tensor's device and carry the gradient.

use crate::{DType, Tensor};

impl Tensor {
    /// The indices of the non-zero elements, one row per element: int64 `[count, rank]`
    /// (`torch.nonzero`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![0.0f32, 2.0, 3.0, 0.0], &[2, 2]);
    /// assert_eq!(x.nonzero().to_vec::<i64>(), vec![0, 1, 1, 0]);
    /// ```
    #[track_caller]
    pub fn nonzero(&self) -> Tensor {
        let _profiled = crate::dispatch::opaque("nonzero", &[self]);
        let flags = self.ne_scalar(0.0).to_vec::<bool>();
        let rank = self.dim();
        let shape = self.shape().to_vec();
        let mut out = Vec::new();
        let mut count = 0;
        for (flat, _) in flags.iter().enumerate().filter(|(_, f)| **f) {
            let mut rest = flat;
            let start = out.len();
            out.resize(start + rank, 0i64);
            for d in (0..rank).rev() {
                out[start + d] = (rest % shape[d]) as i64;
                rest /= shape[d];
            }
            count += 1;
        }
        Tensor::from_vec(out, &[count, rank])
            .to_device(&self.device())
            .expect("the tensor's own device is usable")
    }

    /// The elements where the bool `mask` (broadcast to this tensor) is true, as a 1-D
    /// tensor in row-major order (`torch.masked_select`). Differentiable.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// let mask = Tensor::from_vec(vec![true, false], &[2]);
    /// assert_eq!(x.masked_select(&mask).to_vec::<f32>(), vec![1.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn masked_select(&self, mask: &Tensor) -> Tensor {
        let _profiled = crate::dispatch::opaque("masked_select", &[self]);
        assert!(
            mask.dtype() == DType::Bool,
            "masked_select: expected a bool mask, got {:?} (shape {:?})",
            mask.dtype(),
            mask.shape()
        );
        let shape = crate::ops::broadcast_shape("masked_select", self, mask);
        let values = self.broadcast_to(&shape).reshape(&[shape.iter().product()]);
        let flags = mask.broadcast_to(&shape).to_vec::<bool>();
        let idx = flags
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(i, _)| i as i64)
            .collect();
        values.index_select(0, &crate::ops::index_on(self, idx))
    }

    /// The sorted distinct elements, the index of each input element among them
    /// (`return_inverse`, the input's shape) and how often each occurs (`return_counts`)
    /// (`torch.unique(sorted=True, return_inverse=True, return_counts=True)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![2i64, 1, 2, 5], &[4]);
    /// let (values, inverse, counts) = x.unique();
    /// assert_eq!(values.to_vec::<i64>(), vec![1, 2, 5]);
    /// assert_eq!(inverse.to_vec::<i64>(), vec![1, 0, 1, 2]);
    /// assert_eq!(counts.to_vec::<i64>(), vec![1, 2, 1]);
    /// ```
    #[track_caller]
    pub fn unique(&self) -> (Tensor, Tensor, Tensor) {
        let _profiled = crate::dispatch::opaque("unique", &[self]);
        let flat = self.detach().reshape(&[self.numel()]);
        let (sorted, order) = flat.sort(0, false);
        let keys = sorted.to_dtype(DType::F64).to_vec::<f64>();
        let order = order.to_vec::<i64>();
        let mut first = Vec::new();
        let mut counts: Vec<i64> = Vec::new();
        let mut inverse = vec![0i64; keys.len()];
        for (j, &k) in keys.iter().enumerate() {
            // NaNs are all distinct, as in PyTorch.
            let same = j > 0 && (k == keys[j - 1]);
            if !same {
                first.push(j as i64);
                counts.push(0);
            }
            *counts.last_mut().expect("pushed above") += 1;
            inverse[order[j] as usize] = first.len() as i64 - 1;
        }
        let on_device = |v: Vec<i64>, shape: &[usize]| {
            Tensor::from_vec(v, shape)
                .to_device(&self.device())
                .expect("the tensor's own device is usable")
        };
        let n = counts.len();
        let values = sorted.index_select(0, &crate::ops::index_on(self, first));
        (
            values,
            on_device(inverse, self.shape()),
            on_device(counts, &[n]),
        )
    }

    /// Where elements are NaN (`torch.isnan`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, f32::NAN], &[2]);
    /// assert_eq!(x.isnan().to_vec::<bool>(), vec![false, true]);
    /// ```
    #[track_caller]
    pub fn isnan(&self) -> Tensor {
        self.ne(self)
    }

    /// Where elements are +inf or -inf (`torch.isinf`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, f32::NEG_INFINITY, f32::NAN], &[3]);
    /// assert_eq!(x.isinf().to_vec::<bool>(), vec![false, true, false]);
    /// ```
    #[track_caller]
    pub fn isinf(&self) -> Tensor {
        let _profiled = crate::dispatch::opaque("isinf", &[self]);
        if !self.dtype().is_float() {
            return Tensor::zeros(self.shape(), DType::Bool, &self.device());
        }
        self.abs().eq_scalar(f64::INFINITY)
    }

    /// Where elements are neither infinite nor NaN (`torch.isfinite`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, f32::INFINITY, f32::NAN], &[3]);
    /// assert_eq!(x.isfinite().to_vec::<bool>(), vec![true, false, false]);
    /// ```
    #[track_caller]
    pub fn isfinite(&self) -> Tensor {
        let _profiled = crate::dispatch::opaque("isfinite", &[self]);
        if !self.dtype().is_float() {
            return Tensor::ones(self.shape(), DType::Bool, &self.device());
        }
        self.sub(self).eq_scalar(0.0)
    }

    /// Replaces NaN by `nan`, +inf by `posinf` and -inf by `neginf` (`torch.nan_to_num`;
    /// `None` means the dtype's largest and lowest finite values). The gradient passes
    /// through the elements kept.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![f32::NAN, f32::INFINITY, -1.0], &[3]);
    /// assert_eq!(x.nan_to_num(0.0, None, Some(-9.0)).to_vec::<f32>(), vec![0.0, f32::MAX, -1.0]);
    /// ```
    #[track_caller]
    pub fn nan_to_num(&self, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Tensor {
        let _profiled = crate::dispatch::opaque("nan_to_num", &[self]);
        if !self.dtype().is_float() {
            return self.clone();
        }
        let max = match self.dtype() {
            DType::F64 => f64::MAX,
            DType::F16 => 65504.0,
            DType::BF16 => 3.389_531_389_251_535_5e38,
            _ => f32::MAX as f64,
        };
        let x = self.masked_fill(&self.isnan(), nan);
        let x = x.masked_fill(&self.eq_scalar(f64::INFINITY), posinf.unwrap_or(max));
        x.masked_fill(&self.eq_scalar(f64::NEG_INFINITY), neginf.unwrap_or(-max))
    }

    /// `cond ? self : other` elementwise, with a scalar `other` (`torch.where(cond, x,
    /// scalar)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// let cond = Tensor::from_vec(vec![true, false], &[2]);
    /// assert_eq!(x.where_scalar(&cond, -1.0).to_vec::<f32>(), vec![1.0, -1.0]);
    /// ```
    #[track_caller]
    pub fn where_scalar(&self, cond: &Tensor, other: f64) -> Tensor {
        self.masked_fill(&cond.logical_not(), other)
    }

    /// Linear interpolation `self + weight * (end - self)` with a tensor weight
    /// (`torch.lerp`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
    /// let b = Tensor::full(&[2], 10.0, DType::F32, &Device::Cpu);
    /// let w = Tensor::from_vec(vec![0.5f32, 0.25], &[2]);
    /// assert_eq!(a.lerp(&b, &w).to_vec::<f32>(), vec![5.0, 2.5]);
    /// ```
    #[track_caller]
    pub fn lerp(&self, end: &Tensor, weight: &Tensor) -> Tensor {
        self.add(&end.sub(self).mul(weight))
    }

    /// [`lerp`](Self::lerp) with a scalar weight.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::zeros(&[1], DType::F32, &Device::Cpu);
    /// let b = Tensor::full(&[1], 4.0, DType::F32, &Device::Cpu);
    /// assert_eq!(a.lerp_scalar(&b, 0.25).item::<f32>(), 1.0);
    /// ```
    #[track_caller]
    pub fn lerp_scalar(&self, end: &Tensor, weight: f64) -> Tensor {
        self.add(&end.sub(self).mul_scalar(weight))
    }
}
