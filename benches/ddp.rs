//! DistributedDataParallel over MPI: step time, scaling, overlap and all-reduce bandwidth.
//! `cargo bench --features mpi --bench ddp` launches itself under `mpirun` (each rank one
//! thread) and prints JSON lines that `bench/ddp_compare.py` sets against PyTorch's DDP
//! (gloo) and mpi4py on the same machine.
//!
//! - `step/<model>`: median step time (zero_grad, forward, cross-entropy, backward with
//!   the bucketed all-reduce, SGD-momentum step) at 2 ranks, per-rank batch as PyTorch's;
//!   and of the same step under `no_sync` (no communication), alternating: the difference
//!   is what the gradient reduction costs the step.
//! - `scaling/<model>`: samples per second of 2 ranks against 1 rank (one thread each).
//! - `allreduce/<bytes>`: bus bandwidth of an in-place f32 all-reduce, 4 KB to 64 MB.
//!
//! With `FERROGRAD_BENCH_ALLREDUCE_ONLY` set, only the all-reduce runs (2 ranks): the
//! script alternates it with mpi4py's, since this machine's speed moves within minutes.

use ferrograd::distributed::{self, Backend, DdpConfig, DistributedDataParallel, ReduceOp};
use ferrograd::models::vision::resnet::resnet18;
use ferrograd::nn::{Forward, Module};
use ferrograd::optim::{Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::process::Command;
use std::time::Instant;

network! {
    /// LeNet-5 for 28x28 digits.
    pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2),
        relu,
        max_pool2d(2),
        conv2: Conv2d(6 -> 16, kernel = 5),
        relu,
        max_pool2d(2) => [N, 16, 5, 5],
        flatten,
        fc1: Linear(400 -> 120), relu,
        fc2: Linear(120 -> 84), relu,
        fc3: Linear(84 -> 10),
    }
}

network! {
    /// The MNIST MLP 784-128-10.
    pub struct Mlp(x: [N, 1, 28, 28]) -> [N, 10] {
        flatten,
        fc1: Linear(784 -> 128), relu,
        fc2: Linear(128 -> 10),
    }
}

fn main() {
    let dry = std::env::var("FERROGRAD_BENCH_DRY_RUN").is_ok();
    if std::env::var("OMPI_COMM_WORLD_SIZE").is_err() {
        if std::env::args().any(|a| a == "--list") {
            return; // cargo bench's discovery
        }
        if allreduce_only() {
            launch(2, dry);
        } else {
            for n in [1, 2] {
                launch(n, dry);
            }
        }
        return;
    }
    rank(dry);
}

/// The environment variable that limits the run to the all-reduce bandwidth.
const ALLREDUCE_ONLY: &str = "FERROGRAD_BENCH_ALLREDUCE_ONLY";

/// Whether [`ALLREDUCE_ONLY`] is set.
fn allreduce_only() -> bool {
    std::env::var_os(ALLREDUCE_ONLY).is_some()
}

