//! Learning-rate schedules (`torch.optim.lr_scheduler`): each computes the learning rate
//! of epoch (or step) `t` from the optimizer's learning rate when the schedule was made,
//! and sets it on the optimizer. As in PyTorch, making a schedule sets epoch 0's rate, and
//! each [`LrScheduler::step`] (after `optimizer.step()`) moves to the next.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::optim::{Optimizer, Sgd, SgdConfig};
//! use ferrograd_runtime::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
//! let w = Tensor::zeros(&[2], DType::F32, &Device::Cpu).requires_grad(true);
//! let mut opt = Sgd::new(vec![w], SgdConfig::new(0.1));
//! let mut sched = Scheduler::new(&mut opt, Schedule::Step { step_size: 2, gamma: 0.5 });
//! let mut lrs = vec![opt.lr()];
//! for _ in 0..4 {
//!     sched.step(&mut opt);
//!     lrs.push(opt.lr());
//! }
//! assert_eq!(lrs, vec![0.1, 0.1, 0.05, 0.05, 0.025]);
//! ```

use super::Optimizer;
use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::sync::Arc;

/// How the rate of epoch `t` follows from the initial rate (closed forms of PyTorch's
/// schedulers, with their argument names and defaults in the docs).
#[derive(Clone)]
pub enum Schedule {
    /// `StepLR`: `lr * gamma^(t / step_size)` (gamma 0.1 in PyTorch).
    Step {
        /// Epochs per decay.
        step_size: u64,
        /// Decay factor.
        gamma: f64,
    },
    /// `MultiStepLR`: `lr * gamma^(number of milestones <= t)`.
    MultiStep {
        /// Increasing epochs at which to decay.
        milestones: Vec<u64>,
        /// Decay factor.
        gamma: f64,
    },
    /// `ExponentialLR`: `lr * gamma^t`.
    Exponential {
        /// Decay factor per epoch.
        gamma: f64,
    },
    /// `CosineAnnealingLR`: `eta_min + (lr - eta_min) (1 + cos(pi t / t_max)) / 2`.
    CosineAnnealing {
        /// Half a period.
        t_max: u64,
        /// The floor.
        eta_min: f64,
    },
    /// `CosineAnnealingWarmRestarts`: cosine annealing restarted after `t_0` epochs, each
    /// period `t_mult` times the last.
    CosineAnnealingWarmRestarts {
        /// The first period.
        t_0: u64,
        /// Growth of the period (an integer >= 1).
        t_mult: u64,
        /// The floor.
        eta_min: f64,
    },
    /// `LinearLR`: the factor moves linearly from `start_factor` to `end_factor` over
    /// `total_iters` (defaults 1/3, 1, 5).
    Linear {
        /// Factor at epoch 0.
        start_factor: f64,
        /// Factor from `total_iters` on.
        end_factor: f64,
        /// Epochs of the ramp.
        total_iters: u64,
    },
    /// `ConstantLR`: `lr * factor` until `total_iters`, then `lr` (defaults 1/3, 5).
    Constant {
        /// The factor.
        factor: f64,
        /// Epochs it applies.
        total_iters: u64,
    },
    /// `PolynomialLR`: `lr * (1 - min(t, total_iters) / total_iters)^power` (defaults 5, 1).
    Polynomial {
        /// Epochs to zero.
        total_iters: u64,
        /// The exponent.
        power: f64,
    },
    /// `LambdaLR`: `lr * f(t)`.
    Lambda(Arc<dyn Fn(u64) -> f64 + Send + Sync>),
    /// `OneCycleLR` (cosine annealing, two phases): from `max_lr / div_factor` up to
    /// `max_lr` over `pct_start` of `total_steps`, then down to that over
    /// `final_div_factor` (defaults 0.3, 25, 1e4). Ignores the optimizer's initial rate.
    OneCycle {
        /// The peak rate.
        max_lr: f64,
        /// Steps in the cycle.
        total_steps: u64,
        /// Fraction of the steps spent rising.
        pct_start: f64,
        /// `initial = max_lr / div_factor`.
        div_factor: f64,
        /// `final = initial / final_div_factor`.
        final_div_factor: f64,
    },
    /// `CyclicLR` (`triangular`): between the initial rate and `max_lr`, up over
    /// `step_size_up` steps and down over as many.
    CyclicTriangular {
        /// The peak rate.
        max_lr: f64,
        /// Steps of the rising half.
        step_size_up: u64,
    },
}

