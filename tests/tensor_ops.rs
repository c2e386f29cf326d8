//! Tensor semantics that PyTorch users rely on, stated as tests.

use ferrograd::prelude::*;

#[path = "tensor_ops/conv.rs"]
mod conv;
#[path = "tensor_ops/elementwise.rs"]
mod elementwise;
#[path = "tensor_ops/fused.rs"]
mod fused;

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
