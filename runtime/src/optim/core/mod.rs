//! What every fused optimizer shares: parameter groups, per-parameter state, the step
//! loop (one CUDA launch per group, device and dtype, else the fused host update), and
//! the state dict. Each algorithm is a [`Rule`]; the public optimizer types wrap a
//! [`Core`] of their rule (`optimizer_type!`).

use super::cuda::StepSlot;
use super::state::Hyper;
use super::{Groups, gradient_of, unique_params, with_contiguous, zeros_like};
use crate::Tensor;
use crate::autograd::no_grad;
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::fused::optim::StateSlices;
use ferrograd_kernels::{FloatElement, with_float_dtype};

mod state_dict;

/// A group of parameters sharing one set of options (`optimizer.param_groups[i]`), with
/// the names their state is saved under.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::{AdamConfig, AdamW, ParamGroup};
/// let w = Tensor::ones(&[2, 2], DType::F32, &Device::Cpu).requires_grad(true);
/// let b = Tensor::zeros(&[2], DType::F32, &Device::Cpu).requires_grad(true);
/// let base = AdamConfig::default().lr(1e-3);
/// // "No weight decay on biases": two groups with their own options.
/// let opt = AdamW::with_groups(vec![
///     ParamGroup::named([("fc.weight".to_string(), w)], base.clone().weight_decay(0.05)),
///     ParamGroup::named([("fc.bias".to_string(), b)], base.weight_decay(0.0)),
/// ]);
/// assert_eq!(opt.param_groups()[1].names, vec!["fc.bias"]);
/// ```
#[derive(Clone, Debug)]
pub struct ParamGroup<C> {
    /// The parameters.
    pub params: Vec<Tensor>,
    /// Their names in the state dict: the module's `named_parameters` keys, or their
    /// global positions ("0", "1", …, as PyTorch numbers them) when made from bare tensors.
    pub names: Vec<String>,
    /// The group's options.
    pub config: C,
}

impl<C> ParamGroup<C> {
    /// A group of unnamed parameters (named by position when the optimizer takes them).
    pub fn new(params: Vec<Tensor>, config: C) -> Self {
        ParamGroup {
            params,
            names: Vec::new(),
            config,
        }
    }

    /// A group of named parameters, as `module.named_parameters()` gives them: the state
    /// dict is keyed by these names, so a model whose parameters are reordered still loads.
    pub fn named(params: impl IntoIterator<Item = (String, Tensor)>, config: C) -> Self {
        let (names, params) = params.into_iter().unzip();
        ParamGroup {
            params,
            names,
            config,
        }
    }
}

/// The optimizer state of one parameter (`optimizer.state[p]`): its step count, its
/// buffers by name (`exp_avg`, `momentum_buffer`, …) and, for NAdam, `mu_product`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::optim::{Adam, AdamConfig, Optimizer};
/// let w = Tensor::ones(&[3], DType::F32, &Device::Cpu).requires_grad(true);
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig::default());
/// w.set_grad(Some(Tensor::ones(&[3], DType::F32, &Device::Cpu)));
/// opt.step();
/// let s = opt.state(0).unwrap();
/// assert_eq!(s.step, 1);
/// assert_eq!(s.buffer("exp_avg").unwrap().shape(), &[3]);
/// assert!(s.buffer("max_exp_avg_sq").is_none()); // no AMSGrad
/// ```
#[derive(Clone, Debug)]
pub struct ParamState {
    /// Steps this parameter has taken (steps without a gradient do not count).
    pub step: u64,
    names: &'static [&'static str],
    buffers: [Option<Tensor>; 3],
    pub(crate) scalar: Option<(&'static str, f64)>,
}

impl ParamState {
    /// The state buffer called `name`, if this optimizer keeps one under its options.
    pub fn buffer(&self, name: &str) -> Option<&Tensor> {
        let i = self.names.iter().position(|n| *n == name)?;
        self.buffers[i].as_ref()
    }

    /// The named buffers this parameter has.
    pub fn buffers(&self) -> impl Iterator<Item = (&'static str, &Tensor)> {
        self.names
            .iter()
            .zip(&self.buffers)
            .filter_map(|(n, b)| Some((*n, b.as_ref()?)))
    }

