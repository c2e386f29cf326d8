//! Autograd semantics: accumulation, graph freeing, no_grad, pruning, higher order,
//! custom functions, checkpointing, in-place safety, and very deep graphs.

use ferrograd::autograd::{Function, FunctionCtx, SavedTensors, apply, grad};
use ferrograd::prelude::*;

fn leaf(values: Vec<f64>) -> Tensor {
    let n = values.len();
    Tensor::from_vec(values, &[n]).requires_grad(true)
}

#[test]
fn issue_example_runs_and_gives_correct_shapes() {
    // Its own generator: the process-wide one belongs to the checkpoint-dropout test,
    // whose replay must find the draws it made (tests run on several threads).
    let rng = &mut Generator::new(0);
    let x = Tensor::randn_with(&[64, 784], DType::F32, &Device::Cpu, rng);
    let w = Tensor::randn_with(&[784, 10], DType::F32, &Device::Cpu, rng).requires_grad(true);
    let loss = x.matmul(&w).log_softmax(-1).mean_all();
    loss.backward();
    let g: Tensor = w.grad().unwrap();
    assert_eq!(g.shape(), &[784, 10]);
    // d mean(log_softmax) / d logits sums to zero per row up to the mean's 1/N scaling,
    // so the gradient w.r.t. w is x^T (1/640 - softmax/64): check one entry directly.
    let logits = x.matmul(&w.detach());
    let expected = x.t().matmul(
        &(Tensor::full(&[64, 10], 1.0 / 640.0, DType::F32, &Device::Cpu)
            - logits.softmax(-1) / 64.0),
    );
    assert!(g.allclose(&expected, 1e-4, 1e-5));
}

#[test]
fn relu_backward_follows_pytorchs_threshold_rule() {
    // No gradient where x <= 0; a NaN input passes its gradient (threshold_backward).
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::from_vec(vec![f64::NAN, -1.0, 0.0, 2.0], &[4])
            .to_dtype(dtype)
            .requires_grad(true);
        let g = Tensor::from_vec(vec![3.0, 4.0, 5.0, 6.0], &[4]).to_dtype(dtype);
        x.relu().backward_with(&g);
        let grad = x.grad().unwrap().to_dtype(DType::F64).to_vec::<f64>();
        assert_eq!(grad, vec![3.0, 0.0, 0.0, 6.0], "{dtype:?}");
        // The differentiable form (create_graph) agrees.
        let x2 = x.detach().requires_grad(true);
        let y = x2.relu();
        let d = ferrograd::autograd::grad(&[&y], &[&x2], Some(std::slice::from_ref(&g)), true)[0]
            .clone()
            .unwrap();
        assert_eq!(
            d.to_dtype(DType::F64).to_vec::<f64>(),
            vec![3.0, 0.0, 0.0, 6.0]
        );
    }
}

#[test]
fn gradients_accumulate_across_backward_calls() {
    let x = leaf(vec![1.0, 2.0]);
    (&x * 3.0).sum_all().backward();
    (&x * &x).sum_all().backward();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![5.0, 7.0]);
    x.zero_grad();
    assert!(x.grad().is_none());
}

