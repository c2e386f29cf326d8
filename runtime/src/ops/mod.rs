//! Tensor ops, one file per family. Each op's shape rule, forward dispatch and backward
//! sit together in its method; the kernels live in `ferrograd-kernels`.

mod einsum;
mod elementwise;
mod index;
mod inplace;
mod linalg;
mod rearrange;
mod select;
mod sort;

pub(crate) use rearrange::{index_on, wrap_dim};
mod reduce;
mod view;

use crate::Tensor;
use ferrograd_kernels::{Dims, broadcast_shapes};

/// Panics unless every tensor is on the first one's device, naming the op.
#[track_caller]
pub(crate) fn check_same_device(op: &str, tensors: &[&Tensor]) {
    let first = tensors[0].device();
    for t in &tensors[1..] {
        if t.device() != first {
            panic!(
                "{op}: expected all tensors to be on the same device, but found at least two devices, \
                 {first} and {} (shapes {:?} and {:?})",
                t.device(),
                tensors[0].shape(),
                t.shape()
            );
        }
    }
}

/// The broadcast shape of two tensors, or a panic naming the op, both shapes and the dim.
#[track_caller]
pub(crate) fn broadcast_shape(op: &str, a: &Tensor, b: &Tensor) -> Dims {
    if a.shape() == b.shape() {
        return Dims::from_slice(a.shape());
    }
    broadcast_shapes(a.shape(), b.shape()).unwrap_or_else(|dim| {
        let (sa, sb) = (a.shape(), b.shape());
        let size = |s: &[usize]| {
            s.len()
                .checked_sub((-dim) as usize)
                .map(|i| s[i])
                .unwrap_or(1)
        };
        panic!(
            "{op}: the size of tensor a ({}) must match the size of tensor b ({}) at non-singleton \
             dimension {dim}: shapes {sa:?} and {sb:?} cannot be broadcast",
            size(sa),
            size(sb)
        )
    })
}
