//! Stand-in for the CUDA backend when the `cuda` feature is off: an uninhabited type, so
//! every `Storage::Cuda` match arm type-checks and compiles to nothing.

use super::op::{BinaryFloatOp, BinaryOp, Cmp, IntMap, ReduceOp, RowOp, UnaryOp};
use crate::{Device, Error, Result};
use ferrograd_kernels::cpu::{Conv2dGeometry, CpuStorage};
use ferrograd_kernels::{DType, IndexBounds, Layout};

/// No value of this type exists without the `cuda` feature.
#[derive(Debug)]
pub(crate) enum CudaStorage {}

impl CudaStorage {
    pub(crate) fn dtype(&self) -> DType {
        match *self {}
    }

    pub(crate) fn ordinal(&self) -> usize {
        match *self {}
    }

    pub(crate) fn len(&self) -> usize {
        match *self {}
    }

    pub(crate) fn to_cpu(&self, _layout: &Layout) -> Result<CpuStorage> {
        match *self {}
    }

    pub(crate) fn download(&self) -> Result<CpuStorage> {
        match *self {}
    }

    pub(crate) fn upload(&mut self, _host: &CpuStorage) -> Result<()> {
        match *self {}
    }

    pub(crate) fn from_cpu(_src: &CpuStorage, _layout: &Layout, _device: Device) -> Result<Self> {
        Err(Error::CudaNotCompiled)
    }

    pub(crate) fn unary<K: UnaryOp>(&self, _: &Layout, _: &K, _: &str) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn int_map(&self, _: &Layout, _: IntMap) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn int_map_inplace(&mut self, _: &Layout, _: IntMap) -> Result<()> {
        match *self {}
    }

    pub(crate) fn unary_inplace<K: UnaryOp>(&mut self, _: &Layout, _: &K, _: &str) -> Result<()> {
        match *self {}
    }

    pub(crate) fn binary<K: BinaryOp>(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &K,
        _: &str,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn binary_float<K: BinaryFloatOp>(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &K,
        _: &str,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn binary_inplace<K: BinaryOp>(
        &mut self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &K,
        _: &str,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn assign(&mut self, _: &Layout, _: &Self, _: &Layout) -> Result<()> {
        match *self {}
    }

    pub(crate) fn compare(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: Cmp,
        _: &str,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn logical_and(&self, _: &Layout, _: &Self, _: &Layout) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn where_cond(
        &self,
        _: &Layout,
        _: (&Self, &Layout),
        _: (&Self, &Layout),
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn cast(&self, _: &Layout, _: DType) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn fill(&mut self, _: &Layout, _: f64) -> Result<()> {
        match *self {}
    }

    pub(crate) fn reduce(&self, _: &Layout, _: ReduceOp, _: [usize; 3]) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn arg_reduce(&self, _: &Layout, _: bool, _: [usize; 3]) -> Result<(Self, Self)> {
        match *self {}
    }

    pub(crate) fn rows(&self, _: &Layout, _: RowOp, _: usize, _: usize) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn rows_backward(
        &self,
        _: &Layout,
        _: (&Self, &Layout),
        _: RowOp,
        _: usize,
        _: usize,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn dim_indices(
        &self,
        _: &Layout,
        _: [usize; 3],
        _: ferrograd_kernels::cpu::DimIndexOp,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn cumsum(&self, _: &Layout, _: [usize; 3]) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn index_select(
        &self,
        _: &Layout,
        _: [usize; 3],
        _: (&Self, &Layout),
        _: &IndexBounds,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn gather(
        &self,
        _: &Layout,
        _: (&Self, &Layout),
        _: &IndexBounds,
        _: usize,
    ) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn scatter_add(
        &mut self,
        _: &[usize],
        _: (&Self, &Layout),
        _: &IndexBounds,
        _: (&Self, &Layout),
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn conv_columns(&self, _: &Layout, _: bool, _: &Conv2dGeometry) -> Result<Self> {
        match *self {}
    }

    pub(crate) fn matmul(&self, _: &Layout, _: &Self, _: &Layout) -> Result<Self> {
        match *self {}
    }
}

pub(crate) fn full(
    _ordinal: usize,
    _dtype: DType,
    _len: usize,
    _value: f64,
) -> Result<CudaStorage> {
    Err(Error::CudaNotCompiled)
}

pub(crate) fn cuda_device_available(_ordinal: usize) -> bool {
    false
}

pub(crate) fn cuda_device(_ordinal: usize) -> Result<()> {
    Err(Error::CudaNotCompiled)
}

pub(crate) fn memory_stats(_ordinal: usize) -> crate::memory::MemoryStats {
    Default::default()
}

pub(crate) fn reset_peak_memory_stats(_ordinal: usize) {}

pub(crate) fn empty_cache() {}

pub(crate) fn device_count() -> usize {
    0
}

/// Without CUDA, no device is ever marked.
pub(crate) struct StreamMarks;

impl StreamMarks {
    pub(crate) fn now() -> StreamMarks {
        StreamMarks
    }
    pub(crate) fn is_empty(&self) -> bool {
        true
    }
    pub(crate) fn elapsed_us(&self, _end: &StreamMarks) -> Vec<(usize, f64)> {
        Vec::new()
    }
    pub(crate) fn queued_work_before(&self, _end: &StreamMarks) -> bool {
        false
    }
}

pub(crate) fn synchronize(_ordinal: usize) -> Result<()> {
    Err(Error::CudaNotCompiled)
}
