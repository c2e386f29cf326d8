//! Tensor semantics that PyTorch users rely on, stated as tests.

use ferrograd::prelude::*;

fn range(n: usize, shape: &[usize]) -> Tensor {
    Tensor::arange(0.0, n as f64, 1.0, DType::F32, &Device::Cpu).reshape(shape)
}

#[test]
fn views_share_storage_with_their_base() {
    let base = Tensor::zeros(&[3, 4], DType::F32, &Device::Cpu);
    base.select(0, 1).fill_(1.0);
    base.t().narrow(0, 3, 1).fill_(2.0);
    assert_eq!(
        base.to_vec::<f32>(),
        vec![0.0, 0.0, 0.0, 2.0, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0, 2.0]
    );
}

#[test]
fn reshape_views_when_it_can_and_copies_when_it_must() {
    let t = range(12, &[3, 4]);
    let v = t.reshape(&[4, 3]);
    v.fill_(5.0);
    assert_eq!(
        t.sum_all().item::<f32>(),
        60.0,
        "a contiguous reshape is a view"
    );
    let copy = t.t().reshape(&[12]);
    copy.fill_(0.0);
    assert_eq!(
        t.sum_all().item::<f32>(),
        60.0,
        "a transposed reshape copies"
    );
}

#[test]
fn slicing_with_steps_and_negative_dims() {
    let t = range(24, &[2, 3, 4]);
    assert_eq!(
        t.slice(-1, 1, 4, 2).to_vec::<f32>(),
        vec![
            1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0, 19.0, 21.0, 23.0
        ]
    );
    assert_eq!(t.select(-2, 2).shape(), &[2, 4]);
    assert_eq!(t.permute(&[-1, 0, 1]).shape(), &[4, 2, 3]);
    assert_eq!(t.size(-3), 2);
}

#[test]
fn chunk_split_cat_stack_round_trip() {
    let t = range(20, &[4, 5]);
    let parts = t.chunk(2, 1);
    assert_eq!(
        parts.iter().map(|p| p.shape()[1]).collect::<Vec<_>>(),
        vec![3, 2]
    );
    let refs: Vec<&Tensor> = parts.iter().collect();
    assert_eq!(Tensor::cat(&refs, 1).to_vec::<f32>(), t.to_vec::<f32>());
    let rows = t.split(1, 0);
    let squeezed: Vec<Tensor> = rows.iter().map(|r| r.squeeze(0)).collect();
    let refs: Vec<&Tensor> = squeezed.iter().collect();
    assert_eq!(Tensor::stack(&refs, 0).to_vec::<f32>(), t.to_vec::<f32>());
}

#[test]
fn type_promotion_follows_pytorch() {
    let i = Tensor::from_vec(vec![1i64, 2], &[2]);
    let f = Tensor::from_vec(vec![0.5f32, 0.5], &[2]);
    let h = Tensor::from_vec(vec![1.0f32, 1.0], &[2]).to_dtype(DType::F16);
    assert_eq!((&i + &f).dtype(), DType::F32);
    assert_eq!((&i + &i).dtype(), DType::I64);
    assert_eq!(
        (&i / &i).dtype(),
        DType::F32,
        "true division of integers gives floats"
    );
    assert_eq!((&h + &h.to_dtype(DType::BF16)).dtype(), DType::F32);
    assert_eq!((&i * 2.5).to_vec::<f32>(), vec![2.5, 5.0]);
    assert_eq!(i.exp().dtype(), DType::F32);
    assert_eq!(
        Tensor::from_vec(vec![true, true, false], &[3])
            .sum_all()
            .item::<i64>(),
        2
    );
}

#[test]
fn matmul_follows_pytorch_rank_rules() {
    let m = range(6, &[2, 3]);
    let v = Tensor::from_vec(vec![1.0f32, 0.0, -1.0], &[3]);
    assert_eq!(m.matmul(&v).to_vec::<f32>(), vec![-2.0, -2.0]);
    let w = Tensor::from_vec(vec![1.0f32, 1.0], &[2]);
    assert_eq!(w.matmul(&m).to_vec::<f32>(), vec![3.0, 5.0, 7.0]);
    assert_eq!(v.matmul(&v).dim(), 0);
    let batch = range(24, &[2, 1, 3, 4]);
    let rhs = range(20, &[5, 4, 1]);
    assert_eq!(batch.matmul(&rhs).shape(), &[2, 5, 3, 1]);
    // Against a hand-written product.
    let a = range(6, &[2, 3]);
    let b = range(12, &[3, 4]);
    let c = a.matmul(&b).to_vec::<f32>();
    for i in 0..2 {
        for j in 0..4 {
            let expected: f32 = (0..3)
                .map(|k| (i * 3 + k) as f32 * (k * 4 + j) as f32)
                .sum();
            assert_eq!(c[i * 4 + j], expected);
        }
    }
}

