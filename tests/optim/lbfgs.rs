//! L-BFGS against PyTorch's trajectories (strong Wolfe line search), and its refusal to step
//! without a closure.

use super::*;

/// The function the L-BFGS fixtures minimise (`lbfgs_loss` of the fixture script).
pub(super) fn lbfgs_loss(
    a: &Tensor,
    b: &Tensor,
    fx: &HashMap<String, Tensor>,
    on: &dyn Fn(&Tensor) -> Tensor,
) -> Tensor {
    let (w, ta, tb) = (
        on(&fx["lbfgs.w_a"]),
        on(&fx["lbfgs.t_a"]),
        on(&fx["lbfgs.t_b"]),
    );
    (&w * (a - &ta).pow_scalar(2.0)).sum_all()
        + a.pow_scalar(4.0).sum_all() * 0.25
        + (b - &tb).pow_scalar(2.0).sum_all()
        + (b * 0.3).exp().sum_all()
}

pub(super) fn lbfgs_replay(device: &Device, dtype: DType) {
    let fx = fixtures();
    let on = |t: &Tensor| t.to_dtype(dtype).to_device(device).unwrap().deep_copy();
    let cases = [
        ("lbfgs", LbfgsConfig::default().lr(1.0).max_iter(4)),
        (
            "lbfgs_strong_wolfe",
            LbfgsConfig::default()
                .max_iter(6)
                .history_size(3)
                .line_search(LineSearch::StrongWolfe),
        ),
    ];
    for (name, config) in cases {
        let a = on(&fx["init_a"]).requires_grad(true);
        let b = on(&fx["init_b"]).requires_grad(true);
        let mut opt = Lbfgs::new(vec![a.clone(), b.clone()], config);
        for k in 0..5 {
            let loss = opt.step_with(&mut || {
                a.zero_grad();
                b.zero_grad();
                let loss = lbfgs_loss(&a, &b, &fx, &on);
                loss.backward();
                loss.to_dtype(DType::F64).item::<f64>()
            });
            let expected = fx[&format!("{name}.loss{k}")].to_vec::<f64>()[0];
            let tol = if dtype == DType::F64 { 1e-9 } else { 1e-4 };
            assert!(
                (loss - expected).abs() <= tol * expected.abs().max(1.0),
                "{name} step {k} on {device} in {dtype:?}: loss {loss}, PyTorch {expected}"
            );
            for (p, which) in [(&a, "a"), (&b, "b")] {
                let expected = &fx[&format!("{name}.p{k}_{which}")];
                let result = std::panic::catch_unwind(|| {
                    if dtype == DType::F64 {
                        assert_close(p, expected, DType::F64)
                    } else {
                        assert_close(p, &expected.to_dtype(dtype), DType::F16)
                    }
                });
                assert!(
                    result.is_ok(),
                    "{name} step {k} parameter {which} on {device} in {dtype:?}"
                );
            }
        }
        if dtype == DType::F64 {
            let evals = fx[&format!("{name}.func_evals")].to_vec::<f64>()[0];
            assert_eq!(opt.func_evals() as f64, evals, "{name}: loss evaluations");
        }
    }
}

/// L-BFGS (fixed step and strong-Wolfe line search) follows PyTorch's iterates, losses
/// and evaluation counts; in f32 within half-precision tolerance (its line search
/// branches on the loss's rounding).
pub(super) fn lbfgs_matches_torch(device: &Device) {
    lbfgs_replay(device, DType::F64);
    lbfgs_replay(device, DType::F32);
}
test_device!(lbfgs_matches_torch);

#[test]
#[should_panic(expected = "L-BFGS re-evaluates the loss; call step_with(closure)")]
fn lbfgs_without_a_closure_is_refused() {
    let w = Tensor::zeros(&[1], DType::F64, &Device::Cpu).requires_grad(true);
    Lbfgs::new(vec![w], LbfgsConfig::default()).step();
}
