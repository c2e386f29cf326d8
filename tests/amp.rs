//! Mixed precision: which ops autocast casts, gradients through the casts, loss scaling.

use ferrograd::amp::{GradScaler, autocast, autocast_disabled, autocast_dtype};
use ferrograd::autograd::no_grad;
use ferrograd::prelude::*;

/// Normal f32 draws from the test's own generator: the global one is shared by the tests
/// running in parallel, so its draws would depend on their interleaving.
fn randn(shape: &[usize], rng: &mut Generator) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &Device::Cpu, rng)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    a.to_dtype(DType::F64)
        .sub(&b.to_dtype(DType::F64))
        .abs()
        .max_all()
        .item::<f64>()
}

fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).item::<f64>()
}

#[test]
fn matmul_family_runs_low_and_precision_sensitive_ops_run_in_f32() {
    let mut rng = Generator::new(0);
    let (x, w, b) = (
        randn(&[4, 8], &mut rng),
        randn(&[3, 8], &mut rng),
        randn(&[3], &mut rng),
    );
    let img = randn(&[2, 3, 8, 8], &mut rng);
    let k = randn(&[5, 3, 3, 3], &mut rng);
    for low in [DType::BF16, DType::F16] {
        autocast(low, || {
            assert_eq!(x.matmul(&w.t()).dtype(), low, "matmul");
            assert_eq!(x.unsqueeze(0).bmm(&w.t().unsqueeze(0)).dtype(), low, "bmm");
            assert_eq!(
                F::linear(&x, &w, Some(&b)).dtype(),
                low,
                "linear with f32 bias"
            );
            let conv = F::conv2d(
                &img,
                &k,
                Some(&Tensor::zeros(&[5], DType::F32, &Device::Cpu)),
                &Default::default(),
            );
            assert_eq!(conv.dtype(), low, "conv2d");
            let h = x.to_dtype(low);
            for (name, y) in [
                ("softmax", h.softmax(-1)),
                ("log_softmax", h.log_softmax(-1)),
                ("logsumexp", h.logsumexp(&[1], false)),
                ("sum", h.sum_all()),
                ("prod", h.prod(1, false)),
                ("cumsum", h.cumsum(1)),
                ("norm", h.norm(2.0, &[], false)),
                ("exp", h.exp()),
                ("log", h.abs().log()),
                ("rsqrt", h.abs().rsqrt()),
                ("layer_norm", F::layer_norm(&h, &[8], None, None, 1e-5)),
                ("mse_loss", F::mse_loss(&h, &h, F::Reduction::Mean)),
                (
                    "cross_entropy",
                    F::cross_entropy(&h, &Tensor::from_vec(vec![0i64, 1, 2, 3], &[4])),
                ),
            ] {
                assert_eq!(y.dtype(), DType::F32, "{name} under autocast({low:?})");
            }
            // Other ops keep their inputs' dtype; mean of a low tensor stays low.
            assert_eq!(h.relu().dtype(), low);
            assert_eq!(h.mean_all().dtype(), low);
            // f64 and integer tensors are never cast.
            let d = x.to_dtype(DType::F64);
            assert_eq!(d.matmul(&d.t()).dtype(), DType::F64);
            let i = Tensor::ones(&[2, 2], DType::I64, &Device::Cpu);
            assert_eq!(i.matmul(&i).dtype(), DType::I64);
        });
    }
    // Outside the scope nothing is cast.
    assert_eq!(x.matmul(&w.t()).dtype(), DType::F32);
}

#[test]
fn scopes_nest_disable_and_restore_even_after_a_panic() {
    assert_eq!(autocast_dtype(), None);
    autocast(DType::BF16, || {
        autocast(DType::F16, || {
            assert_eq!(autocast_dtype(), Some(DType::F16))
        });
        assert_eq!(autocast_dtype(), Some(DType::BF16));
        autocast_disabled(|| {
            let a = randn(&[2, 2], &mut Generator::new(4));
            assert_eq!(a.matmul(&a).dtype(), DType::F32);
        });
    });
    let caught = std::panic::catch_unwind(|| autocast(DType::BF16, || panic!("inside")));
    assert!(caught.is_err());
    assert_eq!(autocast_dtype(), None, "the panic left autocast on");
    // Another thread has its own state.
    autocast(DType::BF16, || {
        std::thread::spawn(|| assert_eq!(autocast_dtype(), None))
            .join()
            .unwrap()
    });
}

#[test]
#[should_panic(expected = "autocast: expected DType::BF16 or DType::F16, got F32")]
fn autocast_to_f32_is_refused() {
    autocast(DType::F32, || ());
}

#[test]
fn gradients_flow_through_the_casts_in_f32_and_match_full_precision() {
    let mut rng = Generator::new(1);
    let x = randn(&[16, 32], &mut rng);
    let target = Tensor::randint_with(0, 10, &[16], &Device::Cpu, &mut rng);
    let w1 = randn(&[64, 32], &mut rng)
        .mul_scalar(0.2)
        .requires_grad(true);
    let w2 = randn(&[10, 64], &mut rng)
        .mul_scalar(0.2)
        .requires_grad(true);
    let forward = || {
        let h = F::linear(&x, &w1, None).relu();
        F::cross_entropy(&F::linear(&h, &w2, None), &target)
    };
    let loss32 = forward();
    loss32.backward();
    let (g1, g2) = (w1.grad().unwrap(), w2.grad().unwrap());
    w1.zero_grad();
    w2.zero_grad();
    let loss16 = autocast(DType::BF16, forward);
    assert_eq!(loss16.dtype(), DType::F32);
    loss16.backward();
    let (h1, h2) = (w1.grad().unwrap(), w2.grad().unwrap());
    assert_eq!((h1.dtype(), h2.dtype()), (DType::F32, DType::F32));
    // bf16 keeps 8 bits of mantissa: agreement to a few percent of the gradient's scale.
    let tol = |g: &Tensor| 0.05 * scalar(&g.abs().max_all());
    assert!((scalar(&loss16) - scalar(&loss32)).abs() < 0.05);
    assert!(
        max_abs_diff(&h1, &g1) < tol(&g1),
        "{}",
        max_abs_diff(&h1, &g1)
    );
    assert!(
        max_abs_diff(&h2, &g2) < tol(&g2),
        "{}",
        max_abs_diff(&h2, &g2)
    );
}

