//! Reductions over dims (with `keepdim`), the fused softmax family, and cumsum.

use crate::autograd::{SavedTensor, is_grad_enabled, record};
use crate::storage::op::{ReduceOp, RowOp};
use crate::tensor::backend_failed;
use crate::{DType, Tensor};
use ferrograd_kernels::{Dims, Layout};

/// `[outer, r, inner]` sizes of a reduction over dim `d`.
fn split_at_dim(shape: &[usize], d: usize) -> (usize, usize, usize) {
    (
        shape[..d].iter().product(),
        shape[d],
        shape[d + 1..].iter().product(),
    )
}

fn keepdim_shape(shape: &[usize], dims: &[usize]) -> Dims {
    shape
        .iter()
        .enumerate()
        .map(|(i, &s)| if dims.contains(&i) { 1 } else { s })
        .collect()
}

fn dropped_shape(shape: &[usize], dims: &[usize]) -> Dims {
    shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !dims.contains(i))
        .map(|(_, &s)| s)
        .collect()
}

impl Tensor {
    /// Normalised, de-duplicated reduction dims; empty means all dims.
    #[track_caller]
    fn reduction_dims(&self, op: &str, dims: &[isize]) -> Vec<usize> {
        let mut out: Vec<usize> = if dims.is_empty() {
            (0..self.dim()).collect()
        } else {
            dims.iter().map(|&d| self.normalize_dim(op, d)).collect()
        };
        out.sort_unstable();
        out.dedup();
        if self.dim() == 0 {
            out.clear();
        }
        out
    }

    /// Sums or multiplies along `d`, giving the keepdim-shaped result.
    fn reduce_one(&self, reduce: ReduceOp, d: usize) -> Tensor {
        self.reduce_run(reduce, d, d + 1)
    }

    /// Sums or multiplies along the adjacent dims `start..end` in one pass (they are one
    /// dim of the contiguous buffer), giving the keepdim-shaped result.
    fn reduce_run(&self, reduce: ReduceOp, start: usize, end: usize) -> Tensor {
        let x = self.contiguous();
        let shape = x.shape();
        let (outer, r, inner) = (
            shape[..start].iter().product(),
            shape[start..end].iter().product(),
            shape[end..].iter().product(),
        );
        let mut kept = Dims::from_slice(shape);
        kept[start..end].fill(1);
        let out = x
            .read_storage()
            .reduce(x.layout(), reduce, [outer, r, inner]);
        Tensor::from_backend(reduce.name(), &kept, out)
    }

    fn sum_raw(&self, dims: &[usize]) -> Tensor {
        let mut x = match self.dtype() {
            DType::Bool | DType::U8 => self.detach().to_dtype(DType::I64),
            _ => self.detach(),
        };
        // Runs of adjacent dims are reduced in one pass (a conv bias gradient sums
        // [N, C, H, W] over H and W as rows of H * W, not W then H), from the last run.
        // A run with nothing before it stays dim by dim, so a full sum is still split
        // across threads and accumulates in stages.
        let mut end = dims.len();
        while end > 0 {
            let mut start = end - 1;
            while start > 0 && dims[start - 1] + 1 == dims[start] {
                start -= 1;
            }
            let (first, last) = (dims[start], dims[end - 1]);
            if first > 0 && last > first {
                x = x.reduce_run(ReduceOp::Sum, first, last + 1);
            } else {
                for &d in dims[start..end].iter().rev() {
                    x = x.reduce_one(ReduceOp::Sum, d);
                }
            }
            end = start;
        }
        x
    }

