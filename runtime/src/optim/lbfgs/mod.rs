//! L-BFGS (`torch.optim.LBFGS`): quasi-Newton steps from a limited history of gradient
//! differences, with an optional strong-Wolfe line search. It re-evaluates the loss, so
//! it steps through [`Optimizer::step_with`] and a closure.
//!
//! The direction algebra (dot products over all parameters at once) runs on the host in
//! f64 over the flattened gradient, as PyTorch's synchronises on every `.item()` of it;
//! the parameters are updated in place on their devices.

use super::state::{GroupRecord, Hyper, OptimError, OptimizerState};
use super::{Optimizer, check_hyper, unique_params};
use crate::autograd::no_grad;
use crate::{DType, Tensor};
use std::collections::{BTreeMap, VecDeque};

mod line_search;

use line_search::{dot, max_abs};

/// The line search of [`Lbfgs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LineSearch {
    /// A fixed step of `lr` (`line_search_fn=None`).
    #[default]
    None,
    /// A line search satisfying the strong Wolfe conditions (`"strong_wolfe"`).
    StrongWolfe,
}

/// Options of [`Lbfgs`] (`torch.optim.LBFGS`'s defaults).
///
/// ```
/// use ferrograd_runtime::optim::{LbfgsConfig, LineSearch};
/// let c = LbfgsConfig::default().line_search(LineSearch::StrongWolfe);
/// assert_eq!((c.lr, c.max_iter, c.history_size), (1.0, 20, 100));
/// assert_eq!(c.max_eval(), 25); // max_iter * 5 / 4 unless set
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LbfgsConfig {
    /// Learning rate (the step, or the line search's first trial step).
    pub lr: f64,
    /// Iterations per `step`.
    pub max_iter: usize,
    /// Loss evaluations per `step` (default `max_iter * 5 / 4`).
    pub max_eval: Option<usize>,
    /// Stop when the largest gradient magnitude is at most this.
    pub tolerance_grad: f64,
    /// Stop when the step or the loss changes by less than this.
    pub tolerance_change: f64,
    /// Gradient differences kept.
    pub history_size: usize,
    /// The line search.
    pub line_search: LineSearch,
    /// Maximise instead.
    pub maximize: bool,
}

impl Default for LbfgsConfig {
    fn default() -> Self {
        LbfgsConfig {
            lr: 1.0,
            max_iter: 20,
            max_eval: None,
            tolerance_grad: 1e-7,
            tolerance_change: 1e-9,
            history_size: 100,
            line_search: LineSearch::None,
            maximize: false,
        }
    }
}

impl LbfgsConfig {
    setters! {
        /// Sets the learning rate.
        lr: f64;
        /// Sets the iterations per step.
        max_iter: usize;
        /// Sets the gradient tolerance.
        tolerance_grad: f64;
        /// Sets the change tolerance.
        tolerance_change: f64;
        /// Sets the history size.
        history_size: usize;
        /// Sets the line search.
        line_search: LineSearch;
        /// Maximises instead of minimising.
        maximize: bool;
    }

    /// Sets the evaluations per step.
    pub fn max_eval_per_step(mut self, max_eval: usize) -> Self {
        self.max_eval = Some(max_eval);
        self
    }

    /// The evaluations per step in effect.
    pub fn max_eval(&self) -> usize {
        self.max_eval.unwrap_or(self.max_iter * 5 / 4)
    }
}

/// The state L-BFGS carries between steps.
#[derive(Clone, Debug, Default)]
struct History {
    func_evals: u64,
    n_iter: u64,
    d: Vec<f64>,
    t: f64,
    old_dirs: VecDeque<Vec<f64>>,
    old_stps: VecDeque<Vec<f64>>,
    ro: VecDeque<f64>,
    h_diag: f64,
    prev_flat_grad: Option<Vec<f64>>,
    prev_loss: f64,
}

