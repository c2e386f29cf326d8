//! RMSprop, Adagrad and Adadelta (`torch.optim`).

use crate::Tensor;
use crate::optim::check_hyper;
use crate::optim::core::{ParamState, Rule, StepScalars, optimizer_type, set_bool, set_f64};
use crate::optim::cuda::{self, StepSlot};
use crate::optim::state::Hyper;
use ferrograd_kernels::FloatElement;
use ferrograd_kernels::fused::optim::{
    AdadeltaStep, AdagradStep, RmspropStep, StateSlices, adadelta_step, adagrad_step, rmsprop_step,
};

config! {
    /// Options of [`RMSprop`] (`torch.optim.RMSprop`'s defaults).
    ///
    /// ```
    /// let c = ferrograd_runtime::optim::RMSpropConfig::default().momentum(0.9).centered(true);
    /// assert_eq!((c.lr, c.alpha, c.eps, c.momentum, c.centered), (1e-2, 0.99, 1e-8, 0.9, true));
    /// ```
    RMSpropConfig {
        /// Sets the learning rate.
        lr: f64 = 1e-2,
        /// Sets the smoothing constant of the squared-gradient average.
        alpha: f64 = 0.99,
        /// Sets the term added to the denominator.
        eps: f64 = 1e-8,
        /// Sets the L2 penalty.
        weight_decay: f64 = 0.0,
        /// Sets the momentum factor.
        momentum: f64 = 0.0,
        /// Normalises by the centred second moment (an estimate of the variance).
        centered: bool = false,
        /// Maximises instead of minimising.
        maximize: bool = false,
    }
}

optimizer_type! {
    /// RMSprop (`torch.optim.RMSprop`): divides the gradient by a running root mean square,
    /// optionally centred and with momentum; state `square_avg`, `momentum_buffer`,
    /// `grad_avg`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{Optimizer, RMSprop, RMSpropConfig};
    /// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    /// let mut opt = RMSprop::new(vec![w.clone()], RMSpropConfig::default().lr(0.01).eps(0.0));
    /// w.set_grad(Some(Tensor::from_vec(vec![2.0f64], &[1])));
    /// opt.step(); // square_avg = 0.01 * 4, so the step is 0.01 * 2 / 0.2
    /// assert!((w.item::<f64>() - 0.9).abs() < 1e-12);
    /// ```
    RMSprop, RmspropRule, RMSpropConfig
}

pub(crate) struct RmspropRule;

impl Rule for RmspropRule {
    type Config = RMSpropConfig;
    const NAME: &'static str = "RMSprop";
    const BUFFERS: &'static [&'static str] = &["square_avg", "momentum_buffer", "grad_avg"];

    #[track_caller]
    fn prepare(c: &mut RMSpropConfig) {
        let op = Self::NAME;
        check_hyper(op, "learning rate", c.lr, c.lr >= 0.0);
        check_hyper(op, "epsilon value", c.eps, c.eps >= 0.0);
        check_hyper(op, "momentum value", c.momentum, c.momentum >= 0.0);
        check_hyper(
            op,
            "weight_decay value",
            c.weight_decay,
            c.weight_decay >= 0.0,
        );
        check_hyper(op, "alpha value", c.alpha, c.alpha >= 0.0);
    }
    fn lr(c: &RMSpropConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut RMSpropConfig, lr: f64) {
        c.lr = lr;
    }
    fn momentum(c: &RMSpropConfig) -> Option<f64> {
        Some(c.momentum)
    }
    fn set_momentum(c: &mut RMSpropConfig, momentum: f64) {
        c.momentum = momentum;
    }
    fn hypers(c: &RMSpropConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("alpha", Hyper::Float(c.alpha)),
            ("eps", Hyper::Float(c.eps)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            ("momentum", Hyper::Float(c.momentum)),
            ("centered", Hyper::Bool(c.centered)),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut RMSpropConfig, key: &str, v: &Hyper) -> bool {
        hyper_fields!(c, key, v; floats: lr, alpha, eps, weight_decay, momentum; bools: centered, maximize;)
    }
    fn buffers(c: &RMSpropConfig) -> [Option<f64>; 3] {
        [
            Some(0.0),
            (c.momentum > 0.0).then_some(0.0),
            c.centered.then_some(0.0),
        ]
    }
    fn advance(_: &RMSpropConfig, _: &mut ParamState, _: bool) -> StepScalars {
        StepScalars {
            flags: 0,
            sc: [0.0; 4],
        }
    }
    fn cpu<T: FloatElement>(
        c: &RMSpropConfig,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        _: &StepScalars,
    ) {
        rmsprop_step(param, grad, states, &rmsprop(c));
    }
    fn cuda(c: &RMSpropConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::rmsprop_multi(slots, &rmsprop(c))
    }
}

