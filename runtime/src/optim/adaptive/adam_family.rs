//! Adamax, NAdam and RAdam (`torch.optim`).

use crate::Tensor;
use crate::optim::adam::check_betas;
use crate::optim::check_hyper;
use crate::optim::core::{ParamState, Rule, StepScalars, optimizer_type, set_bool, set_f64};
use crate::optim::cuda::{self, StepSlot};
use crate::optim::state::Hyper;
use ferrograd_kernels::FloatElement;
use ferrograd_kernels::fused::optim::{
    AdamaxStep, NadamStep, RadamStep, StateSlices, adamax_step, nadam_step, radam_step,
};

config! {
    /// Options of [`Adamax`] (`torch.optim.Adamax`'s defaults).
    ///
    /// ```
    /// let c = ferrograd_runtime::optim::AdamaxConfig::default();
    /// assert_eq!((c.lr, c.betas, c.eps), (2e-3, (0.9, 0.999), 1e-8));
    /// ```
    AdamaxConfig {
        /// Sets the learning rate.
        lr: f64 = 2e-3,
        /// Sets the decays of the first moment and the infinity norm.
        betas: (f64, f64) = (0.9, 0.999),
        /// Sets the term added to the gradient's magnitude.
        eps: f64 = 1e-8,
        /// Sets the L2 penalty.
        weight_decay: f64 = 0.0,
        /// Maximises instead of minimising.
        maximize: bool = false,
    }
}

optimizer_type! {
    /// Adamax (`torch.optim.Adamax`): Adam with the infinity norm in place of the second
    /// moment; state `exp_avg`, `exp_inf`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{Adamax, AdamaxConfig, Optimizer};
    /// let w = Tensor::from_vec(vec![0.0f64], &[1]).requires_grad(true);
    /// let mut opt = Adamax::new(vec![w.clone()], AdamaxConfig::default().lr(0.1).eps(0.0));
    /// w.set_grad(Some(Tensor::from_vec(vec![5.0f64], &[1])));
    /// opt.step(); // the first step is lr against the gradient's sign
    /// assert!((w.item::<f64>() + 0.1).abs() < 1e-12);
    /// ```
    Adamax, AdamaxRule, AdamaxConfig
}

pub(crate) struct AdamaxRule;

impl Rule for AdamaxRule {
    type Config = AdamaxConfig;
    const NAME: &'static str = "Adamax";
    const BUFFERS: &'static [&'static str] = &["exp_avg", "exp_inf"];

    #[track_caller]
    fn prepare(c: &mut AdamaxConfig) {
        check_betas(Self::NAME, c.lr, c.eps, c.betas, c.weight_decay);
    }
    fn lr(c: &AdamaxConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut AdamaxConfig, lr: f64) {
        c.lr = lr;
    }
    fn momentum(c: &AdamaxConfig) -> Option<f64> {
        Some(c.betas.0)
    }
    fn set_momentum(c: &mut AdamaxConfig, momentum: f64) {
        c.betas.0 = momentum;
    }
    fn hypers(c: &AdamaxConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("betas", Hyper::Pair(c.betas.0, c.betas.1)),
            ("eps", Hyper::Float(c.eps)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut AdamaxConfig, key: &str, v: &Hyper) -> bool {
        hyper_fields!(c, key, v; floats: lr, eps, weight_decay; bools: maximize; betas: betas)
    }
    fn buffers(_: &AdamaxConfig) -> [Option<f64>; 3] {
        [Some(0.0), Some(0.0), None]
    }
    fn advance(c: &AdamaxConfig, s: &mut ParamState, _: bool) -> StepScalars {
        let clr = c.lr / (1.0 - c.betas.0.powf(s.step as f64));
        StepScalars {
            flags: 0,
            sc: [clr, 0.0, 0.0, 0.0],
        }
    }
    fn cpu<T: FloatElement>(
        c: &AdamaxConfig,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        step: &StepScalars,
    ) {
        adamax_step(param, grad, states, &adamax(c, step.sc[0]));
    }
    fn cuda(c: &AdamaxConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::adamax_multi(slots, &adamax(c, c.lr))
    }
}

fn adamax(c: &AdamaxConfig, clr: f64) -> AdamaxStep {
    AdamaxStep {
        lr: c.lr,
        beta1: c.betas.0,
        beta2: c.betas.1,
        eps: c.eps,
        weight_decay: c.weight_decay,
        clr,
        maximize: c.maximize,
    }
}

