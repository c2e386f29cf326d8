//! Define-by-run automatic differentiation.
//!
//! Every differentiable op records one `Node` through `record`: the output's
//! gradient function, holding the edges to its inputs' nodes (or leaf gradient slots) and
//! a closure that maps the output's gradient to its inputs' gradients. Backward closures
//! are written with tensor ops, so running them with grad enabled (`create_graph`) builds
//! the graph of the gradient itself, which gives higher-order derivatives for free.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! let x = Tensor::from_vec(vec![3.0f64], &[1]).requires_grad(true);
//! let y = (&x * &x * &x).sum_all(); // x^3
//! let dy = ferrograd_runtime::autograd::grad(&[&y], &[&x], None, true)[0].clone().unwrap();
//! assert_eq!(dy.to_vec::<f64>(), vec![27.0]); // 3x^2
//! let d2y = ferrograd_runtime::autograd::grad(&[&dy.sum_all()], &[&x], None, false)[0].clone().unwrap();
//! assert_eq!(d2y.to_vec::<f64>(), vec![18.0]); // 6x
//! ```

mod anomaly;
mod engine;
mod function;
mod gradcheck;
mod hooks;

pub use anomaly::{detect_anomaly, is_anomaly_enabled};
pub use engine::{grad, grad_with};
pub use function::{Function, FunctionCtx, SavedTensors, apply, checkpoint};
pub use gradcheck::{GradcheckError, gradcheck, gradcheck_with};
pub use hooks::HookHandle;

pub(crate) use engine::run_backward;

use crate::Tensor;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether ops on this thread currently record the graph.
///
/// ```
/// use ferrograd_runtime::autograd::{is_grad_enabled, no_grad};
/// assert!(is_grad_enabled());
/// no_grad(|| assert!(!is_grad_enabled()));
/// ```
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Restores the previous grad mode when dropped; made by [`NoGradGuard::new`] or
/// [`enable_grad`].
#[must_use = "grad mode is restored as soon as the guard is dropped"]
pub struct NoGradGuard {
    previous: bool,
}

impl NoGradGuard {
    /// Disables graph recording on this thread until the guard drops (`torch.no_grad()`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
    /// let _guard = NoGradGuard::new();
    /// assert!(!(&w * 2.0).requires_grad_flag());
    /// ```
    pub fn new() -> Self {
        set_grad_enabled(false)
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

pub(crate) fn set_grad_enabled(enabled: bool) -> NoGradGuard {
    let previous = GRAD_ENABLED.with(|g| g.replace(enabled));
    NoGradGuard { previous }
}

/// Runs `f` without recording the graph (`with torch.no_grad():`). Ops on tensors that
/// do not require grad cost the same inside and outside.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
/// let y = no_grad(|| &w * 2.0);
/// assert!(!y.requires_grad_flag());
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = set_grad_enabled(false);
    f()
}

/// Runs `f` with graph recording on, even inside [`no_grad`] (`torch.enable_grad()`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
/// let y = no_grad(|| enable_grad(|| &w * 2.0));
/// assert!(y.requires_grad_flag());
/// ```
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = set_grad_enabled(true);
    f()
}

/// The gradient slot of a leaf tensor: where backward accumulates `.grad`.
#[derive(Default)]
pub(crate) struct LeafSlot {
    pub(crate) grad: Mutex<Option<Tensor>>,
    pub(crate) hooks: hooks::LeafHooks,
}