#[test]
fn matmul_of_every_float_dtype_and_int64() {
    let a = range(6, &[2, 3]);
    let b = range(6, &[3, 2]);
    let expected = a.matmul(&b).to_vec::<f32>();
    for dtype in [DType::F64, DType::F16, DType::BF16, DType::I64] {
        let got = a
            .to_dtype(dtype)
            .matmul(&b.to_dtype(dtype))
            .to_dtype(DType::F32)
            .to_vec::<f32>();
        assert_eq!(got, expected, "{dtype:?}");
    }
}

#[test]
fn reductions_keep_or_drop_dims() {
    let t = range(24, &[2, 3, 4]);
    assert_eq!(t.sum(&[1], true).shape(), &[2, 1, 4]);
    assert_eq!(
        t.sum(&[0, -1], false).to_vec::<f32>(),
        vec![60.0, 92.0, 124.0]
    );
    assert_eq!(t.mean_all().item::<f32>(), 11.5);
    let (values, indices) = t.max_dim(2, false);
    assert_eq!(
        values.to_vec::<f32>(),
        vec![3.0, 7.0, 11.0, 15.0, 19.0, 23.0]
    );
    assert_eq!(indices.to_vec::<i64>(), vec![3; 6]);
    assert_eq!(t.argmin(0, false).to_vec::<i64>(), vec![0; 12]);
    assert_eq!(
        t.cumsum(2).select(2, 3).to_vec::<f32>(),
        vec![6.0, 22.0, 38.0, 54.0, 70.0, 86.0]
    );
}

/// Sums over several dims, adjacent ones reduced as one run, against the sum written out
/// element by element (a permuted view and an integer tensor too).
#[test]
fn sums_over_dim_runs_match_the_definition() {
    let shape = [3usize, 4, 5, 6];
    let t = range(360, &shape);
    let value = |i: [usize; 4]| (((i[0] * 4 + i[1]) * 5 + i[2]) * 6 + i[3]) as f64;
    for dims in [
        vec![0usize, 2, 3],
        vec![1, 2],
        vec![1, 2, 3],
        vec![0, 1, 3],
        vec![0, 1, 2, 3],
        vec![2, 3],
    ] {
        let idims: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
        let out = t.sum(&idims, true);
        let kept: Vec<usize> = (0..4)
            .map(|d| if dims.contains(&d) { 1 } else { shape[d] })
            .collect();
        assert_eq!(out.shape(), &kept[..], "dims {dims:?}");
        let mut want = vec![0.0f64; kept.iter().product()];
        for a in 0..3 {
            for b in 0..4 {
                for c in 0..5 {
                    for d in 0..6 {
                        let i = [a, b, c, d];
                        let o = (0..4).fold(0, |acc, k| {
                            acc * kept[k] + if dims.contains(&k) { 0 } else { i[k] }
                        });
                        want[o] += value(i);
                    }
                }
            }
        }
        let got = out.to_vec::<f32>();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-6 * w.abs(),
                "dims {dims:?}: {g} vs {w}"
            );
        }
        let ints = t.to_dtype(DType::I64).sum(&idims, false).to_vec::<i64>();
        assert_eq!(ints, want.iter().map(|&w| w as i64).collect::<Vec<_>>());
    }
    // A permuted (non-contiguous) input: [6, 5, 4, 3] summed over its last two dims.
    let p = t.permute(&[3, 2, 1, 0]).sum(&[2, 3], false);
    let q = t.sum(&[0, 1], false).transpose(0, 1);
    assert_eq!(p.to_vec::<f32>(), q.contiguous().to_vec::<f32>());
}

#[test]
fn max_propagates_nan_and_softmax_rows_sum_to_one() {
    let t = Tensor::from_vec(vec![1.0f32, f32::NAN, 3.0], &[3]);
    assert!(t.max_all().item::<f32>().is_nan());
    // Its own generator: the process-wide one belongs to the reproducibility test below
    // (tests run on several threads).
    let x = Tensor::randn_with(&[7, 33], DType::F32, &Device::Cpu, &mut Generator::new(2)) * 20.0;
    let sums = x.softmax(1).sum(&[1], false).to_vec::<f32>();
    assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
    let masked = x
        .masked_fill(&x.lt_scalar(0.0), f64::NEG_INFINITY)
        .softmax(1);
    assert!(masked.to_vec::<f32>().iter().all(|v| v.is_finite()));
}

