//! The backward pass: a topological walk over the recorded graph, iterative so that a
//! chain of a million ops needs no deep stack.

use super::{AutogradMeta, BackwardCtx, Edge, LeafSlot, Node, SliceGrad, set_grad_enabled};
use crate::Tensor;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Where gradients that reach leaves go.
enum Sink {
    /// Accumulate into each leaf's `.grad` (`Tensor::backward`).
    Accumulate,
    /// Return the gradients of these edges and touch no `.grad` (`autograd::grad`).
    Capture(HashMap<usize, usize>),
}

/// Adds `g` to the gradient gathered so far. As PyTorch's input buffers and
/// `AccumulateGrad` do, the sum is taken in place when nothing can see the old gradient:
/// no graph is being recorded (`create_graph`), no other handle, view or saved tensor
/// shares its buffer, and the operands match in shape, dtype and device. Otherwise (or
/// under `create_graph`, which records the sum) a new tensor holds it.
fn add_grad(slot: &mut Option<Tensor>, g: Tensor) {
    *slot = Some(match slot.take() {
        Some(old) if accumulates_in_place(&old, &g) => {
            old.add_(&g);
            old
        }
        Some(old) => &old + &g,
        None => g,
    });
}

/// Adds a slice's gradient to the gradient gathered so far: into the slice of the old
/// one where [`add_grad`] could add in place (on the CPU, whose in-place kernels take any
/// strides), else as a full-size tensor.
fn add_slice_grad(slot: &mut Option<Tensor>, g: SliceGrad) {
    match slot.take() {
        Some(old)
            if old.device() == crate::Device::Cpu
                && writable(&old, &g.grad)
                && old.shape() == &g.input_shape[..] =>
        {
            g.add_into(&old);
            *slot = Some(old);
        }
        other => {
            *slot = other;
            add_grad(slot, g.materialize());
        }
    }
}

fn accumulates_in_place(old: &Tensor, g: &Tensor) -> bool {
    writable(old, g) && old.shape() == g.shape()
}

/// Whether a gradient gathered so far may take `g` (or a slice of it) in place: no graph
/// is being recorded, nothing else sees its buffer, and the dtypes and devices match.
fn writable(old: &Tensor, g: &Tensor) -> bool {
    !super::is_grad_enabled()
        && Arc::strong_count(&old.0) == 1
        && !old.requires_grad_flag()
        && old.owns_storage_exclusively()
        && !old.shares_storage(g)
        && old.dtype() == g.dtype()
        && old.device() == g.device()
}

/// A gradient a backward closure hands one input: whole, or as a slice of it.
enum Grad {
    Full(Tensor),
    Slice(SliceGrad),
}

impl Grad {
    fn full(self) -> Tensor {
        match self {
            Grad::Full(g) => g,
            Grad::Slice(g) => g.materialize(),
        }
    }
}

/// Runs backward from each `(output, grad_output)` pair. With `capture` non-empty, returns
/// the gradient reaching each captured edge instead of accumulating into leaves.
pub(crate) fn run_backward(
    roots: &[(Tensor, Tensor)],
    retain_graph: bool,
    create_graph: bool,
    capture: &[Edge],
) -> Vec<Option<Tensor>> {
    // Backward ops run in the dtypes forward chose; autocast does not apply to them.
    // A profile shows the gradient ops under one `backward` range.
    crate::profiler::record_function("backward", || {
        crate::autocast_state::autocast_disabled(|| {
            run_backward_inner(roots, retain_graph, create_graph, capture)
        })
    })
}

