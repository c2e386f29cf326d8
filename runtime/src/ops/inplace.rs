//! In-place ops (`add_`, `mul_`, `fill_`, ...). Each bumps the storage version, so a tensor
//! saved for backward and then modified is caught when backward runs.

use super::elementwise::{AddK, AffineK, ClampK, DivK, MulK, SubK};
use crate::autograd::{AutogradMeta, is_grad_enabled};
use crate::storage::op::{BinaryOp, IntMap};
use crate::{DType, Tensor};
use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
use ferrograd_kernels::{NumElement, broadcast_shapes};

impl Tensor {
    #[track_caller]
    fn check_inplace(&self, op: &str) {
        assert!(
            !crate::onnx::is_tracing(),
            "{op}: in-place ops cannot be traced for ONNX export (shape {:?}); use the out-of-place op",
            self.shape()
        );
        if !is_grad_enabled() {
            return;
        }
        match self.autograd_meta() {
            Some(AutogradMeta::Leaf(_)) => panic!(
                "{op}: a leaf tensor that requires grad (shape {:?}) is being used in an in-place operation; \
                 wrap the update in `no_grad(|| ...)`",
                self.shape()
            ),
            Some(AutogradMeta::Interior(node)) => panic!(
                "{op}: in-place modification of a tensor recorded in the autograd graph (output of {}, shape {:?}) \
                 is not supported; use the out-of-place op",
                node.name,
                self.shape()
            ),
            None => {}
        }
    }

    /// Applies `kernel(self, other)` in place, `other` broadcast to this tensor's shape.
    #[track_caller]
    fn inplace_binary<K: BinaryOp>(&self, other: &Tensor, op: &str, kernel: &K) -> &Tensor {
        self.check_inplace(op);
        super::check_same_device(op, &[self, other]);
        let fits = broadcast_shapes(self.shape(), other.shape())
            .is_ok_and(|s| s.as_slice() == self.shape());
        assert!(
            fits,
            "{op}: output with shape {:?} doesn't match the broadcast shape of the operand {:?}",
            self.shape(),
            other.shape()
        );
        assert!(
            self.dtype() != DType::Bool,
            "{op}: arithmetic is not supported on bool tensors (shape {:?})",
            self.shape()
        );
        // Read the operand from its own buffer: copy it when it aliases this storage.
        let other = other.detach().to_dtype(self.dtype());
        let other = if other.shares_storage(self) {
            other.deep_copy()
        } else {
            other
        };
        let other_layout = other.layout().broadcast_to(self.shape());
        // Two different buffers (an aliasing operand was copied above): read one, write the other.
        self.backend_write(op, |dst, layout| {
            dst.binary_inplace(layout, &other.read_storage(), &other_layout, kernel, op)
        });
        self
    }

