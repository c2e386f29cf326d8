//! Optimizers (`torch.optim`): [`Sgd`], [`Adam`] and [`AdamW`], with PyTorch's update
//! formulas and defaults.
//!
//! Each step is fused: on the CPU one pass per parameter updates the parameter and its
//! state together (in parallel above a size threshold); on CUDA one kernel launch updates
//! every parameter of a dtype (PyTorch's `fused=True`). Parameters without a gradient are
//! skipped, as in PyTorch.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::optim::{Adam, AdamConfig, Optimizer};
//! let w = Tensor::from_vec(vec![1.0f32, -2.0], &[2]).requires_grad(true);
//! let mut opt = Adam::new(vec![w.clone()], AdamConfig::default().lr(0.1));
//! for _ in 0..100 {
//!     opt.zero_grad();
//!     (&w * &w).sum_all().backward();
//!     opt.step();
//! }
//! assert!(w.abs().max_all().item::<f32>() < 0.1);
//! ```

use crate::{DType, Device, Tensor};
use cuda::StepSlot;

/// Builder methods that set one field each.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
    };
}

mod adam;
mod cuda;
pub mod lr_scheduler;
mod sgd;

pub use adam::{Adam, AdamConfig, AdamState, AdamW};
pub use sgd::{Sgd, SgdConfig};

/// What every optimizer does (`torch.optim.Optimizer`).
pub trait Optimizer {
    /// Updates every parameter that has a gradient.
    fn step(&mut self);

    /// Clears the gradients of every parameter (`zero_grad(set_to_none=True)`).
    fn zero_grad(&mut self) {
        for p in self.params() {
            p.zero_grad();
        }
    }

    /// The parameters being optimised.
    fn params(&self) -> &[Tensor];

    /// The learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (for schedules).
    fn set_lr(&mut self, lr: f64);
}

/// The parameters with duplicates (the same tensor twice, as with tied weights) removed,
/// so that no parameter is updated twice per step.
#[track_caller]
fn unique_params(op: &str, params: Vec<Tensor>) -> Vec<Tensor> {
    let mut out: Vec<Tensor> = Vec::with_capacity(params.len());
    for p in params {
        assert!(
            p.dtype().is_float(),
            "{op}: can only optimize floating-point tensors, got {:?} (shape {:?})",
            p.dtype(),
            p.shape()
        );
        assert!(
            p.is_leaf() && p.requires_grad_flag(),
            "{op}: parameters must be leaf tensors that require grad (shape {:?})",
            p.shape()
        );
        if !out
            .iter()
            .any(|q| q.shares_storage(&p) && q.layout() == p.layout())
        {
            out.push(p);
        }
    }
    out
}

#[track_caller]
fn check_hyper(op: &str, name: &str, value: f64, ok: bool) {
    assert!(ok, "{op}: invalid {name}: {value}");
}

/// A parameter's gradient as the fused kernels read it: contiguous, detached, same dtype.
#[track_caller]
fn gradient_of(op: &str, p: &Tensor) -> Option<Tensor> {
    let g = p.grad()?;
    assert!(
        g.dtype() == p.dtype() && g.shape() == p.shape() && g.device() == p.device(),
        "{op}: gradient of {:?} {} on {} does not match its parameter ({:?} {:?} on {})",
        g.shape(),
        g.dtype(),
        g.device(),
        p.shape(),
        p.dtype(),
        p.device()
    );
    Some(g.detach().contiguous())
}

/// Runs `update` on a contiguous working view of `p` and writes it back when `p` itself
/// is not contiguous (a parameter created from a transposed view, say).
fn with_contiguous(p: &Tensor, update: impl FnOnce(&Tensor)) {
    if p.layout().contiguous_range().is_some() {
        update(&p.detach());
    } else {
        let work = p.detach().contiguous();
        update(&work);
        p.detach().copy_(&work);
    }
}

/// A new zero state buffer shaped like `p`.
fn zeros_like(p: &Tensor) -> Tensor {
    Tensor::zeros(p.shape(), p.dtype(), &p.device())
}

/// Parameters' fused updates grouped by (device, dtype), so each group is one CUDA launch.
#[derive(Default)]
struct Groups<'a>(Vec<((Device, DType), Vec<StepSlot<'a>>)>);

impl<'a> Groups<'a> {
    fn push(&mut self, slot: StepSlot<'a>) {
        let p = slot.tensors[0].expect("a slot holds its parameter");
        let key = (p.device(), p.dtype());
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slots)) => slots.push(slot),
            None => self.0.push((key, vec![slot])),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &[StepSlot<'a>]> {
        self.0.iter().map(|(_, slots)| slots.as_slice())
    }
}
