//! Adam and AdamW (`torch.optim.Adam`, `torch.optim.AdamW`).

use super::cuda::{self, StepSlot};
use super::{
    Groups, Optimizer, check_hyper, gradient_of, unique_params, with_contiguous, zeros_like,
};
use crate::Tensor;
use crate::autograd::no_grad;
use ferrograd_kernels::fused::optim::{AdamStep, adam_step};
use ferrograd_kernels::with_float_dtype;

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

/// The state of one parameter under Adam.
#[derive(Clone, Debug)]
pub struct AdamState {
    /// Steps taken (the parameter's own count: steps without a gradient do not count).
    pub step: u64,
    /// First moment average.
    pub exp_avg: Tensor,
    /// Second moment average.
    pub exp_avg_sq: Tensor,
    /// Running maximum of `exp_avg_sq` (AMSGrad only).
    pub max_exp_avg_sq: Option<Tensor>,
}

/// Adam (`torch.optim.Adam`): adaptive moment estimation, with an optional L2 term
/// added to the gradient and AMSGrad.
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
pub struct Adam {
    params: Vec<Tensor>,
    config: AdamConfig,
    decoupled: bool,
    state: Vec<Option<AdamState>>,
}

impl Adam {
    /// Adam over `params` (duplicates are updated once).
    ///
    /// # Panics
    /// On a negative learning rate, epsilon or weight decay, betas outside `[0, 1)`
    /// (PyTorch's `ValueError`s), and on parameters that are not floating-point leaves
    /// requiring grad.
    #[track_caller]
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Self {
        Self::with_decay_mode("Adam", params, config, false)
    }

    #[track_caller]
    fn with_decay_mode(
        op: &str,
        params: Vec<Tensor>,
        mut config: AdamConfig,
        decoupled: bool,
    ) -> Self {
        let weight_decay = *config
            .weight_decay
            .get_or_insert(if decoupled { 1e-2 } else { 0.0 });
        check_hyper(op, "learning rate", config.lr, config.lr >= 0.0);
        check_hyper(op, "epsilon value", config.eps, config.eps >= 0.0);
        check_hyper(
            op,
            "beta parameter at index 0",
            config.betas.0,
            (0.0..1.0).contains(&config.betas.0),
        );
        check_hyper(
            op,
            "beta parameter at index 1",
            config.betas.1,
            (0.0..1.0).contains(&config.betas.1),
        );
        check_hyper(op, "weight_decay value", weight_decay, weight_decay >= 0.0);
        let params = unique_params(op, params);
        let state = vec![None; params.len()];
        Adam {
            params,
            config,
            decoupled,
            state,
        }
    }

    /// The options.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// The state of parameter `i`, once it has taken a step.
    pub fn state(&self, i: usize) -> Option<&AdamState> {
        self.state.get(i)?.as_ref()
    }

    fn name(&self) -> &'static str {
        if self.decoupled { "AdamW" } else { "Adam" }
    }
}

impl Optimizer for Adam {
    fn step(&mut self) {
        let c = &self.config;
        let op = if self.decoupled {
            "AdamW.step"
        } else {
            "Adam.step"
        };
        let weight_decay = c.weight_decay.unwrap_or_default(); // resolved in `new`
        let base = AdamStep {
            decoupled: self.decoupled,
            amsgrad: c.amsgrad,
            maximize: c.maximize,
            ..AdamStep::new(c.lr, c.betas, c.eps, weight_decay, 1)
        };
        no_grad(|| {
            let mut work = Vec::new();
            for (p, state) in self.params.iter().zip(&mut self.state) {
                let Some(g) = gradient_of(op, p) else {
                    continue;
                };
                let s = state.get_or_insert_with(|| AdamState {
                    step: 0,
                    exp_avg: zeros_like(p),
                    exp_avg_sq: zeros_like(p),
                    max_exp_avg_sq: c.amsgrad.then(|| zeros_like(p)),
                });
                s.step += 1;
                work.push((p, g, s.clone(), base.at_step(s.step)));
            }
            let mut groups = Groups::default();
            for (p, g, s, h) in &work {
                if p.layout().contiguous_range().is_some() {
                    groups.push(adam_slot(p, g, s, h));
                } else {
                    with_contiguous(p, |w| adam_on_cpu(op, &adam_slot(w, g, s, h), &base));
                }
            }
            for slots in groups.iter() {
                if !cuda::adam_multi(slots, &base) {
                    slots.iter().for_each(|s| adam_on_cpu(op, s, &base));
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

fn adam_slot<'a>(p: &'a Tensor, g: &'a Tensor, s: &'a AdamState, h: &AdamStep) -> StepSlot<'a> {
    StepSlot {
        tensors: [
            Some(p),
            Some(g),
            Some(&s.exp_avg),
            Some(&s.exp_avg_sq),
            s.max_exp_avg_sq.as_ref(),
        ],
        flags: s.max_exp_avg_sq.is_some() as u64,
        step_size: h.step_size,
        bc2_sqrt: h.bias_correction2_sqrt,
    }
}

/// The fused Adam update of one contiguous parameter on the host.
fn adam_on_cpu(op: &str, slot: &StepSlot<'_>, base: &AdamStep) {
    let [Some(p), Some(g), Some(m_t), Some(v_t), max_t] = slot.tensors else {
        unreachable!("an Adam slot holds a parameter, its gradient and two moments")
    };
    let h = &AdamStep {
        step_size: slot.step_size,
        bias_correction2_sqrt: slot.bc2_sqrt,
        ..*base
    };
    let range = |t: &Tensor| t.layout().contiguous_range().expect("contiguous");
    g.with_cpu(op, |gs, _| {
        p.with_cpu_mut(op, |ps, _| {
            m_t.with_cpu_mut(op, |ms, _| {
                v_t.with_cpu_mut(op, |vs, _| {
                    with_float_dtype!(ps.dtype(), T => {
                        let grad = &gs.typed::<T>()[range(g)];
                        let param = &mut ps.typed_mut::<T>()[range(p)];
                        let m = &mut ms.typed_mut::<T>()[range(m_t)];
                        let v = &mut vs.typed_mut::<T>()[range(v_t)];
                        match max_t {
                            Some(x) => x.with_cpu_mut(op, |xs, _| {
                                adam_step(param, grad, m, v, Some(&mut xs.typed_mut::<T>()[range(x)]), h)
                            }),
                            None => adam_step(param, grad, m, v, None, h),
                        }
                    }, else unreachable!("parameters are floats"))
                })
            })
        })
    });
}

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
pub struct AdamW(Adam);

impl AdamW {
    /// AdamW over `params` (duplicates are updated once); `weight_decay` defaults to 0.01.
    ///
    /// # Panics
    /// As [`Adam::new`].
    #[track_caller]
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Self {
        AdamW(Adam::with_decay_mode("AdamW", params, config, true))
    }

    /// The options.
    pub fn config(&self) -> &AdamConfig {
        self.0.config()
    }

    /// The state of parameter `i`, once it has taken a step.
    pub fn state(&self, i: usize) -> Option<&AdamState> {
        self.0.state(i)
    }
}

impl Optimizer for AdamW {
    fn step(&mut self) {
        self.0.step()
    }
    fn params(&self) -> &[Tensor] {
        self.0.params()
    }
    fn lr(&self) -> f64 {
        self.0.lr()
    }
    fn set_lr(&mut self, lr: f64) {
        self.0.set_lr(lr)
    }
}

impl std::fmt::Debug for Adam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.name())
            .field("params", &self.params.len())
            .field("config", &self.config)
            .finish()
    }
}