/// L-BFGS (`torch.optim.LBFGS`), one parameter group; step it with
/// [`Optimizer::step_with`].
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::{Lbfgs, LbfgsConfig, LineSearch, Optimizer};
/// // The Rosenbrock function, minimum at (1, 1).
/// let x = Tensor::from_vec(vec![-1.5f64, 2.0], &[2]).requires_grad(true);
/// let mut opt = Lbfgs::new(vec![x.clone()], LbfgsConfig::default().line_search(LineSearch::StrongWolfe));
/// for _ in 0..10 {
///     opt.step_with(&mut || {
///         x.zero_grad();
///         let (a, b) = (x.narrow(0, 0, 1), x.narrow(0, 1, 1));
///         let loss = ((1.0 - &a).pow_scalar(2.0) + (&b - &a.pow_scalar(2.0)).pow_scalar(2.0) * 100.0).sum_all();
///         loss.backward();
///         loss.item::<f64>()
///     });
/// }
/// let v = x.to_vec::<f64>();
/// assert!((v[0] - 1.0).abs() < 1e-5 && (v[1] - 1.0).abs() < 1e-5, "{v:?}");
/// ```
pub struct Lbfgs {
    params: Vec<Tensor>,
    names: Vec<String>,
    config: LbfgsConfig,
    state: History,
}

impl Lbfgs {
    /// L-BFGS over `params` (state named by position).
    ///
    /// # Panics
    /// On a negative learning rate and on parameters that are not floating-point leaves
    /// requiring grad.
    #[track_caller]
    pub fn new(params: Vec<Tensor>, config: LbfgsConfig) -> Self {
        let params = unique_params("LBFGS", params);
        let names = (0..params.len()).map(|i| i.to_string()).collect();
        Self::build(params, names, config)
    }

    /// L-BFGS over named parameters (`module.named_parameters()`).
    ///
    /// # Panics
    /// As [`Lbfgs::new`].
    #[track_caller]
    pub fn named(params: impl IntoIterator<Item = (String, Tensor)>, config: LbfgsConfig) -> Self {
        let (names, params): (Vec<String>, Vec<Tensor>) = params.into_iter().unzip();
        let kept = unique_params("LBFGS", params.clone());
        let names = kept
            .iter()
            .map(|k| {
                let i = params
                    .iter()
                    .position(|p| p.shares_storage(k) && p.layout() == k.layout())
                    .expect("kept");
                names[i].clone()
            })
            .collect();
        Self::build(kept, names, config)
    }

    #[track_caller]
    fn build(params: Vec<Tensor>, names: Vec<String>, config: LbfgsConfig) -> Self {
        check_hyper("LBFGS", "learning rate", config.lr, config.lr >= 0.0);
        Lbfgs {
            params,
            names,
            config,
            state: History::default(),
        }
    }

    /// The options.
    pub fn config(&self) -> &LbfgsConfig {
        &self.config
    }

    /// Loss evaluations so far (`state["func_evals"]`).
    pub fn func_evals(&self) -> u64 {
        self.state.func_evals
    }

    /// Iterations so far (`state["n_iter"]`).
    pub fn n_iter(&self) -> u64 {
        self.state.n_iter
    }

    fn numel(&self) -> usize {
        self.params.iter().map(Tensor::numel).sum()
    }

    fn gather_flat_grad(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.numel());
        for p in &self.params {
            match p.grad() {
                Some(g) => out.extend(g.detach().to_dtype(DType::F64).contiguous().to_vec::<f64>()),
                None => out.extend(std::iter::repeat_n(0.0, p.numel())),
            }
        }
        if self.config.maximize {
            out.iter_mut().for_each(|v| *v = -*v);
        }
        out
    }

    /// `p += step * update` over the flattened parameters.
    fn add_grad(&self, step: f64, update: &[f64]) {
        no_grad(|| {
            let mut offset = 0;
            for p in &self.params {
                let n = p.numel();
                let u: Vec<f64> = update[offset..offset + n]
                    .iter()
                    .map(|v| v * step)
                    .collect();
                let u = Tensor::from_vec(u, p.shape())
                    .to_dtype(p.dtype())
                    .to_device(&p.device())
                    .expect("the parameter's device holds its update");
                p.detach().add_(&u);
                offset += n;
            }
        });
    }

    fn clone_params(&self) -> Vec<Tensor> {
        self.params.iter().map(|p| p.detach().deep_copy()).collect()
    }

    fn set_params(&self, values: &[Tensor]) {
        no_grad(|| {
            for (p, v) in self.params.iter().zip(values) {
                p.detach().copy_(v);
            }
        });
    }

    fn evaluate(&self, closure: &mut dyn FnMut() -> f64) -> f64 {
        let loss = closure();
        if self.config.maximize { -loss } else { loss }
    }

    fn directional_evaluate(
        &self,
        closure: &mut dyn FnMut() -> f64,
        x: &[Tensor],
        t: f64,
        d: &[f64],
    ) -> (f64, Vec<f64>) {
        self.add_grad(t, d);
        let loss = self.evaluate(closure);
        let g = self.gather_flat_grad();
        self.set_params(x);
        (loss, g)
    }
}