#[test]
fn creation_functions() {
    assert_eq!(
        Tensor::eye(3, DType::F32, &Device::Cpu)
            .sum_all()
            .item::<f32>(),
        3.0
    );
    assert_eq!(
        Tensor::arange(1.0, 2.0, 0.5, DType::F64, &Device::Cpu).to_vec::<f64>(),
        vec![1.0, 1.5]
    );
    assert_eq!(
        Tensor::linspace(0.0, 1.0, 5, DType::F32, &Device::Cpu).to_vec::<f32>(),
        vec![0.0, 0.25, 0.5, 0.75, 1.0]
    );
    let like = Tensor::full_like(&Tensor::zeros(&[2, 2], DType::BF16, &Device::Cpu), 3.0);
    assert_eq!(
        (like.shape(), like.dtype()),
        (&[2usize, 2][..], DType::BF16)
    );
    let onehot = Tensor::from_vec(vec![2i64, 0], &[2]).one_hot(3);
    assert_eq!(onehot.to_vec::<i64>(), vec![0, 0, 1, 1, 0, 0]);
    assert_eq!(
        range(9, &[3, 3]).tril(-1).to_vec::<f32>(),
        vec![0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 6.0, 7.0, 0.0]
    );
}

/// The only test in this file that uses the process-wide generator: the others draw from
/// their own, so none consumes draws between a seed here and its use.
#[test]
fn random_draws_are_reproducible_and_well_distributed() {
    manual_seed(123);
    let a = Tensor::randn(&[20000], DType::F64, &Device::Cpu);
    manual_seed(123);
    let b = Tensor::randn(&[20000], DType::F64, &Device::Cpu);
    assert_eq!(a.to_vec::<f64>(), b.to_vec::<f64>());
    assert!(a.mean_all().item::<f64>().abs() < 0.03);
    assert!((a.std(&[], true, false).item::<f64>() - 1.0).abs() < 0.03);
    let u = Tensor::rand_with(&[20000], DType::F32, &Device::Cpu, &mut Generator::new(9));
    assert!((u.mean_all().item::<f32>() - 0.5).abs() < 0.01);
    let r = Tensor::randint(3, 7, &[1000], &Device::Cpu).to_vec::<i64>();
    assert!(r.iter().all(|v| (3..7).contains(v)) && (3..7).all(|k| r.contains(&k)));
}

#[test]
fn in_place_ops_through_strided_views_and_aliasing_operands() {
    let t = range(6, &[2, 3]);
    t.t().mul_scalar_(2.0);
    assert_eq!(t.to_vec::<f32>(), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    // The operand aliases the destination: it is read as it was before the update.
    let row = t.select(0, 0);
    t.add_(&row);
    assert_eq!(t.to_vec::<f32>(), vec![0.0, 4.0, 8.0, 6.0, 10.0, 14.0]);
    t.clamp_(1.0, 9.0);
    assert_eq!(t.to_vec::<f32>(), vec![1.0, 4.0, 8.0, 6.0, 9.0, 9.0]);
}

#[test]
fn tensors_are_send_and_sync_and_usable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    let w = Tensor::ones(&[4], DType::F32, &Device::Cpu).requires_grad(true);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| (&w * 2.0).sum_all().backward());
        }
    });
    assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![8.0; 4]);
}

#[test]
fn display_matches_pytorch_layout() {
    let t = Tensor::from_vec(vec![1.5f32, -2.0, 3.25, 4.0], &[2, 2]);
    assert_eq!(
        t.to_string(),
        "tensor([[ 1.5000, -2.0000],\n        [ 3.2500,  4.0000]])"
    );
    let y = (&t.requires_grad(true) * 2.0).sum_all();
    assert_eq!(y.to_string(), "tensor(13.5000, grad_fn=<sum>)");
    let big = Tensor::zeros(&[100, 100], DType::I64, &Device::Cpu);
    let text = big.to_string();
    assert!(text.contains("...") && text.lines().count() < 20, "{text}");
}

