//! The [`Module`] trait: one traversal of a model's tensors, from which names,
//! parameters, `state_dict`, device and dtype moves, and train/eval all follow.
//!
//! Implement it with `#[derive(Module)]`; containers (`Vec`, `Option`, arrays, `Box`)
//! implement it once here, `Option` adding no path segment.

use crate::autograd::no_grad;
use crate::{DType, Device, Tensor};
use std::collections::BTreeMap;

/// Whether a tensor is trained (a parameter) or only saved (a buffer, such as BatchNorm's
/// running statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// Trained: returned by [`Module::parameters`].
    Parameter,
    /// Saved in the state dict but not trained.
    Buffer,
}

/// A model's tensors by dotted name (`layers.0.weight`), as PyTorch's `state_dict()`.
pub type StateDict = BTreeMap<String, Tensor>;

/// The dotted path of a child: `prefix.name`, or `name` at the root.
///
/// ```
/// use ferrograd_runtime::nn::join_path;
/// assert_eq!(join_path("", "fc1"), "fc1");
/// assert_eq!(join_path("blocks.0", "attn"), "blocks.0.attn");
/// ```
pub fn join_path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The `Module` traversal of named children, as `network!` generates it (one call per
/// method instead of one per field keeps generated code small).
///
/// ```
/// use ferrograd_runtime::nn::{Linear, Module, visit_children};
/// use ferrograd_runtime::Device;
/// let (a, b) = (Linear::new(2, 3, &Device::Cpu), Linear::new(3, 1, &Device::Cpu));
/// let mut names = Vec::new();
/// visit_children("net", &mut |n, _, _| names.push(n.to_string()), &[("a", &a), ("b", &b)]);
/// assert_eq!(names, ["net.a.weight", "net.a.bias", "net.b.weight", "net.b.bias"]);
/// ```
pub fn visit_children(
    prefix: &str,
    f: &mut dyn FnMut(&str, &Tensor, TensorKind),
    children: &[(&str, &dyn Module)],
) {
    for (name, child) in children {
        child.visit(&join_path(prefix, name), f);
    }
}

/// [`visit_children`] with mutable access.
///
/// ```
/// use ferrograd_runtime::nn::{Linear, visit_children_mut};
/// use ferrograd_runtime::Device;
/// let mut a = Linear::new(2, 3, &Device::Cpu);
/// let mut count = 0;
/// visit_children_mut("", &mut |_, _, _| count += 1, &mut [("a", &mut a)]);
/// assert_eq!(count, 2);
/// ```
pub fn visit_children_mut(
    prefix: &str,
    f: &mut dyn FnMut(&str, &mut Tensor, TensorKind),
    children: &mut [(&str, &mut dyn Module)],
) {
    for (name, child) in children {
        child.visit_mut(&join_path(prefix, name), f);
    }
}

/// Sets training mode on each child.
///
/// ```
/// use ferrograd_runtime::nn::{Dropout, set_training_children};
/// let mut d = Dropout::new(0.5);
/// set_training_children(false, &mut [("d", &mut d)]);
/// ```
pub fn set_training_children(training: bool, children: &mut [(&str, &mut dyn Module)]) {
    for (_, child) in children {
        child.set_training(training);
    }
}

/// Why `load_state_dict` refused a state dict: every problem, by name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct StateDictError {
    /// Keys the model has but the state dict lacks.
    pub missing: Vec<String>,
    /// Keys the state dict has but the model lacks.
    pub unexpected: Vec<String>,
    /// Keys present in both with different shapes: `(key, model shape, state shape)`.
    pub mismatched: Vec<(String, Vec<usize>, Vec<usize>)>,
}

impl StateDictError {
    fn describe(&self) -> String {
        let mut parts = vec!["error(s) in loading state_dict".to_string()];
        if !self.missing.is_empty() {
            parts.push(format!("missing key(s): {}", self.missing.join(", ")));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected key(s): {}", self.unexpected.join(", ")));
        }
        for (key, model, state) in &self.mismatched {
            parts.push(format!(
                "size mismatch for {key}: copying a param with shape {state:?} from the state dict, the shape in the current model is {model:?}"
            ));
        }
        parts.join("; ")
    }
}

/// What a non-strict load skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// Model keys absent from the state dict (left as they were).
    pub missing: Vec<String>,
    /// State dict keys the model does not have (ignored).
    pub unexpected: Vec<String>,
}

