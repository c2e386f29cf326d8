//! Matrix products with PyTorch's `matmul` rules.

use super::check_same_device;
use crate::Tensor;
use crate::autograd::{SavedTensor, record};
use ferrograd_kernels::{Dims, Layout, broadcast_shapes};

impl Tensor {
    /// Matrix product with PyTorch's rules: 1-D·1-D is a dot product, a 1-D operand is
    /// treated as a row (left) or column (right) vector, and dims before the last two are
    /// batch dims that broadcast.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::ones(&[5, 2, 3], DType::F32, &Device::Cpu);
    /// let b = Tensor::ones(&[3, 4], DType::F32, &Device::Cpu);
    /// assert_eq!(a.matmul(&b).shape(), &[5, 2, 4]);
    /// let v = Tensor::ones(&[3], DType::F32, &Device::Cpu);
    /// assert_eq!(v.matmul(&v).item::<f32>(), 3.0);
    /// ```
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.matmul_untraced(other);
        crate::dispatch::finish(entered, &[self, other], || crate::dispatch::Op::MatMul, out)
    }

    #[track_caller]
    fn matmul_untraced(&self, other: &Tensor) -> Tensor {
        if let Some([a, b]) = crate::dispatch::cast("matmul", [self, other]) {
            return a.matmul(&b);
        }
        check_same_device("matmul", &[self, other]);
        assert!(
            self.dtype() == other.dtype(),
            "matmul: expected both tensors to have the same dtype, but got {:?} and {:?} (shapes {:?} and {:?})",
            self.dtype(),
            other.dtype(),
            self.shape(),
            other.shape()
        );
        match (self.dim(), other.dim()) {
            (0, _) | (_, 0) => panic!(
                "matmul: both arguments need to be at least 1D, but they are {}D and {}D (shapes {:?} and {:?})",
                self.dim(),
                other.dim(),
                self.shape(),
                other.shape()
            ),
            (1, 1) => {
                assert!(
                    self.shape() == other.shape(),
                    "matmul: 1D tensors expected to have the same size, but got shapes {:?} and {:?}",
                    self.shape(),
                    other.shape()
                );
                self.unsqueeze(0).matmul(&other.unsqueeze(1)).reshape(&[])
            }
            (1, _) => self.unsqueeze(0).matmul(other).squeeze(-2),
            (_, 1) => self.matmul(&other.unsqueeze(1)).squeeze(-1),
            _ => self.batched_matmul(other),
        }
    }

    /// Batched matrix product of two 3-D tensors with equal batch size (`bmm`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::ones(&[4, 2, 3], DType::F32, &Device::Cpu);
    /// let b = Tensor::ones(&[4, 3, 5], DType::F32, &Device::Cpu);
    /// assert_eq!(a.bmm(&b).shape(), &[4, 2, 5]);
    /// ```
    #[track_caller]
    pub fn bmm(&self, other: &Tensor) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.bmm_untraced(other);
        crate::dispatch::finish(entered, &[self, other], || crate::dispatch::Op::MatMul, out)
    }

    #[track_caller]
    fn bmm_untraced(&self, other: &Tensor) -> Tensor {
        assert!(
            self.dim() == 3 && other.dim() == 3 && self.shape()[0] == other.shape()[0],
            "bmm: expected two 3D tensors with the same batch size, got shapes {:?} and {:?}",
            self.shape(),
            other.shape()
        );
        self.matmul(other)
    }

    #[track_caller]
    fn batched_matmul(&self, other: &Tensor) -> Tensor {
        let (sa, sb) = (self.shape(), other.shape());
        let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
        if k != k2 {
            panic!(
                "matmul: mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n}): the last dim of \
                 the left operand ({k}) must equal the second-to-last dim of the right operand ({k2}); shapes {sa:?} and {sb:?}"
            );
        }
        // [.., m, k] @ [k, n]: one large GEMM over all rows instead of a batch of small ones.
        if sb.len() == 2 && sa.len() > 2 {
            let mut out_shape: Dims = Dims::from_slice(&sa[..sa.len() - 1]);
            out_shape.push(n);
            return self
                .reshape(&[self.numel() / k.max(1), k])
                .matmul(other)
                .reshape(&out_shape);
        }
        let batch = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2]).unwrap_or_else(|dim| {
            panic!("matmul: batch dims of shapes {sa:?} and {sb:?} cannot be broadcast (batch dim {dim})")
        });
        let with = |tail: [usize; 2]| -> Dims {
            let mut s = batch.clone();
            s.extend_from_slice(&tail);
            s
        };
        let a = self.broadcast_to(&with([m, k]));
        let b = other.broadcast_to(&with([k, n]));
        let out = Tensor::mm_raw(&a, &b, &with([m, n]));
        record(out, "matmul", &[&a, &b], || {
            let (x, y) = (SavedTensor::new(&a), SavedTensor::new(&b));
            move |ctx, g: &Tensor| {
                vec![
                    ctx.needs(0)
                        .then(|| g.matmul(&y.get("matmul").transpose(-1, -2))),
                    ctx.needs(1)
                        .then(|| x.get("matmul").transpose(-1, -2).matmul(g)),
                ]
            }
        })
    }

    /// The raw product of equally batched operands, without autograd. Each operand is
    /// viewed `[batch, rows, cols]`; one whose batch dims do not merge into one stride (a
    /// head-split `[B, H, T, D]` transposed from `[B, T, H, D]`) is copied first on a
    /// device, while the CPU kernels take both operands' batch dims as they are.
    fn mm_raw(a: &Tensor, b: &Tensor, out_shape: &[usize]) -> Tensor {
        let merges = |t: &Tensor| {
            let s = t.shape();
            let batch: usize = s[..s.len() - 2].iter().product();
            t.layout()
                .reshape(&[batch, s[s.len() - 2], s[s.len() - 1]])
                .is_some()
        };
        let on_cpu = !a.device().is_cuda() && !b.device().is_cuda();
        let both_merge = merges(a) && merges(b);
        if on_cpu && a.dtype() != ferrograd_kernels::DType::Bool && !both_merge {
            let out = a
                .read_storage()
                .matmul(a.layout(), &b.read_storage(), b.layout());
            return Tensor::from_backend("matmul", out_shape, out);
        }
        let as3 = |t: &Tensor| -> Tensor {
            let s = t.shape();
            let batch: usize = s[..s.len() - 2].iter().product();
            let shape = [batch, s[s.len() - 2], s[s.len() - 1]];
            match t.layout().reshape(&shape) {
                Some(l) => t.detach().view_with_layout(l),
                None => t
                    .detach()
                    .contiguous()
                    .detach()
                    .view_with_layout(Layout::contiguous(&shape)),
            }
        };
        let (a3, b3) = (as3(a), as3(b));
        assert!(
            a3.dtype() != ferrograd_kernels::DType::Bool,
            "matmul: not implemented for bool tensors (shapes {:?} and {:?})",
            a.shape(),
            b.shape()
        );
        let out = a3
            .read_storage()
            .matmul(a3.layout(), &b3.read_storage(), b3.layout());
        Tensor::from_backend("matmul", out_shape, out)
    }
}