impl Optimizer for Lbfgs {
    /// # Panics
    /// Always: L-BFGS re-evaluates the loss, so it needs [`Optimizer::step_with`].
    fn step(&mut self) {
        panic!("LBFGS.step: L-BFGS re-evaluates the loss; call step_with(closure)")
    }

    fn step_with(&mut self, closure: &mut dyn FnMut() -> f64) -> f64 {
        if self.params.is_empty() {
            return closure();
        }
        let c = self.config.clone();
        let max_eval = c.max_eval();
        let orig_loss = closure();
        let mut loss = if c.maximize { -orig_loss } else { orig_loss };
        let mut current_evals = 1;
        self.state.func_evals += 1;
        let mut flat_grad = self.gather_flat_grad();
        if max_abs(&flat_grad) <= c.tolerance_grad {
            return orig_loss;
        }
        let mut n_iter = 0;
        while n_iter < c.max_iter {
            n_iter += 1;
            self.state.n_iter += 1;
            let s = &mut self.state;
            if s.n_iter == 1 {
                s.d = flat_grad.iter().map(|v| -v).collect();
                s.old_dirs.clear();
                s.old_stps.clear();
                s.ro.clear();
                s.h_diag = 1.0;
            } else {
                let prev = s
                    .prev_flat_grad
                    .as_ref()
                    .expect("set after the first iteration");
                let y: Vec<f64> = flat_grad.iter().zip(prev).map(|(a, b)| a - b).collect();
                let st: Vec<f64> = s.d.iter().map(|v| v * s.t).collect();
                let ys = dot(&y, &st);
                if ys > 1e-10 {
                    if s.old_dirs.len() == c.history_size {
                        s.old_dirs.pop_front();
                        s.old_stps.pop_front();
                        s.ro.pop_front();
                    }
                    s.h_diag = ys / dot(&y, &y);
                    s.old_dirs.push_back(y);
                    s.old_stps.push_back(st);
                    s.ro.push_back(1.0 / ys);
                }
                // The two-loop recursion: d = -H g.
                let k = s.old_dirs.len();
                let mut al = vec![0.0; k];
                let mut q: Vec<f64> = flat_grad.iter().map(|v| -v).collect();
                for i in (0..k).rev() {
                    al[i] = dot(&s.old_stps[i], &q) * s.ro[i];
                    q.iter_mut()
                        .zip(&s.old_dirs[i])
                        .for_each(|(qv, dv)| *qv -= al[i] * dv);
                }
                let mut r: Vec<f64> = q.iter().map(|v| v * s.h_diag).collect();
                for (i, al_i) in al.iter().enumerate() {
                    let be_i = dot(&s.old_dirs[i], &r) * s.ro[i];
                    r.iter_mut()
                        .zip(&s.old_stps[i])
                        .for_each(|(rv, sv)| *rv += (al_i - be_i) * sv);
                }
                s.d = r;
            }
            s.prev_flat_grad = Some(flat_grad.clone());
            s.prev_loss = loss;
            s.t = if s.n_iter == 1 {
                (1.0f64).min(1.0 / flat_grad.iter().map(|v| v.abs()).sum::<f64>()) * c.lr
            } else {
                c.lr
            };
            let gtd = dot(&flat_grad, &s.d);
            if gtd > -c.tolerance_change {
                break;
            }
            let d = s.d.clone();
            let t0 = s.t;
            let mut ls_evals = 0;
            let opt_cond;
            match c.line_search {
                LineSearch::StrongWolfe => {
                    let x = self.clone_params();
                    let (f_new, g_new, t, evals) = self.strong_wolfe(
                        closure,
                        &x,
                        t0,
                        &d,
                        loss,
                        &flat_grad,
                        gtd,
                        max_eval.saturating_sub(current_evals),
                    );
                    loss = f_new;
                    flat_grad = g_new;
                    self.state.t = t;
                    ls_evals = evals;
                    self.add_grad(t, &d);
                    opt_cond = max_abs(&flat_grad) <= c.tolerance_grad;
                }
                LineSearch::None => {
                    self.add_grad(t0, &d);
                    if n_iter != c.max_iter {
                        loss = self.evaluate(closure);
                        flat_grad = self.gather_flat_grad();
                        opt_cond = max_abs(&flat_grad) <= c.tolerance_grad;
                        ls_evals = 1;
                    } else {
                        opt_cond = false;
                    }
                }
            }
            current_evals += ls_evals;
            self.state.func_evals += ls_evals as u64;
            let t = self.state.t;
            if n_iter == c.max_iter
                || current_evals >= max_eval
                || opt_cond
                || max_abs(&d) * t.abs() <= c.tolerance_change
                || (loss - self.state.prev_loss).abs() < c.tolerance_change
            {
                break;
            }
        }
        orig_loss
    }