/// A backward closure: the output's gradient in, one optional gradient per input out.
pub(crate) type BackwardFn =
    Box<dyn Fn(&BackwardCtx<'_>, &Tensor) -> Vec<Option<Tensor>> + Send + Sync>;

/// Where a gradient goes next.
#[derive(Clone)]
pub(crate) enum Edge {
    Leaf(Arc<LeafSlot>),
    Node(Arc<Node>),
}

impl Edge {
    pub(crate) fn key(&self) -> usize {
        match self {
            Edge::Leaf(slot) => Arc::as_ptr(slot) as usize,
            Edge::Node(node) => Arc::as_ptr(node) as usize,
        }
    }
}

/// A recorded op: its name (for error messages), backward closure and input edges.
pub(crate) struct Node {
    pub(crate) name: &'static str,
    pub(crate) backward: Mutex<Option<BackwardFn>>,
    pub(crate) next: Vec<Option<Edge>>,
    /// The forward op and line that made it, under [`detect_anomaly`].
    pub(crate) origin: std::sync::OnceLock<Box<anomaly::Origin>>,
}

/// What a tensor knows about the graph: nothing (no grad), or its slot/node.
#[derive(Clone)]
pub(crate) enum AutogradMeta {
    Leaf(Arc<LeafSlot>),
    Interior(Arc<Node>),
}

impl AutogradMeta {
    pub(crate) fn edge(&self) -> Edge {
        match self {
            AutogradMeta::Leaf(slot) => Edge::Leaf(slot.clone()),
            AutogradMeta::Interior(node) => Edge::Node(node.clone()),
        }
    }
}

/// Passed to backward closures.
pub(crate) struct BackwardCtx<'a> {
    pub(crate) node: &'a Arc<Node>,
    /// Gradients for a slice of an input ([`BackwardCtx::slice_grad`]), by input index.
    pub(crate) regions: std::cell::RefCell<Vec<(usize, SliceGrad)>>,
}

/// The gradient of a slice: `grad` belongs at `start::step` of dim `dim` of an input of
/// `input_shape`, zero elsewhere. The engine adds it into that input's gradient where it
/// already has one it may write (no zero-filled full-size tensor per slice, then summed:
/// attention's `q`, `k` and `v` cut from one projection).
pub(crate) struct SliceGrad {
    pub(crate) input_shape: ferrograd_kernels::Dims,
    pub(crate) dim: usize,
    pub(crate) start: usize,
    pub(crate) step: usize,
    pub(crate) grad: Tensor,
}

impl SliceGrad {
    /// The full-size gradient: zeros with `grad` written into the slice (the slice op's
    /// own backward).
    pub(crate) fn materialize(&self) -> Tensor {
        self.grad
            .slice_backward(&self.input_shape, self.dim, self.start, self.step)
    }

    /// Adds `grad` into the slice of `full`, a tensor of `input_shape` whose storage
    /// nothing else sees.
    pub(crate) fn add_into(&self, full: &Tensor) {
        let len = self.grad.shape()[self.dim];
        let region = full.layout().slice(self.dim, self.start, len, self.step);
        full.view_with_layout(region).add_(&self.grad);
    }
}

