//! Elementwise math against its definitions: atan2 in every quadrant, hardtanh and clamp
//! at their bounds, relu6, and the activations' formulas and gradients.

use super::*;

#[test]
fn atan2_matches_the_standard_library_in_every_quadrant() {
    let ys = [1.0f64, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0, 3.0, f64::NAN];
    let xs = [1.0f64, -1.0, -1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 1.0];
    let got = Tensor::from_vec(ys.to_vec(), &[9])
        .atan2(&Tensor::from_vec(xs.to_vec(), &[9]))
        .to_vec::<f64>();
    for ((y, x), g) in ys.iter().zip(&xs).zip(&got) {
        let want = y.atan2(*x);
        assert!(
            want.to_bits() == g.to_bits() || (want.is_nan() && g.is_nan()),
            "atan2({y}, {x}) = {g}, expected {want}"
        );
    }
    // Integers promote to f32, half types compute in f32.
    let i = Tensor::from_vec(vec![1i64, -2], &[2]).atan2(&Tensor::from_vec(vec![1i64], &[1]));
    assert_eq!(i.dtype(), DType::F32);
    assert_eq!(i.to_vec::<f32>(), vec![1f32.atan2(1.0), (-2f32).atan2(1.0)]);
    let h = Tensor::from_vec(vec![1.0f32, -2.0], &[2]).to_dtype(DType::BF16);
    assert_eq!(h.atan2(&h.abs()).dtype(), DType::BF16);
}

#[test]
fn hardtanh_blocks_the_gradient_at_its_bounds_where_clamp_passes_it() {
    let x = Tensor::from_vec(vec![-2.0f64, -1.0, 0.25, 1.0, 2.0, f64::NAN], &[6]);
    let y = x.hardtanh(-1.0, 1.0).to_vec::<f64>();
    assert_eq!(&y[..5], &[-1.0, -1.0, 0.25, 1.0, 1.0]);
    assert!(y[5].is_nan(), "NaN propagates");

    let grad = |f: &dyn Fn(&Tensor) -> Tensor| {
        let x = Tensor::from_vec(vec![-2.0f64, -1.0, 0.25, 1.0, 2.0], &[5]).requires_grad(true);
        f(&x).sum_all().backward();
        x.grad().unwrap().to_vec::<f64>()
    };
    // PyTorch: hardtanh's gradient is (min < x < max), clamp's is (min <= x <= max).
    assert_eq!(
        grad(&|x| x.hardtanh(-1.0, 1.0)),
        vec![0.0, 0.0, 1.0, 0.0, 0.0]
    );
    assert_eq!(grad(&|x| x.clamp(-1.0, 1.0)), vec![0.0, 1.0, 1.0, 1.0, 0.0]);
    assert_eq!(
        grad(&|x| x.mul_scalar(3.0).relu6()),
        vec![0.0, 0.0, 3.0, 3.0, 0.0]
    );
}

#[test]
fn relu6_and_clamp_agree_on_every_float_dtype() {
    let values: Vec<f32> = (-20..20).map(|i| i as f32 * 0.45).collect();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = Tensor::from_vec(values.clone(), &[40]).to_dtype(dtype);
        let r6 = x.relu6().to_dtype(DType::F64).to_vec::<f64>();
        let want: Vec<f64> = x
            .to_dtype(DType::F64)
            .to_vec::<f64>()
            .iter()
            .map(|v| v.clamp(0.0, 6.0))
            .collect();
        assert_eq!(r6, want, "{dtype:?}");
        let c = x.clamp(-1.5, 2.5).to_dtype(DType::F64).to_vec::<f64>();
        let cw: Vec<f64> = x
            .to_dtype(DType::F64)
            .to_vec::<f64>()
            .iter()
            .map(|v| v.clamp(-1.5, 2.5))
            .collect();
        assert_eq!(c, cw, "{dtype:?}");
    }
}

/// PyTorch's definitions, in f64, on a grid crossing every kink and both thresholds.
#[test]
fn activations_match_pytorchs_formulas_and_gradients() {
    let grid: Vec<f64> = (-50..=50).map(|i| i as f64 * 0.5).collect();
    let relu6 = |v: f64| v.clamp(0.0, 6.0);
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    type Case = (
        &'static str,
        fn(&Tensor) -> Tensor,
        Box<dyn Fn(f64) -> (f64, f64)>,
    );
    let cases: Vec<Case> = vec![
        (
            "leaky_relu",
            |t| t.leaky_relu(0.01),
            Box::new(|v| if v > 0.0 { (v, 1.0) } else { (0.01 * v, 0.01) }),
        ),
        (
            "elu",
            |t| t.elu(1.5),
            Box::new(|v| {
                if v > 0.0 {
                    (v, 1.0)
                } else {
                    (1.5 * v.exp_m1(), 1.5 * v.exp())
                }
            }),
        ),
        (
            "softplus",
            |t| t.softplus(2.0, 20.0),
            Box::new(move |v| {
                if 2.0 * v > 20.0 {
                    (v, 1.0)
                } else {
                    ((2.0 * v).exp().ln_1p() / 2.0, sigmoid(2.0 * v))
                }
            }),
        ),
        (
            "hardsigmoid",
            |t| t.hardsigmoid(),
            Box::new(move |v| {
                (
                    relu6(v + 3.0) / 6.0,
                    if v > -3.0 && v < 3.0 { 1.0 / 6.0 } else { 0.0 },
                )
            }),
        ),
        (
            "hardswish",
            |t| t.hardswish(),
            Box::new(move |v| {
                let d = if v < -3.0 {
                    0.0
                } else if v <= 3.0 {
                    v / 3.0 + 0.5
                } else {
                    1.0
                };
                (v * relu6(v + 3.0) / 6.0, d)
            }),
        ),
        (
            "mish",
            |t| t.mish(),
            Box::new(move |v| {
                let t = v.exp().ln_1p().tanh();
                (v * t, t + v * sigmoid(v) * (1.0 - t * t))
            }),
        ),
    ];
    for (name, op, reference) in cases {
        let x = Tensor::from_vec(grid.clone(), &[grid.len()]).requires_grad(true);
        let y = op(&x);
        y.sum_all().backward();
        let (ys, gs) = (y.to_vec::<f64>(), x.grad().unwrap().to_vec::<f64>());
        for ((&v, &got), &grad) in grid.iter().zip(&ys).zip(&gs) {
            let (want, want_grad) = reference(v);
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "{name}({v}) = {got}, expected {want}"
            );
            assert!(
                (grad - want_grad).abs() <= 1e-12 * want_grad.abs().max(1.0),
                "{name}'({v}) = {grad}, expected {want_grad}"
            );
        }
        // f32 and the half types compute in f32 and agree with f64 to their precision.
        for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 1e-2)] {
            let low = op(&Tensor::from_vec(grid.clone(), &[grid.len()]).to_dtype(dtype))
                .to_dtype(DType::F64)
                .to_vec::<f64>();
            for ((&v, &got), &want) in grid.iter().zip(&low).zip(&ys) {
                assert!(
                    (got - want).abs() <= tol * want.abs().max(1.0),
                    "{name}({v}) in {dtype:?}: {got} vs {want}"
                );
            }
        }
    }
}