    fn params(&self) -> Vec<Tensor> {
        self.params.clone()
    }

    fn num_groups(&self) -> usize {
        1
    }

    fn group_lr(&self, _group: usize) -> f64 {
        self.config.lr
    }

    fn set_group_lr(&mut self, _group: usize, lr: f64) {
        self.config.lr = lr;
    }

    fn state_dict(&self) -> OptimizerState {
        let c = &self.config;
        let mut hyper = BTreeMap::new();
        hyper.insert("lr".into(), Hyper::Float(c.lr));
        hyper.insert("max_iter".into(), Hyper::Float(c.max_iter as f64));
        hyper.insert("max_eval".into(), Hyper::Float(c.max_eval() as f64));
        hyper.insert("tolerance_grad".into(), Hyper::Float(c.tolerance_grad));
        hyper.insert("tolerance_change".into(), Hyper::Float(c.tolerance_change));
        hyper.insert("history_size".into(), Hyper::Float(c.history_size as f64));
        hyper.insert(
            "strong_wolfe".into(),
            Hyper::Bool(c.line_search == LineSearch::StrongWolfe),
        );
        hyper.insert("maximize".into(), Hyper::Bool(c.maximize));
        let mut state = BTreeMap::new();
        let s = &self.state;
        if s.n_iter > 0 {
            let vec1 = |v: &[f64]| Tensor::from_vec(v.to_vec(), &[v.len()]);
            let mat = |rows: &VecDeque<Vec<f64>>| {
                let n = self.numel();
                let flat: Vec<f64> = rows.iter().flatten().copied().collect();
                Tensor::from_vec(flat, &[rows.len(), n])
            };
            let mut e = BTreeMap::new();
            let scalar = |v: f64| Tensor::scalar(v, DType::F64);
            e.insert("func_evals".into(), scalar(s.func_evals as f64));
            e.insert("n_iter".into(), scalar(s.n_iter as f64));
            e.insert("step".into(), scalar(s.n_iter as f64));
            e.insert("t".into(), scalar(s.t));
            e.insert("H_diag".into(), scalar(s.h_diag));
            e.insert("prev_loss".into(), scalar(s.prev_loss));
            e.insert("d".into(), vec1(&s.d));
            if let Some(p) = &s.prev_flat_grad {
                e.insert("prev_flat_grad".into(), vec1(p));
            }
            e.insert("old_dirs".into(), mat(&s.old_dirs));
            e.insert("old_stps".into(), mat(&s.old_stps));
            e.insert("ro".into(), vec1(&s.ro.iter().copied().collect::<Vec<_>>()));
            state.insert(self.names[0].clone(), e);
        }
        OptimizerState {
            state,
            param_groups: vec![GroupRecord {
                hyper,
                params: self.names.clone(),
            }],
        }
    }

