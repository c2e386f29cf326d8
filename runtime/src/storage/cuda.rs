//! CUDA storage through `cudarc` (libraries loaded at run time, so building needs no CUDA
//! install). Kernels for ops on this storage arrive with the CUDA backend; for now tensors
//! move to and from the GPU.

use crate::{Device, Error, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use ferrograd_kernels::cpu::{CpuStorage, unary_map};
use ferrograd_kernels::{DType, Element, Layout, with_dtype};
use half::{bf16, f16};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Device buffers, one variant per dtype.
#[derive(Debug)]
pub(crate) enum CudaData {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    F16(CudaSlice<f16>),
    BF16(CudaSlice<bf16>),
    I64(CudaSlice<i64>),
    U8(CudaSlice<u8>),
    Bool(CudaSlice<bool>),
}

/// A contiguous device buffer and the stream that orders work on it.
#[derive(Debug)]
pub(crate) struct CudaStorage {
    data: CudaData,
    stream: Arc<CudaStream>,
    ordinal: usize,
}

static CONTEXTS: Mutex<Option<HashMap<usize, Arc<CudaContext>>>> = Mutex::new(None);

fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library and reports
    // whether that worked; it touches no CUDA state.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::CudaLibraryMissing {
            library: "libcuda (the NVIDIA driver)",
        });
    }
    let mut guard = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(ctx) = map.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| Error::CudaDevice {
        ordinal,
        reason: e.to_string(),
    })?;
    map.insert(ordinal, ctx.clone());
    Ok(ctx)
}

pub(crate) fn cuda_device_available(ordinal: usize) -> bool {
    context(ordinal).is_ok()
}

/// `Ok` when device `ordinal` can be used, else why not.
pub(crate) fn cuda_device(ordinal: usize) -> Result<()> {
    context(ordinal).map(|_| ())
}

fn device_err(ordinal: usize) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::CudaDevice {
        ordinal,
        reason: e.to_string(),
    }
}

impl CudaStorage {
    pub(crate) fn dtype(&self) -> DType {
        match self.data {
            CudaData::F32(_) => DType::F32,
            CudaData::F64(_) => DType::F64,
            CudaData::F16(_) => DType::F16,
            CudaData::BF16(_) => DType::BF16,
            CudaData::I64(_) => DType::I64,
            CudaData::U8(_) => DType::U8,
            CudaData::Bool(_) => DType::Bool,
        }
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Copies the elements of `layout` (a view of this buffer) to host memory.
    pub(crate) fn to_cpu(&self, layout: &Layout) -> Result<CpuStorage> {
        let err = device_err(self.ordinal);
        let full = match &self.data {
            CudaData::F32(s) => CpuStorage::F32(self.stream.clone_dtoh(s).map_err(&err)?),
            CudaData::F64(s) => CpuStorage::F64(self.stream.clone_dtoh(s).map_err(&err)?),
            CudaData::F16(s) => CpuStorage::F16(self.stream.clone_dtoh(s).map_err(&err)?),
            CudaData::BF16(s) => CpuStorage::BF16(self.stream.clone_dtoh(s).map_err(&err)?),
            CudaData::I64(s) => CpuStorage::I64(self.stream.clone_dtoh(s).map_err(&err)?),
            CudaData::U8(s) => CpuStorage::U8(self.stream.clone_dtoh(s).map_err(&err)?),
            CudaData::Bool(s) => CpuStorage::Bool(self.stream.clone_dtoh(s).map_err(&err)?),
        };
        Ok(
            with_dtype!(full.dtype(), T => T::into_storage(unary_map(full.typed::<T>(), layout, |x| x))),
        )
    }

    /// Uploads the elements of `layout` (a view of `src`) to `device`, contiguous.
    pub(crate) fn from_cpu(src: &CpuStorage, layout: &Layout, device: Device) -> Result<Self> {
        let Device::Cuda(ordinal) = device else {
            unreachable!("from_cpu called for {device}")
        };
        let ctx = context(ordinal)?;
        let stream = ctx.default_stream();
        let err = device_err(ordinal);
        macro_rules! upload {
            ($variant:ident, $t:ty) => {{
                let host: Vec<$t> = unary_map(src.typed::<$t>(), layout, |x| x);
                CudaData::$variant(stream.clone_htod(&host).map_err(&err)?)
            }};
        }
        let data = match src.dtype() {
            DType::F32 => upload!(F32, f32),
            DType::F64 => upload!(F64, f64),
            DType::F16 => upload!(F16, f16),
            DType::BF16 => upload!(BF16, bf16),
            DType::I64 => upload!(I64, i64),
            DType::U8 => upload!(U8, u8),
            DType::Bool => upload!(Bool, bool),
        };
        Ok(CudaStorage {
            data,
            stream,
            ordinal,
        })
    }
}
