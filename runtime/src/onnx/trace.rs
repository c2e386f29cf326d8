//! The tracing mode beside autograd's recording: while an export runs a forward, each
//! op that reaches the dispatcher ([`crate::dispatch`]) appends one [`Record`] (what it
//! computed, from which tensors, at which call site) to the exporting thread's list.
//!
//! Only the outermost exportable op records: `F::linear` is one `Linear` record even
//! when it calls `matmul` inside. The tracer is one of the dispatcher's interceptors;
//! no op names it.

use crate::Tensor;
pub(crate) use crate::dispatch::{Binary, Op, PadKind, Reduce, RnnKind, Unary};
use crate::dispatch::{Interceptor, OpView};
use std::cell::RefCell;
use std::panic::Location;

thread_local! {
    static STATE: RefCell<Option<TraceState>> = const { RefCell::new(None) };
}

struct TraceState {
    /// Exportable ops open now (ops without a schema do not count: the exportable ops
    /// they run are recorded as themselves).
    depth: u32,
    records: Vec<Record>,
}

/// One traced call.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) op: Op,
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) outputs: Vec<Tensor>,
    pub(crate) location: &'static Location<'static>,
}

/// The tracer at the dispatch seam: its state is this thread's [`STATE`].
struct Tracer;

impl Interceptor for Tracer {
    fn begin(&mut self, _depth: u32, exportable: bool) {
        if exportable {
            STATE.with(|s| {
                if let Some(state) = s.borrow_mut().as_mut() {
                    state.depth += 1;
                }
            });
        }
    }

    fn end(&mut self, _depth: u32, op: &OpView<'_>) {
        let Some(schema) = op.schema else { return };
        STATE.with(|s| {
            if let Some(state) = s.borrow_mut().as_mut() {
                state.depth = state.depth.saturating_sub(1);
                if state.depth == 0 {
                    state.records.push(Record {
                        op: schema.clone(),
                        inputs: op.inputs.iter().map(|t| (*t).clone()).collect(),
                        outputs: op.outputs.clone(),
                        location: op.location,
                    });
                }
            }
        });
    }

    fn abandon(&mut self, _depth: u32, exportable: bool) {
        if exportable {
            STATE.with(|s| {
                if let Some(state) = s.borrow_mut().as_mut() {
                    state.depth = state.depth.saturating_sub(1);
                }
            });
        }
    }
}

/// Starts tracing on this thread; the records come back from [`TraceGuard::finish`].
pub(crate) fn start() -> TraceGuard {
    STATE.with(|s| {
        *s.borrow_mut() = Some(TraceState {
            depth: 0,
            records: Vec::new(),
        })
    });
    TraceGuard {
        hook: Some(crate::dispatch::attach(Box::new(Tracer))),
    }
}

/// Ends this thread's trace when dropped (also on a panic inside the traced forward).
pub(crate) struct TraceGuard {
    hook: Option<crate::dispatch::HookId>,
}

impl TraceGuard {
    /// Stops tracing and returns what was recorded, in execution order.
    pub(crate) fn finish(mut self) -> Vec<Record> {
        if let Some(id) = self.hook.take() {
            crate::dispatch::detach(id);
        }
        STATE.with(|s| {
            s.borrow_mut()
                .take()
                .map(|st| st.records)
                .unwrap_or_default()
        })
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        if let Some(id) = self.hook.take() {
            crate::dispatch::detach(id);
            STATE.with(|s| *s.borrow_mut() = None);
        }
    }
}

/// Whether this thread is tracing (for ops that must refuse, such as in-place updates).
pub(crate) fn is_tracing() -> bool {
    crate::dispatch::any_attached() && STATE.with(|s| s.borrow().is_some())
}