config! {
    /// Options of [`NAdam`] (`torch.optim.NAdam`'s defaults).
    ///
    /// ```
    /// let c = ferrograd_runtime::optim::NAdamConfig::default();
    /// assert_eq!((c.lr, c.momentum_decay, c.decoupled_weight_decay), (2e-3, 4e-3, false));
    /// ```
    NAdamConfig {
        /// Sets the learning rate.
        lr: f64 = 2e-3,
        /// Sets the decays of the moment averages.
        betas: (f64, f64) = (0.9, 0.999),
        /// Sets the term added to the denominator.
        eps: f64 = 1e-8,
        /// Sets the weight decay.
        weight_decay: f64 = 0.0,
        /// Sets the momentum decay (the schedule of the Nesterov momentum).
        momentum_decay: f64 = 4e-3,
        /// Decouples the weight decay (NAdamW).
        decoupled_weight_decay: bool = false,
        /// Maximises instead of minimising.
        maximize: bool = false,
    }
}

optimizer_type! {
    /// NAdam (`torch.optim.NAdam`): Adam with Nesterov momentum; state `exp_avg`,
    /// `exp_avg_sq` and the scalar `mu_product`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{NAdam, NAdamConfig, Optimizer};
    /// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    /// let mut opt = NAdam::new(vec![w.clone()], NAdamConfig::default());
    /// w.set_grad(Some(Tensor::from_vec(vec![1.0f64], &[1])));
    /// opt.step();
    /// let mu = 0.9 * (1.0 - 0.5 * 0.96f64.powf(4e-3));
    /// assert!((opt.state(0).unwrap().scalar("mu_product").unwrap() - mu).abs() < 1e-15);
    /// assert!(w.item::<f64>() < 1.0);
    /// ```
    NAdam, NadamRule, NAdamConfig
}

pub(crate) struct NadamRule;

