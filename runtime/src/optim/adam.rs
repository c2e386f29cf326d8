//! Adam and AdamW (`torch.optim.Adam`, `torch.optim.AdamW`).

use super::check_hyper;
use super::core::{ParamState, Rule, StepScalars, optimizer_type, set_bool, set_f64};
use super::cuda::{self, StepSlot};
use super::state::Hyper;
use crate::Tensor;
use ferrograd_kernels::FloatElement;
use ferrograd_kernels::fused::optim::{AdamStep, StateSlices, adam_step};

/// Options of [`Adam`] and [`AdamW`], with PyTorch's defaults (`torch.optim.Adam`;
/// [`AdamW::new`] takes `weight_decay = 0.01` unless set).
///
/// ```
/// use ferrograd_runtime::optim::AdamConfig;
/// let c = AdamConfig::default();
/// assert_eq!((c.lr, c.betas, c.eps, c.weight_decay, c.amsgrad), (1e-3, (0.9, 0.999), 1e-8, None, false));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment averages.
    pub betas: (f64, f64),
    /// Added to the denominator for stability.
    pub eps: f64,
    /// Weight decay: an L2 term for [`Adam`], decoupled decay for [`AdamW`]; `None` takes
    /// the optimizer's default (0 for Adam, 0.01 for AdamW, as PyTorch), which the
    /// optimizer's `config()` then shows.
    pub weight_decay: Option<f64>,
    /// Use the running maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
    /// Maximise the objective instead.
    pub maximize: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: None,
            amsgrad: false,
            maximize: false,
        }
    }
}

impl AdamConfig {
    setters! {
        /// Sets the learning rate.
        lr: f64;
        /// Sets epsilon.
        eps: f64;
        /// Turns AMSGrad on or off.
        amsgrad: bool;
        /// Maximises instead of minimising.
        maximize: bool;
    }
    /// Sets `(beta1, beta2)`.
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        self.betas = (beta1, beta2);
        self
    }
    /// Sets the weight decay.
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = Some(weight_decay);
        self
    }
}

optimizer_type! {
    /// Adam (`torch.optim.Adam`): adaptive moment estimation, with an optional L2 term
    /// added to the gradient and AMSGrad; its state is `exp_avg`, `exp_avg_sq` (and
    /// `max_exp_avg_sq`) per parameter.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{Adam, AdamConfig, Optimizer};
    /// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    /// let mut opt = Adam::new(vec![w.clone()], AdamConfig::default().lr(0.5));
    /// (&w * 3.0).sum_all().backward();
    /// opt.step(); // the first step moves by about lr, whatever the gradient's size
    /// assert!((w.item::<f64>() - 0.5).abs() < 1e-6);
    /// assert_eq!(opt.state(0).unwrap().step, 1);
    /// ```
    Adam, AdamRule<false>, AdamConfig
}

optimizer_type! {
    /// AdamW (`torch.optim.AdamW`): Adam with decoupled weight decay (the parameter shrinks
    /// by `lr * weight_decay` each step instead of an L2 term in the gradient); weight decay
    /// defaults to 0.01.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::optim::{AdamConfig, AdamW, Optimizer};
    /// let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    /// let mut opt = AdamW::new(vec![w.clone()], AdamConfig::default().lr(0.1));
    /// assert_eq!(opt.config().weight_decay, Some(0.01));
    /// w.set_grad(Some(Tensor::zeros(&[1], DType::F64, &Device::Cpu)));
    /// opt.step(); // a zero gradient leaves only the decay: 1 * (1 - 0.1 * 0.01)
    /// assert!((w.item::<f64>() - 0.999).abs() < 1e-12);
    /// ```
    AdamW, AdamRule<true>, AdamConfig
}

/// Adam (`DECOUPLED = false`) and AdamW.
pub(crate) struct AdamRule<const DECOUPLED: bool>;

