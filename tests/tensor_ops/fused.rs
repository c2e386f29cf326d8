//! Fused kernels against the formulas they replace (activation and softmax backwards),
//! `cat` writing every element, and `index_add` by rows against the scatter.

use super::*;

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
