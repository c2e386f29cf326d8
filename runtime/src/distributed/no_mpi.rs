//! Without the `mpi` feature: the same functions, and an engine that cannot start.

#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use super::{DistError, EngineOp};
use ferrograd_kernels::DType;
use std::os::raw::c_void;

/// No communicator can exist in this build.
pub(crate) enum Comm {}

pub(crate) fn init() -> Result<(usize, usize, Comm), DistError> {
    Err(DistError::BackendUnavailable {
        backend: "mpi",
        reason: "ferrograd was built without the `mpi` feature: enable it (it needs OpenMPI: \
                 apt-get install libopenmpi-dev openmpi-bin libclang-dev) and start the ranks \
                 with mpirun"
            .into(),
    })
}

pub(crate) fn finalize() {}

pub(crate) fn serialized() -> bool {
    false
}

pub(crate) fn abort(_code: i32) {}

pub(crate) fn split(c: &Comm, _: Option<usize>, _: usize) -> Result<Option<Comm>, DistError> {
    match *c {}
}

pub(crate) unsafe fn all_reduce(
    c: &Comm,
    _: *mut c_void,
    _: usize,
    _: DType,
    _: EngineOp,
    _: bool,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) unsafe fn broadcast(
    c: &Comm,
    _: *mut c_void,
    _: usize,
    _: DType,
    _: usize,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) unsafe fn all_gather(
    c: &Comm,
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: DType,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) unsafe fn reduce_scatter(
    c: &Comm,
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: DType,
    _: EngineOp,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) unsafe fn all_to_all(
    c: &Comm,
    _: *const c_void,
    _: *mut c_void,
    _: usize,
    _: DType,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) unsafe fn send(
    c: &Comm,
    _: *const c_void,
    _: usize,
    _: DType,
    _: usize,
    _: i32,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) unsafe fn recv(
    c: &Comm,
    _: *mut c_void,
    _: usize,
    _: DType,
    _: usize,
    _: i32,
) -> Result<(), DistError> {
    match *c {}
}

pub(crate) fn barrier(c: &Comm) -> Result<(), DistError> {
    match *c {}
}