/// Gradients are summed in place where nothing else can see the running sum (PyTorch's
/// input buffers and `AccumulateGrad`), and never through a tensor someone holds: a `.grad`
/// taken before the next backward keeps its values, a gradient handed to two inputs
/// (`add`'s backward) is not written through one of them, and the slices of one tensor
/// (q/k/v from one projection) sum to the whole gradient.
#[test]
fn gradients_sum_in_place_only_where_nothing_else_sees_them() {
    let x = leaf(vec![1.0, 2.0]);
    (&x * 3.0).sum_all().backward();
    let held = x.grad().unwrap();
    (&x * &x).sum_all().backward();
    assert_eq!(
        held.to_vec::<f64>(),
        vec![3.0, 3.0],
        "a held .grad is not written"
    );
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![5.0, 7.0]);
    // Dropped handles: the next pass may sum in place, and the values are the same.
    drop(held);
    (&x * 2.0).sum_all().backward();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![7.0, 9.0]);

    // a + b shares one gradient between a and b; each then gathers more.
    let w = leaf(vec![1.0, -1.0, 0.5]);
    let a = &w * 2.0;
    let b = w.exp();
    let out = (&a + &b)
        .sum_all()
        .add(&(&a * &a).sum_all())
        .add(&b.sum_all());
    out.backward();
    let wv = [1.0f64, -1.0, 0.5];
    let want: Vec<f64> = wv
        .iter()
        .map(|&v| 2.0 + v.exp() + 8.0 * v + v.exp())
        .collect();
    let got = w.grad().unwrap().to_vec::<f64>();
    for (g, e) in got.iter().zip(&want) {
        assert!((g - e).abs() < 1e-12, "{got:?} vs {want:?}");
    }

    // Three selects of one tensor: the slices' gradients fill the whole.
    let p = Tensor::arange(0.0, 12.0, 1.0, DType::F64, &Device::Cpu)
        .reshape(&[2, 3, 2])
        .requires_grad(true);
    let parts: Vec<Tensor> = (0..3).map(|i| p.select(1, i)).collect();
    parts[0]
        .mul_scalar(1.0)
        .add(&parts[1].mul_scalar(10.0))
        .add(&parts[2].mul_scalar(100.0))
        .sum_all()
        .backward();
    assert_eq!(
        p.grad().unwrap().to_vec::<f64>(),
        vec![
            1.0, 1.0, 10.0, 10.0, 100.0, 100.0, 1.0, 1.0, 10.0, 10.0, 100.0, 100.0
        ]
    );
}

#[test]
fn graph_is_freed_after_backward_unless_retained() {
    let x = leaf(vec![1.0]);
    let y = x.exp().sum_all();
    y.backward_with_options(None, true, false);
    y.backward();
    assert!((x.grad().unwrap().item::<f64>() - 2.0 * 1f64.exp()).abs() < 1e-12);
    let result = std::panic::catch_unwind(|| y.backward());
    let message = *result.unwrap_err().downcast::<String>().unwrap();
    assert!(
        message.contains("backward through the graph a second time")
            && message.contains("retain_graph"),
        "{message}"
    );
}

#[test]
fn no_grad_records_nothing_and_is_restored() {
    let x = leaf(vec![1.0]);
    let y = no_grad(|| &x * 2.0);
    assert!(!y.requires_grad_flag() && y.grad_fn().is_none());
    assert!(is_grad_enabled());
    let guard = NoGradGuard::new();
    assert!(!(&x * 2.0).requires_grad_flag());
    drop(guard);
    assert!((&x * 2.0).requires_grad_flag());
}

#[test]
fn only_paths_to_leaves_that_need_grad_are_computed() {
    let a = leaf(vec![1.0, 2.0]);
    let constant = Tensor::from_vec(vec![3.0f64, 4.0], &[2]);
    let y = (&a * &constant).sum_all();
    y.backward();
    assert_eq!(a.grad().unwrap().to_vec::<f64>(), vec![3.0, 4.0]);
    assert!(constant.grad().is_none());
    // A branch that does not reach a leaf needing grad records no node at all.
    assert!(!(&constant * 2.0).requires_grad_flag());
}

#[test]
fn backward_with_explicit_gradient() {
    let x = leaf(vec![1.0, 2.0, 3.0]);
    let y = &x * &x;
    y.backward_with(&Tensor::from_vec(vec![1.0f64, 0.0, -1.0], &[3]));
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![2.0, 0.0, -6.0]);
}