/// Values printed by PyTorch 2.15 for `x * 1e-8`, `x + 1e-3`, `x / 3e5`, `x * 1e-4` with
/// `x = [1000, 3]`: the scalar is not rounded to the half type before the op.
#[test]
fn scalar_ops_on_half_tensors_keep_the_scalar_in_f32() {
    type ScalarOp = fn(&Tensor) -> Tensor;
    fn in_place(t: &Tensor, f: fn(&Tensor)) -> Tensor {
        let t = t.deep_copy();
        f(&t);
        t
    }
    let cases: [(DType, ScalarOp, [f64; 2]); 9] = [
        (
            DType::F16,
            |t| t.mul_scalar(1e-8),
            [1.0013580322265625e-05, 5.960464477539063e-08],
        ),
        (DType::F16, |t| t.add_scalar(1e-3), [1000.0, 3.001953125]),
        (
            DType::F16,
            |t| t.div_scalar(3e5),
            [0.00333404541015625, 1.0013580322265625e-05],
        ),
        (
            DType::F16,
            |t| t.mul_scalar(1e-4),
            [0.0999755859375, 0.0002999305725097656],
        ),
        (
            DType::BF16,
            |t| t.mul_scalar(1e-8),
            [1.0013580322265625e-05, 3.003515303134918e-08],
        ),
        (DType::BF16, |t| t.add_scalar(1e-3), [1000.0, 3.0]),
        (
            DType::BF16,
            |t| t.div_scalar(3e5),
            [0.003326416015625, 1.0013580322265625e-05],
        ),
        // The in-place forms (`x.mul_(1e-8)`, `x.add_(1e-3)`) follow the same rule.
        (
            DType::F16,
            |t| in_place(t, |t| _ = t.mul_scalar_(1e-8)),
            [1.0013580322265625e-05, 5.960464477539063e-08],
        ),
        (
            DType::F16,
            |t| in_place(t, |t| _ = t.add_scalar_(1e-3)),
            [1000.0, 3.001953125],
        ),
    ];
    let x = Tensor::from_vec(vec![1000.0f32, 3.0], &[2]);
    for (i, (dtype, op, expected)) in cases.into_iter().enumerate() {
        let got = op(&x.to_dtype(dtype)).to_dtype(DType::F64).to_vec::<f64>();
        assert_eq!(got, expected, "case {i} ({dtype:?})");
    }
}

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

/// A depthwise convolution (one input channel per group: direct kernels on the CPU) is a
/// dense convolution with a block-diagonal weight (im2col + GEMM): same output and the
/// same gradients for input, weight and bias, at a size that runs the kernels in parallel,
/// on every device.
#[test]
fn depthwise_conv2d_matches_a_dense_block_diagonal_convolution() {
    for device in ferrograd::testing::devices() {
        for (m, stride, padding, dilation) in [(1, 1, 1, 1), (1, 2, 1, 1), (2, 1, 2, 2)] {
            let (n, c, h, w) = (3, 8, 17, 13);
            let o = c * m;
            let rng = &mut Generator::new(7);
            let x = Tensor::randn_with(&[n, c, h, w], DType::F32, &device, rng);
            let wt = Tensor::randn_with(&[o, 1, 3, 3], DType::F32, &device, rng);
            let b = Tensor::randn_with(&[o], DType::F32, &device, rng);
            let mask: Vec<f32> = (0..o * c)
                .map(|i| f32::from(((i / c) / m == i % c) as u8))
                .collect();
            let mask = Tensor::from_vec(mask, &[o, c, 1, 1])
                .to_device(&device)
                .unwrap();
            let args = F::Conv2dArgs::default()
                .stride(stride)
                .padding(padding)
                .dilation(dilation);
            let run = |dense: bool| {
                let (x, wt, b) = (
                    x.detach().requires_grad(true),
                    wt.detach().requires_grad(true),
                    b.detach().requires_grad(true),
                );
                let y = if dense {
                    F::conv2d(&x, &wt.mul(&mask), Some(&b), &args)
                } else {
                    F::conv2d(&x, &wt, Some(&b), &args.groups(c))
                };
                let up = Tensor::randn_with(y.shape(), DType::F32, &device, &mut Generator::new(9));
                y.mul(&up).sum_all().backward();
                [y, x.grad().unwrap(), wt.grad().unwrap(), b.grad().unwrap()]
            };
            let (direct, dense) = (run(false), run(true));
            for (name, (a, e)) in ["output", "input grad", "weight grad", "bias grad"]
                .iter()
                .zip(direct.iter().zip(&dense))
            {
                assert_eq!(a.shape(), e.shape(), "{name}");
                assert!(
                    a.allclose(e, 1e-4, 1e-4),
                    "{device:?} m={m} stride={stride} padding={padding} dilation={dilation}: {name} differs"
                );
            }
        }
    }
}