impl Rule for NadamRule {
    type Config = NAdamConfig;
    const NAME: &'static str = "NAdam";
    const BUFFERS: &'static [&'static str] = &["exp_avg", "exp_avg_sq"];
    const SCALAR: Option<(&'static str, f64)> = Some(("mu_product", 1.0));

    #[track_caller]
    fn prepare(c: &mut NAdamConfig) {
        check_betas(Self::NAME, c.lr, c.eps, c.betas, c.weight_decay);
        check_hyper(
            Self::NAME,
            "momentum_decay value",
            c.momentum_decay,
            c.momentum_decay >= 0.0,
        );
    }
    fn lr(c: &NAdamConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut NAdamConfig, lr: f64) {
        c.lr = lr;
    }
    fn momentum(c: &NAdamConfig) -> Option<f64> {
        Some(c.betas.0)
    }
    fn set_momentum(c: &mut NAdamConfig, momentum: f64) {
        c.betas.0 = momentum;
    }
    fn hypers(c: &NAdamConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("betas", Hyper::Pair(c.betas.0, c.betas.1)),
            ("eps", Hyper::Float(c.eps)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            ("momentum_decay", Hyper::Float(c.momentum_decay)),
            (
                "decoupled_weight_decay",
                Hyper::Bool(c.decoupled_weight_decay),
            ),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut NAdamConfig, key: &str, v: &Hyper) -> bool {
        hyper_fields!(c, key, v; floats: lr, eps, weight_decay, momentum_decay; bools: decoupled_weight_decay, maximize; betas: betas)
    }
    fn buffers(_: &NAdamConfig) -> [Option<f64>; 3] {
        [Some(0.0), Some(0.0), None]
    }
    fn advance(c: &NAdamConfig, s: &mut ParamState, _: bool) -> StepScalars {
        let (b1, b2) = c.betas;
        let step = s.step as f64;
        let mu = b1 * (1.0 - 0.5 * 0.96f64.powf(step * c.momentum_decay));
        let mu_next = b1 * (1.0 - 0.5 * 0.96f64.powf((step + 1.0) * c.momentum_decay));
        let (name, product) = s.scalar.expect("NAdam keeps mu_product");
        let product = product * mu;
        s.scalar = Some((name, product));
        StepScalars {
            flags: 0,
            sc: [
                1.0 - b2.powf(step),
                -c.lr * (1.0 - mu) / (1.0 - product),
                -c.lr * mu_next / (1.0 - product * mu_next),
                0.0,
            ],
        }
    }
    fn cpu<T: FloatElement>(
        c: &NAdamConfig,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        step: &StepScalars,
    ) {
        nadam_step(param, grad, states, &nadam(c, step.sc));
    }
    fn cuda(c: &NAdamConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::nadam_multi(slots, &nadam(c, [1.0, 0.0, 0.0, 0.0]))
    }
}

fn nadam(c: &NAdamConfig, sc: [f64; 4]) -> NadamStep {
    NadamStep {
        lr: c.lr,
        beta1: c.betas.0,
        beta2: c.betas.1,
        eps: c.eps,
        weight_decay: c.weight_decay,
        bias_correction2: sc[0],
        grad_coef: sc[1],
        avg_coef: sc[2],
        decoupled: c.decoupled_weight_decay,
        maximize: c.maximize,
    }
}

config! {
    /// Options of [`RAdam`] (`torch.optim.RAdam`'s defaults).
    ///
    /// ```
    /// let c = ferrograd_runtime::optim::RAdamConfig::default();
    /// assert_eq!((c.lr, c.betas, c.eps), (1e-3, (0.9, 0.999), 1e-8));
    /// ```
    RAdamConfig {
        /// Sets the learning rate.
        lr: f64 = 1e-3,
        /// Sets the decays of the moment averages.
        betas: (f64, f64) = (0.9, 0.999),
        /// Sets the term added to the denominator.
        eps: f64 = 1e-8,
        /// Sets the weight decay.
        weight_decay: f64 = 0.0,
        /// Decouples the weight decay (RAdamW).
        decoupled_weight_decay: bool = false,
        /// Maximises instead of minimising.
        maximize: bool = false,
    }
}

optimizer_type! {
    /// RAdam (`torch.optim.RAdam`): Adam with the variance of the adaptive rate
    /// rectified, plain momentum steps while too few steps were seen; state `exp_avg`,
    /// `exp_avg_sq`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{Optimizer, RAdam, RAdamConfig};
    /// let w = Tensor::from_vec(vec![0.0f64], &[1]).requires_grad(true);
    /// let mut opt = RAdam::new(vec![w.clone()], RAdamConfig::default().lr(0.1));
    /// w.set_grad(Some(Tensor::from_vec(vec![3.0f64], &[1])));
    /// opt.step(); // step 1 is not rectified: p -= lr * g
    /// assert!((w.item::<f64>() + 0.3).abs() < 1e-12);
    /// ```
    RAdam, RadamRule, RAdamConfig
}

pub(crate) struct RadamRule;

impl Rule for RadamRule {
    type Config = RAdamConfig;
    const NAME: &'static str = "RAdam";
    const BUFFERS: &'static [&'static str] = &["exp_avg", "exp_avg_sq"];

    #[track_caller]
    fn prepare(c: &mut RAdamConfig) {
        check_betas(Self::NAME, c.lr, c.eps, c.betas, c.weight_decay);
    }
    fn lr(c: &RAdamConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut RAdamConfig, lr: f64) {
        c.lr = lr;
    }
    fn momentum(c: &RAdamConfig) -> Option<f64> {
        Some(c.betas.0)
    }
    fn set_momentum(c: &mut RAdamConfig, momentum: f64) {
        c.betas.0 = momentum;
    }
    fn hypers(c: &RAdamConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("betas", Hyper::Pair(c.betas.0, c.betas.1)),
            ("eps", Hyper::Float(c.eps)),
            ("weight_decay", Hyper::Float(c.weight_decay)),
            (
                "decoupled_weight_decay",
                Hyper::Bool(c.decoupled_weight_decay),
            ),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut RAdamConfig, key: &str, v: &Hyper) -> bool {
        hyper_fields!(c, key, v; floats: lr, eps, weight_decay; bools: decoupled_weight_decay, maximize; betas: betas)
    }
    fn buffers(_: &RAdamConfig) -> [Option<f64>; 3] {
        [Some(0.0), Some(0.0), None]
    }
    fn advance(c: &RAdamConfig, s: &mut ParamState, _: bool) -> StepScalars {
        let (bc1, bc2, rect, rectified) = RadamStep::corrections(c.betas.0, c.betas.1, s.step);
        StepScalars {
            flags: 0,
            sc: [bc1, bc2, rect, rectified as u8 as f64],
        }
    }
    fn cpu<T: FloatElement>(
        c: &RAdamConfig,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        step: &StepScalars,
    ) {
        radam_step(param, grad, states, &radam(c, step.sc));
    }
    fn cuda(c: &RAdamConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::radam_multi(slots, &radam(c, [1.0, 1.0, 0.0, 0.0]))
    }
}

fn radam(c: &RAdamConfig, sc: [f64; 4]) -> RadamStep {
    RadamStep {
        lr: c.lr,
        beta1: c.betas.0,
        beta2: c.betas.1,
        eps: c.eps,
        weight_decay: c.weight_decay,
        bias_correction1: sc[0],
        bias_correction2_sqrt: sc[1],
        rect: sc[2],
        rectified: sc[3] != 0.0,
        decoupled: c.decoupled_weight_decay,
        maximize: c.maximize,
    }
}
