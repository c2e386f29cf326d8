//! Optimizers (`torch.optim`): [`Sgd`], [`Adam`], [`AdamW`], [`RMSprop`], [`Adagrad`],
//! [`Adadelta`], [`Adamax`], [`NAdam`], [`RAdam`] and [`Lbfgs`], with PyTorch's update
//! formulas, defaults, parameter groups ([`ParamGroup`]) and state dicts
//! ([`OptimizerState`], keyed by parameter name); schedules in [`lr_scheduler`], gradient
//! clipping and weight averaging in [`utils`].
//!
//! Each step is fused: on the CPU one pass per parameter updates the parameter and its
//! state together (in parallel above a size threshold); on CUDA one kernel launch updates
//! every parameter of a group and dtype (PyTorch's `fused=True`). Parameters without a
//! gradient are skipped, as in PyTorch.
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

mod adam;
mod adaptive;
pub(crate) mod core;
mod cuda;
mod lbfgs;
pub mod lr_scheduler;
mod sgd;
mod state;
pub mod utils;

pub use adam::{Adam, AdamConfig, AdamW};
pub use adaptive::{
    Adadelta, AdadeltaConfig, Adagrad, AdagradConfig, Adamax, AdamaxConfig, NAdam, NAdamConfig,
    RAdam, RAdamConfig, RMSprop, RMSpropConfig,
};
pub use core::{ParamGroup, ParamState};
pub use lbfgs::{Lbfgs, LbfgsConfig, LineSearch};
pub use sgd::{Sgd, SgdConfig};
pub use state::{GroupRecord, Hyper, OptimError, OptimizerState};

/// What every optimizer does (`torch.optim.Optimizer`).
pub trait Optimizer {
    /// Updates every parameter that has a gradient.
    ///
    /// # Panics
    /// [`Lbfgs`] needs a closure: call [`Optimizer::step_with`].
    fn step(&mut self);

    /// `optimizer.step(closure)`: `closure` clears the gradients, recomputes the loss,
    /// back-propagates and returns the loss; optimizers that evaluate the loss several
    /// times per step ([`Lbfgs`]) call it again. Returns the loss of the first call.
    fn step_with(&mut self, closure: &mut dyn FnMut() -> f64) -> f64 {
        let loss = closure();
        self.step();
        loss
    }

    /// Clears the gradients of every parameter (`zero_grad(set_to_none=True)`).
    fn zero_grad(&mut self) {
        for p in self.params() {
            p.zero_grad();
        }
    }

    /// The parameters being optimised, over all groups.
    fn params(&self) -> Vec<Tensor>;

    /// The number of parameter groups.
    fn num_groups(&self) -> usize;

    /// The learning rate of group `group`.
    fn group_lr(&self, group: usize) -> f64;

    /// Sets the learning rate of group `group` (for schedules).
    fn set_group_lr(&mut self, group: usize, lr: f64);

    /// The momentum-like option of group `group` that schedules cycle (SGD's and
    /// RMSprop's `momentum`, the Adam family's `beta1`), if it has one.
    fn group_momentum(&self, _group: usize) -> Option<f64> {
        None
    }

    /// Sets the momentum-like option of group `group` (ignored without one).
    fn set_group_momentum(&mut self, _group: usize, _momentum: f64) {}

    /// The learning rate of the first group.
    fn lr(&self) -> f64 {
        self.group_lr(0)
    }

    /// Sets the learning rate of every group.
    fn set_lr(&mut self, lr: f64) {
        for g in 0..self.num_groups() {
            self.set_group_lr(g, lr);
        }
    }

    /// The state and options (`optimizer.state_dict()`), keyed by parameter name.
    fn state_dict(&self) -> OptimizerState;

    /// Restores a state dict: options per group, state per parameter name, buffers
    /// converted to each parameter's dtype and device.
    ///
    /// # Errors
    /// When the groups or names differ, an option is not this optimizer's, or a state is
    /// incomplete or mis-shaped; the optimizer is then unchanged.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<(), OptimError>;
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