fn rmsprop(c: &RMSpropConfig) -> RmspropStep {
    RmspropStep {
        lr: c.lr,
        alpha: c.alpha,
        eps: c.eps,
        weight_decay: c.weight_decay,
        momentum: c.momentum,
        centered: c.centered,
        maximize: c.maximize,
    }
}

config! {
    /// Options of [`Adagrad`] (`torch.optim.Adagrad`'s defaults).
    ///
    /// ```
    /// let c = ferrograd_runtime::optim::AdagradConfig::default().lr_decay(0.01);
    /// assert_eq!((c.lr, c.lr_decay, c.eps, c.initial_accumulator_value), (1e-2, 0.01, 1e-10, 0.0));
    /// ```
    AdagradConfig {
        /// Sets the learning rate.
        lr: f64 = 1e-2,
        /// Sets the learning-rate decay per step.
        lr_decay: f64 = 0.0,
        /// Sets the L2 penalty.
        weight_decay: f64 = 0.0,
        /// Sets the starting value of the squared-gradient sum.
        initial_accumulator_value: f64 = 0.0,
        /// Sets the term added to the denominator.
        eps: f64 = 1e-10,
        /// Maximises instead of minimising.
        maximize: bool = false,
    }
}

optimizer_type! {
    /// Adagrad (`torch.optim.Adagrad`): divides by the root of the summed squared
    /// gradients; state `sum`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{Adagrad, AdagradConfig, Optimizer};
    /// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    /// let mut opt = Adagrad::new(vec![w.clone()], AdagradConfig::default().lr(0.5));
    /// w.set_grad(Some(Tensor::from_vec(vec![4.0f64], &[1])));
    /// opt.step(); // sum = 16: the first step is lr in the descent direction
    /// assert!((w.item::<f64>() - 0.5).abs() < 1e-9);
    /// ```
    Adagrad, AdagradRule, AdagradConfig
}

pub(crate) struct AdagradRule;

impl Rule for AdagradRule {
    type Config = AdagradConfig;
    const NAME: &'static str = "Adagrad";
    const BUFFERS: &'static [&'static str] = &["sum"];

    #[track_caller]
    fn prepare(c: &mut AdagradConfig) {
        let op = Self::NAME;
        check_hyper(op, "learning rate", c.lr, c.lr >= 0.0);
        check_hyper(op, "lr_decay value", c.lr_decay, c.lr_decay >= 0.0);
        check_hyper(
            op,
            "weight_decay value",
            c.weight_decay,
            c.weight_decay >= 0.0,
        );
        check_hyper(
            op,
            "initial_accumulator_value value",
            c.initial_accumulator_value,
            c.initial_accumulator_value >= 0.0,
        );
        check_hyper(op, "epsilon value", c.eps, c.eps >= 0.0);
    }
    fn lr(c: &AdagradConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut AdagradConfig, lr: f64) {
        c.lr = lr;
    }
    fn hypers(c: &AdagradConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("lr_decay", Hyper::Float(c.lr_decay)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            (
                "initial_accumulator_value",
                Hyper::Float(c.initial_accumulator_value),
            ),
            ("eps", Hyper::Float(c.eps)),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut AdagradConfig, key: &str, v: &Hyper) -> bool {
        hyper_fields!(c, key, v; floats: lr, lr_decay, weight_decay, initial_accumulator_value, eps; bools: maximize;)
    }
    fn buffers(c: &AdagradConfig) -> [Option<f64>; 3] {
        [Some(c.initial_accumulator_value), None, None]
    }
    fn advance(c: &AdagradConfig, s: &mut ParamState, _: bool) -> StepScalars {
        StepScalars {
            flags: 0,
            sc: [
                c.lr / (1.0 + (s.step - 1) as f64 * c.lr_decay),
                0.0,
                0.0,
                0.0,
            ],
        }
    }
    fn cpu<T: FloatElement>(
        c: &AdagradConfig,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        step: &StepScalars,
    ) {
        adagrad_step(param, grad, states, &adagrad(c, step.sc[0]));
    }
    fn cuda(c: &AdagradConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::adagrad_multi(slots, &adagrad(c, c.lr))
    }
}