/// Narrow f32 convolutions (LeNet's two layers, a padded and a dilated one) run the
/// direct CPU kernels (forward and weight gradient, where the CPU has AVX-512): output and
/// every gradient equal the f64 convolution's, which takes the im2col path.
#[test]
fn narrow_f32_conv2d_matches_f64() {
    for (c, o, hw, k, padding, dilation) in [
        (6, 16, [14, 14], 5, 0, 1),
        (1, 12, [28, 28], 5, 2, 1),
        (1, 6, [28, 28], 5, 2, 1),
        (3, 19, [11, 9], 3, 1, 2),
    ] {
        let rng = &mut Generator::new(11);
        let x = Tensor::randn_with(&[4, c, hw[0], hw[1]], DType::F64, &Device::Cpu, rng);
        let wt = Tensor::randn_with(&[o, c, k, k], DType::F64, &Device::Cpu, rng);
        let b = Tensor::randn_with(&[o], DType::F64, &Device::Cpu, rng);
        let args = F::Conv2dArgs::default().padding(padding).dilation(dilation);
        f32_matches_f64(&format!("c={c} o={o}"), [&x, &wt, &b], |x, w, b| {
            F::conv2d(x, w, Some(b), &args)
        });
    }
}

/// `conv(x, w, b)` in f32 and in f64 from the same f64 data: output and the gradients of
/// x, w and b (through a random upstream gradient) agree within 1e-3.
fn f32_matches_f64(
    label: &str,
    [x, w, b]: [&Tensor; 3],
    conv: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
) {
    let run = |dtype: DType| {
        let (x, w, b) = (
            x.to_dtype(dtype).requires_grad(true),
            w.to_dtype(dtype).requires_grad(true),
            b.to_dtype(dtype).requires_grad(true),
        );
        let y = conv(&x, &w, &b);
        let up = Tensor::randn_with(y.shape(), DType::F64, &Device::Cpu, &mut Generator::new(5));
        y.mul(&up.to_dtype(dtype)).sum_all().backward();
        [y, x.grad().unwrap(), w.grad().unwrap(), b.grad().unwrap()].map(|t| t.to_dtype(DType::F64))
    };
    let (narrow, wide) = (run(DType::F32), run(DType::F64));
    for (name, (a, e)) in ["output", "input grad", "weight grad", "bias grad"]
        .iter()
        .zip(narrow.iter().zip(&wide))
    {
        assert_eq!(a.shape(), e.shape(), "{label}: {name}");
        assert!(a.allclose(e, 1e-3, 1e-3), "{label}: {name} differs");
    }
}

/// ResNet-shaped f32 convolutions run the wide direct kernel (unit stride, 32+ channels,
/// planes of 24×24 and up, on AVX-512 or AVX2 CPUs with at least one sample per thread:
/// forward, the input gradient as a forward of the flipped weights, and the
/// pixel-vectorised weight gradient), Winograd F(2×2, 3×3) (3×3 unit-stride layers
/// of 128+ channels over 128+ output tiles), or, for small
/// planes, several samples per GEMM (and, with large weights, gradients by blocks of
/// input channels): output and every gradient equal the f64 convolution's (which
/// gradcheck checks).
#[test]
fn resnet_shaped_f32_conv2d_matches_f64() {
    // (in, out, input size, kernel, stride, padding, dilation)
    for (c, o, hw, k, stride, padding, dilation) in [
        (32, 32, [24, 24], 3, 1, 1, 1),
        (48, 32, [26, 25], 3, 1, 2, 2),
        (16, 48, [28, 28], 1, 1, 0, 1),
        (64, 64, [7, 7], 3, 1, 1, 1),
        (32, 64, [14, 14], 3, 2, 1, 1),
        // small plane, large weights: the channel-blocked backward
        (128, 256, [7, 7], 3, 1, 1, 1),
        // a stem (7×7 / 2): the weight gradient over phase planes
        (3, 64, [52, 52], 7, 2, 3, 1),
        // 3×3, unit stride, 128+ channels and 128+ tiles of 2×2 in the batch:
        // Winograd F(2×2, 3×3), forward and input gradient (and, over 256+ tiles, the
        // weight gradient), every padding it takes
        (128, 160, [14, 13], 3, 1, 1, 1),
        (144, 128, [12, 12], 3, 1, 2, 1),
        (128, 128, [18, 17], 3, 1, 0, 1),
        (128, 136, [22, 21], 3, 1, 1, 1),
        // 4×4 / 2, padding 1, 16×16 outputs and up: space to depth
        (8, 16, [32, 34], 4, 2, 1, 1),
        (16, 8, [36, 32], 4, 2, 1, 1),
    ] {
        let rng = &mut Generator::new(17);
        let x = Tensor::randn_with(&[4, c, hw[0], hw[1]], DType::F64, &Device::Cpu, rng);
        let wt = Tensor::randn_with(&[o, c, k, k], DType::F64, &Device::Cpu, rng);
        let b = Tensor::randn_with(&[o], DType::F64, &Device::Cpu, rng);
        let args = F::Conv2dArgs::default()
            .stride(stride)
            .padding(padding)
            .dilation(dilation);
        f32_matches_f64(&format!("c={c} o={o} {hw:?}"), [&x, &wt, &b], |x, w, b| {
            F::conv2d(x, w, Some(b), &args)
        });
    }
}