fn run_backward_inner(
    roots: &[(Tensor, Tensor)],
    retain_graph: bool,
    create_graph: bool,
    capture: &[Edge],
) -> Vec<Option<Tensor>> {
    let _mode = set_grad_enabled(create_graph);
    let sink = if capture.is_empty() {
        Sink::Accumulate
    } else {
        Sink::Capture(
            capture
                .iter()
                .enumerate()
                .map(|(i, e)| (e.key(), i))
                .collect(),
        )
    };
    let mut captured: Vec<Option<Tensor>> = vec![None; capture.len()];
    let deliver_leaf =
        |slot: &Arc<LeafSlot>, g: Tensor, captured: &mut Vec<Option<Tensor>>| match &sink {
            Sink::Accumulate => {
                let mut grad = slot.grad.lock().unwrap_or_else(|e| e.into_inner());
                // Own the first gradient outright, so later in-place updates of `.grad`
                // (clipping, optimizers) never write through a view of something else.
                let g = if grad.is_none() && !create_graph && !g.owns_storage_exclusively() {
                    g.deep_copy()
                } else {
                    g
                };
                add_grad(&mut grad, g);
            }
            Sink::Capture(index) => {
                if let Some(&i) = index.get(&(Arc::as_ptr(slot) as usize)) {
                    add_grad(&mut captured[i], g);
                }
            }
        };

    // Leaves with post-accumulate-grad hooks: how many edges lead into each, so that
    // their hooks run once, after the last gradient of this pass has been accumulated.
    let hooked = |slot: &Arc<LeafSlot>| {
        matches!(sink, Sink::Accumulate)
            && slot.hooks.any.load(std::sync::atomic::Ordering::Acquire)
    };
    let mut leaf_deps: HashMap<usize, (usize, bool)> = HashMap::new();
    let mut root_nodes: Vec<Arc<Node>> = Vec::new();
    for (output, _) in roots {
        match output.autograd_meta() {
            Some(AutogradMeta::Leaf(slot)) if hooked(slot) => {
                leaf_deps
                    .entry(Arc::as_ptr(slot) as usize)
                    .or_insert((0, false))
                    .0 += 1;
            }
            Some(AutogradMeta::Interior(node)) => root_nodes.push(node.clone()),
            _ => {}
        }
    }

    // Count, for every reachable node, how many edges lead into it.
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let mut seen: HashSet<usize> = root_nodes.iter().map(|n| Arc::as_ptr(n) as usize).collect();
    let mut stack: Vec<Arc<Node>> = root_nodes.clone();
    while let Some(node) = stack.pop() {
        for edge in node.next.iter().flatten() {
            match edge {
                Edge::Node(child) => {
                    let key = Arc::as_ptr(child) as usize;
                    *deps.entry(key).or_insert(0) += 1;
                    if seen.insert(key) {
                        stack.push(child.clone());
                    }
                }
                Edge::Leaf(slot) if hooked(slot) => {
                    leaf_deps
                        .entry(Arc::as_ptr(slot) as usize)
                        .or_insert((0, false))
                        .0 += 1;
                }
                Edge::Leaf(_) => {}
            }
        }
    }
    // One edge into a hooked leaf has been followed, with or without a gradient: its
    // hooks run when that was the last one and some gradient arrived.
    let mut arrive = |slot: &Arc<LeafSlot>, got: bool| {
        if let Some(entry) = leaf_deps.get_mut(&(Arc::as_ptr(slot) as usize)) {
            entry.0 -= 1;
            entry.1 |= got;
            if entry.0 == 0 && entry.1 {
                slot.hooks.run();
            }
        }
    };

    let mut pending: HashMap<usize, Tensor> = HashMap::new();
    for (output, grad) in roots {
        match output.autograd_meta() {
            None => panic!(
                "backward: element 0 of tensors does not require grad and does not have a grad_fn \
                 (output of shape {:?})",
                output.shape()
            ),
            Some(AutogradMeta::Leaf(slot)) => {
                deliver_leaf(slot, grad.clone(), &mut captured);
                arrive(slot, true);
            }
            Some(AutogradMeta::Interior(node)) => {
                let key = Arc::as_ptr(node) as usize;
                let mut slot = pending.remove(&key);
                add_grad(&mut slot, grad.clone());
                pending.insert(key, slot.expect("just added"));
            }
        }
    }

    let mut ready: Vec<Arc<Node>> = Vec::new();
    let mut queued: HashSet<usize> = HashSet::new();
    for node in root_nodes {
        let key = Arc::as_ptr(&node) as usize;
        if !deps.contains_key(&key) && queued.insert(key) {
            ready.push(node);
        }
    }
    while let Some(node) = ready.pop() {
        let key = Arc::as_ptr(&node) as usize;
        let grad = pending.remove(&key);
        if let (Sink::Capture(index), Some(g)) = (&sink, &grad)
            && let Some(&i) = index.get(&key)
        {
            add_grad(&mut captured[i], g.clone());
        }
        // The closure's gradients, and those it handed over as slices (rarely any).
        let (input_grads, mut slices) = match &grad {
            Some(g) => {
                let guard = node.backward.lock().unwrap_or_else(|e| e.into_inner());
                let Some(backward) = guard.as_ref() else {
                    panic!(
                        "backward: trying to backward through the graph a second time (through {}), \
                         or to use saved tensors after they were freed. Pass retain_graph = true \
                         to the first backward call if you need to backward twice.",
                        node.name
                    );
                };
                let ctx = BackwardCtx::new(&node);
                let grads = crate::profiler::record_named(
                    || format!("{}_backward", node.name),
                    || backward(&ctx, g),
                );
                drop(guard);
                let slices = ctx.regions.into_inner();
                if super::is_anomaly_enabled() {
                    let sliced: Vec<Tensor> = slices.iter().map(|(_, s)| s.grad.clone()).collect();
                    super::anomaly::check_gradients(&node, &grads, &sliced);
                }
                debug_assert_eq!(
                    grads.len(),
                    node.next.len(),
                    "{} returned the wrong number of gradients",
                    node.name
                );
                (grads, slices)
            }
            None => (Vec::new(), Vec::new()),
        };
        if !retain_graph {
            let freed = node
                .backward
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            drop(freed);
        }
        let mut input_grads = input_grads.into_iter();
        for (i, edge) in node.next.iter().enumerate() {
            let g = match input_grads.next().flatten() {
                Some(g) => Some(Grad::Full(g)),
                None => slices
                    .iter()
                    .position(|(at, _)| *at == i)
                    .map(|p| Grad::Slice(slices.swap_remove(p).1)),
            };
            let Some(edge) = edge else { continue };
            match edge {
                Edge::Leaf(slot) => {
                    let got = g.is_some();
                    if let Some(g) = g {
                        deliver_leaf(slot, g.full(), &mut captured);
                    }
                    arrive(slot, got);
                }
                Edge::Node(child) => {
                    let child_key = Arc::as_ptr(child) as usize;
                    if let Some(g) = g {
                        let mut slot = pending.remove(&child_key);
                        match g {
                            Grad::Full(g) => add_grad(&mut slot, g),
                            Grad::Slice(g) => add_slice_grad(&mut slot, g),
                        }
                        pending.insert(child_key, slot.expect("just added"));
                    }
                    let d = deps.get_mut(&child_key).expect("counted above");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(child.clone());
                    }
                }
            }
        }
    }
    captured
}

