//! Anomaly detection (`torch.autograd.detect_anomaly`): inside [`detect_anomaly`], every
//! graph node remembers the op that made it and the user's line that called that op —
//! taken at the op seam, where a watcher attaches for the scope — and backward checks
//! each gradient function's outputs: the first to return NaN stops backward with a panic
//! naming the gradient function, the input, and the forward op and line it came from.
//! It costs a check of every gradient, so it is a debugging mode, as in PyTorch.

use super::Node;
use crate::dispatch::{self, Interceptor, OpView};
use crate::{DType, Tensor};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::panic::Location;
use std::sync::{Arc, Weak};

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(false) };
    /// Nodes recorded since the outermost op now running began.
    static FRESH: RefCell<Vec<Weak<Node>>> = const { RefCell::new(Vec::new()) };
}

/// The forward op a node came from.
pub(crate) struct Origin {
    op: Cow<'static, str>,
    location: &'static Location<'static>,
}

/// Runs `f` with anomaly detection on this thread (`with torch.autograd.detect_anomaly():`):
/// a backward inside `f` (or of a graph recorded inside it) that produces NaN panics at
/// the gradient function that produced it, naming the forward op and the line that
/// called it. Scopes nest.
///
/// ```should_panic
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::autograd::detect_anomaly;
/// let x = Tensor::from_vec(vec![-1.0f64, 4.0], &[2]).requires_grad(true);
/// detect_anomaly(|| {
///     let y = x.sqrt(); // sqrt(-1) is NaN: its gradient is NaN too
///     y.sum_all().backward(); // panics: "sqrt_backward returned nan values ..."
/// });
/// ```
pub fn detect_anomaly<R>(f: impl FnOnce() -> R) -> R {
    if is_anomaly_enabled() {
        return f();
    }
    struct Off(Option<dispatch::HookId>);
    impl Drop for Off {
        fn drop(&mut self) {
            ENABLED.with(|e| e.set(false));
            FRESH.with(|n| n.borrow_mut().clear());
            if let Some(id) = self.0.take() {
                dispatch::detach(id);
            }
        }
    }
    let _off = Off(Some(dispatch::attach(Box::new(Watcher))));
    ENABLED.with(|e| e.set(true));
    f()
}

/// Whether anomaly detection is on on this thread (`torch.is_anomaly_enabled()`).
///
/// ```
/// use ferrograd_runtime::autograd::{detect_anomaly, is_anomaly_enabled};
/// assert!(!is_anomaly_enabled());
/// detect_anomaly(|| assert!(is_anomaly_enabled()));
/// ```
pub fn is_anomaly_enabled() -> bool {
    ENABLED.with(|e| e.get())
}

/// Called by `record` for each node it makes while anomaly detection is on.
pub(crate) fn recorded(node: &Arc<Node>) {
    FRESH.with(|n| n.borrow_mut().push(Arc::downgrade(node)));
}

/// Watches the outermost ops at the seam: the nodes recorded while one ran are stamped
/// with its name and its caller's line when it returns.
struct Watcher;

impl Interceptor for Watcher {
    fn begin(&mut self, depth: u32, _exportable: bool) {
        if depth == 0 {
            // Nodes recorded between ops (a custom `Function`) belong to no op here.
            FRESH.with(|n| n.borrow_mut().clear());
        }
    }

    fn end(&mut self, depth: u32, op: &OpView<'_>) {
        if depth != 0 {
            return;
        }
        let fresh = FRESH.with(|n| std::mem::take(&mut *n.borrow_mut()));
        let name = op.name();
        for node in fresh.iter().filter_map(Weak::upgrade) {
            let _ = node.origin.set(Box::new(Origin {
                op: name.clone(),
                location: op.location,
            }));
        }
    }

    fn abandon(&mut self, depth: u32, _exportable: bool) {
        if depth == 0 {
            FRESH.with(|n| n.borrow_mut().clear());
        }
    }
}

/// Backward's check of what `node`'s gradient function returned: panics at the first
/// gradient with a NaN.
#[track_caller]
pub(crate) fn check_gradients(node: &Node, grads: &[Option<Tensor>], slices: &[Tensor]) {
    let with_nan = grads
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.as_ref().map(|g| (i, g)))
        .chain(slices.iter().map(|g| (usize::MAX, g)))
        .find(|(_, g)| has_nan(g));
    let Some((i, g)) = with_nan else { return };
    let which = if i == usize::MAX {
        "a slice output".to_string()
    } else {
        format!("its {i}th output")
    };
    let origin = match node.origin.get() {
        Some(o) => format!(
            "it is the gradient of `{}`, called at {}:{}:{}",
            o.op,
            o.location.file(),
            o.location.line(),
            o.location.column()
        ),
        None => "its forward op was recorded outside an op at the seam (a custom \
                 `Function`, or before `detect_anomaly` began)"
            .to_string(),
    };
    panic!(
        "detect_anomaly: function '{}_backward' returned nan values in {which} (shape {:?}); {origin}",
        node.name,
        g.shape()
    );
}

fn has_nan(g: &Tensor) -> bool {
    if !g.dtype().is_float() || g.numel() == 0 {
        return false;
    }
    let wide = crate::autograd::no_grad(|| g.to_dtype(DType::F64).contiguous());
    wide.to_vec::<f64>().iter().any(|v| v.is_nan())
}