impl<const DECOUPLED: bool> Rule for AdamRule<DECOUPLED> {
    type Config = AdamConfig;
    const NAME: &'static str = if DECOUPLED { "AdamW" } else { "Adam" };
    const BUFFERS: &'static [&'static str] = &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"];

    #[track_caller]
    fn prepare(config: &mut AdamConfig) {
        let op = Self::NAME;
        let weight_decay = *config
            .weight_decay
            .get_or_insert(if DECOUPLED { 1e-2 } else { 0.0 });
        check_betas(op, config.lr, config.eps, config.betas, weight_decay);
    }
    fn lr(c: &AdamConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut AdamConfig, lr: f64) {
        c.lr = lr;
    }
    fn momentum(c: &AdamConfig) -> Option<f64> {
        Some(c.betas.0)
    }
    fn set_momentum(c: &mut AdamConfig, momentum: f64) {
        c.betas.0 = momentum;
    }
    fn hypers(c: &AdamConfig) -> Vec<(&'static str, Hyper)> {
        vec![
            ("lr", Hyper::Float(c.lr)),
            ("betas", Hyper::Pair(c.betas.0, c.betas.1)),
            ("eps", Hyper::Float(c.eps)),
            (
                "weight_decay",
                Hyper::Float(c.weight_decay.unwrap_or_default()),
            ),
            ("amsgrad", Hyper::Bool(c.amsgrad)),
            ("maximize", Hyper::Bool(c.maximize)),
        ]
    }
    fn set_hyper(c: &mut AdamConfig, key: &str, v: &Hyper) -> bool {
        match (key, v) {
            ("lr", _) => set_f64(&mut c.lr, v),
            ("betas", Hyper::Pair(a, b)) => {
                c.betas = (*a, *b);
                true
            }
            ("eps", _) => set_f64(&mut c.eps, v),
            ("weight_decay", Hyper::Float(x)) => {
                c.weight_decay = Some(*x);
                true
            }
            ("amsgrad", _) => set_bool(&mut c.amsgrad, v),
            ("maximize", _) => set_bool(&mut c.maximize, v),
            _ => false,
        }
    }
    fn buffers(c: &AdamConfig) -> [Option<f64>; 3] {
        [Some(0.0), Some(0.0), c.amsgrad.then_some(0.0)]
    }
    fn advance(c: &AdamConfig, s: &mut ParamState, _: bool) -> StepScalars {
        let h = hyper::<DECOUPLED>(c).at_step(s.step);
        StepScalars {
            flags: c.amsgrad as u64,
            sc: [h.step_size, h.bias_correction2_sqrt, 0.0, 0.0],
        }
    }
    fn cpu<T: FloatElement>(
        c: &AdamConfig,
        param: &mut [T],
        grad: &[T],
        [m, v, vmax]: StateSlices<'_, T>,
        step: &StepScalars,
    ) {
        let h = AdamStep {
            step_size: step.sc[0],
            bias_correction2_sqrt: step.sc[1],
            ..hyper::<DECOUPLED>(c)
        };
        let (Some(m), Some(v)) = (m, v) else {
            unreachable!("Adam keeps both moments")
        };
        adam_step(param, grad, m, v, vmax, &h);
    }
    fn cuda(c: &AdamConfig, slots: &[StepSlot<'_>]) -> bool {
        cuda::adam_multi(slots, &hyper::<DECOUPLED>(c))
    }
}

fn hyper<const DECOUPLED: bool>(c: &AdamConfig) -> AdamStep {
    AdamStep {
        decoupled: DECOUPLED,
        amsgrad: c.amsgrad,
        maximize: c.maximize,
        ..AdamStep::new(c.lr, c.betas, c.eps, c.weight_decay.unwrap_or_default(), 1)
    }
}

/// The Adam family's checks (PyTorch's `ValueError`s).
#[track_caller]
pub(crate) fn check_betas(op: &str, lr: f64, eps: f64, betas: (f64, f64), weight_decay: f64) {
    check_hyper(op, "learning rate", lr, lr >= 0.0);
    check_hyper(op, "epsilon value", eps, eps >= 0.0);
    check_hyper(
        op,
        "beta parameter at index 0",
        betas.0,
        (0.0..1.0).contains(&betas.0),
    );
    check_hyper(
        op,
        "beta parameter at index 1",
        betas.1,
        (0.0..1.0).contains(&betas.1),
    );
    check_hyper(op, "weight_decay value", weight_decay, weight_decay >= 0.0);
}
