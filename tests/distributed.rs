//! Distributed tests on the real engine: this binary launches itself with `mpirun`
//! (world sizes 2 and 4), and each rank runs the checks below. Needs the `mpi` feature:
//! `cargo test --features mpi --test distributed`.
//!
//! Run by cargo (no `OMPI_COMM_WORLD_SIZE` in the environment) it is the launcher: it
//! starts the rank suite under `mpirun -n 2` and `mpirun -n 4 --oversubscribe`, and the
//! fault cases (a rank that panics, a rank that leaves while the other waits, ranks that
//! issue different collectives), and reads their exit status and output. Started by
//! `mpirun`, it is a rank.

use ferrograd::distributed::{
    self, Backend, DdpConfig, DistError, DistributedDataParallel, InitOptions, ProcessGroup,
    ReduceOp, SyncBatchNorm, ZeroRedundancyOptimizer,
};
use ferrograd::nn::{BatchNorm2d, Conv2d, ConvOptions, Forward, Linear, Module};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::process::Command;

#[path = "common/ddp_model.rs"]
mod ddp_model;
use ddp_model::{Mlp, mse};
use std::time::{Duration, Instant};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if std::env::var("OMPI_COMM_WORLD_SIZE").is_err() {
        launcher();
        return;
    }
    match mode.as_str() {
        "suite" => rank_suite(),
        "panic" => rank_panics(),
        "leave" => rank_leaves(),
        "exit_pending" => rank_exits_pending(),
        "mismatch" => rank_mismatch(),
        other => panic!("unknown mode {other:?}"),
    }
}

// ---- the launcher ------------------------------------------------------------------------

fn mpirun(n: usize, mode: &str, env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let exe = std::env::current_exe().expect("own path");
    let mut cmd = Command::new("mpirun");
    cmd.arg("-n").arg(n.to_string());
    if n > 2 {
        cmd.arg("--oversubscribe");
    }
    cmd.arg(exe).arg(mode);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // OpenMPI refuses to run as root (containers, CI) unless told this twice.
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    // Containers often forbid the cross-memory-attach single copy; plain shared memory works.
    cmd.env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    cmd.env("RAYON_NUM_THREADS", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = cmd.output().expect("mpirun starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text, start.elapsed())
}

/// A fault case: its name, the rank mode, the environment, and the message it must print.
type Fault = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

fn launcher() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        let msg = "mpirun not found: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}: the distributed tests cannot run (CI must install it)");
        }
        println!("skipped: {msg}");
        println!("test result: ok. 0 passed; 0 failed; 1 ignored");
        return;
    }
    let mut failed = Vec::new();
    let mut passed = 0;
    let mut check = |name: &str, ok: bool, detail: &str| {
        if ok {
            passed += 1;
            println!("test {name} ... ok");
        } else {
            println!("test {name} ... FAILED\n{detail}");
            failed.push(name.to_string());
        }
    };

    for n in [2, 4] {
        let (code, text, took) = mpirun(n, "suite", &[]);
        print!("{text}");
        check(
            &format!("suite at world size {n} ({:.1} s)", took.as_secs_f64()),
            code == Some(0) && text.contains("rank suite: all passed"),
            &text,
        );
    }

    // Each fault must end the job with a non-zero status and a message, within seconds.
    let faults: [Fault; 3] = [
        // A rank that panics, named in the message.
        (
            "a panicking rank ends the job and is named",
            "panic",
            &[],
            "rank 1 of 2 panicked",
        ),
        // A rank that leaves: the other's collective times out.
        (
            "a collective nobody answers times out and ends the job",
            "leave",
            &[("FERROGRAD_DISTRIBUTED_TIMEOUT", "3")],
            "did not complete within",
        ),
        // A rank that exits with a collective nobody answers: ended at exit, not hung.
        (
            "exiting with an unanswered collective ends the job",
            "exit_pending",
            &[("FERROGRAD_DISTRIBUTED_TIMEOUT", "3")],
            "still pending",
        ),
    ];
    for (name, mode, env, message) in faults {
        let (code, text, took) = mpirun(2, mode, env);
        check(
            name,
            code.is_some_and(|c| c != 0)
                && text.contains(message)
                && took < Duration::from_secs(60),
            &format!("exit {code:?} after {took:?}:\n{text}"),
        );
    }

    // Debug mode: ranks that issue different collectives get an Err, not garbage.
    let (code, text, _) = mpirun(2, "mismatch", &[("FERROGRAD_DISTRIBUTED_DEBUG", "DETAIL")]);
    check(
        "mismatched collectives are reported on every rank",
        code == Some(0) && text.matches("mismatch reported").count() == 2,
        &format!("exit {code:?}:\n{text}"),
    );

    println!(
        "\ntest result: {}. {passed} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    );
    assert!(failed.is_empty(), "failed: {failed:?}");
}

// ---- fault cases (each a rank) -----------------------------------------------------------

fn rank_panics() {
    let world = distributed::init_process_group(Backend::Mpi).unwrap();
    world.barrier().unwrap();
    if world.rank() == 1 {
        panic!("on purpose");
    }
    // Rank 0 waits in a collective that rank 1 never joins: the abort must end it.
    let t = Tensor::ones(&[4], DType::F32, &Device::Cpu);
    let _ = world.all_reduce(&t, ReduceOp::Sum);
    std::thread::sleep(Duration::from_secs(120));
}