fn launch(n: usize, dry: bool) {
    let exe = std::env::current_exe().expect("own path");
    let mut cmd = Command::new("mpirun");
    cmd.arg("-n")
        .arg(n.to_string())
        .arg("--bind-to")
        .arg("core");
    if allreduce_only() {
        cmd.arg("-x").arg(ALLREDUCE_ONLY);
    }
    cmd.arg(exe);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    cmd.env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("RAYON_NUM_THREADS", "1");
    if dry {
        cmd.env("FERROGRAD_BENCH_DRY_RUN", "1");
    }
    let status = cmd.status().expect("mpirun starts (install OpenMPI)");
    assert!(status.success(), "mpirun -n {n} failed: {status}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Times `steps` training steps of `model` (after 2 warm-up steps) on batches of `batch`
/// random inputs of `shape`, alternating steps that reduce the gradients with steps under
/// `no_sync` (same work, no communication); returns both medians in seconds.
fn time_steps<M: Module>(
    model: M,
    forward: impl Fn(&M, &Tensor) -> Tensor,
    shape: &[usize],
    classes: usize,
    batch: usize,
    steps: usize,
) -> (f64, f64) {
    let world = distributed::world().expect("initialised");
    let mut local = Vec::new();
    let ddp = DistributedDataParallel::new(model, &world, DdpConfig::default()).expect("ddp");
    let mut opt = Sgd::new(ddp.parameters(), SgdConfig::new(0.01).momentum(0.9));
    let rng = &mut Generator::new(world.rank() as u64);
    let mut dims = vec![batch];
    dims.extend_from_slice(shape);
    let x = Tensor::randn_with(&dims, DType::F32, &Device::Cpu, rng);
    let y = Tensor::randint_with(0, classes as i64, &[batch], &Device::Cpu, rng);
    let mut times = Vec::new();
    for i in 0..2 * steps + 4 {
        world.barrier().expect("barrier");
        let t = Instant::now();
        opt.zero_grad();
        let sync = i % 2 == 0;
        let guard = (!sync).then(|| ddp.no_sync());
        let loss = F::cross_entropy(&ddp.forward_with(|m| forward(m, &x)), &y);
        loss.backward();
        drop(guard);
        opt.step();
        if i >= 4 {
            let dt = t.elapsed().as_secs_f64();
            if sync { times.push(dt) } else { local.push(dt) }
        }
    }
    (median(times), median(local))
}

fn rank(dry: bool) {
    let world = distributed::init_process_group(Backend::Mpi).expect("init");
    let (r, w) = (world.rank(), world.size());
    let steps = if dry { 1 } else { 20 };
    let report = |line: String| {
        if r == 0 {
            println!("{line}");
        }
    };

    if !allreduce_only() {
        // LeNet-5, batch 64 per rank.
        manual_seed(0);
        let (lenet, alone) = time_steps(
            LeNet::new(&Device::Cpu),
            |m, x| m.forward(x),
            &[1, 28, 28],
            10,
            64,
            steps * 5,
        );
        report(format!(
            "{{\"name\": \"step/lenet_b64\", \"world\": {w}, \"seconds\": {lenet:.6e}, \"no_sync_seconds\": {alone:.6e}, \"samples_per_sec\": {:.1}}}",
            64.0 * w as f64 / lenet
        ));

        // The MLP 784-128-10, batch 64 per rank.
        manual_seed(0);
        let (t, alone) = time_steps(
            Mlp::new(&Device::Cpu),
            |m, x| m.forward(x),
            &[1, 28, 28],
            10,
            64,
            steps * 10,
        );
        report(format!(
            "{{\"name\": \"step/mlp_b64\", \"world\": {w}, \"seconds\": {t:.6e}, \"no_sync_seconds\": {alone:.6e}, \"samples_per_sec\": {:.1}}}",
            64.0 * w as f64 / t
        ));

        // torchvision's ResNet-18 at 224x224, batch 8 per rank (as in bench/).
        if !dry {
            manual_seed(0);
            let (t, alone) = time_steps(
                resnet18(1000, &Device::Cpu),
                |m, x| m.forward(x),
                &[3, 224, 224],
                1000,
                8,
                5,
            );
            report(format!(
                "{{\"name\": \"step/resnet18_b8\", \"world\": {w}, \"seconds\": {t:.6e}, \"no_sync_seconds\": {alone:.6e}, \"samples_per_sec\": {:.1}}}",
                8.0 * w as f64 / t
            ));
        }
    }
    // All-reduce bus bandwidth, in place, f32.
    if w > 1 {
        let mut bytes = 4096usize;
        while bytes <= 64 << 20 {
            let n = bytes / 4;
            let t = Tensor::ones(&[n], DType::F32, &Device::Cpu);
            let reps = if dry {
                1
            } else {
                (256 << 20) / bytes.max(1 << 20) * 4 + 5
            };
            world.all_reduce(&t, ReduceOp::Sum).expect("warm-up");
            let mut times = Vec::new();
            for _ in 0..reps {
                world.barrier().expect("barrier");
                let s = Instant::now();
                world.all_reduce(&t, ReduceOp::Sum).expect("all_reduce");
                times.push(s.elapsed().as_secs_f64());
            }
            let sec = median(times);
            let busbw = 2.0 * (w - 1) as f64 / w as f64 * bytes as f64 / sec / 1e9;
            report(format!(
                "{{\"name\": \"allreduce/{bytes}\", \"world\": {w}, \"seconds\": {sec:.6e}, \"busbw_gbps\": {busbw:.3}}}"
            ));
            bytes *= 4;
        }
    }
    distributed::destroy_process_group();
}