#[test]
fn create_graph_gives_second_and_third_derivatives() {
    let x = leaf(vec![0.3, -1.2]);
    let y = x.sin().sum_all();
    let dy = grad(&[&y], &[&x], None, true)[0].clone().unwrap();
    let d2y = grad(&[&dy.sum_all()], &[&x], None, true)[0]
        .clone()
        .unwrap();
    let d3y = grad(&[&d2y.sum_all()], &[&x], None, false)[0]
        .clone()
        .unwrap();
    let xs = x.detach();
    assert!(dy.allclose(&xs.cos(), 1e-12, 1e-12));
    assert!(d2y.allclose(&xs.sin().neg(), 1e-12, 1e-12));
    assert!(d3y.allclose(&xs.cos().neg(), 1e-12, 1e-12));
    assert!(x.grad().is_none(), "autograd::grad must not touch .grad");
}

#[test]
fn backward_with_create_graph_accumulates_a_differentiable_grad() {
    let x = leaf(vec![2.0]);
    (&x * &x * &x)
        .sum_all()
        .backward_with_options(None, false, true);
    let g = x.grad().unwrap();
    assert!(g.requires_grad_flag());
    assert_eq!(g.item::<f64>(), 12.0);
    let h = grad(&[&g.sum_all()], &[&x], None, false)[0]
        .clone()
        .unwrap();
    assert_eq!(h.item::<f64>(), 12.0);
}

struct ScaledSquare(f64);
impl Function for ScaledSquare {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Tensor {
        ctx.save_for_backward(&inputs[0]);
        &inputs[0] * &inputs[0] * self.0
    }
    fn backward(&self, saved: &SavedTensors, grad: &Tensor) -> Vec<Option<Tensor>> {
        vec![Some(grad * &saved.get(0) * (2.0 * self.0))]
    }
}

#[test]
fn custom_function_forward_and_backward() {
    let x = leaf(vec![1.0, -3.0]);
    let y = apply(ScaledSquare(0.5), &[&x]);
    assert_eq!(y.to_vec::<f64>(), vec![0.5, 4.5]);
    assert!(y.grad_fn().unwrap().contains("ScaledSquare"));
    y.sum_all().backward();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![1.0, -3.0]);
}

#[test]
fn checkpoint_matches_plain_backward_and_reaches_parameters() {
    let w = leaf(vec![0.5, -0.25, 2.0]);
    let x1 = leaf(vec![1.0, 2.0, 3.0]);
    let x2 = leaf(vec![1.0, 2.0, 3.0]);
    let block = {
        let w = w.clone();
        move |xs: &[Tensor]| (&xs[0] * &w).tanh().exp()
    };
    block(std::slice::from_ref(&x1)).sum_all().backward();
    let (plain_x, plain_w) = (x1.grad().unwrap(), w.grad().unwrap());
    w.zero_grad();
    checkpoint(block, &[&x2]).sum_all().backward();
    assert!(x2.grad().unwrap().allclose(&plain_x, 1e-12, 1e-12));
    assert!(w.grad().unwrap().allclose(&plain_w, 1e-12, 1e-12));
}

#[test]
fn checkpoint_replays_dropout_with_the_same_mask() {
    // The only test in this file that uses the process-wide generator.
    manual_seed(42);
    let x = Tensor::ones(&[64], DType::F64, &Device::Cpu).requires_grad(true);
    let y = checkpoint(|xs: &[Tensor]| F::dropout(&xs[0], 0.5, true), &[&x]);
    y.sum_all().backward();
    // The gradient is the mask the forward used: 2 where kept, 0 where dropped.
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), y.to_vec::<f64>());
}

#[test]
fn modifying_a_saved_tensor_in_place_is_an_error_at_backward() {
    let x = leaf(vec![1.0, 2.0]);
    let b = Tensor::from_vec(vec![3.0f64, 4.0], &[2]);
    let y = (&x * &b).sum_all();
    b.add_scalar_(1.0);
    let result = std::panic::catch_unwind(|| y.backward());
    let message = *result.unwrap_err().downcast::<String>().unwrap();
    assert!(
        message.contains("modified by an inplace operation") && message.contains("mul"),
        "{message}"
    );
}