    /// Sum over `dims` (all dims when empty), keeping them as size 1 with `keepdim`.
    /// Integer and bool tensors sum to int64, as in PyTorch.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[2, 3]);
    /// assert_eq!(t.sum(&[1], false).to_vec::<f32>(), vec![3.0, 12.0]);
    /// assert_eq!(t.sum(&[0], true).shape(), &[1, 3]);
    /// ```
    #[track_caller]
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.sum_untraced(dims, keepdim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::Sum,
                axes: crate::dispatch::axes(self, dims),
                keepdim,
            },
            out,
        )
    }

    #[track_caller]
    fn sum_untraced(&self, dims: &[isize], keepdim: bool) -> Tensor {
        match crate::dispatch::cast("sum", [self]) {
            Some([x]) => x.sum_same_dtype(dims, keepdim),
            None => self.sum_same_dtype(dims, keepdim),
        }
    }

    /// [`Tensor::sum`] without autocast's cast to f32 (for `mean` and gradients).
    #[track_caller]
    pub(crate) fn sum_same_dtype(&self, dims: &[isize], keepdim: bool) -> Tensor {
        let dims = self.reduction_dims("sum", dims);
        let kept = self.sum_raw(&dims);
        let out = if keepdim {
            kept
        } else {
            kept.detach().reshape(&dropped_shape(self.shape(), &dims))
        };
        let (input_shape, keep) = (
            Dims::from_slice(self.shape()),
            keepdim_shape(self.shape(), &dims),
        );
        record(out, "sum", &[self], || {
            move |_, g: &Tensor| vec![Some(g.reshape(&keep).broadcast_to(&input_shape))]
        })
    }

    /// Sum of all elements, as a 0-d tensor.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::ones(&[2, 3], DType::F32, &Device::Cpu).sum_all().item::<f32>(), 6.0);
    /// ```
    #[track_caller]
    pub fn sum_all(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.sum_all_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::Sum,
                axes: (0..self.dim()).collect(),
                keepdim: false,
            },
            out,
        )
    }

    #[track_caller]
    fn sum_all_untraced(&self) -> Tensor {
        self.sum(&[], false)
    }

    /// Mean over `dims` (all when empty); floating-point tensors only.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// assert_eq!(t.mean(&[0], false).to_vec::<f32>(), vec![2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.mean_untraced(dims, keepdim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::Mean,
                axes: crate::dispatch::axes(self, dims),
                keepdim,
            },
            out,
        )
    }

    #[track_caller]
    fn mean_untraced(&self, dims: &[isize], keepdim: bool) -> Tensor {
        assert!(
            self.dtype().is_float(),
            "mean: could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: {:?}",
            self.dtype()
        );
        let reduced = self.reduction_dims("mean", dims);
        let count: usize = reduced.iter().map(|&d| self.shape()[d]).product();
        self.sum_same_dtype(dims, keepdim).div_scalar(count as f64)
    }

    /// Mean of all elements, as a 0-d tensor.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1.0f32, 3.0], &[2]).mean_all().item::<f32>(), 2.0);
    /// ```
    #[track_caller]
    pub fn mean_all(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.mean_all_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::Mean,
                axes: (0..self.dim()).collect(),
                keepdim: false,
            },
            out,
        )
    }

    #[track_caller]
    fn mean_all_untraced(&self) -> Tensor {
        self.mean(&[], false)
    }

    #[allow(clippy::bool_comparison)] // `>` on bool is the ordering false < true, as in PyTorch
    fn arg_reduce(
        &self,
        op: &'static str,
        dim: isize,
        keepdim: bool,
        is_max: bool,
    ) -> (Tensor, Tensor) {
        if self.dim() == 0 {
            let index = Tensor::zeros(&[], DType::I64, &self.device());
            return (self.clone(), index);
        }
        let d = self.normalize_dim(op, dim);
        assert!(
            self.shape()[d] > 0,
            "{op}: cannot reduce over a zero-size dimension {d} (shape {:?})",
            self.shape()
        );
        let x = self.detach().contiguous();
        let (outer, r, inner) = split_at_dim(x.shape(), d);
        let keep = keepdim_shape(self.shape(), &[d]);
        let (values, indices) = x
            .read_storage()
            .arg_reduce(x.layout(), is_max, [outer, r, inner])
            .unwrap_or_else(|e| backend_failed(op, e));
        let (values, indices) = (
            Tensor::from_storage(values, Layout::contiguous(&keep)),
            Tensor::from_storage(indices, Layout::contiguous(&keep)),
        );
        let final_shape = if keepdim {
            keep.clone()
        } else {
            dropped_shape(self.shape(), &[d])
        };
        let values = values.reshape(&final_shape);
        let indices = indices.reshape(&final_shape);
        let input_shape = Dims::from_slice(self.shape());
        let idx = indices.reshape(&keep);
        let values = record(values, op, &[self], || {
            move |_, g: &Tensor| {
                let zeros = Tensor::zeros(&input_shape, g.dtype(), &g.device());
                vec![Some(zeros.scatter_add(d as isize, &idx, &g.reshape(&keep)))]
            }
        });
        (values, indices)
    }

    /// The maximum along `dim` and its index (`torch.max(t, dim)`); NaN wins, the first
    /// index wins ties.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 2.0], &[2, 2]);
    /// let (v, i) = t.max_dim(1, false);
    /// assert_eq!((v.to_vec::<f32>(), i.to_vec::<i64>()), (vec![5.0, 3.0], vec![1, 0]));
    /// ```
    #[track_caller]
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> (Tensor, Tensor) {
        let entered = crate::dispatch::enter();
        let out = self.max_dim_untraced(dim, keepdim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::Max,
                axes: vec![self.normalize_dim("max", dim)],
                keepdim,
            },
            out,
        )
    }

    #[track_caller]
    fn max_dim_untraced(&self, dim: isize, keepdim: bool) -> (Tensor, Tensor) {
        self.arg_reduce("max", dim, keepdim, true)
    }

    /// The minimum along `dim` and its index (`torch.min(t, dim)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 2.0], &[2, 2]);
    /// assert_eq!(t.min_dim(0, false).0.to_vec::<f32>(), vec![1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> (Tensor, Tensor) {
        let entered = crate::dispatch::enter();
        let out = self.min_dim_untraced(dim, keepdim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::Min,
                axes: vec![self.normalize_dim("min", dim)],
                keepdim,
            },
            out,
        )
    }

    #[track_caller]
    fn min_dim_untraced(&self, dim: isize, keepdim: bool) -> (Tensor, Tensor) {
        self.arg_reduce("min", dim, keepdim, false)
    }

    /// The largest element, as a 0-d tensor (`t.max()`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1i64, 7, 3], &[3]).max_all().item::<i64>(), 7);
    /// ```
    #[track_caller]
    pub fn max_all(&self) -> Tensor {
        self.reshape(&[self.numel()]).max_dim(0, false).0
    }

    /// The smallest element, as a 0-d tensor (`t.min()`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_vec(vec![1i64, 7, 3], &[3]).min_all().item::<i64>(), 1);
    /// ```
    #[track_caller]
    pub fn min_all(&self) -> Tensor {
        self.reshape(&[self.numel()]).min_dim(0, false).0
    }

    /// Index of the maximum along `dim` (`argmax`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![0.1f32, 0.7, 0.2], &[1, 3]);
    /// assert_eq!(t.argmax(-1, false).to_vec::<i64>(), vec![1]);
    /// ```
    #[track_caller]
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.argmax_untraced(dim, keepdim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::ArgMax,
                axes: vec![self.normalize_dim("argmax", dim)],
                keepdim,
            },
            out,
        )
    }

    #[track_caller]
    fn argmax_untraced(&self, dim: isize, keepdim: bool) -> Tensor {
        self.detach().arg_reduce("argmax", dim, keepdim, true).1
    }

    /// Index of the minimum along `dim` (`argmin`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![0.1f32, 0.7, 0.2], &[1, 3]);
    /// assert_eq!(t.argmin(-1, false).to_vec::<i64>(), vec![0]);
    /// ```
    #[track_caller]
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.argmin_untraced(dim, keepdim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Reduce {
                kind: crate::dispatch::Reduce::ArgMin,
                axes: vec![self.normalize_dim("argmin", dim)],
                keepdim,
            },
            out,
        )
    }

    #[track_caller]
    fn argmin_untraced(&self, dim: isize, keepdim: bool) -> Tensor {
        self.detach().arg_reduce("argmin", dim, keepdim, false).1
    }

    /// Variance over `dims` with Bessel's correction when `unbiased` (`var`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4]);
    /// assert!((t.var(&[0], true, false).item::<f64>() - 5.0 / 3.0).abs() < 1e-12);
    /// ```
    #[track_caller]
    pub fn var(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Tensor {
        let _profiled = crate::dispatch::opaque("var", &[self]);
        let reduced = self.reduction_dims("var", dims);
        let n: usize = reduced.iter().map(|&d| self.shape()[d]).product();
        let centered = self.sub(&self.mean(dims, true));
        let denominator = if unbiased { n.saturating_sub(1) } else { n };
        centered
            .mul(&centered)
            .sum(dims, keepdim)
            .div_scalar(denominator as f64)
    }

    /// Standard deviation over `dims` (`std`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![2.0f64, 4.0], &[2]);
    /// assert!((t.std(&[0], false, false).item::<f64>() - 1.0).abs() < 1e-12);
    /// ```
    #[track_caller]
    pub fn std(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Tensor {
        self.var(dims, unbiased, keepdim).sqrt()
    }

    /// Product along `dim` (`prod`). The gradient is `grad * prod / x`, so it is not
    /// defined where an input is exactly zero.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// assert_eq!(t.prod(1, false).to_vec::<f32>(), vec![2.0, 12.0]);
    /// ```
    #[track_caller]
    pub fn prod(&self, dim: isize, keepdim: bool) -> Tensor {
        let _profiled = crate::dispatch::opaque("prod", &[self]);
        if let Some([x]) = crate::dispatch::cast("prod", [self]) {
            return x.prod(dim, keepdim);
        }
        let d = self.normalize_dim("prod", dim);
        let x = match self.dtype() {
            DType::Bool | DType::U8 => self.detach().to_dtype(DType::I64),
            _ => self.detach(),
        };
        let kept = x.reduce_one(ReduceOp::Prod, d);
        let out = if keepdim {
            kept.clone()
        } else {
            kept.reshape(&dropped_shape(self.shape(), &[d]))
        };
        let keep = keepdim_shape(self.shape(), &[d]);
        record(out, "prod", &[self], || {
            let (x, o) = (SavedTensor::new(self), SavedTensor::new(&kept));
            move |_, g: &Tensor| {
                vec![Some(
                    g.reshape(&keep).mul(&o.get("prod")).div(&x.get("prod")),
                )]
            }
        })
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably (`logsumexp`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1000.0f64, 1000.0], &[2]);
    /// assert!((t.logsumexp(&[0], false).item::<f64>() - (1000.0 + 2f64.ln())).abs() < 1e-9);
    /// ```
    #[track_caller]
    pub fn logsumexp(&self, dims: &[isize], keepdim: bool) -> Tensor {
        let _profiled = crate::dispatch::opaque("logsumexp", &[self]);
        if let Some([x]) = crate::dispatch::cast("logsumexp", [self]) {
            return x.logsumexp(dims, keepdim);
        }
        let reduced = self.reduction_dims("logsumexp", dims);
        let mut m = self.detach();
        if reduced.iter().any(|&d| self.shape()[d] == 0) {
            // A sum of no exponentials: log 0 = -inf (PyTorch's result), with no max to
            // shift by.
            let mut shape = self.shape().to_vec();
            for &d in &reduced {
                shape[d] = 1;
            }
            m = Tensor::zeros(&shape, self.dtype(), &self.device());
        }
        for &d in &reduced {
            if m.shape()[d] != 1 {
                m = m.max_dim(d as isize, true).0;
            }
        }
        // An all -inf slice has max -inf; shift by 0 there so the result is -inf, not NaN.
        let m = Tensor::where_cond(
            &m.abs().eq_scalar(f64::INFINITY),
            &Tensor::zeros(&[], m.dtype(), &m.device()),
            &m,
        );
        let dims_i: Vec<isize> = reduced.iter().map(|&d| d as isize).collect();
        let out = self.sub(&m).exp().sum(&dims_i, true).log().add(&m);
        if keepdim {
            out
        } else {
            out.reshape(&dropped_shape(self.shape(), &reduced))
        }
    }

    /// Applies a row op along `dim` by moving it last.
    fn along_last(&self, row_op: RowOp, op: &str, d: usize) -> Tensor {
        let last = self.dim().saturating_sub(1);
        let moved = if d == last {
            self.detach().contiguous()
        } else {
            self.detach()
                .transpose(d as isize, last as isize)
                .contiguous()
        };
        let len = moved.shape().last().copied().unwrap_or(1);
        let rows = moved.numel() / len.max(1);
        let out = moved.read_storage().rows(moved.layout(), row_op, rows, len);
        let out = Tensor::from_backend(op, moved.shape(), out);
        if d == last {
            out
        } else {
            out.transpose(d as isize, last as isize)
        }
    }

    /// The input gradient of the row op `row_op` along `d` from its output `self` and the
    /// output's gradient `g` (same shape and dtype), in one kernel.
    #[track_caller]
    fn rows_backward(&self, g: &Tensor, row_op: RowOp, d: usize) -> Tensor {
        let last = self.dim().saturating_sub(1);
        let moved = |t: &Tensor| {
            if d == last {
                t.detach().contiguous()
            } else {
                t.detach().transpose(d as isize, last as isize).contiguous()
            }
        };
        let (y, g) = (moved(self), moved(g));
        let len = y.shape().last().copied().unwrap_or(1);
        let rows = y.numel() / len.max(1);
        let out = y.read_storage().rows_backward(
            y.layout(),
            &g.read_storage(),
            g.layout(),
            row_op,
            rows,
            len,
        );
        let out = Tensor::from_backend("softmax_backward", y.shape(), out);
        if d == last {
            out
        } else {
            out.transpose(d as isize, last as isize)
        }
    }

    /// Softmax along `dim`, fused in one kernel (`softmax`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let s = Tensor::from_vec(vec![1.0f32, 1.0], &[2]).softmax(0);
    /// assert_eq!(s.to_vec::<f32>(), vec![0.5, 0.5]);
    /// ```
    #[track_caller]
    pub fn softmax(&self, dim: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.softmax_untraced(dim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Softmax {
                axis: self.normalize_dim("softmax", dim),
                log: false,
            },
            out,
        )
    }

    #[track_caller]
    fn softmax_untraced(&self, dim: isize) -> Tensor {
        self.softmax_family("softmax", dim, false)
    }

    /// Log-softmax along `dim`, fused and stable (`log_softmax`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let s = Tensor::from_vec(vec![0.0f64, 0.0], &[2]).log_softmax(-1);
    /// assert!((s.to_vec::<f64>()[0] + 2f64.ln()).abs() < 1e-12);
    /// ```
    #[track_caller]
    pub fn log_softmax(&self, dim: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.log_softmax_untraced(dim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Softmax {
                axis: self.normalize_dim("log_softmax", dim),
                log: true,
            },
            out,
        )
    }

    #[track_caller]
    fn log_softmax_untraced(&self, dim: isize) -> Tensor {
        self.softmax_family("log_softmax", dim, true)
    }

    /// Softmax or log-softmax: one row kernel each, and backward from the saved output.
    #[track_caller]
    fn softmax_family(&self, op: &'static str, dim: isize, log: bool) -> Tensor {
        if let Some([x]) = crate::dispatch::cast("softmax", [self]) {
            return x.softmax_family(op, dim, log);
        }
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.to_dtype(DType::F32)
        };
        let d = x.normalize_dim(op, dim);
        let row_op = if log {
            RowOp::LogSoftmax
        } else {
            RowOp::Softmax
        };
        let out = x.along_last(row_op, op, d);
        record(out.clone(), op, &[&x], || {
            let o = SavedTensor::output(&out);
            move |ctx, g: &Tensor| {
                let y = ctx.output(&o);
                // One fused row kernel, unless the backward is itself recorded
                // (`create_graph`), which needs the differentiable formula.
                if !is_grad_enabled() && g.dtype() == y.dtype() && g.shape() == y.shape() {
                    return vec![Some(y.rows_backward(g, row_op, d))];
                }
                let dim = [d as isize];
                vec![Some(if log {
                    // d log_softmax: g - softmax * sum(g)
                    g.sub(&y.exp().mul(&g.sum(&dim, true)))
                } else {
                    // d softmax: s * (g - sum(g * s))
                    y.mul(&g.sub(&g.mul(&y).sum(&dim, true)))
                })]
            }
        })
    }

    /// The `p`-norm over `dims` (all when empty): `p = 2` is the Euclidean norm, `p = 1`
    /// the sum of magnitudes, `p = inf` the largest magnitude.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![3.0f32, -4.0], &[2]);
    /// assert_eq!(t.norm(2.0, &[], false).item::<f32>(), 5.0);
    /// assert_eq!(t.norm(1.0, &[], false).item::<f32>(), 7.0);
    /// assert_eq!(t.norm(f64::INFINITY, &[], false).item::<f32>(), 4.0);
    /// ```
    #[track_caller]
    pub fn norm(&self, p: f64, dims: &[isize], keepdim: bool) -> Tensor {
        let _profiled = crate::dispatch::opaque("norm", &[self]);
        if let Some([x]) = crate::dispatch::cast("norm", [self]) {
            return x.norm(p, dims, keepdim);
        }
        if p == 2.0 {
            self.mul(self).sum(dims, keepdim).sqrt()
        } else if p == 1.0 {
            self.abs().sum(dims, keepdim)
        } else if p == f64::INFINITY {
            let reduced = self.reduction_dims("norm", dims);
            let mut m = self.abs();
            for &d in reduced.iter().rev() {
                m = m.max_dim(d as isize, true).0;
            }
            if keepdim {
                m
            } else {
                m.reshape(&dropped_shape(self.shape(), &reduced))
            }
        } else {
            self.abs()
                .pow_scalar(p)
                .sum(dims, keepdim)
                .pow_scalar(1.0 / p)
        }
    }

    /// Inclusive cumulative sum along `dim` (`cumsum`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]);
    /// assert_eq!(t.cumsum(0).to_vec::<f32>(), vec![1.0, 3.0, 6.0]);
    /// ```
    #[track_caller]
    pub fn cumsum(&self, dim: isize) -> Tensor {
        let _profiled = crate::dispatch::opaque("cumsum", &[self]);
        if let Some([x]) = crate::dispatch::cast("cumsum", [self]) {
            return x.cumsum(dim);
        }
        let d = self.normalize_dim("cumsum", dim);
        let x = match self.dtype() {
            DType::Bool | DType::U8 => self.detach().to_dtype(DType::I64),
            _ => self.detach().contiguous(),
        };
        let (outer, r, inner) = split_at_dim(x.shape(), d);
        let out = x.read_storage().cumsum(x.layout(), [outer, r, inner]);
        let out = Tensor::from_backend("cumsum", x.shape(), out);
        record(out, "cumsum", &[self], || {
            move |_, g: &Tensor| {
                let di = d as isize;
                vec![Some(g.sum(&[di], true).sub(&g.cumsum(di)).add(g))]
            }
        })
    }
}
