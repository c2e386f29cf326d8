//! Views and joins: reshape, permute, expand, narrow/slice, select, cat, stack. Views share
//! storage; each backward is the inverse view (or a sum, for expand).

use super::check_same_device;
use crate::autograd::record;
use crate::tensor::normalize_dim;
use crate::{DType, Tensor};
use ferrograd_kernels::{Dims, Layout};

impl Tensor {
    /// Resolves a shape with at most one `-1` against this tensor's element count.
    #[track_caller]
    fn infer_shape(&self, op: &str, shape: &[isize]) -> Dims {
        let known: usize = shape
            .iter()
            .filter(|&&d| d >= 0)
            .map(|&d| d as usize)
            .product();
        let unknown = shape.iter().filter(|&&d| d == -1).count();
        assert!(
            unknown <= 1 && shape.iter().all(|&d| d >= -1),
            "{op}: only one dimension can be inferred and sizes must be >= -1, got {shape:?}"
        );
        let numel = self.numel();
        let out: Dims = shape
            .iter()
            .map(|&d| {
                if d == -1 {
                    numel.checked_div(known).unwrap_or(0)
                } else {
                    d as usize
                }
            })
            .collect();
        assert!(
            out.iter().product::<usize>() == numel
                && (unknown == 0 || known == 0 || numel.is_multiple_of(known)),
            "{op}: shape {shape:?} is invalid for input of size {numel} (input shape {:?})",
            self.shape()
        );
        out
    }