impl BackwardCtx<'_> {
    pub(crate) fn new(node: &Arc<Node>) -> BackwardCtx<'_> {
        BackwardCtx {
            node,
            regions: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Hands the engine the gradient of input `i` as a slice of it (the closure returns
    /// `None` for that input). Only without `create_graph`: the sum would not be recorded.
    pub(crate) fn slice_grad(&self, i: usize, grad: SliceGrad) {
        debug_assert!(!is_grad_enabled(), "slice gradients are not differentiable");
        self.regions.borrow_mut().push((i, grad));
    }

    /// Whether input `i` needs a gradient; closures skip the work for the others.
    pub(crate) fn needs(&self, i: usize) -> bool {
        self.node.next.get(i).is_some_and(|e| e.is_some())
    }

    /// The op's output, rebuilt from its detached saved data with this node as its
    /// gradient function, so a backward that uses the output stays differentiable under
    /// `create_graph` without the node owning its own output (which would be a cycle).
    pub(crate) fn output(&self, saved: &SavedTensor) -> Tensor {
        let data = saved.get(self.node.name);
        if crate::autograd::is_grad_enabled() {
            data.with_autograd(AutogradMeta::Interior(self.node.clone()))
        } else {
            data
        }
    }
}

/// A tensor saved for backward with the storage version it had, so that modifying it in
/// place before backward is caught, as PyTorch does.
pub(crate) struct SavedTensor {
    tensor: Tensor,
    version: u64,
}

impl SavedTensor {
    pub(crate) fn new(tensor: &Tensor) -> Self {
        SavedTensor {
            version: tensor.storage_version(),
            tensor: tensor.clone(),
        }
    }

    /// Saves the data of an op's output without its graph (see [`BackwardCtx::output`]).
    pub(crate) fn output(tensor: &Tensor) -> Self {
        SavedTensor::new(&tensor.detach())
    }

    /// The saved tensor's shape (no version check: shapes cannot change in place).
    pub(crate) fn peek_shape(&self) -> &[usize] {
        self.tensor.shape()
    }

    #[track_caller]
    pub(crate) fn get(&self, op: &str) -> Tensor {
        let now = self.tensor.storage_version();
        if now != self.version {
            panic!(
                "one of the variables needed for gradient computation has been modified by an \
                 inplace operation: the {:?} tensor of shape {:?} saved by {op} is at version {now}; \
                 expected version {} instead",
                self.tensor.dtype(),
                self.tensor.shape(),
                self.version
            );
        }
        self.tensor.clone()
    }
}

/// The single choke point through which every differentiable op records itself: when grad
/// mode is on and some input requires grad, `out` gets a node whose backward is built by
/// `make_backward` (called only then, so ops pay nothing for saved tensors otherwise).
#[inline]
pub(crate) fn record<F>(
    out: Tensor,
    name: &'static str,
    inputs: &[&Tensor],
    make_backward: impl FnOnce() -> F,
) -> Tensor
where
    F: Fn(&BackwardCtx<'_>, &Tensor) -> Vec<Option<Tensor>> + Send + Sync + 'static,
{
    if !inputs.iter().any(|t| t.requires_grad_flag())
        || !is_grad_enabled()
        || !out.dtype().is_float()
    {
        return out;
    }
    let next = inputs
        .iter()
        .map(|t| t.autograd_meta().map(|m| m.edge()))
        .collect();
    let node = Arc::new(Node {
        name,
        backward: Mutex::new(Some(Box::new(make_backward()))),
        next,
        origin: std::sync::OnceLock::new(),
    });
    if anomaly::is_anomaly_enabled() {
        anomaly::recorded(&node);
    }
    out.with_autograd(AutogradMeta::Interior(node))
}

// Dropping a long chain of nodes recursively would overflow the stack: a node's closure
// owns saved tensors, which own their nodes, and so on. Instead, while one node is being
// dropped on this thread, every nested node hands its parts to a queue that the outer drop
// empties in a loop, so the stack depth stays constant.
type Deferred = (Option<BackwardFn>, Vec<Option<Edge>>);

thread_local! {
    static DROPPING: Cell<bool> = const { Cell::new(false) };
    static DROP_QUEUE: RefCell<Vec<Deferred>> = const { RefCell::new(Vec::new()) };
}

impl Drop for Node {
    fn drop(&mut self) {
        let backward = self
            .backward
            .get_mut()
            .map(|b| b.take())
            .unwrap_or_else(|e| e.into_inner().take());
        let parts = (backward, std::mem::take(&mut self.next));
        if DROPPING.with(|d| d.get()) {
            DROP_QUEUE.with(|q| q.borrow_mut().push(parts));
            return;
        }
        DROPPING.with(|d| d.set(true));
        drop(parts);
        loop {
            let next = DROP_QUEUE.with(|q| q.borrow_mut().pop());
            match next {
                Some(parts) => drop(parts),
                None => break,
            }
        }
        DROPPING.with(|d| d.set(false));
    }
}

pub(crate) use engine::root_pairs as engine_roots;

/// The identity of a leaf's gradient slot, or `None` for tensors that are not leaves
/// requiring grad: what [`reachable_leaves`] reports.
pub(crate) fn leaf_key(t: &Tensor) -> Option<usize> {
    match t.autograd_meta() {
        Some(AutogradMeta::Leaf(slot)) => Some(Arc::as_ptr(slot) as usize),
        _ => None,
    }
}

/// The leaves (by [`leaf_key`]) that a backward from `outputs` would reach: how
/// DistributedDataParallel finds the parameters a forward pass did not use.
pub(crate) fn reachable_leaves(outputs: &[&Tensor]) -> std::collections::HashSet<usize> {
    let mut leaves = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Arc<Node>> = Vec::new();
    for t in outputs {
        match t.autograd_meta() {
            Some(AutogradMeta::Leaf(slot)) => {
                leaves.insert(Arc::as_ptr(slot) as usize);
            }
            Some(AutogradMeta::Interior(node)) if seen.insert(Arc::as_ptr(node) as usize) => {
                stack.push(node.clone());
            }
            _ => {}
        }
    }
    while let Some(node) = stack.pop() {
        for edge in node.next.iter().flatten() {
            match edge {
                Edge::Leaf(slot) => {
                    leaves.insert(Arc::as_ptr(slot) as usize);
                }
                Edge::Node(child) => {
                    if seen.insert(Arc::as_ptr(child) as usize) {
                        stack.push(child.clone());
                    }
                }
            }
        }
    }
    leaves
}