impl Schedule {
    /// The rate at epoch `t` for initial rate `base`.
    pub fn lr_at(&self, base: f64, t: u64) -> f64 {
        let tf = t as f64;
        match self {
            Schedule::Step { step_size, gamma } => {
                base * gamma.powi((t / step_size.max(&1)) as i32)
            }
            Schedule::MultiStep { milestones, gamma } => {
                base * gamma.powi(milestones.iter().filter(|&&m| m <= t).count() as i32)
            }
            Schedule::Exponential { gamma } => base * gamma.powf(tf),
            Schedule::CosineAnnealing { t_max, eta_min } => {
                eta_min + (base - eta_min) * (1.0 + (PI * tf / *t_max as f64).cos()) / 2.0
            }
            Schedule::CosineAnnealingWarmRestarts {
                t_0,
                t_mult,
                eta_min,
            } => {
                let (t_0, t_mult) = (*t_0 as f64, (*t_mult).max(1) as f64);
                let (t_cur, t_i) = if t_mult == 1.0 {
                    (tf % t_0, t_0)
                } else {
                    let n = ((tf / t_0 * (t_mult - 1.0) + 1.0).ln() / t_mult.ln()).floor();
                    let t_cur = tf - t_0 * (t_mult.powf(n) - 1.0) / (t_mult - 1.0);
                    (t_cur, t_0 * t_mult.powf(n))
                };
                eta_min + (base - eta_min) * (1.0 + (PI * t_cur / t_i).cos()) / 2.0
            }
            Schedule::Linear {
                start_factor,
                end_factor,
                total_iters,
            } => {
                let progress = (t.min(*total_iters) as f64) / *total_iters as f64;
                base * (start_factor + (end_factor - start_factor) * progress)
            }
            Schedule::Constant {
                factor,
                total_iters,
            } => {
                if t < *total_iters {
                    base * factor
                } else {
                    base
                }
            }
            Schedule::Polynomial { total_iters, power } => {
                base * (1.0 - t.min(*total_iters) as f64 / *total_iters as f64).powf(*power)
            }
            Schedule::Lambda(f) => base * f(t),
            Schedule::OneCycle {
                max_lr,
                total_steps,
                pct_start,
                div_factor,
                final_div_factor,
            } => {
                let initial = max_lr / div_factor;
                let min_lr = initial / final_div_factor;
                let peak = pct_start * *total_steps as f64 - 1.0;
                let last = *total_steps as f64 - 1.0;
                let anneal = |start: f64, end: f64, pct: f64| {
                    end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0)
                };
                if tf <= peak {
                    anneal(initial, *max_lr, tf / peak)
                } else {
                    anneal(*max_lr, min_lr, (tf - peak) / (last - peak))
                }
            }
            Schedule::CyclicTriangular {
                max_lr,
                step_size_up,
            } => {
                let total = 2.0 * *step_size_up as f64;
                let cycle = (1.0 + tf / total).floor();
                let x = 1.0 + tf / total - cycle;
                let scale = if x <= 0.5 {
                    x / 0.5
                } else {
                    (x - 1.0) / (0.5 - 1.0)
                };
                base + (max_lr - base) * scale
            }
        }
    }
}

/// A learning-rate schedule driving an optimizer.
pub trait LrScheduler {
    /// Moves to the next epoch and sets its rate on `optimizer`.
    fn step(&mut self, optimizer: &mut dyn Optimizer);
    /// The rate set last (`get_last_lr()`).
    fn last_lr(&self) -> f64;
    /// The schedule's state (`last_epoch`, the initial rate, ...), by name.
    fn state_dict(&self) -> BTreeMap<String, f64>;
    /// Restores a state saved by [`state_dict`](Self::state_dict).
    fn load_state_dict(&mut self, state: &BTreeMap<String, f64>);
}

/// A [`Schedule`] applied to an optimizer.
pub struct Scheduler {
    schedule: Schedule,
    base_lr: f64,
    last_epoch: u64,
    last_lr: f64,
}

