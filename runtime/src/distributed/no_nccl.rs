//! Without the `nccl` feature: the same functions, and an engine that cannot start.

use super::{DistError, ReduceOp};
use crate::Tensor;

pub(crate) fn available() -> Result<(), DistError> {
    Err(missing())
}

fn missing() -> DistError {
    DistError::BackendUnavailable {
        backend: "nccl",
        reason: "ferrograd was built without the `nccl` feature: enable it (with `cuda`; libnccl \
                 is loaded at run time) or use Backend::Mpi for CPU tensors"
            .into(),
    }
}

pub(crate) fn unique_id() -> Result<[u8; 128], DistError> {
    Err(missing())
}

/// No communicator can exist in this build.
pub(crate) enum Comm {}

impl Comm {
    pub(crate) fn init(_: [u8; 128], _: usize, _: usize, _: usize) -> Result<Comm, DistError> {
        Err(missing())
    }
    pub(crate) fn ordinal(&self) -> usize {
        match *self {}
    }
    pub(crate) fn split(&self, _: Option<usize>, _: usize) -> Result<Option<Comm>, DistError> {
        match *self {}
    }
    pub(crate) fn all_reduce(&self, _: &Tensor, _: ReduceOp) -> Result<(), DistError> {
        match *self {}
    }
    pub(crate) fn broadcast(&self, _: &Tensor, _: usize) -> Result<(), DistError> {
        match *self {}
    }
    pub(crate) fn two_buffer(
        &self,
        _: super::TwoBuffer,
        _: &Tensor,
        _: &Tensor,
        _: usize,
    ) -> Result<(), DistError> {
        match *self {}
    }
    pub(crate) fn point_to_point(&self, _: &Tensor, _: usize, _: bool) -> Result<(), DistError> {
        match *self {}
    }
}