#[test]
fn in_place_on_a_leaf_requiring_grad_needs_no_grad() {
    let w = leaf(vec![1.0, 2.0]);
    let result = std::panic::catch_unwind(|| {
        w.add_scalar_(1.0);
    });
    let message = *result.unwrap_err().downcast::<String>().unwrap();
    assert!(
        message.contains("add_") && message.contains("leaf"),
        "{message}"
    );
    no_grad(|| w.add_scaled_(&Tensor::ones(&[2], DType::F64, &Device::Cpu), -0.5));
    assert_eq!(w.to_vec::<f64>(), vec![0.5, 1.5]);
}

#[test]
fn a_million_op_chain_backpropagates_and_drops_without_stack_overflow() {
    // Runs on a thread with a deliberately small stack: recursion anywhere would overflow.
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let x = Tensor::from_vec(vec![1.0f32], &[1]).requires_grad(true);
            let mut y = x.clone();
            for _ in 0..1_000_000 {
                y = &y * 1.0;
            }
            let y = y.sum_all();
            y.backward();
            assert_eq!(x.grad().unwrap().item::<f32>(), 1.0);
            // And a second graph dropped without ever running backward.
            let mut z = x.clone();
            for _ in 0..1_000_000 {
                z = z.exp().log();
            }
            drop(z);
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn requires_grad_rules_follow_pytorch() {
    let i = Tensor::from_vec(vec![1i64], &[1]);
    assert!(std::panic::catch_unwind(|| i.clone().requires_grad(true)).is_err());
    let x = leaf(vec![1.0]);
    let y = &x * 2.0;
    assert!(!y.is_leaf() && x.is_leaf());
    assert_eq!(y.grad_fn(), Some("mul"));
    assert!(!y.detach().requires_grad_flag());
    let result = std::panic::catch_unwind(|| y.clone().requires_grad(false));
    assert!(result.is_err());
}

#[test]
fn gradients_flow_through_dtype_promotion() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad(true);
    let y = Tensor::from_vec(vec![3.0f64, 4.0], &[2]);
    let z = &x * &y;
    assert_eq!(z.dtype(), DType::F64);
    z.sum_all().backward();
    let g = x.grad().unwrap();
    assert_eq!((g.dtype(), g.to_vec::<f32>()), (DType::F32, vec![3.0, 4.0]));
}

// ---- post-accumulate-grad hooks (`Tensor::register_post_accumulate_grad_hook`) ----------

/// What the recording hooks saw: the hook's name and the gradient, per call.
type HookLog = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<f64>)>>>;

/// Records, per call, the name given and the gradient the leaf held.
fn recording_hook(log: &HookLog, name: &str) -> impl Fn(&Tensor) + Send + Sync + 'static {
    let (log, name) = (log.clone(), name.to_string());
    move |leaf: &Tensor| {
        let g = leaf
            .grad()
            .expect("the hook runs after accumulation")
            .to_vec::<f64>();
        log.lock().unwrap().push((name.clone(), g));
    }
}

#[test]
fn post_accumulate_grad_hook_runs_once_after_the_last_gradient() {
    use std::sync::{Arc, Mutex};
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad(true);
    let b = Tensor::from_vec(vec![0.5f64, 0.5], &[2]).requires_grad(true);
    let _hw = w.register_post_accumulate_grad_hook(recording_hook(&log, "w"));
    let _hb = b.register_post_accumulate_grad_hook(recording_hook(&log, "b"));
    // w reaches the loss along three paths, b along one: each hook runs once, with the
    // complete gradient (d/dw of sum(w*w + 3w + b) = 2w + 3).
    let y = (&(&w * &w) + &(&w * 3.0)) + &b;
    y.sum_all().backward();
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    let get = |n: &str| log.iter().find(|(k, _)| k == n).unwrap().1.clone();
    assert_eq!(get("w"), vec![5.0, 7.0]);
    assert_eq!(get("b"), vec![1.0, 1.0]);
}

