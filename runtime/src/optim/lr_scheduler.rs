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
        /// `cycle_momentum`: `Some((base_momentum, max_momentum))` moves the optimizer's
        /// momentum (Adam's beta1) against the rate, from max down to base while the rate
        /// rises and back (PyTorch's default is on, with (0.85, 0.95)).
        momentum: Option<(f64, f64)>,
    },
    /// `CyclicLR`: between the initial rate and `max_lr`, up over `step_size_up` steps
    /// and down over `step_size_down` (default: as many), the amplitude kept
    /// (`Triangular`), halved each cycle (`Triangular2`) or decayed by `gamma` per step
    /// (`ExpRange`).
    Cyclic {
        /// The peak rate.
        max_lr: f64,
        /// Steps of the rising part.
        step_size_up: u64,
        /// Steps of the falling part (`None`: `step_size_up`).
        step_size_down: Option<u64>,
        /// How the amplitude changes.
        mode: CyclicMode,
        /// `cycle_momentum`: `Some((base_momentum, max_momentum))` moves the momentum
        /// against the rate (PyTorch's default is on, with (0.8, 0.9)).
        momentum: Option<(f64, f64)>,
    },
    /// `SequentialLR`: `schedules[i]` from `milestones[i - 1]` on, each restarted at its
    /// milestone (epoch `t - milestones[i - 1]`) from the initial rate.
    Sequential {
        /// One more schedule than milestones.
        schedules: Vec<Schedule>,
        /// Increasing epochs at which the next schedule takes over.
        milestones: Vec<u64>,
    },
    /// `ChainedScheduler`: every schedule at once, their factors multiplied
    /// (`lr * prod(schedule_i(t) / lr)`), as stepping multiplicative schedules in
    /// sequence does.
    Chained(Vec<Schedule>),
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
                ..
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
            Schedule::Cyclic {
                max_lr,
                step_size_up,
                step_size_down,
                mode,
                ..
            } => base + (max_lr - base) * cyclic_scale(*step_size_up, *step_size_down, mode, t),
            Schedule::Sequential {
                schedules,
                milestones,
            } => {
                let (i, local) = segment(milestones, t);
                schedules[i].lr_at(base, local)
            }
            Schedule::Chained(schedules) => schedules
                .iter()
                .fold(base, |lr, s| lr * s.lr_at(base, t) / base),
        }
    }

    /// The momentum at epoch `t`, for schedules that cycle it.
    ///
    /// ```
    /// use ferrograd_runtime::optim::lr_scheduler::Schedule;
    /// use ferrograd_runtime::optim::lr_scheduler::CyclicMode;
    /// let s = Schedule::Cyclic { max_lr: 1.0, step_size_up: 2, step_size_down: None,
    ///     mode: CyclicMode::Triangular, momentum: Some((0.8, 0.9)) };
    /// assert_eq!(s.momentum_at(0), Some(0.9)); // rate at its lowest, momentum at its highest
    /// assert!((s.momentum_at(2).unwrap() - 0.8).abs() < 1e-12);
    /// ```
    pub fn momentum_at(&self, t: u64) -> Option<f64> {
        let tf = t as f64;
        match self {
            Schedule::OneCycle {
                total_steps,
                pct_start,
                momentum: Some((base_m, max_m)),
                ..
            } => {
                let peak = pct_start * *total_steps as f64 - 1.0;
                let last = *total_steps as f64 - 1.0;
                let anneal = |start: f64, end: f64, pct: f64| {
                    end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0)
                };
                Some(if tf <= peak {
                    anneal(*max_m, *base_m, tf / peak)
                } else {
                    anneal(*base_m, *max_m, (tf - peak) / (last - peak))
                })
            }
            Schedule::Cyclic {
                step_size_up,
                step_size_down,
                mode,
                momentum: Some((base_m, max_m)),
                ..
            } => Some(
                max_m - (max_m - base_m) * cyclic_scale(*step_size_up, *step_size_down, mode, t),
            ),
            Schedule::Sequential {
                schedules,
                milestones,
            } => {
                let (i, local) = segment(milestones, t);
                schedules[i].momentum_at(local)
            }
            Schedule::Chained(schedules) => schedules.iter().find_map(|s| s.momentum_at(t)),
            _ => None,
        }
    }
}

/// SequentialLR's schedule at epoch `t` and the epoch within it.
fn segment(milestones: &[u64], t: u64) -> (usize, u64) {
    let i = milestones.iter().filter(|&&m| m <= t).count();
    let start = if i == 0 { 0 } else { milestones[i - 1] };
    (i, t - start)
}

/// The amplitude change of [`Schedule::Cyclic`] (`CyclicLR`'s `mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CyclicMode {
    /// The same amplitude every cycle.
    Triangular,
    /// The amplitude halves each cycle.
    Triangular2,
    /// The amplitude decays by `gamma` every step.
    ExpRange {
        /// The decay per step.
        gamma: f64,
    },
}