#[test]
fn grad_scaler_rescues_gradients_that_underflow_in_f16() {
    let mut rng = Generator::new(2);
    let x = randn(&[8, 4], &mut rng).abs().add_scalar(0.5);
    let w = randn(&[4, 3], &mut rng).requires_grad(true);
    // d loss / d y = 1e-8 per element: below f16's smallest subnormal (6e-8).
    let loss = || autocast(DType::F16, || x.matmul(&w).mul_scalar(1e-8).sum_all());
    loss().backward();
    assert_eq!(
        w.grad().unwrap().abs().max_all().item::<f32>(),
        0.0,
        "unscaled, the f16 gradient flushes to zero"
    );
    w.zero_grad();

    let mut scaler = GradScaler::new().init_scale(1024.0);
    scaler.scale(&loss()).backward();
    let params = [w.clone()];
    let stepped = scaler.step(&params, || ());
    assert!(stepped.is_some());
    scaler.update();
    // The expected gradient: x^T @ (1e-8 everywhere) = 1e-8 * column sums of x.
    let expected = x
        .sum(&[0], false)
        .mul_scalar(1e-8)
        .unsqueeze(1)
        .expand(&[4, 3]);
    let got = w.grad().unwrap();
    let rel = max_abs_diff(&got, &expected) / scalar(&expected.abs().max_all());
    assert!(rel < 0.02, "relative error {rel}");
}

#[test]
fn grad_scaler_skips_overflowing_steps_and_adapts_the_scale() {
    let w = Tensor::ones(&[3], DType::F32, &Device::Cpu).requires_grad(true);
    let params = [w.clone()];
    let mut scaler = GradScaler::new()
        .init_scale(8.0)
        .growth(2.0, 2)
        .backoff(0.5);
    assert_eq!(
        scaler
            .scale(&Tensor::from_vec(vec![1.5f32], &[]))
            .item::<f32>(),
        12.0
    );

    let mut steps = 0;
    let mut iterate = |grad: Vec<f32>| {
        w.set_grad(Some(Tensor::from_vec(grad, &[3])));
        let out = scaler.step(&params, || steps += 1);
        scaler.update();
        (out.is_some(), scaler.get_scale())
    };
    assert_eq!(iterate(vec![8.0, 16.0, 0.0]), (true, 8.0));
    assert_eq!(
        w.grad().unwrap().to_vec::<f32>(),
        vec![1.0, 2.0, 0.0],
        "unscaled in place"
    );
    assert_eq!(
        iterate(vec![1.0, 1.0, 1.0]),
        (true, 16.0),
        "grows after 2 clean steps"
    );
    assert_eq!(
        iterate(vec![1.0, f32::INFINITY, 1.0]),
        (false, 8.0),
        "inf: skip, back off"
    );
    assert_eq!(
        iterate(vec![f32::NAN, 1.0, 1.0]),
        (false, 4.0),
        "NaN: skip, back off"
    );
    assert_eq!(
        iterate(vec![1.0, 1.0, 1.0]),
        (true, 4.0),
        "the growth count restarted"
    );
    assert_eq!(steps, 3);

    // unscale_ before step (to clip in between) is honoured once.
    w.set_grad(Some(Tensor::from_vec(vec![4.0f32, 4.0, 4.0], &[3])));
    assert!(!scaler.unscale_(&params));
    no_grad(|| {
        w.grad().unwrap().clamp_(-0.5, 0.5);
    });
    assert!(scaler.step(&params, || ()).is_some());
    scaler.update();
    assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![0.5, 0.5, 0.5]);

    let mut off = GradScaler::new().enabled(false);
    assert_eq!(off.get_scale(), 1.0);
    w.set_grad(Some(Tensor::from_vec(vec![f32::INFINITY, 0.0, 0.0], &[3])));
    assert!(off.step(&params, || ()).is_some(), "disabled: never skips");
    off.update();
}

#[test]
#[should_panic(expected = "GradScaler::update: call step() (or unscale_()) first")]
fn grad_scaler_update_without_step_panics() {
    GradScaler::new().update();
}

#[test]
fn a_small_mlp_trains_under_bf16_autocast() {
    let mut rng = Generator::new(3);
    let x = randn(&[64, 8], &mut rng);
    let target = x.sum(&[1], false).gt_scalar(0.0).to_dtype(DType::I64);
    let w1 = randn(&[32, 8], &mut rng)
        .mul_scalar(0.3)
        .requires_grad(true);
    let w2 = randn(&[2, 32], &mut rng)
        .mul_scalar(0.3)
        .requires_grad(true);
    let mut losses = vec![];
    for _ in 0..60 {
        let loss = autocast(DType::BF16, || {
            F::cross_entropy(
                &F::linear(&F::linear(&x, &w1, None).relu(), &w2, None),
                &target,
            )
        });
        losses.push(loss.item::<f32>());
        loss.backward();
        no_grad(|| {
            for w in [&w1, &w2] {
                w.add_scaled_(&w.grad().unwrap(), -0.5);
                w.zero_grad();
            }
        });
    }
    assert!(
        losses[59] < 0.5 * losses[0],
        "loss {} -> {}",
        losses[0],
        losses[59]
    );
}