/// A neural-network module: something that owns parameters, buffers and child modules.
///
/// The three required methods are what `#[derive(Module)]` generates; everything else
/// (names, `state_dict`, `to_device`, `train`/`eval`, ...) is provided on top of them.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{Linear, Module};
///
/// #[derive(Module)]
/// #[module(crate = ferrograd_runtime)] // not needed through the `ferrograd` facade
/// struct Mlp {
///     fc1: Linear,
///     fc2: Linear,
/// }
///
/// let mut mlp = Mlp { fc1: Linear::new(4, 8, &Device::Cpu), fc2: Linear::new(8, 2, &Device::Cpu) };
/// let names: Vec<String> = mlp.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
/// assert_eq!(mlp.num_parameters(), 4 * 8 + 8 + 8 * 2 + 2);
/// mlp.eval();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a ferrograd `Module`",
    label = "this field's type does not implement `Module`",
    note = "mark tensor fields `#[param]` (trained) or `#[buffer]` (saved, not trained), plain data `#[module(skip)]`, or add `#[derive(Module)]` to `{Self}`"
)]
pub trait Module {
    /// Calls `f(dotted_name, tensor, kind)` for every parameter and buffer, in field order.
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind));

    /// Like [`Module::visit`], with mutable access (to move or replace tensors).
    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind));

    /// Sets training mode on this module and all its children (`module.train(mode)`).
    fn set_training(&mut self, training: bool);

    /// This module as [`Any`](std::any::Any), so code walking a model can find a layer
    /// type in it ([`Module::for_each_module_mut`]). `#[derive(Module)]` gives it to
    /// every struct without generics; `None` otherwise.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }

    /// Calls `f` on this module, then on every module inside it, depth first (PyTorch's
    /// `modules()`, mutably), each as [`Module::as_any_mut`] gives it: how
    /// `distributed::convert_sync_batchnorm` finds the batch norms of a model.
    ///
    /// ```
    /// use ferrograd_runtime::nn::{BatchNorm2d, Linear, Module};
    /// use ferrograd_runtime::Device;
    /// #[derive(Module)]
    /// #[module(crate = ferrograd_runtime)]
    /// struct Net {
    ///     fc: Linear,
    ///     bn: BatchNorm2d,
    /// }
    /// let mut net = Net { fc: Linear::new(2, 2, &Device::Cpu), bn: BatchNorm2d::new(2, &Device::Cpu) };
    /// let mut batch_norms = 0;
    /// net.for_each_module_mut(&mut |m| batch_norms += m.is::<BatchNorm2d>() as usize);
    /// assert_eq!(batch_norms, 1);
    /// ```
    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        if let Some(me) = self.as_any_mut() {
            f(me);
        }
    }

    /// Parameters with their dotted names (`named_parameters()`).
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        named_of_kind(self, TensorKind::Parameter)
    }

    /// The trainable tensors, for an optimizer (`parameters()`).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Buffers with their dotted names (`named_buffers()`).
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        named_of_kind(self, TensorKind::Buffer)
    }

    /// The number of trainable scalars.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Tensor::numel).sum()
    }

    /// Every parameter and buffer by dotted name, detached (`state_dict()`).
    fn state_dict(&self) -> StateDict {
        let mut out = StateDict::new();
        self.visit("", &mut |name, t, _| {
            out.insert(name.to_string(), t.detach());
        });
        out
    }

    /// Copies values from `state` into this module's tensors (`load_state_dict`). Shape
    /// mismatches are always an error; with `strict`, so are missing and unexpected keys.
    /// Values are converted to each tensor's dtype and device. On error nothing is
    /// modified.
    fn load_state_dict(
        &mut self,
        state: &StateDict,
        strict: bool,
    ) -> Result<LoadReport, StateDictError> {
        let mut own: Vec<(String, Vec<usize>)> = Vec::new();
        self.visit("", &mut |name, t, _| {
            own.push((name.to_string(), t.shape().to_vec()))
        });
        let mut error = StateDictError {
            missing: Vec::new(),
            unexpected: state
                .keys()
                .filter(|k| !own.iter().any(|(n, _)| n == *k))
                .cloned()
                .collect(),
            mismatched: Vec::new(),
        };
        for (name, shape) in &own {
            match state.get(name) {
                None => error.missing.push(name.clone()),
                Some(v) if v.shape() != shape.as_slice() => {
                    error
                        .mismatched
                        .push((name.clone(), shape.clone(), v.shape().to_vec()))
                }
                Some(_) => {}
            }
        }
        if !error.mismatched.is_empty()
            || (strict && (!error.missing.is_empty() || !error.unexpected.is_empty()))
        {
            return Err(error);
        }
        no_grad(|| {
            self.visit_mut("", &mut |name, t, _| {
                if let Some(v) = state.get(name) {
                    let v = v
                        .to_dtype(t.dtype())
                        .to_device(&t.device())
                        .expect("the tensor's own device is usable");
                    t.copy_(&v);
                }
            })
        });
        Ok(LoadReport {
            missing: error.missing,
            unexpected: error.unexpected,
        })
    }

    /// Moves every parameter and buffer to `device` (`module.to(device)`); parameters stay
    /// leaves that require grad.
    fn to_device(&mut self, device: &Device) -> crate::Result<()> {
        let mut failure = None;
        self.visit_mut("", &mut |_, t, _| {
            if failure.is_some() || t.device() == *device {
                return;
            }
            match t.detach().to_device(device) {
                Ok(moved) => *t = moved.requires_grad(t.requires_grad_flag()),
                Err(e) => failure = Some(e),
            }
        });
        failure.map_or(Ok(()), Err)
    }

    /// Converts every floating-point parameter and buffer to `dtype` (`module.to(dtype)`).
    fn to_dtype(&mut self, dtype: DType) {
        self.visit_mut("", &mut |_, t, _| {
            if t.dtype().is_float() && t.dtype() != dtype {
                *t = t
                    .detach()
                    .to_dtype(dtype)
                    .requires_grad(t.requires_grad_flag());
            }
        });
    }

    /// Training mode (dropout active, batch statistics): `module.train()`.
    fn train(&mut self) {
        self.set_training(true);
    }

    /// Evaluation mode (dropout off, running statistics): `module.eval()`.
    fn eval(&mut self) {
        self.set_training(false);
    }

    /// Clears every parameter's gradient (`zero_grad(set_to_none=True)`).
    fn zero_grad(&self) {
        self.visit("", &mut |_, t, _| t.zero_grad());
    }

    /// The device of the first tensor, if the module has any.
    fn device(&self) -> Option<Device> {
        let mut found = None;
        self.visit("", &mut |_, t, _| {
            found.get_or_insert(t.device());
        });
        found
    }
}