fn rank_leaves() {
    let world = distributed::init_process_group(Backend::Mpi).unwrap();
    world.barrier().unwrap();
    if world.rank() == 1 {
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let t = Tensor::ones(&[4], DType::F32, &Device::Cpu);
    let _ = world.all_reduce(&t, ReduceOp::Sum);
    println!("rank 0 should not get here");
}

fn rank_exits_pending() {
    let world = distributed::init_process_group(Backend::Mpi).unwrap();
    world.barrier().unwrap();
    if world.rank() == 1 {
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let t = Tensor::ones(&[4], DType::F32, &Device::Cpu);
    let _never_waited = world.all_reduce_async(&t, ReduceOp::Sum).unwrap();
    // Returning from main runs destroy_process_group at exit.
}

fn rank_mismatch() {
    let world = distributed::init_process_group(Backend::Mpi).unwrap();
    let n = if world.rank() == 0 { 4 } else { 5 };
    let t = Tensor::ones(&[n], DType::F32, &Device::Cpu);
    match world.all_reduce(&t, ReduceOp::Sum) {
        Err(DistError::Mismatch(m)) => println!("rank {}: mismatch reported: {m}", world.rank()),
        other => println!(
            "rank {}: expected a mismatch error, got {other:?}",
            world.rank()
        ),
    }
    // The group is still usable afterwards.
    let t = Tensor::ones(&[3], DType::F32, &Device::Cpu);
    world.all_reduce(&t, ReduceOp::Sum).unwrap();
    assert_eq!(t.to_vec::<f32>(), vec![2.0; 3]);
    distributed::destroy_process_group();
}

// ---- the rank suite ----------------------------------------------------------------------

type Check = fn(&ProcessGroup) -> Result<(), String>;

fn rank_suite() {
    let world = distributed::init_process_group_with(
        Backend::Mpi,
        InitOptions {
            timeout: Duration::from_secs(120),
            ..InitOptions::default()
        },
    )
    .unwrap();
    assert_eq!(distributed::rank(), world.rank());
    assert_eq!(distributed::world_size(), world.size());
    let checks: &[(&str, Check)] = &[
        (
            "all_reduce every dtype and op, sync and async",
            all_reduce_all,
        ),
        ("broadcast every dtype from every root", broadcast_all),
        ("all_gather and all_gather_into_tensor", all_gather_all),
        ("reduce_scatter_tensor sum and avg", reduce_scatter_all),
        ("all_to_all_single", all_to_all_all),
        (
            "communicated inputs stay usable by autograd",
            inputs_stay_unmodified,
        ),
        ("send and recv around a ring", send_recv_ring),
        ("sub-groups", sub_groups),
        ("non-contiguous tensors", non_contiguous),
        ("wrong arguments are errors", wrong_arguments),
        (
            "DDP = one process with the whole batch: MLP, SGD momentum",
            |g| ddp_equivalence(g, false, false),
        ),
        ("DDP = one process with the whole batch: MLP, AdamW", |g| {
            ddp_equivalence(g, true, false)
        }),
        ("DDP with gradient_as_bucket_view", |g| {
            ddp_equivalence(g, true, true)
        }),
        (
            "DDP no_sync accumulation = one step on the larger batch",
            ddp_no_sync,
        ),
        ("DDP find_unused_parameters", ddp_unused),
        (
            "DDP broadcasts rank 0's weights and reports a different model",
            ddp_broadcast_and_mismatch,
        ),
        (
            "DDP + SyncBatchNorm CNN (a SyncBatchNorm layer, and convert_sync_batchnorm on the plain CNN) = one process with the whole batch, SGD-momentum and AdamW",
            ddp_sync_batchnorm,
        ),
        (
            "SyncBatchNorm input gradient = BatchNorm2d's on the whole batch",
            sync_bn_input_grad,
        ),
        (
            "ZeRO-1 AdamW = plain AdamW; state sharded; consolidate and load",
            zero_adamw,
        ),
        (
            "a stopped and resumed run equals an unstopped one bit for bit",
            ddp_resume_bitwise,
        ),
        (
            "Trainer under DDP = the Trainer in one process on the whole batch; reduced metrics; rank 0 logs; resume",
            trainer_ddp,
        ),
    ];
    let mut failures = 0i64;
    for (name, f) in checks {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&world)))
            .unwrap_or_else(|_| Err("panicked".into()));
        if let Err(e) = result {
            failures += 1;
            eprintln!("rank {}: {name}: FAILED: {e}", world.rank());
        } else if world.rank() == 0 {
            println!("  [world {}] {name}: ok", world.size());
        }
        world.barrier().unwrap();
    }
    let total = Tensor::from_vec(vec![failures], &[1]);
    world.all_reduce(&total, ReduceOp::Sum).unwrap();
    if world.rank() == 0 {
        let total = total.to_vec::<i64>()[0];
        if total == 0 {
            println!(
                "rank suite: all passed ({} checks, world {})",
                checks.len(),
                world.size()
            );
        } else {
            println!("rank suite: {total} failures");
        }
    }
    distributed::destroy_process_group();
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// The value rank `r` contributes at index `i`: small integers, exact in every dtype.
fn value(r: usize, i: usize) -> f64 {
    ((r * 3 + i) % 5) as f64 + 1.0
}

