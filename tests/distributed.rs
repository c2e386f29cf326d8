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

#[path = "distributed/collectives.rs"]
mod collectives;
use collectives::*;
#[path = "distributed/ddp.rs"]
mod ddp;
use ddp::*;
#[path = "distributed/sync_bn.rs"]
mod sync_bn;
use sync_bn::*;
#[path = "distributed/zero_resume.rs"]
mod zero_resume;
use zero_resume::*;

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