/// The tensors of one kind with their dotted names, in field order.
fn named_of_kind<M: Module + ?Sized>(module: &M, wanted: TensorKind) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    module.visit("", &mut |name, t, kind| {
        if kind == wanted {
            out.push((name.to_string(), t.clone()));
        }
    });
    out
}

/// Sequences (`Vec`, arrays) name their items by index: `layers.0.weight`.
fn visit_items<M: Module>(items: &[M], prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
    for (i, m) in items.iter().enumerate() {
        m.visit(&join_path(prefix, &i.to_string()), f);
    }
}

fn visit_items_mut<M: Module>(
    items: &mut [M],
    prefix: &str,
    f: &mut dyn FnMut(&str, &mut Tensor, TensorKind),
) {
    for (i, m) in items.iter_mut().enumerate() {
        m.visit_mut(&join_path(prefix, &i.to_string()), f);
    }
}

/// `Vec<M>` and `[M; N]`: items under `prefix.0`, `prefix.1`, ... as `nn.ModuleList`.
macro_rules! sequence_module {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> Module for $ty {
            fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
                visit_items(self, prefix, f);
            }
            fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
                visit_items_mut(self, prefix, f);
            }
            fn set_training(&mut self, training: bool) {
                self.iter_mut().for_each(|m| m.set_training(training));
            }
            fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
                self.iter_mut().for_each(|m| m.for_each_module_mut(f));
            }
        }
    };
}

sequence_module!([M: Module] Vec<M>);
sequence_module!([M: Module, const N: usize] [M; N]);

/// Tuples of modules name their items by position, `name.0.…`, `name.1.…`, as a
/// heterogeneous `nn.Sequential` (what `network!`'s `name: (A, B)` sequences hold).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{BatchNorm1d, Linear, Module};
/// let pair = (Linear::new(2, 3, &Device::Cpu), BatchNorm1d::new(3, &Device::Cpu));
/// let names: Vec<String> = pair.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "1.weight", "1.bias"]);
/// ```
macro_rules! tuple_module {
    ($($m:ident $i:tt),+) => {
        impl<$($m: Module),+> Module for ($($m,)+) {
            fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
                $(self.$i.visit(&join_path(prefix, stringify!($i)), f);)+
            }
            fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
                $(self.$i.visit_mut(&join_path(prefix, stringify!($i)), f);)+
            }
            fn set_training(&mut self, training: bool) {
                $(self.$i.set_training(training);)+
            }
            fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
                $(self.$i.for_each_module_mut(f);)+
            }
        }
    };
}

tuple_module!(A 0);
tuple_module!(A 0, B 1);
tuple_module!(A 0, B 1, C 2);
tuple_module!(A 0, B 1, C 2, D 3);
tuple_module!(A 0, B 1, C 2, D 3, E 4);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_module!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// `None` has no tensors; `Some(m)` is `m` under the same path (no extra segment).
impl<M: Module> Module for Option<M> {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        if let Some(m) = self {
            m.visit(prefix, f);
        }
    }
    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        if let Some(m) = self {
            m.visit_mut(prefix, f);
        }
    }
    fn set_training(&mut self, training: bool) {
        if let Some(m) = self {
            m.set_training(training);
        }
    }
    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        if let Some(m) = self {
            m.for_each_module_mut(f);
        }
    }
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        (**self).visit(prefix, f);
    }
    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        (**self).visit_mut(prefix, f);
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training);
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        (**self).as_any_mut()
    }
    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        (**self).for_each_module_mut(f);
    }
}