fn adagrad(c: &AdagradConfig, clr: f64) -> AdagradStep {
    AdagradStep {
        lr: c.lr,
        lr_decay: c.lr_decay,
        weight_decay: c.weight_decay,
        eps: c.eps,
        clr,
        maximize: c.maximize,
    }
}

config! {
    /// Options of [`Adadelta`] (`torch.optim.Adadelta`'s defaults).
    ///
    /// ```
    /// let c = ferrograd_runtime::optim::AdadeltaConfig::default();
    /// assert_eq!((c.lr, c.rho, c.eps), (1.0, 0.9, 1e-6));
    /// ```
    AdadeltaConfig {
        /// Sets the scale of the delta.
        lr: f64 = 1.0,
        /// Sets the decay of the running averages.
        rho: f64 = 0.9,
        /// Sets the term added inside the square roots.
        eps: f64 = 1e-6,
        /// Sets the L2 penalty.
        weight_decay: f64 = 0.0,
        /// Maximises instead of minimising.
        maximize: bool = false,
    }
}

optimizer_type! {
    /// Adadelta (`torch.optim.Adadelta`): steps scaled by the ratio of running RMS of past
    /// updates and of gradients; state `square_avg`, `acc_delta`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{Adadelta, AdadeltaConfig, Optimizer};
    /// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    /// let mut opt = Adadelta::new(vec![w.clone()], AdadeltaConfig::default());
    /// w.set_grad(Some(Tensor::from_vec(vec![1.0f64], &[1])));
    /// opt.step(); // delta = sqrt(eps) / sqrt(0.1 + eps)
    /// let delta = (1e-6f64).sqrt() / (0.1f64 + 1e-6).sqrt();
    /// assert!((w.item::<f64>() - (1.0 - delta)).abs() < 1e-12);
    /// ```
    Adadelta, AdadeltaRule, AdadeltaConfig
}

pub(crate) struct AdadeltaRule;

impl Rule for AdadeltaRule {
    type Config = AdadeltaConfig;
    const NAME: &'static str = "Adadelta";
    const BUFFERS: &'static [&'static str] = &["square_avg", "acc_delta"];

    #[track_caller]
    fn prepare(c: &mut AdadeltaConfig) {
        let op = Self::NAME;
        check_hyper(op, "learning rate", c.lr, c.lr >= 0.0);
        check_hyper(op, "rho value", c.rho, (0.0..=1.0).contains(&c.rho));
        check_hyper(op, "epsilon value", c.eps, c.eps >= 0.0);
        check_hyper(
            op,
            "weight_decay value",
            c.weight_decay,
            c.weight_decay >= 0.0,
        );
    }
    fn lr(c: &AdadeltaConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut AdadeltaConfig, lr: f64) {
        c.lr = lr;
    }
    fn hypers(c: &AdadeltaConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("rho", Hyper::Float(c.rho)),
            ("eps", Hyper::Float(c.eps)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut AdadeltaConfig, key: &str, v: &Hyper) -> bool {
        hyper_fields!(c, key, v; floats: lr, rho, eps, weight_decay; bools: maximize;)
    }
    fn buffers(_: &AdadeltaConfig) -> [Option<f64>; 3] {
        [Some(0.0), Some(0.0), None]
    }
    fn advance(_: &AdadeltaConfig, _: &mut ParamState, _: bool) -> StepScalars {
        StepScalars {
            flags: 0,
            sc: [0.0; 4],
        }
    }
    fn cpu<T: FloatElement>(
        c: &AdadeltaConfig,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        _: &StepScalars,
    ) {
        adadelta_step(param, grad, states, &adadelta(c));
    }
    fn cuda(c: &AdadeltaConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::adadelta_multi(slots, &adadelta(c))
    }
}

fn adadelta(c: &AdadeltaConfig) -> AdadeltaStep {
    AdadeltaStep {
        lr: c.lr,
        rho: c.rho,
        eps: c.eps,
        weight_decay: c.weight_decay,
        maximize: c.maximize,
    }
}
