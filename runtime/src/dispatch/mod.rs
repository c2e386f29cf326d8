//! The one seam every op runs through. An op describes itself once — its `Op` schema
//! (name and attributes, what the exporter maps to ONNX and the profiler names), or, for
//! an op with no exporter mapping, just its name (`dispatch::opaque`) — and brackets its
//! work with `dispatch::enter` and `dispatch::finish`; an op autocast casts asks
//! `dispatch::cast` by name, and one table here decides how. What watches ops attaches
//! here and nowhere else: the ONNX tracer, the profiler, anomaly detection, and the
//! user's own hooks ([`with_hook`],
//! in the spirit of PyTorch's `TorchDispatchMode`: count FLOPs, log shapes). No op names
//! any of them.
//!
//! While nothing is attached on any thread, an op's cost here is one relaxed atomic
//! load and a branch on each side.
//!
//! See [`DispatchHook`] for a FLOP counter.

mod autocast;
mod hooks;
mod schema;

pub use autocast::{CastPolicy, autocast_ops, autocast_policy};
pub(crate) use autocast::{cast, cast_with_bias};
pub use hooks::{DispatchHook, OpEvent, with_hook};
pub(crate) use schema::*;

use crate::{Device, Tensor};
use std::borrow::Cow;
use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Interceptors attached on all threads: while 0, every op's check is one relaxed load.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SEAM: RefCell<Seam> = RefCell::new(Seam::default());
}

#[derive(Default)]
struct Seam {
    /// Ops open now on this thread (those entered while something was attached).
    depth: u32,
    hooks: Vec<(u64, Box<dyn Interceptor>)>,
    next_id: u64,
    /// Hooks are lent out while they run (so that a hook may call ops): ids detached
    /// meanwhile are dropped when they come back.
    lent: bool,
    detached_while_lent: Vec<u64>,
}

/// What attaches at the seam. Calls nest: every `begin` is followed by the `end` or
/// `abandon` of the same op before the `begin`'s enclosing op ends.
pub(crate) trait Interceptor {
    /// An op starts, `depth` ops deep on this thread (0: called from outside any op);
    /// `exportable` says whether it has a schema.
    fn begin(&mut self, depth: u32, exportable: bool);
    /// It returned.
    fn end(&mut self, depth: u32, op: &OpView<'_>);
    /// It left without returning (a panic).
    fn abandon(&mut self, depth: u32, exportable: bool);
}

/// A handle on an attached interceptor.
#[derive(Debug)]
pub(crate) struct HookId(u64);

/// Attaches `hook` on this thread until [`detach`].
pub(crate) fn attach(hook: Box<dyn Interceptor>) -> HookId {
    ACTIVE.fetch_add(1, Ordering::Relaxed);
    SEAM.with(|s| {
        let mut s = s.borrow_mut();
        s.next_id += 1;
        let id = s.next_id;
        s.hooks.push((id, hook));
        HookId(id)
    })
}

/// Detaches a hook [`attach`] returned.
pub(crate) fn detach(id: HookId) {
    SEAM.with(|s| {
        let mut s = s.borrow_mut();
        let before = s.hooks.len();
        s.hooks.retain(|(i, _)| *i != id.0);
        if s.hooks.len() == before && s.lent {
            s.detached_while_lent.push(id.0);
        }
    });
    ACTIVE.fetch_sub(1, Ordering::Relaxed);
}

/// The seam's depth on this thread now.
pub(crate) fn depth() -> u32 {
    SEAM.with(|s| s.borrow().depth)
}

/// Whether anything is attached on any thread (a relaxed load).
#[inline(always)]
pub(crate) fn any_attached() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// Runs `f` over the hooks that saw an op begin, lent out of the thread's state so that
/// they may call ops (which then see no hooks), and sets the depth back to `depth`.
fn with_lent_hooks(ids: &[u64], depth: u32, mut f: impl FnMut(&mut dyn Interceptor)) {
    let mut hooks = SEAM.with(|s| {
        let mut s = s.borrow_mut();
        s.lent = true;
        std::mem::take(&mut s.hooks)
    });
    for (id, hook) in hooks.iter_mut() {
        if ids.contains(id) {
            f(hook.as_mut());
        }
    }
    SEAM.with(|s| {
        let mut s = s.borrow_mut();
        let gone = std::mem::take(&mut s.detached_while_lent);
        hooks.retain(|(i, _)| !gone.contains(i));
        // Hooks attached while these were out go after them.
        hooks.append(&mut s.hooks);
        s.hooks = hooks;
        s.lent = false;
        s.depth = depth;
    });
}

/// An op as the interceptors see it when it ends.
pub(crate) struct OpView<'a> {
    /// Its schema; `None` for an op with no exporter mapping.
    pub(crate) schema: Option<&'a Op>,
    /// The name of an op without a schema.
    pub(crate) opaque_name: &'static str,
    /// Its inputs (none for an op without a schema: see `shapes`).
    pub(crate) inputs: &'a [&'a Tensor],
    /// The input shapes of an op without a schema, taken when it began.
    pub(crate) shapes: Option<&'a [Vec<usize>]>,
    /// Whether an input is on a GPU.
    pub(crate) on_device: bool,
    /// What it returned (none for an op without a schema).
    pub(crate) outputs: Vec<Tensor>,
    /// The user's line that called it.
    pub(crate) location: &'static Location<'static>,
}