fn rank_tensor(g: &ProcessGroup, n: usize, dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..n).map(|i| value(g.rank(), i)).collect();
    Tensor::from_vec(v, &[n]).to_dtype(dtype)
}

fn all_reduce_all(g: &ProcessGroup) -> Result<(), String> {
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

fn broadcast_all(g: &ProcessGroup) -> Result<(), String> {
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

fn all_gather_all(g: &ProcessGroup) -> Result<(), String> {
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
fn inputs_stay_unmodified(g: &ProcessGroup) -> Result<(), String> {
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

fn reduce_scatter_all(g: &ProcessGroup) -> Result<(), String> {
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

fn all_to_all_all(g: &ProcessGroup) -> Result<(), String> {
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

fn send_recv_ring(g: &ProcessGroup) -> Result<(), String> {
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

fn sub_groups(g: &ProcessGroup) -> Result<(), String> {
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

fn non_contiguous(g: &ProcessGroup) -> Result<(), String> {
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

fn wrong_arguments(g: &ProcessGroup) -> Result<(), String> {
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

// ---- DistributedDataParallel -------------------------------------------------------------

/// The whole batch of step `step` (the same on every rank) and its targets.
fn global_batch(step: usize, rows: usize) -> (Tensor, Tensor) {
    ddp_model::global_batch(step, rows, &Device::Cpu)
}

fn close(a: &[f32], b: &[f32], rtol: f32, atol: f32) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= atol + rtol * y.abs())
}

/// Every parameter of `model` within 1e-5 (relative) of `reference`'s, by name.
fn parameters_match(
    model: &impl Module,
    reference: &impl Module,
    when: &str,
) -> Result<(), String> {
    for ((name, p), (_, q)) in model
        .named_parameters()
        .iter()
        .zip(reference.named_parameters())
    {
        let (a, r) = (p.to_vec::<f32>(), q.to_vec::<f32>());
        ensure(close(&a, &r, 1e-5, 1e-6), || {
            let worst = a
                .iter()
                .zip(&r)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            format!("{when}{name} differs from the single-process run by {worst:e}")
        })?;
    }
    Ok(())
}

/// Every rank's copy of `params` must be bitwise equal to rank 0's.
fn identical_across_ranks(g: &ProcessGroup, params: &[Tensor]) -> Result<(), String> {
    for p in params {
        let mine = p.detach().contiguous();
        let theirs = mine.deep_copy();
        g.broadcast(&theirs, 0).map_err(|e| e.to_string())?;
        let (a, b) = (mine.to_vec::<f32>(), theirs.to_vec::<f32>());
        ensure(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            || {
                format!(
                    "rank {} differs from rank 0 in a parameter of shape {:?}",
                    g.rank(),
                    p.shape()
                )
            },
        )?;
    }
    Ok(())
}

/// The two optimizers the equivalence checks run: AdamW with weight decay, or SGD with
/// momentum.
fn optimizer(adamw: bool, params: Vec<Tensor>) -> Box<dyn Optimizer> {
    if adamw {
        Box::new(AdamW::new(
            params,
            AdamConfig::default().lr(0.01).weight_decay(0.01),
        ))
    } else {
        Box::new(Sgd::new(params, SgdConfig::new(0.05).momentum(0.9)))
    }
}

fn ddp_equivalence(g: &ProcessGroup, adamw: bool, as_view: bool) -> Result<(), String> {
    let (w, b) = (g.size(), 5);
    // Ranks start from different weights: construction must make them rank 0's.
    let ddp = DistributedDataParallel::new(
        Mlp::new(10 + g.rank() as u64, &Device::Cpu),
        g,
        DdpConfig::default()
            .gradient_as_bucket_view(as_view)
            .first_bucket_cap_mb(0.0005), // several buckets even for this small model
    )
    .map_err(|e| e.to_string())?;
    ensure(ddp.buckets().len() >= 2, || {
        format!("buckets: {:?}", ddp.buckets())
    })?;
    let mut reference = Mlp::new(99, &Device::Cpu);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let mut opt = optimizer(adamw, ddp.parameters());
    let mut opt_ref = optimizer(adamw, reference.parameters());
    for step in 0..5 {
        let (x, y) = global_batch(step, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        opt.zero_grad();
        mse(&ddp.forward(&xs), &ys).backward();
        if as_view {
            for p in ddp.parameters() {
                ensure(p.grad().is_some(), || "grad set".into())?;
            }
        }
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        identical_across_ranks(g, &ddp.parameters())?;
        parameters_match(ddp.module(), &reference, &format!("step {step}: "))?;
    }
    Ok(())
}

fn ddp_no_sync(g: &ProcessGroup) -> Result<(), String> {
    let (w, b, m) = (g.size(), 3, 3);
    let ddp = DistributedDataParallel::new(Mlp::new(3, &Device::Cpu), g, DdpConfig::default())
        .map_err(|e| e.to_string())?;
    let mut reference = Mlp::new(99, &Device::Cpu);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let mut opt = Sgd::new(ddp.parameters(), SgdConfig::new(0.1));
    let mut opt_ref = Sgd::new(reference.parameters(), SgdConfig::new(0.1));
    opt.zero_grad();
    opt_ref.zero_grad();
    for micro in 0..m {
        let (x, y) = global_batch(50 + micro, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        if micro + 1 < m {
            let _guard = ddp.no_sync();
            mse(&ddp.forward(&xs), &ys).backward();
        } else {
            mse(&ddp.forward(&xs), &ys).backward();
        }
        mse(&reference.forward(&x), &y).backward();
    }
    opt.step();
    opt_ref.step();
    identical_across_ranks(g, &ddp.parameters())?;
    for (p, q) in ddp.parameters().iter().zip(reference.parameters()) {
        ensure(
            close(&p.to_vec::<f32>(), &q.to_vec::<f32>(), 1e-5, 1e-6),
            || "no_sync".into(),
        )?;
    }
    Ok(())
}

#[derive(Module)]
struct TwoHeads {
    trunk: Linear,
    a: Linear,
    b: Linear,
    never: Linear,
}

struct UseB(bool);

impl<'a> Forward<(&'a Tensor, UseB)> for TwoHeads {
    type Output = Tensor;
    fn forward(&self, (x, use_b): (&'a Tensor, UseB)) -> Tensor {
        let h = self.trunk.forward(x).relu();
        let out = self.a.forward(&h);
        if use_b.0 {
            &out + &self.b.forward(&h)
        } else {
            out
        }
    }
}

fn ddp_unused(g: &ProcessGroup) -> Result<(), String> {
    manual_seed(5);
    let model = TwoHeads {
        trunk: Linear::new(4, 8, &Device::Cpu),
        a: Linear::new(8, 2, &Device::Cpu),
        b: Linear::new(8, 2, &Device::Cpu),
        never: Linear::new(8, 2, &Device::Cpu),
    };
    let ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default().find_unused_parameters(true))
            .map_err(|e| e.to_string())?;
    // Only rank 0 uses head b; nobody uses `never`.
    let rng = &mut Generator::new(77 + g.rank() as u64);
    let x = Tensor::randn_with(&[3, 4], DType::F32, &Device::Cpu, rng);
    for _ in 0..2 {
        ddp.zero_grad();
        ddp.forward((&x, UseB(g.rank() == 0))).sum_all().backward();
        let m = ddp.module();
        ensure(m.never.weight.grad().is_none(), || {
            "a parameter no rank used keeps no grad".into()
        })?;
        // b's gradient: rank 0's, divided by the world size, on every rank.
        let local_b = if g.rank() == 0 {
            let h = m.trunk.forward(&x).relu();
            h.sum(&[0], false).to_vec::<f32>()
        } else {
            vec![0.0; 8]
        };
        let t = Tensor::from_vec(local_b, &[8]);
        g.all_reduce(&t, ReduceOp::Avg).map_err(|e| e.to_string())?;
        let expect = t.to_vec::<f32>();
        let got = m.b.weight.grad().ok_or("b has a gradient")?.to_vec::<f32>();
        ensure(close(&got[..8], &expect, 1e-5, 1e-6), || {
            format!("b grad {got:?} vs {expect:?}")
        })?;
    }
    Ok(())
}

fn ddp_broadcast_and_mismatch(g: &ProcessGroup) -> Result<(), String> {
    let ddp = DistributedDataParallel::new(
        Mlp::new(40 + g.rank() as u64, &Device::Cpu),
        g,
        DdpConfig::default(),
    )
    .map_err(|e| e.to_string())?;
    identical_across_ranks(g, &ddp.parameters())?;
    let keys: Vec<String> = ddp.state_dict().keys().cloned().collect();
    ensure(keys.iter().any(|k| k == "module.fc1.weight"), || {
        format!("keys {keys:?}")
    })?;
    // A rank with another width: every rank gets an error naming the ranks.
    manual_seed(1);
    let width = if g.rank() == g.size() - 1 { 33 } else { 32 };
    let odd = Mlp {
        fc1: Linear::new(6, width, &Device::Cpu),
        fc2: Linear::new(width, 16, &Device::Cpu),
        head: Linear::new(16, 3, &Device::Cpu),
    };
    match DistributedDataParallel::new(odd, g, DdpConfig::default()) {
        Err(DistError::Mismatch(m)) => ensure(m.contains("different parameters"), || m.clone()),
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(_) => Err("a different model must be an error".into()),
    }
}

// ---- SyncBatchNorm -----------------------------------------------------------------------

#[derive(Module)]
struct SyncCnn {
    conv: Conv2d,
    bn: SyncBatchNorm,
    fc: Linear,
}

#[derive(Module)]
struct Cnn {
    conv: Conv2d,
    bn: BatchNorm2d,
    fc: Linear,
}

fn cnn(seed: u64) -> Cnn {
    manual_seed(seed);
    Cnn {
        // No bias before a batch norm (as in ResNets): its true gradient is zero, and Adam
        // would turn the rounding noise of that zero into full-size steps.
        conv: Conv2d::new(2, 4, 3, ConvOptions::default().bias(false), &Device::Cpu),
        bn: BatchNorm2d::new(4, &Device::Cpu),
        fc: Linear::new(64, 3, &Device::Cpu),
    }
}

impl Forward<&Tensor> for SyncCnn {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc
            .forward(&self.bn.forward(&self.conv.forward(x)).relu().flatten(1, -1))
    }
}

impl Forward<&Tensor> for Cnn {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc
            .forward(&self.bn.forward(&self.conv.forward(x)).relu().flatten(1, -1))
    }
}

fn image_batch(step: usize, rows: usize) -> (Tensor, Tensor) {
    let rng = &mut Generator::new(2000 + step as u64);
    let x = Tensor::randn_with(&[rows, 2, 6, 6], DType::F32, &Device::Cpu, rng) * 2.0 + 0.5;
    let y = Tensor::randn_with(&[rows, 3], DType::F32, &Device::Cpu, rng);
    (x, y)
}

fn ddp_sync_batchnorm(g: &ProcessGroup) -> Result<(), String> {
    for adamw in [false, true] {
        let Cnn { conv, bn, fc } = cnn(20 + g.rank() as u64);
        let model = SyncCnn {
            conv,
            bn: SyncBatchNorm::from_batch_norm(bn, Some(g)),
            fc,
        };
        ddp_sync_batchnorm_with(g, model, adamw)?;
        // The whole-model conversion: the plain CNN's BatchNorm2d, found and synchronised.
        let mut model = cnn(20 + g.rank() as u64);
        let converted = distributed::convert_sync_batchnorm(&mut model, Some(g));
        ensure(converted == 1 && model.bn.sync_stats, || {
            format!("convert_sync_batchnorm converted {converted} layers")
        })?;
        ddp_sync_batchnorm_with(g, model, adamw)?;
    }
    Ok(())
}

fn ddp_sync_batchnorm_with<M>(g: &ProcessGroup, model: M, adamw: bool) -> Result<(), String>
where
    M: Module + for<'a> Forward<&'a Tensor, Output = Tensor>,
{
    let (w, b) = (g.size(), 3);
    let ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default()).map_err(|e| e.to_string())?;
    let mut reference = cnn(99);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let mut opt = optimizer(adamw, ddp.parameters());
    let mut opt_ref = optimizer(adamw, reference.parameters());
    for step in 0..5 {
        let (x, y) = image_batch(step, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        opt.zero_grad();
        mse(&ddp.forward(&xs), &ys).backward();
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        identical_across_ranks(g, &ddp.parameters())?;
        let ours = ddp.module().state_dict();
        for (name, r) in reference.state_dict().iter() {
            if r.dtype() != DType::F32 {
                continue; // num_batches_tracked
            }
            let (a, e) = (ours[name].to_vec::<f32>(), r.to_vec::<f32>());
            ensure(close(&a, &e, 1e-5, 1e-6), || {
                let worst = a
                    .iter()
                    .zip(&e)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                format!(
                    "step {step}: {name} differs from BatchNorm2d on the whole batch by {worst:e}"
                )
            })?;
        }
    }
    Ok(())
}

fn sync_bn_input_grad(g: &ProcessGroup) -> Result<(), String> {
    // f64, no DDP: the gradient of the sum of every rank's loss w.r.t. this rank's input
    // equals the single-process gradient of the whole batch's loss, restricted to it.
    let (w, b) = (g.size(), 2);
    let rng = &mut Generator::new(31);
    let x = Tensor::randn_with(&[w * b, 3, 4, 4], DType::F64, &Device::Cpu, rng);
    let up = Tensor::randn_with(&[w * b, 3, 4, 4], DType::F64, &Device::Cpu, rng);
    let mut bn_ref = BatchNorm2d::new(3, &Device::Cpu);
    bn_ref.to_dtype(DType::F64);
    no_grad(|| {
        bn_ref
            .weight
            .as_ref()
            .unwrap()
            .copy_(&Tensor::from_vec(vec![0.5f64, 1.5, -1.0], &[3]));
    });
    let xr = x.detach().requires_grad(true);
    (&bn_ref.forward(&xr) * &up).sum_all().backward();
    let mut bn = BatchNorm2d::new(3, &Device::Cpu);
    bn.to_dtype(DType::F64);
    no_grad(|| {
        bn.weight
            .as_ref()
            .unwrap()
            .copy_(&Tensor::from_vec(vec![0.5f64, 1.5, -1.0], &[3]));
    });
    let sync = SyncBatchNorm::from_batch_norm(bn, Some(g));
    let xs = x
        .narrow(0, g.rank() * b, b)
        .contiguous()
        .requires_grad(true);
    let out = sync.forward(&xs);
    let expect_out = bn_ref_forward_rows(&bn_ref, &x, g.rank() * b, b);
    (&out * &up.narrow(0, g.rank() * b, b)).sum_all().backward();
    let got = xs.grad().ok_or("x has a gradient")?.to_vec::<f64>();
    let expect = xr
        .grad()
        .unwrap()
        .narrow(0, g.rank() * b, b)
        .contiguous()
        .to_vec::<f64>();
    let worst = got
        .iter()
        .zip(&expect)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, f64::max);
    ensure(worst < 1e-12, || {
        format!("input gradient differs by {worst:e}")
    })?;
    let (o, e) = (out.to_vec::<f64>(), expect_out);
    let worst = o
        .iter()
        .zip(&e)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    ensure(worst < 1e-12, || format!("output differs by {worst:e}"))?;
    let (rm, rv) = (
        sync.running_mean.as_ref().unwrap(),
        sync.running_var.as_ref().unwrap(),
    );
    let (erm, erv) = (
        bn_ref.running_mean.as_ref().unwrap(),
        bn_ref.running_var.as_ref().unwrap(),
    );
    let d = |a: &Tensor, b: &Tensor| {
        a.to_vec::<f64>()
            .iter()
            .zip(b.to_vec::<f64>())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    ensure(d(rm, erm) < 1e-12 && d(rv, erv) < 1e-12, || {
        "running statistics differ".into()
    })
}

/// The reference batch norm's training output for rows `start..start + n` of `x` (its
/// statistics over all of `x`), computed without touching its running statistics.
fn bn_ref_forward_rows(bn: &BatchNorm2d, x: &Tensor, start: usize, n: usize) -> Vec<f64> {
    no_grad(|| {
        let mean = x.mean(&[0, 2, 3], true);
        let c = x - &mean;
        let var = (&c * &c).mean(&[0, 2, 3], true);
        let w = bn.weight.as_ref().unwrap().reshape(&[1, 3, 1, 1]);
        let b = bn.bias.as_ref().unwrap().reshape(&[1, 3, 1, 1]);
        let y = &(&(&c * &(&var + 1e-5).rsqrt()) * &w) + &b;
        y.narrow(0, start, n).contiguous().to_vec::<f64>()
    })
}

// ---- ZeRO-1 ------------------------------------------------------------------------------

fn zero_adamw(g: &ProcessGroup) -> Result<(), String> {
    let (w, b) = (g.size(), 4);
    let ddp = DistributedDataParallel::new(Mlp::new(7, &Device::Cpu), g, DdpConfig::default())
        .map_err(|e| e.to_string())?;
    let mut reference = Mlp::new(99, &Device::Cpu);
    reference
        .load_state_dict(&ddp.module().state_dict(), true)
        .map_err(|e| e.to_string())?;
    let cfg = AdamConfig::default().lr(0.01).weight_decay(0.01);
    let c = cfg.clone();
    let mut opt = ZeroRedundancyOptimizer::new(ddp.parameters(), g, move |shard| {
        Box::new(AdamW::named(shard, c))
    });
    let mut opt_ref = AdamW::new(reference.parameters(), cfg.clone());
    for step in 0..5 {
        let (x, y) = global_batch(200 + step, w * b);
        let (xs, ys) = (x.narrow(0, g.rank() * b, b), y.narrow(0, g.rank() * b, b));
        opt.zero_grad();
        mse(&ddp.forward(&xs), &ys).backward();
        opt.step();
        opt_ref.zero_grad();
        mse(&reference.forward(&x), &y).backward();
        opt_ref.step();
        identical_across_ranks(g, &ddp.parameters())?;
        for (p, q) in ddp.parameters().iter().zip(reference.parameters()) {
            ensure(
                close(&p.to_vec::<f32>(), &q.to_vec::<f32>(), 1e-5, 1e-6),
                || format!("step {step}"),
            )?;
        }
    }
    // Each rank keeps only its shard's state: about 1 / world of it.
    let elements = |s: &ferrograd::optim::OptimizerState| -> usize {
        s.state
            .values()
            .flat_map(|m| m.values())
            .map(|t| t.numel())
            .sum()
    };
    let whole = elements(&opt_ref.state_dict());
    let local = Tensor::from_vec(vec![elements(&opt.state_dict()) as i64], &[1]);
    let largest = ddp
        .parameters()
        .iter()
        .map(|p| p.numel())
        .max()
        .unwrap_or(0);
    let mine = local.to_vec::<i64>()[0] as usize;
    ensure(mine <= whole / w + 2 * largest + 8, || {
        format!("rank holds {mine} of {whole} state elements")
    })?;
    g.all_reduce(&local, ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    ensure(local.to_vec::<i64>()[0] as usize == whole, || {
        "the shards make up the whole state".into()
    })?;
    // Consolidated on rank 0, it equals the unsharded optimizer's state.
    let consolidated = opt.consolidate_state_dict(0).map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        let c = consolidated.ok_or("rank 0 gets the state")?;
        let r = opt_ref.state_dict();
        ensure(c.state.len() == r.state.len(), || "same parameters".into())?;
        for (k, entries) in &r.state {
            for (name, t) in entries {
                let ours = &c.state[k][name];
                let (a, e) = (
                    ours.to_dtype(DType::F64).to_vec::<f64>(),
                    t.to_dtype(DType::F64).to_vec::<f64>(),
                );
                ensure(
                    a.iter()
                        .zip(&e)
                        .all(|(x, y)| (x - y).abs() <= 1e-6 + 1e-4 * y.abs()),
                    || format!("state {k}.{name} differs"),
                )?;
            }
        }
        opt.load_state_dict(&c).map_err(|e| e.to_string())?;
    } else {
        ensure(consolidated.is_none(), || {
            "only rank 0 gets the state".into()
        })?;
    }
    Ok(())
}

// ---- stop and resume ---------------------------------------------------------------------

#[derive(Module)]
struct DropMlp {
    fc1: Linear,
    drop: ferrograd::nn::Dropout,
    fc2: Linear,
}

impl Forward<&Tensor> for DropMlp {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc2
            .forward(&self.drop.forward(&self.fc1.forward(x).relu()))
    }
}

/// Trains 2 epochs of 6 batches per rank; with `stop_at`, saves a checkpoint after that
/// many steps and returns; with `resume`, starts from the checkpoint. Returns the final
/// parameters.
fn resumable_run(
    g: &ProcessGroup,
    stop_at: Option<usize>,
    resume: Option<&std::path::Path>,
    path: &std::path::Path,
) -> Result<Vec<Vec<f32>>, String> {
    use ferrograd::data::{DataLoader, DistributedSampler, TensorDataset};
    let w = g.size();
    let n = 24 * w; // 6 batches of 4 per rank and epoch
    let rng = &mut Generator::new(4242);
    let x = Tensor::randn_with(&[n, 6], DType::F32, &Device::Cpu, rng);
    let y = Tensor::randint_with(0, 3, &[n], &Device::Cpu, rng);
    // Different weights and random streams per rank, and per run.
    manual_seed(100 + g.rank() as u64 + if resume.is_some() { 50 } else { 0 });
    let model = DropMlp {
        fc1: Linear::new(6, 16, &Device::Cpu),
        drop: ferrograd::nn::Dropout::new(0.3),
        fc2: Linear::new(16, 3, &Device::Cpu),
    };
    let mut ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default()).map_err(|e| e.to_string())?;
    let mut opt = AdamW::named(
        ddp.module().named_parameters(),
        AdamConfig::default().lr(0.01),
    );
    let sampler =
        DistributedSampler::new(n, w, g.rank(), true, 9, false).map_err(|e| e.to_string())?;
    let mut loader = DataLoader::builder(TensorDataset::new((x, y)))
        .batch_size(4)
        .sampler(sampler)
        .build();
    let mut step = 0usize;
    let mut first_epoch = 0;
    if let Some(p) = resume {
        let ckpt = distributed::load_checkpoint(g, p).map_err(|e| e.to_string())?;
        ckpt.restore_model(ddp.module_mut(), true)
            .map_err(|e| e.to_string())?;
        ckpt.restore_optimizer(&mut opt)
            .map_err(|e| e.to_string())?;
        ckpt.restore_rng().map_err(|e| e.to_string())?;
        let state = ckpt
            .loader
            .ok_or("the checkpoint has this rank's loader position")?;
        loader.load_state(&state);
        first_epoch = state.epoch as usize;
        step = ckpt.step as usize;
    }
    for _epoch in first_epoch..2 {
        let mut stop = false;
        for batch in loader.iter() {
            let (xb, yb) = batch.map_err(|e| e.to_string())?;
            opt.zero_grad();
            F::cross_entropy(&ddp.forward(&xb), &yb).backward();
            opt.step();
            step += 1;
            if stop_at == Some(step) {
                stop = true;
                break;
            }
        }
        if stop {
            let ckpt = ferrograd::checkpoint::Checkpoint::new(ddp.module())
                .optimizer(&opt)
                .step(step as u64);
            distributed::save_checkpoint(g, ckpt, Some(loader.state()), path)
                .map_err(|e| e.to_string())?;
            return Ok(Vec::new());
        }
    }
    Ok(ddp.parameters().iter().map(|p| p.to_vec::<f32>()).collect())
}

fn ddp_resume_bitwise(g: &ProcessGroup) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("ferrograd-ddp-resume-w{}.safetensors", g.size()));
    let unstopped = resumable_run(g, None, None, &path)?;
    resumable_run(g, Some(8), None, &path)?; // mid-way through the second epoch
    let resumed = resumable_run(g, None, Some(&path), &path)?;
    ensure(unstopped.len() == resumed.len(), || {
        "same parameters".into()
    })?;
    for (a, b) in unstopped.iter().zip(&resumed) {
        ensure(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            || "the resumed run's parameters differ from the unstopped run's".into(),
        )?;
    }
    // A checkpoint of another world size is refused.
    if g.size() > 1 {
        let sub = distributed::new_group(&[0]).map_err(|e| e.to_string())?;
        if g.rank() == 0 {
            ensure(distributed::load_checkpoint(&sub, &path).is_err(), || {
                "world size check".into()
            })?;
        }
    }
    g.barrier().map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

/// The Trainer with a process group: a DDP model on each rank's shard (DistributedSampler)
/// takes the steps the Trainer takes in one process on the whole batch; validation loss,
/// accuracy and AUROC are reduced over the ranks and equal the one-process values; rank 0 alone
/// writes the CSV and TensorBoard; the checkpoint is saved collectively and resumes.
fn trainer_ddp(g: &ProcessGroup) -> Result<(), String> {
    use ferrograd::data::{DataLoader, DistributedSampler, TensorDataset};
    use ferrograd::train::metrics::{Accuracy, Auroc};
    use ferrograd::train::{ModelCheckpoint, StepOutput, Trainer, TrainerConfig};
    let (w, b) = (g.size(), 4);
    let (x, y) = global_batch(300, 8 * w * b);
    let (vx, vy) = global_batch(301, 4 * w * b);
    // Classes for the accuracy: which of the 3 targets is largest.
    let classes = |y: &Tensor| y.argmax(1, false);
    let ds = |x: &Tensor, y: &Tensor| TensorDataset::new(vec![x.clone(), y.clone(), classes(y)]);
    let step = |m: &mut dyn FnMut(&Tensor) -> Tensor, batch: Vec<Tensor>| {
        let out = m(&batch[0]);
        StepOutput::new(mse(&out, &batch[1])).with_predictions(out, batch[2].clone())
    };
    let err = |e: ferrograd::train::TrainError| e.to_string();
    // Every rank writes into the same run directory, as ranks on one machine do.
    let root = std::env::temp_dir().join(format!("ferrograd-trainer-ddp-{}", w));
    if g.rank() == 0 {
        std::fs::remove_dir_all(&root).ok();
    }
    g.barrier().map_err(|e| e.to_string())?;

    // One process, the whole batch (w * b rows, in the order the samplers interleave).
    let mut reference = Mlp::new(5, &Device::Cpu);
    // A copy: the state dict's tensors are the parameters, which training updates.
    let init: ferrograd::nn::StateDict = reference
        .state_dict()
        .into_iter()
        .map(|(k, v)| (k, v.deep_copy()))
        .collect();
    let mut opt_ref = Sgd::new(reference.parameters(), SgdConfig::new(0.05));
    let mut train_ref = DataLoader::builder(ds(&x, &y)).batch_size(w * b).build();
    let mut val_ref = DataLoader::builder(ds(&vx, &vy)).batch_size(w * b).build();
    let one = Trainer::new(TrainerConfig {
        max_epochs: 2,
        root_dir: root.join(format!("reference-{}", g.rank())),
        progress: false,
        tensorboard: false,
        ..Default::default()
    })
    .metric(Accuracy::new())
    .metric(Auroc::new())
    .fit(
        &mut reference,
        &mut opt_ref,
        None,
        &mut train_ref,
        Some(&mut val_ref),
        &mut |m: &mut Mlp, batch: Vec<Tensor>| step(&mut |x| m.forward(x), batch),
    )
    .map_err(err)?;

    let mut model = Mlp::new(50 + g.rank() as u64, &Device::Cpu);
    model
        .load_state_dict(&init, true)
        .map_err(|e| e.to_string())?;
    let mut ddp =
        DistributedDataParallel::new(model, g, DdpConfig::default()).map_err(|e| e.to_string())?;
    let loaders = || -> Result<_, String> {
        let sampler = |n| DistributedSampler::new(n, w, g.rank(), false, 0, false);
        let train = DataLoader::builder(ds(&x, &y))
            .batch_size(b)
            .sampler(sampler(8 * w * b).map_err(|e| e.to_string())?)
            .build();
        let val = DataLoader::builder(ds(&vx, &vy))
            .batch_size(b)
            .sampler(sampler(4 * w * b).map_err(|e| e.to_string())?)
            .build();
        Ok((train, val))
    };
    // `epochs` in all, resuming from the collective checkpoint when asked.
    let fit = |ddp: &mut DistributedDataParallel<Mlp>, opt: &mut Sgd, epochs, resume: bool| {
        let (mut train, mut val) = loaders()?;
        Trainer::new(TrainerConfig {
            max_epochs: epochs,
            root_dir: root.clone(),
            progress: false,
            process_group: Some(g.clone()),
            resume_from: resume.then(|| root.join("checkpoints/last.safetensors")),
            ..Default::default()
        })
        .metric(Accuracy::new())
        .metric(Auroc::new())
        .callback(ModelCheckpoint::last_only())
        .fit(
            ddp,
            opt,
            None,
            &mut train,
            Some(&mut val),
            &mut |m: &mut DistributedDataParallel<Mlp>, batch: Vec<Tensor>| {
                step(&mut |x| m.forward(x), batch)
            },
        )
        .map_err(err)
    };
    let mut opt = Sgd::new(ddp.parameters(), SgdConfig::new(0.05));
    let many = fit(&mut ddp, &mut opt, 2, false)?;
    identical_across_ranks(g, &ddp.parameters())?;
    parameters_match(ddp.module(), &reference, "the Trainer: ")?;
    // AUROC's scores are gathered from every rank, not averaged.
    for key in ["val_loss", "val_accuracy", "val_auroc", "train_loss"] {
        let (a, r) = (many.metrics[key], one.metrics[key]);
        ensure((a - r).abs() <= 1e-6 * r.abs().max(1.0), || {
            format!("{key}: {a} under DDP, {r} in one process")
        })?;
    }
    g.barrier().map_err(|e| e.to_string())?;
    let csv = root.join("metrics.csv");
    ensure(csv.exists() && root.join("tensorboard").is_dir(), || {
        "rank 0 wrote no CSV or TensorBoard run".into()
    })?;
    let rows = std::fs::read_to_string(&csv).map_err(|e| e.to_string())?;
    ensure(rows.lines().count() == 3, || format!("metrics.csv: {rows}"))?;
    // Every rank has read the CSV before rank 0's resume rewrites it.
    g.barrier().map_err(|e| e.to_string())?;

    // Resume to a third epoch from the collective checkpoint.
    let resumed = fit(&mut ddp, &mut opt, 3, true)?;
    ensure(resumed.epochs == 3 && resumed.global_step == 24, || {
        format!(
            "resumed to epoch {} step {}",
            resumed.epochs, resumed.global_step
        )
    })?;
    identical_across_ranks(g, &ddp.parameters())?;
    g.barrier().map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        std::fs::remove_dir_all(&root).ok();
    }
    Ok(())
}
