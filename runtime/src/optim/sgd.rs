//! Stochastic gradient descent (`torch.optim.SGD`).

use super::check_hyper;
use super::core::{ParamState, Rule, StepScalars, optimizer_type, set_bool, set_f64};
use super::cuda::{self, StepSlot};
use super::state::Hyper;
use crate::Tensor;
use ferrograd_kernels::FloatElement;
use ferrograd_kernels::fused::optim::{SgdStep, StateSlices, sgd_step};

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

optimizer_type! {
    /// Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and
    /// weight decay (`torch.optim.SGD`); its state is `momentum_buffer` per parameter.
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
    Sgd, SgdRule, SgdConfig
}

pub(crate) struct SgdRule;

impl Rule for SgdRule {
    type Config = SgdConfig;
    const NAME: &'static str = "SGD";
    const BUFFERS: &'static [&'static str] = &["momentum_buffer"];

    #[track_caller]
    fn prepare(config: &mut SgdConfig) {
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
    }
    fn lr(c: &SgdConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut SgdConfig, lr: f64) {
        c.lr = lr;
    }
    fn momentum(c: &SgdConfig) -> Option<f64> {
        Some(c.momentum)
    }
    fn set_momentum(c: &mut SgdConfig, momentum: f64) {
        c.momentum = momentum;
    }
    fn hypers(c: &SgdConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("momentum", Hyper::Float(c.momentum)),
            ("dampening", Hyper::Float(c.dampening)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            ("nesterov", Hyper::Bool(c.nesterov)),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut SgdConfig, key: &str, v: &Hyper) -> bool {
        match key {
            "lr" => set_f64(&mut c.lr, v),
            "momentum" => set_f64(&mut c.momentum, v),
            "dampening" => set_f64(&mut c.dampening, v),
            "weight_decay" => set_f64(&mut c.weight_decay, v),
            "nesterov" => set_bool(&mut c.nesterov, v),
            "maximize" => set_bool(&mut c.maximize, v),
            _ => false,
        }
    }
    fn buffers(c: &SgdConfig) -> [Option<f64>; 3] {
        [(c.momentum != 0.0).then_some(0.0), None, None]
    }
    fn advance(_: &SgdConfig, _: &mut ParamState, first: bool) -> StepScalars {
        StepScalars {
            flags: if first { 2 } else { 0 },
            sc: [0.0; 4],
        }
    }
    fn cpu<T: FloatElement>(
        c: &SgdConfig,
        param: &mut [T],
        grad: &[T],
        [buf, ..]: StateSlices<'_, T>,
        step: &StepScalars,
    ) {
        sgd_step(param, grad, buf, &hyper(c, step.flags & 2 != 0));
    }
    fn cuda(c: &SgdConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::sgd_multi(slots, &hyper(c, false))
    }
}

fn hyper(c: &SgdConfig, first: bool) -> SgdStep {
    SgdStep {
        lr: c.lr,
        momentum: c.momentum,
        dampening: c.dampening,
        weight_decay: c.weight_decay,
        nesterov: c.nesterov,
        maximize: c.maximize,
        first,
    }
}