/// `conv_transpose2d` runs conv2d's backward kernels (tiled input gradient, depthwise
/// loops, the direct weight gradient for narrow f32 layers, space to depth for 4×4 / 2
/// from 16×16 up) and its backward a conv2d:
/// in f32, output and every gradient equal the f64 results (which gradcheck checks).
#[test]
fn f32_conv_transpose2d_matches_f64() {
    // (in, out, groups, input size, kernel, stride, padding, output padding, dilation)
    for (c, o, groups, hw, k, stride, padding, out_pad, dilation) in [
        // Narrow and unit-stride: the direct weight gradient (AVX-512 or AVX2 CPUs).
        (16, 6, 1, [10, 10], 5, 1, 0, 0, 1),
        (12, 1, 1, [24, 24], 5, 1, 2, 0, 1),
        // Strided, grouped, dilated: tiled columns.
        (8, 6, 2, [7, 5], 3, 2, 1, 1, 2),
        (64, 32, 1, [9, 9], 4, 2, 1, 0, 1),
        // DCGAN's upsampling (4×4 / 2, padding 1) from 16×16: space to depth, one GEMM
        // per tap (`fused::conv::subpixel`); the weight gradient too from 64 × 128
        // products per tap (64 in, 32 out), the tiles' below.
        (16, 8, 1, [16, 16], 4, 2, 1, 0, 1),
        (8, 16, 1, [16, 18], 4, 2, 1, 0, 1),
        (64, 32, 1, [16, 16], 4, 2, 1, 0, 1),
        // One output channel per group: the depthwise loops.
        (6, 3, 3, [8, 7], 3, 2, 1, 1, 1),
    ] {
        let rng = &mut Generator::new(13);
        let x = Tensor::randn_with(&[3, c, hw[0], hw[1]], DType::F64, &Device::Cpu, rng);
        let wt = Tensor::randn_with(&[c, o / groups, k, k], DType::F64, &Device::Cpu, rng);
        let b = Tensor::randn_with(&[o], DType::F64, &Device::Cpu, rng);
        let args = F::ConvTranspose2dArgs {
            stride: [stride; 2],
            padding: [padding; 2],
            output_padding: [out_pad; 2],
            dilation: [dilation; 2],
            groups,
        };
        f32_matches_f64(
            &format!("c={c} o={o} groups={groups} stride={stride}"),
            [&x, &wt, &b],
            |x, w, b| F::conv_transpose2d(x, w, Some(b), &args),
        );
    }
}

/// A bias of another dtype than the input (f64 bias on f32 data) promotes, as in PyTorch,
/// instead of reaching the single-dtype CPU kernels.
#[test]
fn conv2d_with_a_bias_of_another_dtype_promotes() {
    let x = Tensor::ones(&[1, 2, 3, 3], DType::F32, &Device::Cpu);
    let w = Tensor::ones(&[1, 2, 2, 2], DType::F32, &Device::Cpu);
    let b = Tensor::from_vec(vec![0.5f64], &[1]);
    let y = F::conv2d(&x, &w, Some(&b), &F::Conv2dArgs::default());
    assert_eq!(y.dtype(), DType::F64);
    assert_eq!(y.to_vec::<f64>(), vec![8.5; 4]);
}