impl Scheduler {
    /// Starts `schedule` from `optimizer`'s current rate and sets epoch 0's.
    pub fn new(optimizer: &mut dyn Optimizer, schedule: Schedule) -> Self {
        let base_lr = optimizer.lr();
        let last_lr = schedule.lr_at(base_lr, 0);
        optimizer.set_lr(last_lr);
        Scheduler {
            schedule,
            base_lr,
            last_epoch: 0,
            last_lr,
        }
    }

    /// The current epoch (`last_epoch`).
    pub fn last_epoch(&self) -> u64 {
        self.last_epoch
    }
}

impl LrScheduler for Scheduler {
    fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.last_epoch += 1;
        self.last_lr = self.schedule.lr_at(self.base_lr, self.last_epoch);
        optimizer.set_lr(self.last_lr);
    }
    fn last_lr(&self) -> f64 {
        self.last_lr
    }
    fn state_dict(&self) -> BTreeMap<String, f64> {
        BTreeMap::from([
            ("base_lr".to_string(), self.base_lr),
            ("last_epoch".to_string(), self.last_epoch as f64),
            ("last_lr".to_string(), self.last_lr),
        ])
    }
    fn load_state_dict(&mut self, state: &BTreeMap<String, f64>) {
        if let Some(&v) = state.get("base_lr") {
            self.base_lr = v;
        }
        if let Some(&v) = state.get("last_epoch") {
            self.last_epoch = v as u64;
        }
        if let Some(&v) = state.get("last_lr") {
            self.last_lr = v;
        }
    }
}

/// `ReduceLROnPlateau` (mode `min`, relative threshold): multiplies the rate by `factor`
/// once the metric has not improved on its best by `threshold` (relative) for more than
/// `patience` epochs, then waits `cooldown` epochs; never below `min_lr`, and changes
/// smaller than `eps` are skipped (defaults 0.1, 10, 1e-4, 0, 0, 1e-8).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::{Optimizer, Sgd, SgdConfig};
/// use ferrograd_runtime::optim::lr_scheduler::ReduceLROnPlateau;
/// let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
/// let mut opt = Sgd::new(vec![w], SgdConfig::new(1.0));
/// let mut plateau = ReduceLROnPlateau::new(0.5, 1);
/// for loss in [1.0, 0.9, 0.9, 0.9, 0.9] {
///     plateau.step(&mut opt, loss);
/// }
/// assert_eq!(opt.lr(), 0.5);
/// ```
#[derive(Clone, Debug)]
pub struct ReduceLROnPlateau {
    /// The factor applied on a plateau.
    pub factor: f64,
    /// Epochs without improvement tolerated.
    pub patience: u64,
    /// Relative improvement needed.
    pub threshold: f64,
    /// Epochs to wait after a reduction.
    pub cooldown: u64,
    /// The floor.
    pub min_lr: f64,
    /// Smallest change applied.
    pub eps: f64,
    best: f64,
    bad_epochs: u64,
    cooldown_left: u64,
}

impl ReduceLROnPlateau {
    /// `factor` and `patience`, PyTorch's defaults otherwise.
    pub fn new(factor: f64, patience: u64) -> Self {
        ReduceLROnPlateau {
            factor,
            patience,
            threshold: 1e-4,
            cooldown: 0,
            min_lr: 0.0,
            eps: 1e-8,
            best: f64::INFINITY,
            bad_epochs: 0,
            cooldown_left: 0,
        }
    }

    /// Records this epoch's `metric` (lower is better) and reduces the rate on a plateau.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer, metric: f64) {
        if metric < self.best * (1.0 - self.threshold) {
            self.best = metric;
            self.bad_epochs = 0;
        } else {
            self.bad_epochs += 1;
        }
        if self.cooldown_left > 0 {
            self.cooldown_left -= 1;
            self.bad_epochs = 0;
        }
        if self.bad_epochs > self.patience {
            let old = optimizer.lr();
            let new = (old * self.factor).max(self.min_lr);
            if old - new > self.eps {
                optimizer.set_lr(new);
            }
            self.cooldown_left = self.cooldown;
            self.bad_epochs = 0;
        }
    }
}
