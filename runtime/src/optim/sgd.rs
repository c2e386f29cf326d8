//! Stochastic gradient descent (`torch.optim.SGD`).

use super::cuda::{self, StepSlot};
use super::{
    Groups, Optimizer, check_hyper, gradient_of, unique_params, with_contiguous, zeros_like,
};
use crate::Tensor;
use crate::autograd::no_grad;
use ferrograd_kernels::fused::optim::{SgdStep, sgd_step};
use ferrograd_kernels::with_float_dtype;

/// Options of [`Sgd`], with PyTorch's defaults (`torch.optim.SGD`).
///
/// ```
/// use ferrograd_runtime::optim::SgdConfig;
/// let c = SgdConfig::new(0.1).momentum(0.9).nesterov(true);
/// assert_eq!((c.lr, c.momentum, c.dampening, c.nesterov), (0.1, 0.9, 0.0, true));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor; 0 keeps no buffer.
    pub momentum: f64,
    /// Dampening of the gradient term in the momentum buffer.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum (needs momentum > 0 and no dampening).
    pub nesterov: bool,
    /// Maximise the objective instead.
    pub maximize: bool,
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        SgdConfig {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
    setters! {
        /// Sets the momentum factor.
        momentum: f64;
        /// Sets the dampening.
        dampening: f64;
        /// Sets the L2 penalty.
        weight_decay: f64;
        /// Turns Nesterov momentum on or off.
        nesterov: bool;
        /// Maximises instead of minimising.
        maximize: bool;
    }
}

/// Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and
/// weight decay (`torch.optim.SGD`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::{Optimizer, Sgd, SgdConfig};
/// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
/// let mut opt = Sgd::new(vec![w.clone()], SgdConfig::new(0.1));
/// (&w * 3.0).sum_all().backward();
/// opt.step();
/// assert!((w.item::<f64>() - 0.7).abs() < 1e-12);
/// ```
pub struct Sgd {
    params: Vec<Tensor>,
    config: SgdConfig,
    momentum_buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    /// An optimizer over `params` (duplicates are updated once).
    ///
    /// # Panics
    /// On a negative learning rate, momentum or weight decay, on Nesterov momentum without
    /// momentum or with dampening (PyTorch's `ValueError`s), and on parameters that are
    /// not floating-point leaves requiring grad.
    #[track_caller]
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Self {
        let op = "SGD";
        check_hyper(op, "learning rate", config.lr, config.lr >= 0.0);
        check_hyper(
            op,
            "momentum value",
            config.momentum,
            config.momentum >= 0.0,
        );
        check_hyper(
            op,
            "weight_decay value",
            config.weight_decay,
            config.weight_decay >= 0.0,
        );
        assert!(
            !config.nesterov || (config.momentum > 0.0 && config.dampening == 0.0),
            "SGD: Nesterov momentum requires a momentum and zero dampening"
        );
        let params = unique_params(op, params);
        let momentum_buffers = vec![None; params.len()];
        Sgd {
            params,
            config,
            momentum_buffers,
        }
    }

    /// The options.
    pub fn config(&self) -> &SgdConfig {
        &self.config
    }

    /// The momentum buffer of parameter `i`, once it has one.
    pub fn momentum_buffer(&self, i: usize) -> Option<&Tensor> {
        self.momentum_buffers.get(i)?.as_ref()
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) {
        let c = &self.config;
        let base = SgdStep {
            lr: c.lr,
            momentum: c.momentum,
            dampening: c.dampening,
            weight_decay: c.weight_decay,
            nesterov: c.nesterov,
            maximize: c.maximize,
            first: false,
        };
        no_grad(|| {
            let mut work = Vec::new();
            for (p, buf) in self.params.iter().zip(&mut self.momentum_buffers) {
                let Some(g) = gradient_of("SGD.step", p) else {
                    continue;
                };
                let first = buf.is_none();
                if c.momentum != 0.0 && first {
                    *buf = Some(zeros_like(p));
                }
                work.push((p, g, buf.clone(), first));
            }
            let mut groups = Groups::default();
            for (p, g, buf, first) in &work {
                if p.layout().contiguous_range().is_some() {
                    groups.push(sgd_slot(p, g, buf.as_ref(), *first));
                } else {
                    with_contiguous(p, |w| {
                        sgd_on_cpu(&sgd_slot(w, g, buf.as_ref(), *first), &base)
                    });
                }
            }
            for slots in groups.iter() {
                if !cuda::sgd_multi(slots, &base) {
                    slots.iter().for_each(|s| sgd_on_cpu(s, &base));
                }
            }
        });
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }
}

fn sgd_slot<'a>(
    p: &'a Tensor,
    g: &'a Tensor,
    buf: Option<&'a Tensor>,
    first: bool,
) -> StepSlot<'a> {
    StepSlot {
        tensors: [Some(p), Some(g), buf, None, None],
        flags: if first { 2 } else { 0 },
        step_size: 0.0,
        bc2_sqrt: 0.0,
    }
}

/// The fused SGD update of one contiguous parameter on the host (the host fallback for a
/// device tensor).
fn sgd_on_cpu(slot: &StepSlot<'_>, base: &SgdStep) {
    let [Some(p), Some(g), buf, ..] = slot.tensors else {
        unreachable!("a slot holds a parameter and its gradient")
    };
    let h = &SgdStep {
        first: slot.flags & 2 != 0,
        ..*base
    };
    let range = |t: &Tensor| t.layout().contiguous_range().expect("contiguous");
    g.with_cpu("SGD.step", |gs, _| {
        p.with_cpu_mut("SGD.step", |ps, _| {
            with_float_dtype!(ps.dtype(), T => {
                let grad = &gs.typed::<T>()[range(g)];
                let param = &mut ps.typed_mut::<T>()[range(p)];
                match buf {
                    Some(b) => b.with_cpu_mut("SGD.step", |bs, _| {
                        sgd_step(param, grad, Some(&mut bs.typed_mut::<T>()[range(b)]), h)
                    }),
                    None => sgd_step(param, grad, None, h),
                }
            }, else unreachable!("parameters are floats"))
        })
    });
}