    /// `self += other` in place (`add_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
    /// t.add_(&Tensor::ones(&[2], DType::F32, &Device::Cpu));
    /// assert_eq!(t.to_vec::<f32>(), vec![1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn add_(&self, other: &Tensor) -> &Tensor {
        self.inplace_binary(other, "add_", &AddK)
    }

    /// `self -= other` in place (`sub_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// t.sub_(&t.deep_copy());
    /// assert_eq!(t.to_vec::<f32>(), vec![0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn sub_(&self, other: &Tensor) -> &Tensor {
        self.inplace_binary(other, "sub_", &SubK)
    }

    /// `self *= other` in place (`mul_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::full(&[2], 3.0, DType::F32, &Device::Cpu);
    /// t.mul_(&t);
    /// assert_eq!(t.to_vec::<f32>(), vec![9.0, 9.0]);
    /// ```
    #[track_caller]
    pub fn mul_(&self, other: &Tensor) -> &Tensor {
        self.inplace_binary(other, "mul_", &MulK)
    }

    /// `self /= other` in place (`div_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::full(&[2], 3.0, DType::F32, &Device::Cpu);
    /// t.div_(&Tensor::full(&[1], 2.0, DType::F32, &Device::Cpu));
    /// assert_eq!(t.to_vec::<f32>(), vec![1.5, 1.5]);
    /// ```
    #[track_caller]
    pub fn div_(&self, other: &Tensor) -> &Tensor {
        self.inplace_binary(other, "div_", &DivK)
    }

    /// `self += value` in place.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[1], DType::F32, &Device::Cpu);
    /// t.add_scalar_(2.0);
    /// assert_eq!(t.item::<f32>(), 2.0);
    /// ```
    #[track_caller]
    pub fn add_scalar_(&self, value: f64) -> &Tensor {
        let _profiled = crate::dispatch::opaque("add_scalar_", &[self]);
        if self.scalar_in_kernel() {
            return self.affine_("add_scalar_", 1.0, value);
        }
        self.inplace_binary(&self.scalar_on_device(value), "add_", &AddK)
    }

    /// `self *= value` in place.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[1], DType::F32, &Device::Cpu);
    /// t.mul_scalar_(4.0);
    /// assert_eq!(t.item::<f32>(), 4.0);
    /// ```
    #[track_caller]
    pub fn mul_scalar_(&self, value: f64) -> &Tensor {
        let _profiled = crate::dispatch::opaque("mul_scalar_", &[self]);
        if self.scalar_in_kernel() {
            return self.affine_("mul_scalar_", value, 0.0);
        }
        self.inplace_binary(&self.scalar_on_device(value), "mul_", &MulK)
    }

    /// `value` as a 0-d tensor of this dtype on this device.
    fn scalar_on_device(&self, value: f64) -> Tensor {
        Tensor::scalar(value, self.dtype())
            .to_device(&self.device())
            .expect("scalar on an existing device")
    }

    /// `self = self * mul + add` in place for f16/bf16, with the scalars kept in f32 (the
    /// in-place twin of the out-of-place scalar ops; see `AffineK`).
    #[track_caller]
    fn affine_(&self, op: &str, mul: f64, add: f64) -> &Tensor {
        self.check_inplace(op);
        self.backend_write(op, |dst, layout| {
            dst.unary_inplace(layout, &AffineK { mul, add }, op)
        });
        self
    }

    /// `self += alpha * other` in place (`add_(other, alpha=alpha)`), the optimizer update.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// w.add_scaled_(&Tensor::ones(&[2], DType::F32, &Device::Cpu), -0.5);
    /// assert_eq!(w.to_vec::<f32>(), vec![0.5, 0.5]);
    /// ```
    #[track_caller]
    pub fn add_scaled_(&self, other: &Tensor, alpha: f64) -> &Tensor {
        let _profiled = crate::dispatch::opaque("add_scaled_", &[self]);
        struct Axpy(f64);
        impl BinaryOp for Axpy {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::ADD, &kernels::ADD_INPLACE]);
            #[inline(always)]
            fn apply<A: NumElement>(&self, a: A, b: A) -> A {
                a + A::from_f64(self.0) * b
            }
            fn alpha(&self) -> f64 {
                self.0
            }
        }
        self.inplace_binary(other, "add_", &Axpy(alpha))
    }

    /// Sets every element to `value` (`fill_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 2], DType::F32, &Device::Cpu);
    /// t.t().fill_(7.0);
    /// assert_eq!(t.to_vec::<f32>(), vec![7.0; 4]);
    /// ```
    #[track_caller]
    pub fn fill_(&self, value: f64) -> &Tensor {
        let _profiled = crate::dispatch::opaque("fill_", &[self]);
        self.check_inplace("fill_");
        self.backend_write("fill_", |dst, layout| dst.fill(layout, value));
        self
    }

    /// Sets every element to zero (`zero_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// t.zero_();
    /// assert_eq!(t.to_vec::<f32>(), vec![0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn zero_(&self) -> &Tensor {
        self.fill_(0.0)
    }

    /// Copies `src` (broadcast, converted) into this tensor (`copy_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 2], DType::F32, &Device::Cpu);
    /// t.copy_(&Tensor::from_vec(vec![1i64, 2], &[2]));
    /// assert_eq!(t.to_vec::<f32>(), vec![1.0, 2.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> &Tensor {
        let _profiled = crate::dispatch::opaque("copy_", &[self]);
        struct Take;
        impl BinaryOp for Take {
            const CUDA: Option<[&'static CudaKernel; 2]> =
                Some([&kernels::ASSIGN, &kernels::ASSIGN_INPLACE]);
            #[inline(always)]
            fn apply<A: NumElement>(&self, _: A, b: A) -> A {
                b
            }
        }
        if self.dtype() == DType::Bool {
            self.check_inplace("copy_");
            let region = self.layout().clone();
            self.write_region(&region, &src.detach());
            return self;
        }
        self.inplace_binary(src, "copy_", &Take)
    }

    /// Clamps every element to `[min, max]` in place (`clamp_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![-3.0f32, 0.5, 3.0], &[3]);
    /// t.clamp_(-1.0, 1.0);
    /// assert_eq!(t.to_vec::<f32>(), vec![-1.0, 0.5, 1.0]);
    /// ```
    #[track_caller]
    pub fn clamp_(&self, min: f64, max: f64) -> &Tensor {
        let _profiled = crate::dispatch::opaque("clamp_", &[self]);
        assert!(
            min <= max,
            "clamp_: min ({min}) must not exceed max ({max})"
        );
        self.check_inplace("clamp_");
        if self.dtype().is_float() {
            self.backend_write("clamp_", |dst, layout| {
                dst.unary_inplace(layout, &ClampK(min, max), "clamp_")
            });
            return self;
        }
        self.backend_write("clamp_", |dst, layout| {
            dst.int_map_inplace(layout, IntMap::Clamp(min, max))
        });
        self
    }

    /// Writes `value` where `mask` is true, in place (`masked_fill_`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[3], DType::F32, &Device::Cpu);
    /// t.masked_fill_(&Tensor::from_vec(vec![true, false, true], &[3]), 1.0);
    /// assert_eq!(t.to_vec::<f32>(), vec![1.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn masked_fill_(&self, mask: &Tensor, value: f64) -> &Tensor {
        let _profiled = crate::dispatch::opaque("masked_fill_", &[self]);
        let filled = self.detach().masked_fill(mask, value);
        self.check_inplace("masked_fill_");
        let region = self.layout().clone();
        self.write_region(&region, &filled);
        self
    }
}