impl OpView<'_> {
    /// The op's name in profiles (`mul`, `conv2d`, `log_softmax`, `mse_loss`, ...).
    pub(crate) fn name(&self) -> Cow<'static, str> {
        match self.schema {
            Some(op) => Cow::Owned(op.profile_name()),
            None => Cow::Borrowed(self.opaque_name),
        }
    }

    /// The shapes of its inputs.
    pub(crate) fn input_shapes(&self) -> Vec<Vec<usize>> {
        match self.shapes {
            Some(s) => s.to_vec(),
            None => self.inputs.iter().map(|t| t.shape().to_vec()).collect(),
        }
    }
}

/// An op that has begun at the seam (see [`enter`]); dropped without [`finish`] (an
/// early return or a panic), the interceptors are told it was abandoned.
pub(crate) struct Entered {
    depth: u32,
    exportable: bool,
    /// The hooks that saw it begin.
    hooks: Vec<u64>,
    done: bool,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if !self.done {
            let (depth, exportable) = (self.depth, self.exportable);
            with_lent_hooks(&self.hooks, depth, |h| h.abandon(depth, exportable));
        }
    }
}

/// Marks the start of an op with a schema; `None` (nothing to do) unless something is
/// attached on this thread.
#[inline(always)]
pub(crate) fn enter() -> Option<Entered> {
    if !any_attached() {
        return None;
    }
    begin(true)
}

#[cold]
#[inline(never)]
fn begin(exportable: bool) -> Option<Entered> {
    SEAM.with(|s| {
        let mut s = s.borrow_mut();
        if s.hooks.is_empty() || s.lent {
            return None;
        }
        let depth = s.depth;
        s.depth += 1;
        let mut ids = Vec::with_capacity(s.hooks.len());
        for (id, hook) in s.hooks.iter_mut() {
            hook.begin(depth, exportable);
            ids.push(*id);
        }
        Some(Entered {
            depth,
            exportable,
            hooks: ids,
            done: false,
        })
    })
}

/// Ends an op [`enter`]ed: its schema is `op()` over `inputs`, it returned `out`. Returns
/// `out`.
#[inline(always)]
#[track_caller]
pub(crate) fn finish<R: Outputs>(
    entered: Option<Entered>,
    inputs: &[&Tensor],
    op: impl FnOnce() -> Op,
    out: R,
) -> R {
    match entered {
        None => out,
        Some(e) => finish_slow(e, inputs, op, out, Location::caller()),
    }
}