/// The gradients of `outputs` with respect to `inputs` (`torch.autograd.grad`), without
/// touching any `.grad`. `grad_outputs` defaults to ones for scalar outputs. With
/// `create_graph` the results carry their own graph (for higher-order derivatives) and
/// the graph is retained. An input that the outputs do not depend on gets `None`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad(true);
/// let y = (&x * &x).sum_all();
/// let g = ferrograd_runtime::autograd::grad(&[&y], &[&x], None, false);
/// assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>(), vec![2.0, 4.0]);
/// assert!(x.grad().is_none());
/// ```
#[track_caller]
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: Option<&[Tensor]>,
    create_graph: bool,
) -> Vec<Option<Tensor>> {
    grad_with(outputs, inputs, grad_outputs, create_graph, create_graph)
}

/// [`grad`] with an explicit `retain_graph` (keep the graph for another backward).
#[track_caller]
pub fn grad_with(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: Option<&[Tensor]>,
    retain_graph: bool,
    create_graph: bool,
) -> Vec<Option<Tensor>> {
    let roots = root_pairs(outputs, grad_outputs);
    let capture: Vec<Edge> = inputs
        .iter()
        .map(|t| {
            t.autograd_meta()
                .unwrap_or_else(|| {
                    panic!(
                        "grad: an input of shape {:?} does not require grad",
                        t.shape()
                    )
                })
                .edge()
        })
        .collect();
    run_backward(&roots, retain_graph, create_graph, &capture)
}

#[track_caller]
pub(crate) fn root_pairs(
    outputs: &[&Tensor],
    grad_outputs: Option<&[Tensor]>,
) -> Vec<(Tensor, Tensor)> {
    outputs
        .iter()
        .enumerate()
        .map(|(i, &out)| {
            let g = match grad_outputs {
                Some(gs) => {
                    let g = &gs[i];
                    assert!(
                        g.shape() == out.shape(),
                        "backward: grad_output {i} has shape {:?} but the output has shape {:?}",
                        g.shape(),
                        out.shape()
                    );
                    g.clone()
                }
                None => {
                    assert!(
                        out.numel() == 1,
                        "backward: grad can be implicitly created only for scalar outputs, got shape {:?}",
                        out.shape()
                    );
                    Tensor::ones_like(out)
                }
            };
            (out.clone(), g)
        })
        .collect()
}