/// The fused GELU/SiLU backward kernels (plain backward) give the gradients of the
/// differentiable formulas (`create_graph`), across the kinks' scale and far tails, in
/// f64 and f32, and bf16 within its precision.
#[test]
fn fused_activation_backwards_match_their_formulas() {
    use ferrograd::autograd::grad;
    let xs: Vec<f64> = (0..401).map(|i| (i as f64 - 200.0) * 0.06).collect();
    type Act = fn(&Tensor) -> Tensor;
    let acts: [(&str, Act); 3] = [
        ("gelu", Tensor::gelu),
        ("gelu_tanh", Tensor::gelu_tanh),
        ("silu", Tensor::silu),
    ];
    for (dtype, tol) in [(DType::F64, 1e-14), (DType::F32, 2e-6), (DType::BF16, 2e-2)] {
        for (name, f) in acts {
            let x = Tensor::from_vec(xs.clone(), &[401])
                .to_dtype(dtype)
                .requires_grad(true);
            let g = Tensor::from_vec(
                (0..401)
                    .map(|i| 1.0 + (i % 7) as f64 * 0.25)
                    .collect::<Vec<_>>(),
                &[401],
            )
            .to_dtype(dtype);
            let y = f(&x);
            let fused = grad(&[&y], &[&x], Some(std::slice::from_ref(&g)), false)[0]
                .clone()
                .unwrap();
            let y = f(&x);
            let formula = grad(&[&y], &[&x], Some(&[g]), true)[0].clone().unwrap();
            let (a, b) = (
                fused.to_dtype(DType::F64).to_vec::<f64>(),
                formula.to_dtype(DType::F64).to_vec::<f64>(),
            );
            for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (p - q).abs() <= tol * q.abs().max(1.0),
                    "{name} {dtype:?} at x = {}: {p} vs {q}",
                    xs[i]
                );
            }
        }
    }
}

/// `cat` writes every element from its pieces (the CPU path starts from uninitialised
/// memory): along each dim of transposed pieces, with an empty piece, promoting an i64
/// piece to f64, against the values read back element by element; and its gradient is
/// each piece's slice.
#[test]
fn cat_writes_every_element_of_every_piece() {
    let base = Tensor::arange(0.0, 24.0, 1.0, DType::F64, &Device::Cpu).reshape(&[4, 3, 2]);
    let a = base.permute(&[2, 1, 0]); // [2, 3, 4], not contiguous
    let b = Tensor::arange(100.0, 124.0, 1.0, DType::F64, &Device::Cpu).reshape(&[2, 3, 4]);
    let c = Tensor::arange(0.0, 24.0, 1.0, DType::I64, &Device::Cpu).reshape(&[2, 3, 4]);
    for d in 0..3usize {
        let mut empty_shape = [2usize, 3, 4];
        empty_shape[d] = 0;
        let empty = Tensor::zeros(&empty_shape, DType::F64, &Device::Cpu);
        let out = Tensor::cat(&[&a, &empty, &b, &c], d as isize);
        assert_eq!(out.dtype(), DType::F64);
        let mut want_shape = [2usize, 3, 4];
        want_shape[d] *= 3;
        assert_eq!(out.shape(), &want_shape[..]);
        let got = out.to_vec::<f64>();
        let pieces = [
            a.contiguous().to_vec::<f64>(),
            b.to_vec::<f64>(),
            c.to_dtype(DType::F64).to_vec::<f64>(),
        ];
        for (i, &v) in got.iter().enumerate() {
            let idx = [
                i / (want_shape[1] * want_shape[2]),
                i / want_shape[2] % want_shape[1],
                i % want_shape[2],
            ];
            let (piece, at) = (idx[d] / [2, 3, 4][d], idx[d] % [2, 3, 4][d]);
            let mut local = idx;
            local[d] = at;
            let want = pieces[piece][local[0] * 12 + local[1] * 4 + local[2]];
            assert_eq!(v, want, "dim {d} at {idx:?}");
        }
    }
    let x = Tensor::randn(&[2, 3], DType::F64, &Device::Cpu).requires_grad(true);
    let y = Tensor::randn(&[2, 5], DType::F64, &Device::Cpu).requires_grad(true);
    let w = Tensor::arange(0.0, 16.0, 1.0, DType::F64, &Device::Cpu).reshape(&[2, 8]);
    Tensor::cat(&[&x, &y], 1).mul(&w).sum_all().backward();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>(),
        w.narrow(1, 0, 3).contiguous().to_vec::<f64>()
    );
    assert_eq!(
        y.grad().unwrap().to_vec::<f64>(),
        w.narrow(1, 3, 5).contiguous().to_vec::<f64>()
    );
}

