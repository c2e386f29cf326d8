//! Order statistics along a dim: `sort`, `argsort`, `topk`, `kthvalue`, `cummax`,
//! `cummin`. One index scan (stable; NaN is larger than every number, as in PyTorch)
//! picks positions along the dim, and a gather takes the values, so the gradient flows
//! back to the chosen elements.

use crate::Tensor;
use crate::storage::Storage;
use ferrograd_kernels::cpu::DimIndexOp;

impl Tensor {
    /// The indices `op` picks along dim `d` (int64, the input's shape).
    fn dim_indices(&self, op_name: &str, d: usize, op: DimIndexOp) -> Tensor {
        let x = self.detach();
        let shape = x.shape();
        let dims = [
            shape[..d].iter().product(),
            shape[d],
            shape[d + 1..].iter().product(),
        ];
        let x = x.contiguous();
        let out: crate::Result<Storage> = x.read_storage().dim_indices(x.layout(), dims, op);
        Tensor::from_backend(op_name, x.shape(), out)
    }

    /// Sorts along `dim`, stably (`torch.sort(x, dim, descending, stable=True)`): the
    /// sorted values and, for each, its index along `dim` in the input. NaN sorts as the
    /// largest value.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0, 1.0], &[4]);
    /// let (v, i) = x.sort(0, false);
    /// assert_eq!((v.to_vec::<f32>(), i.to_vec::<i64>()), (vec![1.0, 1.0, 2.0, 3.0], vec![1, 3, 2, 0]));
    /// ```
    #[track_caller]
    pub fn sort(&self, dim: isize, descending: bool) -> (Tensor, Tensor) {
        let _profiled = crate::dispatch::opaque("sort", &[self]);
        let d = self.normalize_dim("sort", dim);
        let idx = self.dim_indices("sort", d, DimIndexOp::Sort { descending });
        (self.gather(d as isize, &idx), idx)
    }

    /// The indices that sort the tensor along `dim`, stably (`torch.argsort`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![3i64, 1, 2], &[3]);
    /// assert_eq!(x.argsort(0, true).to_vec::<i64>(), vec![0, 2, 1]);
    /// ```
    #[track_caller]
    pub fn argsort(&self, dim: isize, descending: bool) -> Tensor {
        let _profiled = crate::dispatch::opaque("argsort", &[self]);
        let d = self.normalize_dim("argsort", dim);
        self.dim_indices("argsort", d, DimIndexOp::Sort { descending })
    }

    /// The `k` largest (or smallest) elements along `dim` with their indices, in sorted
    /// order (`torch.topk(x, k, dim, largest, sorted=True)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 4.0], &[1, 4]);
    /// let (v, i) = x.topk(2, -1, true);
    /// assert_eq!((v.to_vec::<f32>(), i.to_vec::<i64>()), (vec![5.0, 4.0], vec![1, 3]));
    /// ```
    #[track_caller]
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> (Tensor, Tensor) {
        let _profiled = crate::dispatch::opaque("topk", &[self]);
        let d = self.normalize_dim("topk", dim);
        let n = self.shape().get(d).copied().unwrap_or(1);
        assert!(
            k <= n,
            "topk: k ({k}) is out of range for dimension {d} of size {n} (shape {:?})",
            self.shape()
        );
        let idx = self
            .dim_indices(
                "topk",
                d,
                DimIndexOp::Sort {
                    descending: largest,
                },
            )
            .narrow(d as isize, 0, k)
            .contiguous();
        (self.gather(d as isize, &idx), idx)
    }

    /// The `k`-th smallest element (1-based) along `dim` and its index
    /// (`torch.kthvalue`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![4.0f32, 1.0, 3.0], &[3]);
    /// let (v, i) = x.kthvalue(2, 0, false);
    /// assert_eq!((v.item::<f32>(), i.item::<i64>()), (3.0, 2));
    /// ```
    #[track_caller]
    pub fn kthvalue(&self, k: usize, dim: isize, keepdim: bool) -> (Tensor, Tensor) {
        let _profiled = crate::dispatch::opaque("kthvalue", &[self]);
        let d = self.normalize_dim("kthvalue", dim);
        let n = self.shape().get(d).copied().unwrap_or(1);
        assert!(
            (1..=n).contains(&k),
            "kthvalue: selected number k ({k}) out of range for dimension {d} of size {n} (shape {:?})",
            self.shape()
        );
        let idx = self
            .dim_indices("kthvalue", d, DimIndexOp::Sort { descending: false })
            .narrow(d as isize, k - 1, 1)
            .contiguous();
        let values = self.gather(d as isize, &idx);
        if keepdim {
            (values, idx)
        } else {
            (values.squeeze(d as isize), idx.squeeze(d as isize))
        }
    }

    /// The running maximum along `dim` and where it was found (`torch.cummax`): ties take
    /// the later index and a NaN, once seen, stays.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0, 2.0, 3.0], &[4]);
    /// let (v, i) = x.cummax(0);
    /// assert_eq!((v.to_vec::<f32>(), i.to_vec::<i64>()), (vec![1.0, 3.0, 3.0, 3.0], vec![0, 1, 1, 3]));
    /// ```
    #[track_caller]
    pub fn cummax(&self, dim: isize) -> (Tensor, Tensor) {
        let _profiled = crate::dispatch::opaque("cummax", &[self]);
        let d = self.normalize_dim("cummax", dim);
        let idx = self.dim_indices("cummax", d, DimIndexOp::CumMax);
        (self.gather(d as isize, &idx), idx)
    }

    /// The running minimum along `dim` and where it was found (`torch.cummin`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0], &[3]);
    /// assert_eq!(x.cummin(0).0.to_vec::<f32>(), vec![3.0, 1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn cummin(&self, dim: isize) -> (Tensor, Tensor) {
        let _profiled = crate::dispatch::opaque("cummin", &[self]);
        let d = self.normalize_dim("cummin", dim);
        let idx = self.dim_indices("cummin", d, DimIndexOp::CumMin);
        (self.gather(d as isize, &idx), idx)
    }
}