    fn load_state_dict(&mut self, dict: &OptimizerState) -> Result<(), OptimError> {
        let [rec] = dict.param_groups.as_slice() else {
            return Err(OptimError::Groups(format!(
                "LBFGS has one parameter group, the state dict {}",
                dict.param_groups.len()
            )));
        };
        if rec.params != self.names {
            return Err(OptimError::Groups(format!(
                "the state dict holds {:?}, this LBFGS {:?}",
                rec.params, self.names
            )));
        }
        let mut c = self.config.clone();
        for (k, v) in &rec.hyper {
            let count = |v: &Hyper| match v {
                Hyper::Float(x) if *x >= 0.0 && x.fract() == 0.0 => Some(*x as usize),
                _ => None,
            };
            let ok = match (k.as_str(), v) {
                ("lr", Hyper::Float(x)) => {
                    c.lr = *x;
                    true
                }
                ("tolerance_grad", Hyper::Float(x)) => {
                    c.tolerance_grad = *x;
                    true
                }
                ("tolerance_change", Hyper::Float(x)) => {
                    c.tolerance_change = *x;
                    true
                }
                ("max_iter", v) => count(v).map(|n| c.max_iter = n).is_some(),
                ("max_eval", v) => count(v).map(|n| c.max_eval = Some(n)).is_some(),
                ("history_size", v) => count(v).map(|n| c.history_size = n).is_some(),
                ("strong_wolfe", Hyper::Bool(b)) => {
                    c.line_search = if *b {
                        LineSearch::StrongWolfe
                    } else {
                        LineSearch::None
                    };
                    true
                }
                ("maximize", Hyper::Bool(b)) => {
                    c.maximize = *b;
                    true
                }
                _ => false,
            };
            if !ok {
                return Err(OptimError::Hyper {
                    group: 0,
                    key: k.clone(),
                    value: v.clone(),
                });
            }
        }
        let mut history = History::default();
        if let Some(name) = dict.state.keys().find(|k| **k != self.names[0]) {
            return Err(OptimError::UnknownParameter(name.clone()));
        }
        if let Some(e) = dict.state.get(&self.names[0]) {
            let n = self.numel();
            let bad = |reason: String| OptimError::State {
                param: self.names[0].clone(),
                reason,
            };
            let get = |k: &str| e.get(k).ok_or_else(|| bad(format!("no {k:?}")));
            let scalar = |k: &str| -> Result<f64, OptimError> {
                let t = get(k)?;
                if t.numel() != 1 {
                    return Err(bad(format!("{k:?} is not a scalar")));
                }
                Ok(t.to_dtype(DType::F64).item::<f64>())
            };
            let vector = |k: &str, len: usize| -> Result<Vec<f64>, OptimError> {
                let t = get(k)?;
                if t.shape() != [len] {
                    return Err(bad(format!("{k:?} has shape {:?}, not [{len}]", t.shape())));
                }
                Ok(t.to_dtype(DType::F64).to_vec::<f64>())
            };
            let rows = |k: &str| -> Result<VecDeque<Vec<f64>>, OptimError> {
                let t = get(k)?;
                if t.dim() != 2 || t.shape()[1] != n {
                    return Err(bad(format!(
                        "{k:?} has shape {:?}, not [k, {n}]",
                        t.shape()
                    )));
                }
                let v = t.to_dtype(DType::F64).to_vec::<f64>();
                Ok(v.chunks(n.max(1)).map(<[f64]>::to_vec).collect())
            };
            let count = |k: &str| -> Result<u64, OptimError> {
                let v = scalar(k)?;
                if v >= 0.0 && v.fract() == 0.0 {
                    Ok(v as u64)
                } else {
                    Err(bad(format!("{k:?} = {v} is not a count")))
                }
            };
            history.func_evals = count("func_evals")?;
            history.n_iter = count("n_iter")?;
            history.t = scalar("t")?;
            history.h_diag = scalar("H_diag")?;
            history.prev_loss = scalar("prev_loss")?;
            history.d = vector("d", n)?;
            history.prev_flat_grad = match e.get("prev_flat_grad") {
                Some(_) => Some(vector("prev_flat_grad", n)?),
                None => None,
            };
            history.old_dirs = rows("old_dirs")?;
            history.old_stps = rows("old_stps")?;
            let k = history.old_dirs.len();
            history.ro = vector("ro", k)?.into();
            if history.old_stps.len() != k {
                return Err(bad("old_dirs and old_stps differ in length".into()));
            }
        }
        self.config = c;
        self.state = history;
        Ok(())
    }
}

impl std::fmt::Debug for Lbfgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LBFGS")
            .field("params", &self.params.len())
            .field("config", &self.config)
            .finish()
    }
}
