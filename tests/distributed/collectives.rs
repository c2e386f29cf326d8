//! Each collective on every dtype and op, against values computed on the host: all-reduce,
//! broadcast, all-gather, reduce-scatter, all-to-all, send/recv, sub-groups, views, and
//! wrong arguments.

use super::*;

pub(super) fn all_reduce_all(g: &ProcessGroup) -> Result<(), String> {
    let w = g.size();
    let n = 7;
    for dtype in FLOATS.iter().copied().chain([DType::I64]) {
        for op in [
            ReduceOp::Sum,
            ReduceOp::Avg,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Product,
        ] {
            if op == ReduceOp::Avg && dtype == DType::I64 {
                let t = rank_tensor(g, n, dtype);
                ensure(g.all_reduce(&t, op).is_err(), || {
                    "Avg on i64 must be an error".into()
                })?;
                continue;
            }
            let expect: Vec<f64> = (0..n)
                .map(|i| {
                    let vals = (0..w).map(|r| value(r, i));
                    match op {
                        ReduceOp::Sum => vals.sum(),
                        ReduceOp::Avg => vals.sum::<f64>() / w as f64,
                        ReduceOp::Max => vals.fold(f64::MIN, f64::max),
                        ReduceOp::Min => vals.fold(f64::MAX, f64::min),
                        ReduceOp::Product => vals.product(),
                    }
                })
                .collect();
            for asynchronous in [false, true] {
                let t = rank_tensor(g, n, dtype);
                if asynchronous {
                    let work = g.all_reduce_async(&t, op).map_err(|e| e.to_string())?;
                    work.wait().map_err(|e| e.to_string())?;
                } else {
                    g.all_reduce(&t, op).map_err(|e| e.to_string())?;
                }
                let got = t.to_dtype(DType::F64).to_vec::<f64>();
                // Avg over 4 ranks of integers is exact in binary; 16-bit types hold these.
                let tol = if matches!(dtype, DType::F16 | DType::BF16) {
                    0.02
                } else {
                    1e-12
                };
                ensure(
                    got.iter()
                        .zip(&expect)
                        .all(|(a, b)| (a - b).abs() <= tol * b.abs().max(1.0)),
                    || {
                        format!(
                            "{dtype} {op:?} async={asynchronous}: got {got:?}, expected {expect:?}"
                        )
                    },
                )?;
            }
        }
    }
    // Buffers over 4 MiB go to MPI in pieces: two and a half (f32, f16) and four and a
    // bit (f64) pieces, every element reduced once.
    for (dtype, n) in [
        (DType::F32, 2_600_000),
        (DType::F64, 2_100_000),
        (DType::F16, 5_300_000),
    ] {
        for asynchronous in [false, true] {
            let t = rank_tensor(g, n, dtype);
            if asynchronous {
                let work = g
                    .all_reduce_async(&t, ReduceOp::Sum)
                    .map_err(|e| e.to_string())?;
                work.wait().map_err(|e| e.to_string())?;
            } else {
                g.all_reduce(&t, ReduceOp::Sum).map_err(|e| e.to_string())?;
            }
            let got = t.to_dtype(DType::F64).to_vec::<f64>();
            if let Some(i) = (0..n).find(|&i| got[i] != (0..w).map(|r| value(r, i)).sum::<f64>()) {
                return Err(format!(
                    "{dtype} Sum of {n} elements async={asynchronous}: element {i} is {}",
                    got[i]
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn broadcast_all(g: &ProcessGroup) -> Result<(), String> {
    for dtype in FLOATS.iter().copied().chain([DType::I64, DType::U8]) {
        for src in 0..g.size() {
            let t = rank_tensor(g, 5, dtype);
            g.broadcast(&t, src).map_err(|e| e.to_string())?;
            let expect: Vec<f64> = (0..5).map(|i| value(src, i)).collect();
            let got = t.to_dtype(DType::F64).to_vec::<f64>();
            ensure(got == expect, || {
                format!("{dtype} from {src}: {got:?} vs {expect:?}")
            })?;
        }
    }
    // Asynchronous, large enough to need more than one eager message.
    let big = Tensor::full(&[1 << 20], g.rank() as f64, DType::F32, &Device::Cpu);
    g.broadcast_async(&big, g.size() - 1)
        .and_then(|w| w.wait())
        .map_err(|e| e.to_string())?;
    let v = big.to_vec::<f32>();
    ensure(v.iter().all(|&x| x == (g.size() - 1) as f32), || {
        "large async broadcast".into()
    })
}

pub(super) fn all_gather_all(g: &ProcessGroup) -> Result<(), String> {
    for dtype in FLOATS.iter().copied().chain([DType::I64]) {
        let t = rank_tensor(g, 3, dtype).reshape(&[1, 3]);
        let parts = g.all_gather(&t).map_err(|e| e.to_string())?;
        ensure(parts.len() == g.size(), || "one part per rank".into())?;
        for (r, p) in parts.iter().enumerate() {
            let expect: Vec<f64> = (0..3).map(|i| value(r, i)).collect();
            ensure(
                p.shape() == [1, 3] && p.to_dtype(DType::F64).to_vec::<f64>() == expect,
                || format!("{dtype}: part {r} is {p:?}"),
            )?;
        }
        let out = Tensor::zeros(&[g.size(), 3], dtype, &Device::Cpu);
        g.all_gather_into_tensor_async(&out, &t.reshape(&[3]))
            .and_then(|w| w.wait())
            .map_err(|e| e.to_string())?;
        let expect: Vec<f64> = (0..g.size())
            .flat_map(|r| (0..3).map(move |i| value(r, i)))
            .collect();
        ensure(out.to_dtype(DType::F64).to_vec::<f64>() == expect, || {
            format!("{dtype}: into tensor")
        })?;
    }
    Ok(())
}

/// Communicating a tensor only read (all-gather input, send) leaves it usable by
/// autograd: it is not counted as modified in place.
pub(super) fn inputs_stay_unmodified(g: &ProcessGroup) -> Result<(), String> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad(true);
    let y = (&x * &x).sum_all(); // saves x for backward
    let out = Tensor::zeros(&[2 * g.size()], DType::F64, &Device::Cpu);
    g.all_gather_into_tensor(&out, &x)
        .map_err(|e| e.to_string())?;
    y.backward();
    ensure(x.grad().unwrap().to_vec::<f64>() == vec![2.0, 4.0], || {
        "gradient".into()
    })
}

pub(super) fn reduce_scatter_all(g: &ProcessGroup) -> Result<(), String> {
    let w = g.size();
    for dtype in FLOATS {
        for op in [ReduceOp::Sum, ReduceOp::Avg] {
            let input = rank_tensor(g, 2 * w, dtype).reshape(&[w, 2]);
            let out = Tensor::zeros(&[2], dtype, &Device::Cpu);
            g.reduce_scatter_tensor(&out, &input, op)
                .map_err(|e| e.to_string())?;
            let expect: Vec<f64> = (0..2)
                .map(|j| {
                    let s: f64 = (0..w).map(|r| value(r, g.rank() * 2 + j)).sum();
                    if op == ReduceOp::Avg { s / w as f64 } else { s }
                })
                .collect();
            let got = out.to_dtype(DType::F64).to_vec::<f64>();
            ensure(
                got.iter()
                    .zip(&expect)
                    .all(|(a, b)| (a - b).abs() < 0.02 * b.abs()),
                || format!("{dtype} {op:?}: {got:?} vs {expect:?}"),
            )?;
        }
    }
    Ok(())
}

pub(super) fn all_to_all_all(g: &ProcessGroup) -> Result<(), String> {
    let w = g.size();
    // Rank r's block j holds 100 r + j: after the exchange, block j holds 100 j + r.
    let input = Tensor::from_vec(
        (0..w)
            .flat_map(|j| [100.0 * g.rank() as f64 + j as f64; 2])
            .collect::<Vec<_>>(),
        &[w, 2],
    );
    let out = Tensor::zeros(&[w, 2], DType::F64, &Device::Cpu);
    g.all_to_all_single(&out, &input)
        .map_err(|e| e.to_string())?;
    let expect: Vec<f64> = (0..w)
        .flat_map(|j| [100.0 * j as f64 + g.rank() as f64; 2])
        .collect();
    ensure(out.to_vec::<f64>() == expect, || {
        format!("{:?} vs {expect:?}", out.to_vec::<f64>())
    })
}

pub(super) fn send_recv_ring(g: &ProcessGroup) -> Result<(), String> {
    let (r, w) = (g.rank(), g.size());
    let next = (r + 1) % w;
    let prev = (r + w - 1) % w;
    let msg = Tensor::full(&[1000], r as f64, DType::F32, &Device::Cpu);
    let got = Tensor::zeros(&[1000], DType::F32, &Device::Cpu);
    // Even ranks send first, odd ranks receive first: blocking calls cannot deadlock.
    if r % 2 == 0 {
        g.send(&msg, next, 7).map_err(|e| e.to_string())?;
        g.recv(&got, prev, 7).map_err(|e| e.to_string())?;
    } else {
        g.recv(&got, prev, 7).map_err(|e| e.to_string())?;
        g.send(&msg, next, 7).map_err(|e| e.to_string())?;
    }
    ensure(
        got.to_vec::<f32>().iter().all(|&x| x == prev as f32),
        || "ring".into(),
    )?;
    // A message of the wrong length is an error, not a silent truncation.
    if w >= 2 && r < 2 {
        if r == 0 {
            g.send(&Tensor::ones(&[3], DType::F32, &Device::Cpu), 1, 9)
                .map_err(|e| e.to_string())?;
        } else {
            let short = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
            ensure(g.recv(&short, 0, 9).is_err(), || {
                "a too-long message must be an error".into()
            })?;
        }
    }
    Ok(())
}

pub(super) fn sub_groups(g: &ProcessGroup) -> Result<(), String> {
    let w = g.size();
    let evens: Vec<usize> = (0..w).step_by(2).collect();
    let ends = vec![w - 1, 0];
    let ge = distributed::new_group(&evens).map_err(|e| e.to_string())?;
    let gends = distributed::new_group(&ends).map_err(|e| e.to_string())?;
    let me = g.rank();
    let t = Tensor::full(&[2], me as f64 + 1.0, DType::F64, &Device::Cpu);
    if evens.contains(&me) {
        ge.all_reduce(&t, ReduceOp::Sum)
            .map_err(|e| e.to_string())?;
        let expect: f64 = evens.iter().map(|&r| r as f64 + 1.0).sum();
        ensure(t.to_vec::<f64>() == vec![expect; 2], || {
            format!("evens: {:?}", t.to_vec::<f64>())
        })?;
        ensure(ge.rank() == me / 2, || "group rank".into())?;
    } else {
        ensure(
            matches!(
                ge.all_reduce(&t, ReduceOp::Sum),
                Err(DistError::NotAMember { .. })
            ),
            || "a non-member's collective must be an error".into(),
        )?;
    }
    if ends.contains(&me) {
        // Group rank 0 of `ends` is global rank w - 1: broadcast takes global ranks.
        let b = Tensor::full(&[1], me as f64, DType::F64, &Device::Cpu);
        gends.broadcast(&b, w - 1).map_err(|e| e.to_string())?;
        ensure(b.to_vec::<f64>() == vec![(w - 1) as f64], || {
            "ends broadcast".into()
        })?;
        ensure(gends.rank() == if me == w - 1 { 0 } else { 1 }, || {
            "ends group rank".into()
        })?;
    }
    Ok(())
}

pub(super) fn non_contiguous(g: &ProcessGroup) -> Result<(), String> {
    let base = Tensor::from_vec((0..12).map(|i| i as f32).collect::<Vec<_>>(), &[3, 4]);
    let view = base.transpose(0, 1); // [4, 3], not contiguous
    let col = base.select(1, 2); // a strided column [3]
    g.all_reduce(&view, ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    let w = g.size() as f32;
    ensure(
        base.to_vec::<f32>() == (0..12).map(|i| i as f32 * w).collect::<Vec<_>>(),
        || format!("transposed view: {:?}", base.to_vec::<f32>()),
    )?;
    g.broadcast(&col, 0).map_err(|e| e.to_string())?;
    ensure(
        col.to_vec::<f32>() == vec![2.0 * w, 6.0 * w, 10.0 * w],
        || "strided column".into(),
    )
}

pub(super) fn wrong_arguments(g: &ProcessGroup) -> Result<(), String> {
    let t = Tensor::ones(&[3], DType::F32, &Device::Cpu);
    let bad_out = Tensor::zeros(&[3 * g.size() + 1], DType::F32, &Device::Cpu);
    ensure(g.all_gather_into_tensor(&bad_out, &t).is_err(), || {
        "all_gather size".into()
    })?;
    let f64_out = Tensor::zeros(&[3 * g.size()], DType::F64, &Device::Cpu);
    ensure(g.all_gather_into_tensor(&f64_out, &t).is_err(), || {
        "all_gather dtype".into()
    })?;
    ensure(g.broadcast(&t, g.size() + 3).is_err(), || {
        "root out of range".into()
    })?;
    ensure(distributed::new_group(&[0, 0]).is_err(), || {
        "duplicate ranks".into()
    })?;
    ensure(
        matches!(
            distributed::init_process_group(Backend::Mpi),
            Err(DistError::AlreadyInitialized)
        ),
        || "second init".into(),
    )
}