/// [`finish`] for ops with optional inputs (a bias): the absent ones are left out.
#[inline(always)]
#[track_caller]
pub(crate) fn finish_opt<R: Outputs>(
    entered: Option<Entered>,
    inputs: &[Option<&Tensor>],
    op: impl FnOnce() -> Op,
    out: R,
) -> R {
    match entered {
        None => out,
        Some(e) => {
            let present: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
            finish_slow(e, &present, op, out, Location::caller())
        }
    }
}

#[cold]
#[inline(never)]
fn finish_slow<R: Outputs>(
    mut entered: Entered,
    inputs: &[&Tensor],
    op: impl FnOnce() -> Op,
    out: R,
    location: &'static Location<'static>,
) -> R {
    let schema = op();
    let view = OpView {
        schema: Some(&schema),
        opaque_name: "",
        inputs,
        shapes: None,
        on_device: inputs.iter().any(|t| t.device() != Device::Cpu),
        outputs: out.tensors(),
        location,
    };
    entered.done = true;
    let depth = entered.depth;
    with_lent_hooks(&entered.hooks, depth, |h| h.end(depth, &view));
    out
}

/// An op without an exporter mapping (an in-place update, a fused loss, a sort), seen by
/// the interceptors as `name` from when this guard is made (its first statement) until
/// it drops: the ops it runs are its children in a profile, and export records those
/// that have a schema. A guard, not a closure, so the op's `#[track_caller]` still
/// reaches its checks.
pub(crate) struct Opaque {
    open: Option<(Entered, Vec<Vec<usize>>, bool)>,
    name: &'static str,
    location: &'static Location<'static>,
}

/// Begins the op `name` over `inputs` (see [`Opaque`]).
#[inline(always)]
#[track_caller]
pub(crate) fn opaque(name: &'static str, inputs: &[&Tensor]) -> Opaque {
    let location = Location::caller();
    if !any_attached() {
        return Opaque {
            open: None,
            name,
            location,
        };
    }
    opaque_slow(name, inputs, location)
}

#[cold]
#[inline(never)]
fn opaque_slow(
    name: &'static str,
    inputs: &[&Tensor],
    location: &'static Location<'static>,
) -> Opaque {
    let open = begin(false).map(|e| {
        let shapes = inputs.iter().map(|t| t.shape().to_vec()).collect();
        let on_device = inputs.iter().any(|t| t.device() != Device::Cpu);
        (e, shapes, on_device)
    });
    Opaque {
        open,
        name,
        location,
    }
}

impl Drop for Opaque {
    fn drop(&mut self) {
        let Some((mut entered, shapes, on_device)) = self.open.take() else {
            return;
        };
        if std::thread::panicking() {
            return; // `entered` drops: abandoned
        }
        let view = OpView {
            schema: None,
            opaque_name: self.name,
            inputs: &[],
            shapes: Some(&shapes),
            on_device,
            outputs: Vec::new(),
            location: self.location,
        };
        entered.done = true;
        let depth = entered.depth;
        with_lent_hooks(&entered.hooks, depth, |h| h.end(depth, &view));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    #[test]
    fn nothing_attached_means_nothing_entered() {
        assert!(enter().is_none());
        let x = Tensor::ones(&[2], DType::F32, &Device::Cpu);
        assert!(opaque("fill_", &[&x]).open.is_none());
    }

    #[test]
    fn a_panicking_op_is_abandoned_and_the_depth_restored() {
        let x = Tensor::ones(&[2, 3], DType::F32, &Device::Cpu);
        let names = std::rc::Rc::new(RefCell::new(Vec::new()));
        let seen = names.clone();
        let ((), _) = with_hook(
            move |op: &OpEvent<'_>| seen.borrow_mut().push(op.name().to_string()),
            || {
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    x.matmul(&x);
                }));
                assert!(caught.is_err());
                assert_eq!(depth(), 0);
                x.relu();
            },
        );
        assert_eq!(*names.borrow(), ["relu"]);
    }
}
