//! The user's hooks at the dispatch seam.

use super::{Interceptor, OpView};
use crate::Tensor;
use std::borrow::Cow;
use std::cell::RefCell;
use std::panic::Location;
use std::rc::Rc;

/// One op as a [`DispatchHook`] sees it, after it returned.
pub struct OpEvent<'a> {
    view: &'a OpView<'a>,
}

impl OpEvent<'_> {
    /// The op's name as profiles show it (`matmul`, `relu`, `conv2d`, `mse_loss`, ...).
    pub fn name(&self) -> Cow<'static, str> {
        self.view.name()
    }

    /// The shapes of its tensor inputs, in order.
    pub fn input_shapes(&self) -> Vec<Vec<usize>> {
        self.view.input_shapes()
    }

    /// Its tensor inputs (empty for an op without an exporter mapping, whose inputs are
    /// known by their shapes only).
    pub fn inputs(&self) -> &[&Tensor] {
        self.view.inputs
    }

    /// What it returned (empty for an op without an exporter mapping).
    pub fn outputs(&self) -> &[Tensor] {
        &self.view.outputs
    }

    /// The line that called it.
    pub fn location(&self) -> &'static Location<'static> {
        self.view.location
    }

    /// Whether the op has an exporter mapping (`onnx::export` can write it).
    pub fn is_exportable(&self) -> bool {
        self.view.schema.is_some()
    }
}

/// Something that watches ops (PyTorch's `TorchDispatchMode` habit, read-only): counts
/// FLOPs, logs shapes, collects a trace. Closures `FnMut(&OpEvent)` are hooks.
///
/// ```
/// use ferrograd_runtime::dispatch::{DispatchHook, OpEvent, with_hook};
/// use ferrograd_runtime::prelude::*;
/// /// Multiply-adds of every `matmul`.
/// #[derive(Default)]
/// struct Flops(usize);
/// impl DispatchHook for Flops {
///     fn on_op(&mut self, op: &OpEvent<'_>) {
///         if op.name() == "matmul" {
///             let s = op.input_shapes();
///             self.0 += s[0][0] * s[0][1] * s[1][1];
///         }
///     }
/// }
/// let a = Tensor::ones(&[4, 8], DType::F32, &Device::Cpu);
/// let b = Tensor::ones(&[8, 2], DType::F32, &Device::Cpu);
/// let (_, flops) = with_hook(Flops::default(), || a.matmul(&b).relu());
/// assert_eq!(flops.0, 64);
/// ```
pub trait DispatchHook {
    /// Called after each op the watched code calls (not the ops those ops run inside).
    fn on_op(&mut self, op: &OpEvent<'_>);
}

impl<F: FnMut(&OpEvent<'_>)> DispatchHook for F {
    fn on_op(&mut self, op: &OpEvent<'_>) {
        self(op)
    }
}

/// A user's hook at the seam: told of the ops at the depth it was attached at.
struct UserHook<H> {
    hook: Rc<RefCell<H>>,
    depth: u32,
}

impl<H: DispatchHook> Interceptor for UserHook<H> {
    fn begin(&mut self, _depth: u32, _exportable: bool) {}

    fn end(&mut self, depth: u32, op: &OpView<'_>) {
        if depth == self.depth {
            self.hook.borrow_mut().on_op(&OpEvent { view: op });
        }
    }

    fn abandon(&mut self, _depth: u32, _exportable: bool) {}
}

/// Detaches on the way out, a panic included.
struct Attached(Option<super::HookId>);

impl Drop for Attached {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            super::detach(id);
        }
    }
}

/// Runs `body` with `hook` told of every op it calls on this thread; returns what
/// `body` returned and the hook.
///
/// ```
/// use ferrograd_runtime::dispatch::{OpEvent, with_hook};
/// use ferrograd_runtime::prelude::*;
/// let x = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
/// let log = |op: &OpEvent<'_>| format!("{} {:?} at line {}", op.name(), op.input_shapes(), op.location().line());
/// let (y, _) = with_hook(
///     move |op: &OpEvent<'_>| println!("{}", log(op)),
///     || x.relu().sum_all(),
/// );
/// assert_eq!(y.item::<f32>(), 6.0);
/// // A hook that keeps what it saw comes back from `with_hook`.
/// #[derive(Default)]
/// struct Names(Vec<String>);
/// impl ferrograd_runtime::dispatch::DispatchHook for Names {
///     fn on_op(&mut self, op: &OpEvent<'_>) {
///         self.0.push(op.name().into_owned());
///     }
/// }
/// let (_, names) = with_hook(Names::default(), || x.relu().sum_all());
/// assert_eq!(names.0, ["relu", "sum"]);
/// ```
pub fn with_hook<H: DispatchHook + 'static, R>(hook: H, body: impl FnOnce() -> R) -> (R, H) {
    let shared = Rc::new(RefCell::new(hook));
    let attached = Attached(Some(super::attach(Box::new(UserHook {
        hook: shared.clone(),
        depth: super::depth(),
    }))));
    let out = body();
    drop(attached);
    let hook = match Rc::try_unwrap(shared) {
        Ok(cell) => cell.into_inner(),
        Err(_) => unreachable!("the seam dropped the hook when it was detached"),
    };
    (out, hook)
}