#[test]
fn post_accumulate_grad_hook_sees_accumulation_across_passes_and_order() {
    use std::sync::{Arc, Mutex};
    let log = Arc::new(Mutex::new(Vec::new()));
    // A chain: the last layer's weight is ready first, as DDP's reverse bucket order assumes.
    let w1 = Tensor::from_vec(vec![2.0f64], &[1]).requires_grad(true);
    let w2 = Tensor::from_vec(vec![3.0f64], &[1]).requires_grad(true);
    let _h1 = w1.register_post_accumulate_grad_hook(recording_hook(&log, "w1"));
    let _h2 = w2.register_post_accumulate_grad_hook(recording_hook(&log, "w2"));
    let x = Tensor::from_vec(vec![1.0f64], &[1]);
    let forward = || (&(&x * &w1).exp() * &w2).sum_all();
    forward().backward();
    forward().backward(); // accumulates: the hook sees the running .grad
    let log = log.lock().unwrap().clone();
    let names: Vec<&str> = log.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["w2", "w1", "w2", "w1"]);
    let e2 = 2.0f64.exp();
    assert!((log[2].1[0] - 2.0 * e2).abs() < 1e-12);
    assert!((log[3].1[0] - 2.0 * 3.0 * e2).abs() < 1e-9);
}

#[test]
fn post_accumulate_grad_hook_skips_leaves_without_a_gradient_and_autograd_grad() {
    use std::sync::{Arc, Mutex};
    let log = Arc::new(Mutex::new(Vec::new()));
    let used = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    let unused = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    let _a = used.register_post_accumulate_grad_hook(recording_hook(&log, "used"));
    let _b = unused.register_post_accumulate_grad_hook(recording_hook(&log, "unused"));
    (&used * 2.0).sum_all().backward();
    // autograd::grad touches no .grad, so no hook runs.
    let y = (&used * &unused).sum_all();
    let _ = ferrograd::autograd::grad(&[&y], &[&used], None, false);
    let names: Vec<String> = log.lock().unwrap().iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, ["used"]);
}

#[test]
#[should_panic(expected = "can only be registered on leaf tensors")]
fn post_accumulate_grad_hook_on_a_non_leaf_panics() {
    let w = Tensor::from_vec(vec![1.0f64], &[1]).requires_grad(true);
    let _ = (&w * 2.0).register_post_accumulate_grad_hook(|_| {});
}