    /// A scalar kept beside the buffers (NAdam's `mu_product`), by name.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.scalar.filter(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// The per-parameter scalars of one step and the slot flags (see [`StepSlot`]).
pub(crate) struct StepScalars {
    pub(crate) flags: u64,
    pub(crate) sc: [f64; 4],
}

/// One optimization algorithm: its options, state layout and update.
pub(crate) trait Rule: 'static {
    /// The options of a parameter group.
    type Config: Clone + std::fmt::Debug;
    /// The name PyTorch gives it (error messages).
    const NAME: &'static str;
    /// Names of the (up to three) state buffers, in the kernels' order.
    const BUFFERS: &'static [&'static str];
    /// A scalar state (name and initial value), NAdam's `mu_product`.
    const SCALAR: Option<(&'static str, f64)> = None;

    /// Validates the options (panicking as PyTorch's `ValueError`s) and fills defaults.
    #[track_caller]
    fn prepare(config: &mut Self::Config);
    fn lr(config: &Self::Config) -> f64;
    fn set_lr(config: &mut Self::Config, lr: f64);
    /// The momentum-like option schedules cycle (SGD/RMSprop momentum, Adam's beta1).
    fn momentum(_config: &Self::Config) -> Option<f64> {
        None
    }
    fn set_momentum(_config: &mut Self::Config, _momentum: f64) {}
    /// The options as a state dict's `param_groups` entry holds them (PyTorch's keys).
    fn hypers(config: &Self::Config) -> Vec<(&'static str, Hyper)>;
    /// Sets one option from a state dict; false when the key or its type is not this
    /// optimizer's.
    fn set_hyper(config: &mut Self::Config, key: &str, value: &Hyper) -> bool;
    /// Which of [`Rule::BUFFERS`] a parameter keeps under `config`, and their initial value.
    fn buffers(config: &Self::Config) -> [Option<f64>; 3];
    /// Advances `state` by one step (the step count already incremented) and returns
    /// the step's per-parameter scalars.
    fn advance(config: &Self::Config, state: &mut ParamState, first: bool) -> StepScalars;
    /// The fused host update of one contiguous parameter.
    fn cpu<T: FloatElement>(
        config: &Self::Config,
        param: &mut [T],
        grad: &[T],
        states: StateSlices<'_, T>,
        step: &StepScalars,
    );
    /// The multi-tensor CUDA update of `slots` (false: not CUDA, or not possible; the host
    /// update runs instead).
    fn cuda(config: &Self::Config, slots: &[StepSlot<'_>]) -> bool;
}

/// Parameter groups, their state, and the step of rule `R`.
pub(crate) struct Core<R: Rule> {
    pub(crate) groups: Vec<ParamGroup<R::Config>>,
    states: Vec<Vec<Option<ParamState>>>,
}

/// The boolean of a hyper-parameter, for `set_hyper`.
pub(crate) fn set_bool(slot: &mut bool, v: &Hyper) -> bool {
    match v {
        Hyper::Bool(b) => {
            *slot = *b;
            true
        }
        _ => false,
    }
}

/// The number of a hyper-parameter, for `set_hyper`.
pub(crate) fn set_f64(slot: &mut f64, v: &Hyper) -> bool {
    match v {
        Hyper::Float(x) => {
            *slot = *x;
            true
        }
        _ => false,
    }
}

impl<R: Rule> Core<R> {
    #[track_caller]
    pub(crate) fn new(groups: Vec<ParamGroup<R::Config>>) -> Self {
        let mut core = Core {
            groups: Vec::new(),
            states: Vec::new(),
        };
        for g in groups {
            core.add_param_group(g);
        }
        core
    }

    #[track_caller]
    pub(crate) fn add_param_group(&mut self, group: ParamGroup<R::Config>) {
        let ParamGroup {
            params,
            names,
            mut config,
        } = group;
        R::prepare(&mut config);
        let named = !names.is_empty();
        assert!(
            !named || names.len() == params.len(),
            "{}: a parameter group has {} names for {} parameters",
            R::NAME,
            names.len(),
            params.len()
        );
        let keep = unique_params(R::NAME, params.clone());
        let names: Vec<String> = if named {
            keep.iter()
                .map(|k| {
                    let i = params.iter().position(|p| same(p, k)).expect("kept");
                    names[i].clone()
                })
                .collect()
        } else {
            let start: usize = self.groups.iter().map(|g| g.params.len()).sum();
            (start..start + keep.len()).map(|i| i.to_string()).collect()
        };
        for p in &keep {
            assert!(
                !self
                    .groups
                    .iter()
                    .flat_map(|g| &g.params)
                    .any(|q| same(p, q)),
                "{}: some parameters appear in more than one parameter group (shape {:?})",
                R::NAME,
                p.shape()
            );
        }
        for n in &names {
            assert!(
                !self.groups.iter().flat_map(|g| &g.names).any(|m| m == n),
                "{}: the parameter name {n:?} appears twice",
                R::NAME
            );
        }
        self.states.push(vec![None; keep.len()]);
        self.groups.push(ParamGroup {
            params: keep,
            names,
            config,
        });
    }

    pub(crate) fn params(&self) -> Vec<Tensor> {
        self.groups.iter().flat_map(|g| g.params.clone()).collect()
    }

    /// The state of the `i`-th parameter over all groups.
    pub(crate) fn state(&self, i: usize) -> Option<&ParamState> {
        self.states.iter().flatten().nth(i)?.as_ref()
    }

    fn fresh_state(config: &R::Config, p: &Tensor) -> ParamState {
        let init = R::buffers(config);
        ParamState {
            step: 0,
            names: R::BUFFERS,
            buffers: std::array::from_fn(|i| {
                init[i].map(|v| {
                    if v == 0.0 {
                        zeros_like(p)
                    } else {
                        Tensor::full(p.shape(), v, p.dtype(), &p.device())
                    }
                })
            }),
            scalar: R::SCALAR,
        }
    }

    pub(crate) fn step(&mut self) {
        let op = format!("{}.step", R::NAME);
        no_grad(|| {
            for (group, states) in self.groups.iter().zip(&mut self.states) {
                let c = &group.config;
                let mut work = Vec::new();
                for (p, state) in group.params.iter().zip(states.iter_mut()) {
                    let Some(g) = gradient_of(&op, p) else {
                        continue;
                    };
                    let mut first = state.is_none();
                    let s = state.get_or_insert_with(|| Self::fresh_state(c, p));
                    // A buffer the options now ask for (momentum switched on by a
                    // schedule, say) starts here, as PyTorch's lazily created state does.
                    let wanted = R::buffers(c);
                    for (buf, init) in s.buffers.iter_mut().zip(wanted) {
                        if let (None, Some(v)) = (&buf, init) {
                            *buf = Some(Tensor::full(p.shape(), v, p.dtype(), &p.device()));
                            first = true;
                        }
                    }
                    s.step += 1;
                    let scalars = R::advance(c, s, first);
                    work.push((p, g, s.buffers.clone(), scalars));
                }
                let mut by_device = Groups::default();
                for (p, g, bufs, scalars) in &work {
                    if p.layout().contiguous_range().is_some() {
                        by_device.push(slot(p, g, bufs, scalars));
                    } else {
                        with_contiguous(p, |w| run_cpu::<R>(&op, c, &slot(w, g, bufs, scalars)));
                    }
                }
                for slots in by_device.iter() {
                    if !R::cuda(c, slots) {
                        slots.iter().for_each(|s| run_cpu::<R>(&op, c, s));
                    }
                }
            }
        });
    }
}

fn slot<'a>(
    p: &'a Tensor,
    g: &'a Tensor,
    bufs: &'a [Option<Tensor>; 3],
    scalars: &StepScalars,
) -> StepSlot<'a> {
    StepSlot {
        tensors: [
            Some(p),
            Some(g),
            bufs[0].as_ref(),
            bufs[1].as_ref(),
            bufs[2].as_ref(),
        ],
        flags: scalars.flags,
        sc: scalars.sc,
    }
}

fn same(a: &Tensor, b: &Tensor) -> bool {
    a.shares_storage(b) && a.layout() == b.layout()
}

/// `f` on the host storage of `t`, or on `None`.
fn opt_mut<Out>(
    t: Option<&Tensor>,
    op: &str,
    f: impl FnOnce(Option<&mut CpuStorage>) -> Out,
) -> Out {
    match t {
        Some(t) => t.with_cpu_mut(op, |s, _| f(Some(s))),
        None => f(None),
    }
}

/// The fused host update of one slot (contiguous tensors; device tensors through the
/// host fallback).
fn run_cpu<R: Rule>(op: &str, c: &R::Config, slot: &StepSlot<'_>) {
    let [Some(p), Some(g), a, b, s2] = slot.tensors else {
        unreachable!("a slot holds its parameter and gradient")
    };
    let range = |t: &Tensor| t.layout().contiguous_range().expect("contiguous");
    let scalars = StepScalars {
        flags: slot.flags,
        sc: slot.sc,
    };
    g.with_cpu(op, |gs, _| {
        p.with_cpu_mut(op, |ps, _| {
            opt_mut(a, op, |sa| {
                opt_mut(b, op, |sb| {
                    opt_mut(s2, op, |sc| {
                        with_float_dtype!(ps.dtype(), T => {
                            let states = [
                                sa.map(|s| &mut s.typed_mut::<T>()[range(a.expect("a"))]),
                                sb.map(|s| &mut s.typed_mut::<T>()[range(b.expect("b"))]),
                                sc.map(|s| &mut s.typed_mut::<T>()[range(s2.expect("c"))]),
                            ];
                            R::cpu::<T>(
                                c,
                                &mut ps.typed_mut::<T>()[range(p)],
                                &gs.typed::<T>()[range(g)],
                                states,
                                &scalars,
                            )
                        }, else unreachable!("parameters are floats"))
                    })
                })
            })
        })
    });
}

/// Declares a public optimizer type over `Core<$rule>`.
macro_rules! optimizer_type {
    ($(#[$m:meta])* $name:ident, $rule:ty, $config:ty) => {
        $(#[$m])*
        pub struct $name(pub(crate) $crate::optim::core::Core<$rule>);

        impl $name {
            /// An optimizer over `params` (one group; duplicates are updated once; state
            /// named by position).
            ///
            /// # Panics
            /// On invalid options (PyTorch's `ValueError`s) and on parameters that are
            /// not floating-point leaves requiring grad.
            #[track_caller]
            pub fn new(params: Vec<Tensor>, config: $config) -> Self {
                Self::with_groups(vec![$crate::optim::ParamGroup::new(params, config)])
            }

            /// An optimizer over named parameters (`module.named_parameters()`): its
            /// state dict is keyed by the names.
            ///
            /// # Panics
            /// As [`Self::new`].
            #[track_caller]
            pub fn named(params: impl IntoIterator<Item = (String, Tensor)>, config: $config) -> Self {
                Self::with_groups(vec![$crate::optim::ParamGroup::named(params, config)])
            }

            /// An optimizer over several parameter groups, each with its own options.
            ///
            /// # Panics
            /// As [`Self::new`], and when a parameter is in two groups.
            #[track_caller]
            pub fn with_groups(groups: Vec<$crate::optim::ParamGroup<$config>>) -> Self {
                $name($crate::optim::core::Core::new(groups))
            }

            /// Adds a parameter group (`add_param_group`).
            ///
            /// # Panics
            /// As [`Self::with_groups`].
            #[track_caller]
            pub fn add_param_group(&mut self, group: $crate::optim::ParamGroup<$config>) {
                self.0.add_param_group(group)
            }

            /// The options of the first group.
            pub fn config(&self) -> &$config {
                &self.0.groups[0].config
            }

            /// The parameter groups (`param_groups`).
            pub fn param_groups(&self) -> &[$crate::optim::ParamGroup<$config>] {
                &self.0.groups
            }

            /// The options of group `i`, to change between steps.
            ///
            /// # Panics
            /// If there is no group `i`.
            #[track_caller]
            pub fn group_config_mut(&mut self, i: usize) -> &mut $config {
                let n = self.0.groups.len();
                &mut self.0.groups.get_mut(i).unwrap_or_else(|| panic!("no parameter group {i} of {n}")).config
            }

            /// The state of parameter `i` (counted over all groups), once it has stepped.
            pub fn state(&self, i: usize) -> Option<&$crate::optim::ParamState> {
                self.0.state(i)
            }
        }

        impl $crate::optim::Optimizer for $name {
            fn step(&mut self) {
                self.0.step()
            }
            fn params(&self) -> Vec<Tensor> {
                self.0.params()
            }
            fn num_groups(&self) -> usize {
                self.0.groups.len()
            }
            fn group_lr(&self, group: usize) -> f64 {
                <$rule as $crate::optim::core::Rule>::lr(&self.0.groups[group].config)
            }
            fn set_group_lr(&mut self, group: usize, lr: f64) {
                <$rule as $crate::optim::core::Rule>::set_lr(&mut self.0.groups[group].config, lr)
            }
            fn group_momentum(&self, group: usize) -> Option<f64> {
                <$rule as $crate::optim::core::Rule>::momentum(&self.0.groups[group].config)
            }
            fn set_group_momentum(&mut self, group: usize, momentum: f64) {
                <$rule as $crate::optim::core::Rule>::set_momentum(&mut self.0.groups[group].config, momentum)
            }
            fn state_dict(&self) -> $crate::optim::OptimizerState {
                self.0.state_dict()
            }
            fn load_state_dict(&mut self, state: &$crate::optim::OptimizerState) -> Result<(), $crate::optim::OptimError> {
                self.0.load_state_dict(state)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("params", &self.0.groups.iter().map(|g| g.params.len()).sum::<usize>())
                    .field("groups", &self.0.groups.iter().map(|g| &g.config).collect::<Vec<_>>())
                    .finish()
            }
        }
    };
}
pub(crate) use optimizer_type;