/// CyclicLR's fraction of the amplitude at step `t`: the triangular wave (0 → 1 over
/// `up` steps, back over `down`) times the mode's scale.
fn cyclic_scale(up: u64, down: Option<u64>, mode: &CyclicMode, t: u64) -> f64 {
    let (up, down) = (up as f64, down.unwrap_or(up) as f64);
    let total = up + down;
    let ratio = up / total;
    let tf = t as f64;
    let cycle = (1.0 + tf / total).floor();
    let x = 1.0 + tf / total - cycle;
    let wave = if x <= ratio {
        x / ratio
    } else {
        (x - 1.0) / (ratio - 1.0)
    };
    let scale = match mode {
        CyclicMode::Triangular => 1.0,
        CyclicMode::Triangular2 => 1.0 / 2f64.powf(cycle - 1.0),
        CyclicMode::ExpRange { gamma } => gamma.powf(tf),
    };
    wave * scale
}

/// A learning-rate schedule driving an optimizer.
pub trait LrScheduler {
    /// Moves to the next epoch and sets its rates on `optimizer`.
    fn step(&mut self, optimizer: &mut dyn Optimizer);
    /// The rate set last on the first group (`get_last_lr()[0]`).
    fn last_lr(&self) -> f64 {
        self.last_lrs()[0]
    }
    /// The rates set last, per group (`get_last_lr()`).
    fn last_lrs(&self) -> Vec<f64>;
    /// The schedule's state (`last_epoch`, the initial rates, ...), by name.
    fn state_dict(&self) -> BTreeMap<String, f64>;
    /// Restores a state saved by [`state_dict`](Self::state_dict).
    fn load_state_dict(&mut self, state: &BTreeMap<String, f64>);
}

/// A [`Schedule`] applied to every parameter group of an optimizer, each from its own
/// initial rate (`base_lrs`).
pub struct Scheduler {
    schedule: Schedule,
    base_lrs: Vec<f64>,
    last_epoch: u64,
    last_lrs: Vec<f64>,
}

impl Scheduler {
    /// Starts `schedule` from `optimizer`'s current rates and sets epoch 0's rates (and
    /// momentum, for schedules that cycle it).
    pub fn new(optimizer: &mut dyn Optimizer, schedule: Schedule) -> Self {
        let base_lrs: Vec<f64> = (0..optimizer.num_groups())
            .map(|g| optimizer.group_lr(g))
            .collect();
        let mut s = Scheduler {
            schedule,
            base_lrs,
            last_epoch: 0,
            last_lrs: Vec::new(),
        };
        s.apply(optimizer);
        s
    }

    /// The current epoch (`last_epoch`).
    pub fn last_epoch(&self) -> u64 {
        self.last_epoch
    }

    fn apply(&mut self, optimizer: &mut dyn Optimizer) {
        let t = self.last_epoch;
        self.last_lrs = self
            .base_lrs
            .iter()
            .map(|&b| self.schedule.lr_at(b, t))
            .collect();
        let momentum = self.schedule.momentum_at(t);
        for (g, &lr) in self.last_lrs.iter().enumerate() {
            optimizer.set_group_lr(g, lr);
            if let Some(m) = momentum {
                optimizer.set_group_momentum(g, m);
            }
        }
    }
}

impl LrScheduler for Scheduler {
    fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.last_epoch += 1;
        self.apply(optimizer);
    }
    fn last_lrs(&self) -> Vec<f64> {
        self.last_lrs.clone()
    }
    fn state_dict(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::from([("last_epoch".to_string(), self.last_epoch as f64)]);
        for (i, (b, l)) in self.base_lrs.iter().zip(&self.last_lrs).enumerate() {
            m.insert(format!("base_lrs.{i}"), *b);
            m.insert(format!("last_lrs.{i}"), *l);
        }
        m
    }
    fn load_state_dict(&mut self, state: &BTreeMap<String, f64>) {
        if let Some(&v) = state.get("last_epoch") {
            self.last_epoch = v as u64;
        }
        for (i, b) in self.base_lrs.iter_mut().enumerate() {
            if let Some(&v) = state.get(&format!("base_lrs.{i}")) {
                *b = v;
            }
        }
        for (i, l) in self.last_lrs.iter_mut().enumerate() {
            if let Some(&v) = state.get(&format!("last_lrs.{i}")) {
                *l = v;
            }
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
            for g in 0..optimizer.num_groups() {
                let old = optimizer.group_lr(g);
                let new = (old * self.factor).max(self.min_lr);
                if old - new > self.eps {
                    optimizer.set_group_lr(g, new);
                }
            }
            self.cooldown_left = self.cooldown;
            self.bad_epochs = 0;
        }
    }

    /// The plateau's progress (`best`, `num_bad_epochs`, `cooldown_counter`), for a
    /// checkpoint.
    pub fn state_dict(&self) -> BTreeMap<String, f64> {
        BTreeMap::from([
            ("best".to_string(), self.best),
            ("num_bad_epochs".to_string(), self.bad_epochs as f64),
            ("cooldown_counter".to_string(), self.cooldown_left as f64),
        ])
    }

    /// Restores [`ReduceLROnPlateau::state_dict`].
    pub fn load_state_dict(&mut self, state: &BTreeMap<String, f64>) {
        if let Some(&v) = state.get("best") {
            self.best = v;
        }
        if let Some(&v) = state.get("num_bad_epochs") {
            self.bad_epochs = v as u64;
        }
        if let Some(&v) = state.get("cooldown_counter") {
            self.cooldown_left = v as u64;
        }
    }
}