/// The fused softmax and log-softmax backward kernels (plain backward) give the gradients
/// of the differentiable formulas (`create_graph`) along every dim of a transposed input,
/// with a transposed output gradient, rows of 1 to 1500 elements, in f64, f32 and bf16.
#[test]
fn fused_softmax_backwards_match_their_formulas() {
    use ferrograd::autograd::grad;
    for (dtype, tol) in [(DType::F64, 1e-14), (DType::F32, 2e-6), (DType::BF16, 2e-2)] {
        for shape in [[3usize, 5, 7], [2, 1, 1500], [4, 1, 1]] {
            let n: usize = shape.iter().product();
            let x = Tensor::from_vec(
                (0..n)
                    .map(|i| ((i * 37 % 101) as f64 - 50.0) * 0.09)
                    .collect::<Vec<_>>(),
                &[shape[2], shape[1], shape[0]],
            )
            .to_dtype(dtype)
            .permute(&[2, 1, 0])
            .detach()
            .requires_grad(true);
            let g = Tensor::from_vec(
                (0..n)
                    .map(|i| ((i * 53 % 97) as f64 - 48.0) * 0.04)
                    .collect::<Vec<_>>(),
                &[shape[0], shape[2], shape[1]],
            )
            .to_dtype(dtype)
            .transpose(1, 2);
            for log in [false, true] {
                for dim in [0isize, 1, -1] {
                    let f = |x: &Tensor| {
                        if log {
                            x.log_softmax(dim)
                        } else {
                            x.softmax(dim)
                        }
                    };
                    let y = f(&x);
                    let fused = grad(&[&y], &[&x], Some(std::slice::from_ref(&g)), false)[0]
                        .clone()
                        .unwrap();
                    let y = f(&x);
                    let formula = grad(&[&y], &[&x], Some(std::slice::from_ref(&g)), true)[0]
                        .clone()
                        .unwrap();
                    assert_eq!(fused.shape(), &shape[..]);
                    let (a, b) = (
                        fused.to_dtype(DType::F64).to_vec::<f64>(),
                        formula.to_dtype(DType::F64).to_vec::<f64>(),
                    );
                    for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                        assert!(
                            (p - q).abs() <= tol * q.abs().max(1.0),
                            "log {log} dim {dim} {shape:?} {dtype:?} at {i}: {p} vs {q}"
                        );
                    }
                }
            }
        }
    }
}

/// `index_add` of whole rows (the CPU fast path) equals `scatter_add` with the index
/// spread over the source, along every dim, repeated indices summing, in f32 and f64,
/// contiguous and strided; an
/// index out of range is still the general path's error.
#[test]
fn index_add_by_rows_equals_the_scatter() {
    for dtype in [DType::F32, DType::F64] {
        for d in 0..3usize {
            let shape = [4usize, 5, 3];
            let base = range(60, &shape).to_dtype(dtype);
            let idx = Tensor::from_vec(vec![2i64, 0, 2, shape[d] as i64 - 1], &[4]);
            let mut src_shape = shape;
            src_shape[d] = 4;
            let n: usize = src_shape.iter().product();
            let src = range(n, &src_shape).mul_scalar(0.5).to_dtype(dtype);
            let mut view = [1usize; 3];
            view[d] = 4;
            let spread = idx.reshape(&view).broadcast_to(&src_shape).contiguous();
            let want = base.scatter_add(d as isize, &spread, &src);
            let got = base.index_add(d as isize, &idx, &src);
            let f64s = |t: &Tensor| t.to_dtype(DType::F64).to_vec::<f64>();
            assert_eq!(f64s(&got), f64s(&want), "{dtype:?} dim {d}");
            // Strided operands (permuted views) are read as their elements, not their
            // storage order.
            let [a, b, c] = src_shape;
            let src_t = range(n, &[c, b, a]).to_dtype(dtype).permute(&[2, 1, 0]);
            let base_t = range(60, &[3, 5, 4]).to_dtype(dtype).permute(&[2, 1, 0]);
            assert!(!src_t.is_contiguous() && !base_t.is_contiguous());
            let want = base_t.scatter_add(d as isize, &spread, &src_t);
            let got = base_t.index_add(d as isize, &idx, &src_t);
            assert_eq!(f64s(&got), f64s(&want), "{dtype:?} dim {d}, strided");
        }
    }
    let bad = std::panic::catch_unwind(|| {
        Tensor::zeros(&[3, 2], DType::F32, &Device::Cpu).index_add(
            0,
            &Tensor::from_vec(vec![3i64], &[1]),
            &Tensor::ones(&[1, 2], DType::F32, &Device::Cpu),
        )
    });
    assert!(bad.is_err(), "an index past the end panics");
}