    /// A view (or a copy when the strides forbid a view) with a new shape (`reshape`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu);
    /// assert_eq!(t.reshape(&[2, 3]).shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.reshape_untraced(shape);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn reshape_untraced(&self, shape: &[usize]) -> Tensor {
        let shape: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
        self.reshape_infer(&shape)
    }

    /// [`Tensor::reshape`] where one dim may be `-1` (inferred).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[4, 6], DType::F32, &Device::Cpu);
    /// assert_eq!(t.reshape_infer(&[-1, 3]).shape(), &[8, 3]);
    /// ```
    #[track_caller]
    pub fn reshape_infer(&self, shape: &[isize]) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.reshape_infer_untraced(shape);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn reshape_infer_untraced(&self, shape: &[isize]) -> Tensor {
        let shape = self.infer_shape("reshape", shape);
        if shape.as_slice() == self.shape() {
            return self.clone();
        }
        let base = match self.layout().reshape(&shape) {
            Some(layout) => self.view_with_layout(layout),
            None => self
                .contiguous()
                .detach()
                .view_with_layout(Layout::contiguous(&shape)),
        };
        let from: Dims = Dims::from_slice(self.shape());
        record(base, "reshape", &[self], || {
            move |_, g: &Tensor| vec![Some(g.reshape(&from))]
        })
    }

    /// A view with a new shape; panics when the strides do not allow one (`view`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu);
    /// assert_eq!(t.view(&[-1]).shape(), &[6]);
    /// ```
    #[track_caller]
    pub fn view(&self, shape: &[isize]) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.view_untraced(shape);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn view_untraced(&self, shape: &[isize]) -> Tensor {
        let resolved = self.infer_shape("view", shape);
        assert!(
            self.layout().reshape(&resolved).is_some(),
            "view: size {resolved:?} is not compatible with input tensor's size {:?} and stride {:?} \
             (at least one dimension spans across two contiguous subspaces); use .reshape(...) instead",
            self.shape(),
            self.stride()
        );
        self.reshape_infer(shape)
    }

    /// Merges dims `start..=end` into one (`flatten(start_dim, end_dim)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 3, 4], DType::F32, &Device::Cpu);
    /// assert_eq!(t.flatten(1, -1).shape(), &[2, 12]);
    /// ```
    #[track_caller]
    pub fn flatten(&self, start: isize, end: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.flatten_untraced(start, end);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn flatten_untraced(&self, start: isize, end: isize) -> Tensor {
        if self.dim() == 0 {
            return self.reshape(&[1]);
        }
        let (s, e) = (
            self.normalize_dim("flatten", start),
            self.normalize_dim("flatten", end),
        );
        assert!(
            s <= e,
            "flatten: start_dim ({start}) cannot come after end_dim ({end})"
        );
        let mut shape: Vec<usize> = self.shape()[..s].to_vec();
        shape.push(self.shape()[s..=e].iter().product());
        shape.extend_from_slice(&self.shape()[e + 1..]);
        self.reshape(&shape)
    }

    /// Reorders dims (`permute`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 3, 4], DType::F32, &Device::Cpu);
    /// assert_eq!(t.permute(&[2, 0, 1]).shape(), &[4, 2, 3]);
    /// ```
    #[track_caller]
    pub fn permute(&self, dims: &[isize]) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.permute_untraced(dims);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Permute {
                perm: dims
                    .iter()
                    .map(|&d| self.normalize_dim("permute", d))
                    .collect(),
            },
            out,
        )
    }

    #[track_caller]
    fn permute_untraced(&self, dims: &[isize]) -> Tensor {
        assert!(
            dims.len() == self.dim(),
            "permute: number of dims in the permutation ({}) doesn't match the tensor's rank {} (shape {:?})",
            dims.len(),
            self.dim(),
            self.shape()
        );
        let perm: Vec<usize> = dims
            .iter()
            .map(|&d| self.normalize_dim("permute", d))
            .collect();
        let mut seen = vec![false; perm.len()];
        for &p in &perm {
            assert!(!seen[p], "permute: dim {p} appears twice in {dims:?}");
            seen[p] = true;
        }
        let out = self.view_with_layout(self.layout().permute(&perm));
        record(out, "permute", &[self], || {
            let mut inverse = vec![0isize; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i as isize;
            }
            move |_, g: &Tensor| vec![Some(g.permute(&inverse))]
        })
    }

    /// Swaps two dims (`transpose`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 3, 4], DType::F32, &Device::Cpu);
    /// assert_eq!(t.transpose(0, -1).shape(), &[4, 3, 2]);
    /// ```
    #[track_caller]
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.transpose_untraced(dim0, dim1);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Permute {
                perm: crate::dispatch::swap_perm(
                    self.dim(),
                    self.normalize_dim("transpose", dim0),
                    self.normalize_dim("transpose", dim1),
                ),
            },
            out,
        )
    }

    #[track_caller]
    fn transpose_untraced(&self, dim0: isize, dim1: isize) -> Tensor {
        if self.dim() < 2 && dim0 == dim1 {
            return self.clone();
        }
        let (a, b) = (
            self.normalize_dim("transpose", dim0),
            self.normalize_dim("transpose", dim1),
        );
        let mut perm: Vec<isize> = (0..self.dim() as isize).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// The transpose of a matrix (`t()`); 0-d and 1-d tensors are returned as they are.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).t().shape(), &[3, 2]);
    /// ```
    #[track_caller]
    pub fn t(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.t_untraced();
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Permute {
                perm: (0..self.dim()).rev().collect(),
            },
            out,
        )
    }

    #[track_caller]
    fn t_untraced(&self) -> Tensor {
        assert!(
            self.dim() <= 2,
            "t: expects a tensor with <= 2 dimensions, but got shape {:?}",
            self.shape()
        );
        if self.dim() < 2 {
            self.clone()
        } else {
            self.transpose(0, 1)
        }
    }

    /// Inserts a dim of size 1 (`unsqueeze`); `dim` may be `rank` (append).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[3], DType::F32, &Device::Cpu).unsqueeze(0).shape(), &[1, 3]);
    /// ```
    #[track_caller]
    pub fn unsqueeze(&self, dim: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.unsqueeze_untraced(dim);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn unsqueeze_untraced(&self, dim: isize) -> Tensor {
        let d = normalize_dim("unsqueeze", dim, self.dim() + 1, self.shape());
        let out = self.view_with_layout(self.layout().unsqueeze(d));
        record(out, "unsqueeze", &[self], || {
            move |_, g: &Tensor| vec![Some(g.squeeze(d as isize))]
        })
    }

    /// Removes dim `dim` if it has size 1 (`squeeze(dim)`); otherwise returns the tensor.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[1, 3], DType::F32, &Device::Cpu).squeeze(0).shape(), &[3]);
    /// ```
    #[track_caller]
    pub fn squeeze(&self, dim: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.squeeze_untraced(dim);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn squeeze_untraced(&self, dim: isize) -> Tensor {
        if self.dim() == 0 {
            return self.clone();
        }
        let d = self.normalize_dim("squeeze", dim);
        if self.shape()[d] != 1 {
            return self.clone();
        }
        let out = self.view_with_layout(self.layout().squeeze(d));
        record(out, "squeeze", &[self], || {
            move |_, g: &Tensor| vec![Some(g.unsqueeze(d as isize))]
        })
    }

    /// Removes every dim of size 1 (`squeeze()`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[1, 3, 1], DType::F32, &Device::Cpu).squeeze_all().shape(), &[3]);
    /// ```
    #[track_caller]
    pub fn squeeze_all(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.squeeze_all_untraced();
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Reshape, out)
    }

    #[track_caller]
    fn squeeze_all_untraced(&self) -> Tensor {
        let shape: Vec<usize> = self.shape().iter().copied().filter(|&d| d != 1).collect();
        self.reshape(&shape)
    }

    /// A broadcast view with `shape`; `-1` keeps a dim (`expand`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1]);
    /// assert_eq!(t.expand(&[-1, 3]).to_vec::<f32>(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn expand(&self, shape: &[isize]) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.expand_untraced(shape);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Expand, out)
    }

    #[track_caller]
    fn expand_untraced(&self, shape: &[isize]) -> Tensor {
        assert!(
            shape.len() >= self.dim(),
            "expand: the number of sizes provided ({}) must be greater or equal to the number of dimensions in the tensor ({}) (shape {:?})",
            shape.len(),
            self.dim(),
            self.shape()
        );
        let extra = shape.len() - self.dim();
        let target: Dims = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                let own = if i >= extra { Some(self.shape()[i - extra]) } else { None };
                match (d, own) {
                    (-1, Some(o)) => o,
                    (-1, None) => panic!("expand: -1 is not allowed in a leading, non-existing dimension ({shape:?})"),
                    (d, Some(o)) if o != 1 && o != d as usize => panic!(
                        "expand: the expanded size of the tensor ({d}) must match the existing size ({o}) at non-singleton dimension {i}: target {shape:?}, tensor shape {:?}",
                        self.shape()
                    ),
                    (d, _) => d as usize,
                }
            })
            .collect();
        self.broadcast_to(&target)
    }

    /// A broadcast view with exactly `shape` (`broadcast_to`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[3], DType::F32, &Device::Cpu);
    /// assert_eq!(t.broadcast_to(&[2, 3]).shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        let _profiled = crate::dispatch::opaque("broadcast_to", &[self]);
        if self.shape() == shape {
            return self.clone();
        }
        let ok = ferrograd_kernels::broadcast_shapes(self.shape(), shape)
            .is_ok_and(|s| s.as_slice() == shape);
        assert!(
            ok,
            "broadcast_to: tensor of shape {:?} cannot be broadcast to {shape:?}",
            self.shape()
        );
        let out = self.view_with_layout(self.layout().broadcast_to(shape));
        let from: Dims = Dims::from_slice(self.shape());
        record(out, "expand", &[self], || {
            move |_, g: &Tensor| vec![Some(g.sum_to_shape(&from))]
        })
    }

    /// `len` indices of `dim` from `start` (`narrow`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 5.0, 1.0, DType::I64, &Device::Cpu);
    /// assert_eq!(t.narrow(0, 1, 3).to_vec::<i64>(), vec![1, 2, 3]);
    /// ```
    #[track_caller]
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.narrow_untraced(dim, start, len);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Slice {
                axis: self.normalize_dim("narrow", dim),
                start,
                end: start + len,
                step: 1,
            },
            out,
        )
    }

    #[track_caller]
    fn narrow_untraced(&self, dim: isize, start: usize, len: usize) -> Tensor {
        let d = self.normalize_dim("narrow", dim);
        assert!(
            start + len <= self.shape()[d],
            "narrow: start ({start}) + length ({len}) exceeds dimension size ({}) of dim {dim} (shape {:?})",
            self.shape()[d],
            self.shape()
        );
        self.slice_raw(d, start, len, 1)
    }

    /// Python's `t[.., start:end:step, ..]` along `dim`; `end` is clamped to the size.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 10.0, 1.0, DType::I64, &Device::Cpu);
    /// assert_eq!(t.slice(0, 1, 8, 3).to_vec::<i64>(), vec![1, 4, 7]);
    /// ```
    #[track_caller]
    pub fn slice(&self, dim: isize, start: usize, end: usize, step: usize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.slice_untraced(dim, start, end, step);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Slice {
                axis: self.normalize_dim("slice", dim),
                start,
                end,
                step,
            },
            out,
        )
    }

    #[track_caller]
    fn slice_untraced(&self, dim: isize, start: usize, end: usize, step: usize) -> Tensor {
        let d = self.normalize_dim("slice", dim);
        assert!(step > 0, "slice: step must be positive, got {step}");
        let end = end.min(self.shape()[d]);
        let start = start.min(end);
        let len = (end - start).div_ceil(step);
        self.slice_raw(d, start, len, step)
    }

    fn slice_raw(&self, d: usize, start: usize, len: usize, step: usize) -> Tensor {
        if start == 0 && step == 1 && len == self.shape()[d] {
            return self.clone();
        }
        let out = self.view_with_layout(self.layout().slice(d, start, len, step));
        let input_shape: Dims = Dims::from_slice(self.shape());
        record(out, "slice", &[self], || {
            move |ctx, g: &Tensor| {
                if crate::autograd::is_grad_enabled() {
                    return vec![Some(g.slice_backward(&input_shape, d, start, step))];
                }
                // Without a graph to record, the engine adds the slice into the input's
                // gradient (see `SliceGrad`).
                ctx.slice_grad(
                    0,
                    crate::autograd::SliceGrad {
                        input_shape: input_shape.clone(),
                        dim: d,
                        start,
                        step,
                        grad: g.clone(),
                    },
                );
                vec![None]
            }
        })
    }

    /// Zeros of `input_shape` with `self` written into the slice `start::step` of `dim`: the
    /// adjoint of slicing, itself differentiable (its backward is the slice).
    pub(crate) fn slice_backward(
        &self,
        input_shape: &[usize],
        d: usize,
        start: usize,
        step: usize,
    ) -> Tensor {
        let out = Tensor::zeros(input_shape, self.dtype(), &self.device());
        let region = out.layout().slice(d, start, self.shape()[d], step);
        out.write_region(&region, self);
        let len = self.shape()[d];
        record(out, "slice_backward", &[self], || {
            move |_, g: &Tensor| vec![Some(g.slice_raw(d, start, len, step))]
        })
    }

    /// Copies `src` into the `region` view of this freshly made tensor's storage.
    pub(crate) fn write_region(&self, region: &Layout, src: &Tensor) {
        let src = src.to_dtype(self.dtype());
        let src_layout = src.layout().broadcast_to(region.shape());
        // One thread cannot hold a buffer's write and read locks: copy an aliasing source.
        let src = if self.shares_storage(&src) {
            src.deep_copy()
        } else {
            src
        };
        self.backend_write("copy", |dst, _| {
            dst.assign(region, &src.read_storage(), &src_layout)
        });
    }

    /// The slice at `index` of `dim`, removing the dim (`select`, `t[:, i]`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 6.0, 1.0, DType::I64, &Device::Cpu).reshape(&[2, 3]);
    /// assert_eq!(t.select(1, 2).to_vec::<i64>(), vec![2, 5]);
    /// ```
    #[track_caller]
    pub fn select(&self, dim: isize, index: usize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.select_untraced(dim, index);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Select {
                axis: self.normalize_dim("select", dim),
                index,
            },
            out,
        )
    }

    #[track_caller]
    fn select_untraced(&self, dim: isize, index: usize) -> Tensor {
        let d = self.normalize_dim("select", dim);
        assert!(
            index < self.shape()[d],
            "select: index {index} is out of bounds for dimension {dim} with size {} (shape {:?})",
            self.shape()[d],
            self.shape()
        );
        self.slice_raw(d, index, 1, 1).squeeze(d as isize)
    }

    /// A contiguous tensor with the same values (a no-op when already contiguous).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).t().contiguous();
    /// assert!(t.is_contiguous());
    /// ```
    #[track_caller]
    pub fn contiguous(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.contiguous_untraced();
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Identity, out)
    }

    #[track_caller]
    fn contiguous_untraced(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        self.deep_copy()
    }

    /// Splits into `chunks` pieces along `dim` (the last may be smaller), as `chunk`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[5, 2], DType::F32, &Device::Cpu);
    /// let parts = t.chunk(3, 0);
    /// assert_eq!(parts.iter().map(|p| p.shape()[0]).collect::<Vec<_>>(), vec![2, 2, 1]);
    /// ```
    #[track_caller]
    pub fn chunk(&self, chunks: usize, dim: isize) -> Vec<Tensor> {
        let entered = crate::dispatch::enter();
        let out = self.chunk_untraced(chunks, dim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Split {
                axis: self.normalize_dim("chunk", dim),
            },
            out,
        )
    }

    #[track_caller]
    fn chunk_untraced(&self, chunks: usize, dim: isize) -> Vec<Tensor> {
        assert!(chunks > 0, "chunk: chunks must be positive");
        let d = self.normalize_dim("chunk", dim);
        let size = self.shape()[d].div_ceil(chunks).max(1);
        self.split(size, dim)
    }

    /// Splits into pieces of `size` along `dim` (the last may be smaller), as `split`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[5], DType::F32, &Device::Cpu);
    /// assert_eq!(t.split(2, 0).len(), 3);
    /// ```
    #[track_caller]
    pub fn split(&self, size: usize, dim: isize) -> Vec<Tensor> {
        let entered = crate::dispatch::enter();
        let out = self.split_untraced(size, dim);
        crate::dispatch::finish(
            entered,
            &[self],
            || crate::dispatch::Op::Split {
                axis: self.normalize_dim("split", dim),
            },
            out,
        )
    }

    #[track_caller]
    fn split_untraced(&self, size: usize, dim: isize) -> Vec<Tensor> {
        assert!(size > 0, "split: split_size must be positive");
        let d = self.normalize_dim("split", dim);
        let n = self.shape()[d];
        (0..n)
            .step_by(size)
            .map(|start| self.narrow(d as isize, start, size.min(n - start)))
            .collect()
    }

    /// Concatenates along `dim` (`torch.cat`); all other dims must match.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu);
    /// let b = Tensor::ones(&[1, 3], DType::F32, &Device::Cpu);
    /// assert_eq!(Tensor::cat(&[&a, &b], 0).shape(), &[3, 3]);
    /// ```
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = Self::cat_untraced(tensors, dim);
        crate::dispatch::finish(
            entered,
            tensors,
            || crate::dispatch::Op::Cat {
                axis: tensors[0].normalize_dim("cat", dim),
            },
            out,
        )
    }

    #[track_caller]
    fn cat_untraced(tensors: &[&Tensor], dim: isize) -> Tensor {
        assert!(
            !tensors.is_empty(),
            "cat: expected a non-empty list of tensors"
        );
        check_same_device("cat", tensors);
        let first = tensors[0];
        let d = first.normalize_dim("cat", dim);
        let dtype = tensors
            .iter()
            .fold(first.dtype(), |acc, t| DType::promote(acc, t.dtype()));
        for (i, t) in tensors.iter().enumerate() {
            let ok = t.dim() == first.dim()
                && t.shape()
                    .iter()
                    .zip(first.shape())
                    .enumerate()
                    .all(|(k, (a, b))| k == d || a == b);
            assert!(
                ok,
                "cat: sizes of tensors must match except in dimension {d}: expected shape {:?} (apart from dim {d}) but tensor {i} has shape {:?}",
                first.shape(),
                t.shape()
            );
        }
        let mut shape = Dims::from_slice(first.shape());
        shape[d] = tensors.iter().map(|t| t.shape()[d]).sum();
        let sizes: Vec<usize> = tensors.iter().map(|t| t.shape()[d]).collect();
        let converted: Vec<Tensor> = tensors.iter().map(|t| t.to_dtype(dtype)).collect();
        let out = if first.device() == crate::Device::Cpu {
            // Every element written once from the contiguous pieces, no zero fill first.
            let pieces: Vec<Tensor> = converted.iter().map(|t| t.detach().contiguous()).collect();
            let outer: usize = shape[..d].iter().product();
            let inner: usize = shape[d + 1..].iter().product();
            let storages: Vec<_> = pieces.iter().map(|t| t.read_storage()).collect();
            let parts: Vec<_> = storages
                .iter()
                .zip(&pieces)
                .map(|(s, t)| match &**s {
                    crate::storage::Storage::Cpu(c) => (c, t.layout()),
                    crate::storage::Storage::Cuda(_) => {
                        unreachable!("a CPU cat's pieces are on the CPU")
                    }
                })
                .collect();
            let out = crate::storage::cpu::cat(&parts, &sizes, outer, inner);
            Tensor::from_backend("cat", &shape, Ok(crate::storage::Storage::Cpu(out)))
        } else {
            let out = Tensor::zeros(&shape, dtype, &first.device());
            let mut offset = 0;
            for (t, &len) in tensors.iter().zip(&sizes) {
                out.write_region(&out.layout().slice(d, offset, len, 1), t);
                offset += len;
            }
            out
        };
        let refs: Vec<&Tensor> = converted.iter().collect();
        record(out, "cat", &refs, || {
            move |ctx, g: &Tensor| {
                let mut start = 0;
                sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &len)| {
                        let piece = ctx.needs(i).then(|| g.narrow(d as isize, start, len));
                        start += len;
                        piece
                    })
                    .collect()
            }
        })
    }

    /// Stacks equally shaped tensors along a new dim (`torch.stack`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::zeros(&[3], DType::F32, &Device::Cpu);
    /// assert_eq!(Tensor::stack(&[&a, &a], 0).shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Tensor {
        let _profiled = crate::dispatch::opaque("stack", tensors);
        assert!(
            !tensors.is_empty(),
            "stack: expected a non-empty list of tensors"
        );
        for (i, t) in tensors.iter().enumerate() {
            assert!(
                t.shape() == tensors[0].shape(),
                "stack: expects each tensor to be equal size, but got {:?} at entry 0 and {:?} at entry {i}",
                tensors[0].shape(),
                t.shape()
            );
        }
        let d = normalize_dim("stack", dim, tensors[0].dim() + 1, tensors[0].shape());
        let expanded: Vec<Tensor> = tensors.iter().map(|t| t.unsqueeze(d as isize)).collect();
        let refs: Vec<&Tensor> = expanded.iter().collect();
        Tensor::cat(&refs, d as isize)
    }
}
