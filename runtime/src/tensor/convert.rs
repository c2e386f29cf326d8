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
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.to_dtype_untraced(dtype);
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Cast(dtype), out)
    }

    #[track_caller]
    fn to_dtype_untraced(&self, dtype: DType) -> Tensor {
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

/// A safetensors tensor as a CPU tensor: f32, f64, f16, bf16, i64, u8 and bool as they
/// are; the other integers (`I8`, `I16`, `I32`, `U16`, `U32`, and `U64` when every value
/// fits) widened to i64; the 8-bit floats widened without rounding (`F8_E4M3`, `F8_E5M2`
/// and their `FNUZ` forms to f16, `F8_E8M0` to f32). Only what no ferrograd dtype can
/// hold exactly (complex numbers, the packed 4- and 6-bit floats, a `U64` above
/// `i64::MAX`) is refused, saying why.
pub(crate) fn tensor_from_view(
    view: &safetensors::tensor::TensorView<'_>,
) -> Result<Tensor, String> {
    use safetensors::Dtype as S;
    let (shape, data) = (view.shape(), view.data());
    macro_rules! le {
        ($t:ty, $n:literal) => {
            data.chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")))
        };
    }
    macro_rules! widened {
        ($t:ty, $n:literal) => {
            Tensor::from_vec(le!($t, $n).map(i64::from).collect::<Vec<i64>>(), shape)
        };
    }
    Ok(match view.dtype() {
        S::F32 => Tensor::from_vec(le!(f32, 4).collect::<Vec<_>>(), shape),
        S::F64 => Tensor::from_vec(le!(f64, 8).collect::<Vec<_>>(), shape),
        S::F16 => Tensor::from_vec(le!(half::f16, 2).collect::<Vec<_>>(), shape),
        S::BF16 => Tensor::from_vec(le!(half::bf16, 2).collect::<Vec<_>>(), shape),
        S::I64 => Tensor::from_vec(le!(i64, 8).collect::<Vec<_>>(), shape),
        S::I32 => widened!(i32, 4),
        S::I16 => widened!(i16, 2),
        S::I8 => widened!(i8, 1),
        S::U32 => widened!(u32, 4),
        S::U16 => widened!(u16, 2),
        S::U64 => {
            let values = le!(u64, 8)
                .map(|v| i64::try_from(v).map_err(|_| v))
                .collect::<Result<Vec<i64>, u64>>()
                .map_err(|v| {
                    format!("dtype U64 holds {v}, above the largest int64 ferrograd holds")
                })?;
            Tensor::from_vec(values, shape)
        }
        S::U8 => Tensor::from_vec(data.to_vec(), shape),
        S::BOOL => Tensor::from_vec(data.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape),
        S::F8_E5M2 => f8_to_f16(data, shape, 2, 15, Nan::Ieee),
        S::F8_E4M3 => f8_to_f16(data, shape, 3, 7, Nan::AllOnes),
        S::F8_E5M2FNUZ => f8_to_f16(data, shape, 2, 16, Nan::NegativeZero),
        S::F8_E4M3FNUZ => f8_to_f16(data, shape, 3, 8, Nan::NegativeZero),
        S::F8_E8M0 => Tensor::from_vec(
            data.iter()
                .map(|&b| f8_e8m0fnu_to_f32(b))
                .collect::<Vec<_>>(),
            shape,
        ),
        other => {
            return Err(format!(
                "dtype {other:?} has no ferrograd dtype that holds it exactly"
            ));
        }
    })
}

/// Where an 8-bit float format keeps its NaNs (and infinities).
#[derive(Clone, Copy)]
enum Nan {
    /// IEEE-style: an all-ones exponent is infinity (zero mantissa) or NaN (`e5m2`).
    Ieee,
    /// Only all-ones exponent and mantissa is NaN, no infinities (`e4m3fn`).
    AllOnes,
    /// The negative-zero pattern `0x80` is the one NaN, no infinities (`fnuz`).
    NegativeZero,
}

/// 8-bit floats (1 sign bit, `8 - 1 - man_bits` exponent bits biased by `bias`, `man_bits`
/// mantissa bits) as f16 tensors: every value of these formats is an f16, so nothing is
/// rounded.
fn f8_to_f16(data: &[u8], shape: &[usize], man_bits: u32, bias: i32, nan: Nan) -> Tensor {
    let exp_max = (1u8 << (7 - man_bits)) - 1;
    let man_mask = (1u8 << man_bits) - 1;
    let decode = |b: u8| -> f32 {
        let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let (exp, man) = ((b & 0x7f) >> man_bits, b & man_mask);
        match nan {
            Nan::NegativeZero if b == 0x80 => return f32::NAN,
            Nan::AllOnes if exp == exp_max && man == man_mask => return f32::NAN,
            Nan::Ieee if exp == exp_max => {
                return if man == 0 {
                    sign * f32::INFINITY
                } else {
                    f32::NAN
                };
            }
            _ => {}
        }
        let scale = 2f32.powi(-(man_bits as i32));
        let magnitude = if exp == 0 {
            f32::from(man) * scale * 2f32.powi(1 - bias)
        } else {
            (1.0 + f32::from(man) * scale) * 2f32.powi(i32::from(exp) - bias)
        };
        sign * magnitude
    };
    Tensor::from_vec(
        data.iter()
            .map(|&b| half::f16::from_f32(decode(b)))
            .collect::<Vec<_>>(),
        shape,
    )
}

/// An `float8_e8m0fnu` (8 exponent bits biased by 127, no sign, no mantissa; `0xff` is
/// NaN): `2^(b - 127)` as an f32.
fn f8_e8m0fnu_to_f32(b: u8) -> f32 {
    match b {
        0xff => f32::NAN,
        0 => f32::from_bits(0x0040_0000), // 2^-127, an f32 subnormal
        e => f32::from_bits(u32::from(e) << 23),
    }
}