/// A slice's gradient is added into its input's gradient by the engine (no full-size
/// zero tensor per slice): the sums must equal the definition whatever the mix — slices
/// of an interior node (`q`, `k`, `v` of one projection), overlapping and strided slices,
/// a whole-tensor use beside them in either order, a sliced leaf, and double backward
/// through slices (`create_graph`, which takes the recorded path).
#[test]
fn slice_gradients_accumulate_like_their_definition() {
    let x = Tensor::from_vec((0..24).map(|v| v as f64 * 0.5 - 3.0).collect(), &[2, 3, 4])
        .requires_grad(true);
    let w = Tensor::from_vec(
        (0..24).map(|v| (v as f64 * 0.37).sin()).collect(),
        &[2, 3, 4],
    );
    // Interior node: h = x * w; slices of h along dim 1, one of them twice, one strided,
    // and h used whole between them.
    let h = x.mul(&w);
    let loss = h.select(1, 0).mul_scalar(2.0).sum_all()
        + h.mul_scalar(0.25).sum_all()
        + h.select(1, 2).sum_all()
        + h.select(1, 2).mul_scalar(3.0).sum_all()
        + h.slice(2, 1, 4, 2).mul_scalar(-1.0).sum_all();
    loss.backward();
    // d loss / d h[i, j, k] = 0.25 + 2 [j == 0] + 4 [j == 2] - [k odd]
    let want: Vec<f64> = (0..24)
        .map(|idx| {
            let (j, k) = (idx / 4 % 3, idx % 4);
            let dh = 0.25 + if j == 0 { 2.0 } else { 0.0 } + if j == 2 { 4.0 } else { 0.0 }
                - if k % 2 == 1 { 1.0 } else { 0.0 };
            dh * w.to_vec::<f64>()[idx]
        })
        .collect();
    let got = x.grad().expect("x has a gradient").to_vec::<f64>();
    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
        assert!((g - e).abs() < 1e-12, "x.grad[{i}] = {g}, want {e}");
    }

    // A sliced leaf: its slices' gradients reach `.grad` as full tensors.
    let y = leaf(vec![1.0, 2.0, 3.0, 4.0]);
    (y.narrow(0, 0, 2).sum_all() + y.narrow(0, 1, 3).mul_scalar(10.0).sum_all()).backward();
    assert_eq!(
        y.grad().unwrap().to_vec::<f64>(),
        vec![1.0, 11.0, 10.0, 10.0]
    );

    // Double backward through slices: d/dz of sum((z[0:2]^2)) = 2 z on the slice, and
    // the gradient of that gradient's sum is 2 there.
    let z = leaf(vec![1.0, -2.0, 3.0]);
    let s = z.narrow(0, 0, 2);
    let g = grad(&[&s.mul(&s).sum_all()], &[&z], None, true)[0]
        .clone()
        .unwrap();
    assert_eq!(g.to_vec::<f64>(), vec![2.0, -4.0, 0.0]);
    let gg = grad(&[&g.sum_all()], &[&z], None, false)[0]
        .clone()
        .unwrap();
    assert_eq!(gg.to_vec::<f64>(), vec![2.0, 2.0, 0.0]);
}

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn detect_anomaly_names_the_gradient_function_the_op_and_the_line() {
    use ferrograd::autograd::{detect_anomaly, is_anomaly_enabled};
    // PyTorch's example: sqrt at 0 has an infinite derivative; times a zero gradient
    // it is NaN, made by sqrt's gradient function.
    let x = leaf(vec![0.0, 4.0]);
    let mut line = 0;
    let message = panic_message(|| {
        detect_anomaly(|| {
            assert!(is_anomaly_enabled());
            line = line!() + 1;
            let y = x.sqrt();
            (&y * 0.0).sum_all().backward();
        })
    });
    assert!(!is_anomaly_enabled(), "the scope ends on a panic too");
    assert!(
        message.contains("'sqrt_backward' returned nan values in its 0th output"),
        "{message}"
    );
    assert!(
        message.contains(&format!("`sqrt`, called at tests/autograd.rs:{line}:")),
        "{message}"
    );

    // The same graph without detection: backward finishes, the gradient is NaN.
    x.zero_grad();
    let y = x.sqrt();
    (&y * 0.0).sum_all().backward();
    assert!(x.grad().unwrap().to_vec::<f64>()[0].is_nan());
}

#[test]
fn detect_anomaly_names_the_users_op_for_a_composite() {
    use ferrograd::autograd::detect_anomaly;
    // The 2-norm of a zero vector: its gradient x / |x| is 0 / 0. The failing gradient
    // function is one of `norm`'s pieces; the message names `norm` and this line.
    let x = leaf(vec![0.0, 0.0, 0.0]);
    let mut line = 0;
    let message = panic_message(|| {
        detect_anomaly(|| {
            line = line!() + 1;
            let n = x.norm(2.0, &[0], false);
            n.sum_all().backward();
        })
    });
    assert!(message.contains("returned nan values"), "{message}");
    assert!(
        message.contains(&format!("`norm`, called at tests/autograd.rs:{line}:")),
        "{message}"
    );
}

#[test]
fn detect_anomaly_lets_finite_gradients_through() {
    use ferrograd::autograd::detect_anomaly;
    let x = leaf(vec![1.0, 4.0]);
    detect_anomaly(|| x.sqrt().sum_all().backward());
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![0.5, 0.25]);
}
