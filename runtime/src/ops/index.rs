//! Indexing: index_select, gather, scatter_add, one_hot, tril/triu.

use super::check_same_device;
use crate::autograd::record;
use crate::{DType, Tensor};
use ferrograd_kernels::{Dims, IndexBounds};

/// The bounds of indices `index` into dim `d` of `input`, for `op`.
pub(crate) fn dim_bounds(
    op: &'static str,
    input: &Tensor,
    d: usize,
    index: &Tensor,
) -> IndexBounds {
    IndexBounds::dim(op, d, input.shape(), index.shape())
}

/// Panics unless `index` is an int64 tensor on `input`'s device, naming the op.
#[track_caller]
fn check_index_tensor(op: &str, input: &Tensor, index: &Tensor) {
    check_same_device(op, &[input, index]);
    assert!(
        index.dtype() == DType::I64,
        "{op}: expected an int64 index tensor but got {:?} (index shape {:?})",
        index.dtype(),
        index.shape()
    );
}

impl Tensor {
    /// Picks entries `index` (1-D int64) along `dim` (`index_select`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[3, 2]);
    /// let idx = Tensor::from_vec(vec![2i64, 0], &[2]);
    /// assert_eq!(t.index_select(0, &idx).to_vec::<f32>(), vec![4.0, 5.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn index_select(&self, dim: isize, index: &Tensor) -> Tensor {
        let _profiled = crate::dispatch::opaque("index_select", &[self]);
        let d = self.normalize_dim("index_select", dim);
        assert!(
            index.dim() <= 1,
            "index_select: index must be 0-D or 1-D, got shape {:?}",
            index.shape()
        );
        check_index_tensor("index_select", self, index);
        let bounds = dim_bounds("index_select", self, d, index);
        let x = self.detach().contiguous();
        let outer: usize = x.shape()[..d].iter().product();
        let inner: usize = x.shape()[d + 1..].iter().product();
        let r = x.shape()[d];
        let mut shape = Dims::from_slice(self.shape());
        shape[d] = index.numel();
        let idx = index.contiguous();
        let out = x.read_storage().index_select(
            x.layout(),
            [outer, r, inner],
            (&idx.read_storage(), idx.layout()),
            &bounds,
        );
        let out = Tensor::from_backend("index_select", &shape, out);
        let (input_shape, index) = (
            Dims::from_slice(self.shape()),
            index.reshape(&[index.numel()]),
        );
        record(out, "index_select", &[self], || {
            move |_, g: &Tensor| {
                vec![Some(
                    Tensor::zeros(&input_shape, g.dtype(), &g.device())
                        .index_add(d as isize, &index, g),
                )]
            }
        })
    }

    /// `self` with `src`'s slices added at positions `index` along `dim` (`index_add`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[3], DType::F32, &Device::Cpu);
    /// let idx = Tensor::from_vec(vec![0i64, 0, 2], &[3]);
    /// let src = Tensor::from_vec(vec![1.0f32, 2.0, 5.0], &[3]);
    /// assert_eq!(t.index_add(0, &idx, &src).to_vec::<f32>(), vec![3.0, 0.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn index_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Tensor {
        let _profiled = crate::dispatch::opaque("index_add", &[self]);
        let d = self.normalize_dim("index_add", dim);
        let mut view_shape = vec![1usize; src.dim()];
        view_shape[d] = index.numel();
        assert!(
            src.dim() == self.dim() && src.shape()[d] == index.numel(),
            "index_add: source of shape {:?} must match the input's rank ({:?}) and have {} entries along dim {d}",
            src.shape(),
            self.shape(),
            index.numel()
        );
        if let Some(out) = self.index_add_rows(d, index, src) {
            return out;
        }
        let expanded = index
            .reshape(&view_shape)
            .broadcast_to(src.shape())
            .contiguous();
        self.scatter_add(dim, &expanded, src)
    }

    /// [`Tensor::index_add`] of float tensors on the CPU whose source matches the input
    /// outside `d` (an embedding's and `index_select`'s backward): whole rows of `inner`
    /// elements added at once, instead of a scatter through an index expanded to the
    /// source's shape. `None` (nothing done) for anything else, including an index out of
    /// range, which the general path reports.
    fn index_add_rows(&self, d: usize, index: &Tensor, src: &Tensor) -> Option<Tensor> {
        /// `x` with `src`'s rows added at `idx` (over `[outer, r, inner]`), as a new tensor:
        /// one copy of `x`, then `src` read where it lies (no copy of it).
        fn add_rows<T: ferrograd_kernels::FloatElement>(
            x: &Tensor,
            src: &Tensor,
            idx: &[usize],
            [outer, r, inner]: [usize; 3],
        ) -> Tensor {
            let (x, src) = (x.detach().contiguous(), src.detach().contiguous());
            let range =
                |l: &ferrograd_kernels::Layout| l.contiguous_range().expect("made contiguous");
            let mut out = x.with_cpu("index_add", |s, l| {
                ferrograd_kernels::cpu::HostBuffer::from_slice(&s.typed::<T>()[range(l)])
            });
            let n = idx.len();
            src.with_cpu("index_add", |s, l| {
                let src = &s.typed::<T>()[range(l)];
                for o in 0..outer {
                    for (i, &row) in idx.iter().enumerate() {
                        let dst = &mut out[(o * r + row) * inner..][..inner];
                        let add = &src[(o * n + i) * inner..][..inner];
                        dst.iter_mut().zip(add).for_each(|(a, &b)| *a = *a + b);
                    }
                }
            });
            Tensor::from_cpu_on(T::into_storage(out), x.shape(), crate::Device::Cpu)
        }
        let same_outside = (0..self.dim()).all(|j| j == d || self.shape()[j] == src.shape()[j]);
        if self.device() != crate::Device::Cpu
            || !matches!(self.dtype(), DType::F32 | DType::F64)
            || src.dtype() != self.dtype()
            || index.dtype() != DType::I64
            || !same_outside
        {
            return None;
        }
        let r = self.shape()[d];
        let idx: Vec<usize> = index
            .to_vec::<i64>()
            .into_iter()
            .map(|i| usize::try_from(i).ok().filter(|&i| i < r))
            .collect::<Option<_>>()?;
        let outer: usize = self.shape()[..d].iter().product();
        let inner: usize = self.shape()[d + 1..].iter().product();
        let dims = [outer, r, inner];
        let out = match self.dtype() {
            DType::F32 => add_rows::<f32>(self, src, &idx, dims),
            _ => add_rows::<f64>(self, src, &idx, dims),
        };
        let index = index.reshape(&[index.numel()]);
        Some(record(out, "index_add", &[self, src], || {
            move |ctx, g: &Tensor| {
                vec![
                    ctx.needs(0).then(|| g.clone()),
                    ctx.needs(1).then(|| g.index_select(d as isize, &index)),
                ]
            }
        }))
    }

    /// `out[p] = self[p with p[dim] = index[p]]` (`gather`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// let idx = Tensor::from_vec(vec![1i64, 0], &[2, 1]);
    /// assert_eq!(t.gather(1, &idx).to_vec::<f32>(), vec![2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn gather(&self, dim: isize, index: &Tensor) -> Tensor {
        let _profiled = crate::dispatch::opaque("gather", &[self]);
        let d = self.normalize_dim("gather", dim);
        self.gather_checked(d, index, dim_bounds("gather", self, d, index))
    }

    /// [`Tensor::gather`] along normalised `d`, a bad index reported through `bounds`.
    #[track_caller]
    pub(crate) fn gather_checked(&self, d: usize, index: &Tensor, bounds: IndexBounds) -> Tensor {
        let op = bounds.op();
        check_index_tensor(op, self, index);
        self.check_scatter_shapes(op, index, d, None);
        let idx = index.contiguous();
        let out = self.read_storage().gather(
            self.layout(),
            (&idx.read_storage(), idx.layout()),
            &bounds,
            d,
        );
        let out = Tensor::from_backend(op, index.shape(), out);
        let (input_shape, index) = (Dims::from_slice(self.shape()), index.clone());
        record(out, "gather", &[self], || {
            move |_, g: &Tensor| {
                vec![Some(
                    Tensor::zeros(&input_shape, g.dtype(), &g.device())
                        .scatter_add(d as isize, &index, g),
                )]
            }
        })
    }

    #[track_caller]
    fn check_scatter_shapes(&self, op: &str, index: &Tensor, d: usize, src: Option<&Tensor>) {
        let ok = index.dim() == self.dim()
            && index
                .shape()
                .iter()
                .zip(self.shape())
                .enumerate()
                .all(|(i, (a, b))| i == d || a <= b)
            && src.is_none_or(|s| {
                s.dim() == index.dim() && index.shape().iter().zip(s.shape()).all(|(a, b)| a <= b)
            });
        assert!(
            ok,
            "{op}: index of shape {:?} must have the input's rank and be no larger than the input (shape {:?}) outside dim {d}{}",
            index.shape(),
            self.shape(),
            src.map(|s| format!(" and no larger than src (shape {:?})", s.shape()))
                .unwrap_or_default()
        );
    }

    /// `self` plus `src` scattered to positions `index` along `dim` (`scatter_add`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 2], DType::F32, &Device::Cpu);
    /// let idx = Tensor::from_vec(vec![1i64, 1], &[1, 2]);
    /// let src = Tensor::from_vec(vec![5.0f32, 6.0], &[1, 2]);
    /// assert_eq!(t.scatter_add(0, &idx, &src).to_vec::<f32>(), vec![0.0, 0.0, 5.0, 6.0]);
    /// ```
    #[track_caller]
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Tensor {
        let _profiled = crate::dispatch::opaque("scatter_add", &[self]);
        let d = self.normalize_dim("scatter_add", dim);
        self.scatter_add_checked(d, index, src, dim_bounds("scatter_add", self, d, index))
    }

    /// [`Tensor::scatter_add`] along normalised `d`, a bad index reported through `bounds`.
    #[track_caller]
    fn scatter_add_checked(
        &self,
        d: usize,
        index: &Tensor,
        src: &Tensor,
        bounds: IndexBounds,
    ) -> Tensor {
        check_same_device("scatter_add", &[self, src]);
        check_index_tensor(bounds.op(), self, index);
        self.check_scatter_shapes("scatter_add", index, d, Some(src));
        assert!(
            self.dtype() != DType::Bool,
            "scatter_add: not implemented for bool tensors (shape {:?})",
            self.shape()
        );
        let src = src.to_dtype(self.dtype());
        let out = self.detach().deep_copy();
        let src_view = src.layout().slice_to(index.shape());
        let idx = index.contiguous();
        out.backend_write("scatter_add", |dst, _| {
            dst.scatter_add(
                self.shape(),
                (&idx.read_storage(), idx.layout()),
                &bounds,
                (&src.read_storage(), &src_view),
                d,
            )
        });
        let index = index.clone();
        let src_shape = Dims::from_slice(src.shape());
        record(out, "scatter_add", &[self, &src], || {
            move |ctx, g: &Tensor| {
                vec![
                    ctx.needs(0).then(|| g.clone()),
                    ctx.needs(1).then(|| {
                        let picked = g.gather(d as isize, &index);
                        if picked.shape() == src_shape.as_slice() {
                            picked
                        } else {
                            let full = Tensor::zeros(&src_shape, g.dtype(), &g.device());
                            full.write_region(&full.layout().slice_to(index.shape()), &picked);
                            full
                        }
                    }),
                ]
            }
        })
    }

    /// One-hot encoding of an int64 tensor (`F.one_hot`): a new last dim of `num_classes`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![0i64, 2], &[2]);
    /// assert_eq!(t.one_hot(3).to_vec::<i64>(), vec![1, 0, 0, 0, 0, 1]);
    /// ```
    #[track_caller]
    pub fn one_hot(&self, num_classes: usize) -> Tensor {
        let _profiled = crate::dispatch::opaque("one_hot", &[self]);
        let n = self.numel();
        let classes = Tensor::zeros(&[num_classes], DType::I64, &self.device());
        let bounds = dim_bounds("one_hot", &classes, 0, self);
        let mut shape = Dims::from_slice(self.shape());
        shape.push(num_classes);
        let ones = Tensor::ones(&[n, 1], DType::I64, &self.device());
        Tensor::zeros(&[n, num_classes], DType::I64, &self.device())
            .scatter_add_checked(1, &self.reshape(&[n, 1]), &ones, bounds)
            .reshape(&shape)
    }

    fn triangle(&self, op: &str, diagonal: i64, lower: bool) -> Tensor {
        assert!(
            self.dim() >= 2,
            "{op}: input tensor must have at least 2 dimensions, got shape {:?}",
            self.shape()
        );
        let (r, c) = (self.shape()[self.dim() - 2], self.shape()[self.dim() - 1]);
        let mask: Vec<bool> = (0..r * c)
            .map(|p| {
                let offset = (p % c) as i64 - (p / c) as i64;
                if lower {
                    offset <= diagonal
                } else {
                    offset >= diagonal
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, &[r, c])
            .to_device(&self.device())
            .expect("the tensor's own device is usable");
        Tensor::where_cond(
            &mask,
            self,
            &Tensor::zeros(&[], self.dtype(), &self.device()),
        )
    }

    /// The lower triangle of the last two dims, zero above `diagonal` (`tril`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[2, 2], DType::F32, &Device::Cpu);
    /// assert_eq!(t.tril(0).to_vec::<f32>(), vec![1.0, 0.0, 1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Tensor {
        self.triangle("tril", diagonal, true)
    }

    /// The upper triangle of the last two dims, zero below `diagonal` (`triu`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[2, 2], DType::F32, &Device::Cpu);
    /// assert_eq!(t.triu(1).to_vec::<f32>(), vec![0.0, 1.0, 0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Tensor {
        self.triangle("triu", diagonal, false)
    }
}
