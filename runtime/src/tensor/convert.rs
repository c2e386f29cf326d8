//! Reading a tensor's elements (`to_vec`, `item`), copies, and conversions between
//! dtypes and devices.

use super::Tensor;
use crate::autograd;
use crate::storage::{CudaStorage, Storage};
use crate::{Device, Result};
use ferrograd_kernels::cpu::unary_map;
use ferrograd_kernels::{DType, Element, Layout};

impl Tensor {
    /// The elements in row-major order, copied to a `Vec` (from any device).
    ///
    /// # Panics
    /// If `T` is not the tensor's dtype (use [`Tensor::to_dtype`] first).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 4.0, 1.0, DType::I64, &Device::Cpu).reshape(&[2, 2]).t();
    /// assert_eq!(t.to_vec::<i64>(), vec![0, 2, 1, 3]);
    /// ```
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        assert!(
            T::DTYPE == self.dtype(),
            "to_vec: tensor has dtype {:?} but {:?} was requested; convert with .to_dtype() first",
            self.dtype(),
            T::DTYPE
        );
        let guard = self.read_storage();
        match &*guard {
            Storage::Cpu(s) => match self.layout().contiguous_range() {
                Some(range) => s.typed::<T>()[range].to_vec(),
                None => unary_map(s.typed::<T>(), self.layout(), |x| x).to_vec(),
            },
            Storage::Cuda(s) => {
                let host = s.to_cpu(self.layout()).unwrap_or_else(|e| {
                    panic!("to_vec: reading from {} failed: {e}", self.device())
                });
                host.typed::<T>().to_vec()
            }
        }
    }

    /// The single element of a one-element tensor (`tensor.item()`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::full(&[1, 1], 2.5, DType::F64, &Device::Cpu).item::<f64>(), 2.5);
    /// ```
    #[track_caller]
    pub fn item<T: Element>(&self) -> T {
        assert!(
            self.numel() == 1,
            "item: a Tensor with {} elements (shape {:?}) cannot be converted to a scalar",
            self.numel(),
            self.shape()
        );
        self.to_vec::<T>()[0]
    }

    /// The single element converted to f64, whatever the dtype.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::full(&[], 3.0, DType::I64, &Device::Cpu).item_f64(), 3.0);
    /// ```
    #[track_caller]
    pub fn item_f64(&self) -> f64 {
        self.to_dtype(DType::F64).item::<f64>()
    }

    /// A contiguous copy with its own storage (`tensor.clone()` in PyTorch; Rust's `clone`
    /// shares the handle). Differentiable.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
    /// let b = a.deep_copy();
    /// b.add_scalar_(1.0);
    /// assert_eq!(a.to_vec::<f32>(), vec![0.0, 0.0]);
    /// ```
    pub fn deep_copy(&self) -> Tensor {
        let copied = self.read_storage().cast(self.layout(), self.dtype());
        let out = Tensor::from_backend("clone", self.shape(), copied);
        autograd::record(out, "clone", &[self], || {
            |_, g: &Tensor| vec![Some(g.clone())]
        })
    }

    /// Converts to another dtype (`tensor.to(dtype)`); differentiable between float types.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.7f32, -2.2], &[2]).to_dtype(DType::I64);
    /// assert_eq!(t.to_vec::<i64>(), vec![1, -2]);
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        let cast = self.read_storage().cast(self.layout(), dtype);
        let out = Tensor::from_backend("to_dtype", self.shape(), cast);
        let from = self.dtype();
        autograd::record(out, "to_dtype", &[self], move || {
            move |_, g: &Tensor| vec![Some(g.to_dtype(from))]
        })
    }

    /// Copies to `device` (`tensor.to(device)`). Returns an error when the device cannot be
    /// used (no driver, no such GPU, or no `cuda` feature). Differentiable.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// assert_eq!(t.to_device(&Device::Cpu).unwrap().device(), Device::Cpu);
    /// ```
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if *device == self.device() {
            return Ok(self.clone());
        }
        let moved = {
            let guard = self.read_storage();
            match (&*guard, device) {
                (Storage::Cpu(s), Device::Cuda(_)) => {
                    Storage::Cuda(CudaStorage::from_cpu(s, self.layout(), *device)?)
                }
                (Storage::Cuda(s), Device::Cpu) => Storage::Cpu(s.to_cpu(self.layout())?),
                (Storage::Cuda(s), Device::Cuda(_)) => Storage::Cuda(CudaStorage::from_cpu(
                    &s.to_cpu(self.layout())?,
                    &Layout::contiguous(self.shape()),
                    *device,
                )?),
                (Storage::Cpu(_), Device::Cpu) => unreachable!("same device handled above"),
            }
        };
        let out = Tensor::from_storage(moved, Layout::contiguous(self.shape()));
        let from = self.device();
        Ok(autograd::record(out, "to_device", &[self], move || {
            move |_, g: &Tensor| {
                vec![Some(
                    g.to_device(&from)
                        .unwrap_or_else(|e| panic!("to_device backward: {e}")),
                )]
            }
        }))
    }
}

/// A safetensors tensor as a CPU tensor of the same dtype (int32 widened to int64), or
/// why not.
pub(crate) fn tensor_from_view(
    view: &safetensors::tensor::TensorView<'_>,
) -> Result<Tensor, String> {
    let (shape, data) = (view.shape(), view.data());
    macro_rules! le {
        ($t:ty, $n:literal) => {
            Tensor::from_vec(
                data.chunks_exact($n)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")))
                    .collect::<Vec<$t>>(),
                shape,
            )
        };
    }
    Ok(match view.dtype() {
        safetensors::Dtype::F32 => le!(f32, 4),
        safetensors::Dtype::F64 => le!(f64, 8),
        safetensors::Dtype::F16 => le!(half::f16, 2),
        safetensors::Dtype::BF16 => le!(half::bf16, 2),
        safetensors::Dtype::I64 => le!(i64, 8),
        safetensors::Dtype::I32 => Tensor::from_vec(
            data.chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
                .collect::<Vec<i64>>(),
            shape,
        ),
        safetensors::Dtype::U8 => Tensor::from_vec(data.to_vec(), shape),
        safetensors::Dtype::BOOL => {
            Tensor::from_vec(data.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape)
        }
        other => return Err(format!("dtype {other:?} is not one ferrograd holds")),
    })
}
