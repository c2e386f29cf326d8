//! GPU workloads of issue #4, timed on `cuda:0`; `bench/pytorch_gpu_workloads.py` runs the
//! same ones in PyTorch and `bench/gpu.sh` prints both side by side. Prints one JSON
//! object: workload -> median seconds per iteration (device-synchronised). Without the
//! `cuda` feature or a GPU it says so and prints `{}`. With `FERROGRAD_BENCH_DRY_RUN=1`
//! it runs every workload once at small sizes on the CPU instead (checks the workloads
//! themselves on a machine without a GPU).
//!
//! ```text
//! cargo bench --features cuda --bench gpu
//! ```

use ferrograd::cuda;
use ferrograd::optim::{Optimizer, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::time::Instant;

/// With `FERROGRAD_BENCH_PROFILE=1`: three calls of `f` under the profiler, and on
/// standard error the ops with the most device self time, by op and input shapes.
fn profile_on_device(what: &str, mut f: impl FnMut()) {
    use ferrograd::profiler::{self, ProfilerOptions};
    use std::collections::HashMap;
    f();
    cuda::synchronize(0).expect("synchronize");
    let (_, prof) = profiler::profile(ProfilerOptions::default(), || {
        for _ in 0..3 {
            f();
        }
    });
    let mut by: HashMap<(String, String), (f64, usize)> = HashMap::new();
    let mut total = 0.0;
    for e in prof.events() {
        if let Some(t) = e.cuda {
            let key = (e.name.clone(), format!("{:?}", e.input_shapes));
            let slot = by.entry(key).or_default();
            slot.0 += t.self_us / 3.0;
            slot.1 += 1;
            total += t.self_us / 3.0;
        }
    }
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    eprintln!("{what}: device self time per call, {total:.0} us in all");
    for ((name, shapes), (us, calls)) in rows.iter().take(25) {
        eprintln!(
            "{us:10.1} us {:5.1}% {:3}x  {name} {shapes}",
            100.0 * us / total,
            calls / 3
        );
    }
}

/// Median seconds per call of `f` over 7 rounds of `iters` calls, after 3 warm-up calls;
/// each round ends with a device synchronisation.
fn median_time(iters: usize, mut f: impl FnMut()) -> f64 {
    if dry_run() {
        let start = Instant::now();
        f();
        return start.elapsed().as_secs_f64();
    }
    for _ in 0..3 {
        f();
    }
    cuda::synchronize(0).expect("synchronize");
    let mut rounds: Vec<f64> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            cuda::synchronize(0).expect("synchronize");
            start.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn dry_run() -> bool {
    std::env::var_os("FERROGRAD_BENCH_DRY_RUN").is_some_and(|v| v == "1")
}

/// A parameter of `shape`, uniform in ±1/sqrt(fan_in), on `dev`, requiring grad.
fn param(shape: &[usize], fan_in: usize, dev: &Device) -> Tensor {
    let bound = 1.0 / (fan_in as f64).sqrt();
    Tensor::rand(shape, DType::F32, &Device::Cpu)
        .mul_scalar(2.0 * bound)
        .sub_scalar(bound)
        .to_device(dev)
        .unwrap()
        .requires_grad(true)
}

/// One training step of the loss `forward` returns: zero_grad, backward, and the
/// optimizer's fused update (PyTorch's twin uses `torch.optim.SGD`).
fn sgd_step(opt: &mut Sgd, forward: &dyn Fn() -> Tensor) {
    opt.zero_grad();
    forward().backward();
    opt.step();
}

fn main() {
    let dev = if dry_run() {
        Device::Cpu
    } else {
        match ferrograd::testing::cuda_test_device() {
            Ok(d) => d,
            Err(why) => {
                eprintln!("gpu bench skipped: {why}");
                println!("{{}}");
                return;
            }
        }
    };
    // (matmul size, batch, transformer batch, sequence length) at full size or dry-run size
    let (n, batch, bsz, seq) = if dry_run() {
        (64, 8, 2, 16)
    } else {
        (8192, 256, 32, 256)
    };
    manual_seed(0);
    let mut results: Vec<(&str, f64)> = Vec::new();

    // bf16 matmul 8192^3 (tensor cores); also f32 with and without TF32.
    let a = Tensor::randn(&[n, n], DType::BF16, &dev);
    let b = Tensor::randn(&[n, n], DType::BF16, &dev);
    results.push(("matmul_bf16_8192", median_time(10, || drop(a.matmul(&b)))));
    let (a32, b32) = (a.to_dtype(DType::F32), b.to_dtype(DType::F32));
    results.push(("matmul_f32_8192", median_time(3, || drop(a32.matmul(&b32)))));
    cuda::set_allow_tf32(true);
    results.push((
        "matmul_tf32_8192",
        median_time(5, || drop(a32.matmul(&b32))),
    ));
    cuda::set_allow_tf32(false);
    drop((a, b, a32, b32));

    // MNIST MLP 784-512-256-10, batch 256: forward, backward, SGD update.
    let x = Tensor::randn(&[batch, 784], DType::F32, &dev);
    let y = Tensor::randint(0, 10, &[batch], &dev);
    let p = [
        param(&[512, 784], 784, &dev),
        param(&[512], 784, &dev),
        param(&[256, 512], 512, &dev),
        param(&[256], 512, &dev),
        param(&[10, 256], 256, &dev),
        param(&[10], 256, &dev),
    ];
    let mlp = || {
        let h = F::linear(&x, &p[0], Some(&p[1])).relu();
        let h = F::linear(&h, &p[2], Some(&p[3])).relu();
        F::cross_entropy(&F::linear(&h, &p[4], Some(&p[5])), &y)
    };
    let mut opt = Sgd::new(p.to_vec(), SgdConfig::new(0.01));
    results.push((
        "mlp_step_b256",
        median_time(50, || sgd_step(&mut opt, &mlp)),
    ));

    // LeNet-5 on 28x28, batch 256.
    let x = Tensor::randn(&[batch, 1, 28, 28], DType::F32, &dev);
    let p = [
        param(&[6, 1, 5, 5], 25, &dev),
        param(&[6], 25, &dev),
        param(&[16, 6, 5, 5], 150, &dev),
        param(&[16], 150, &dev),
        param(&[120, 256], 256, &dev),
        param(&[120], 256, &dev),
        param(&[84, 120], 120, &dev),
        param(&[84], 120, &dev),
        param(&[10, 84], 84, &dev),
        param(&[10], 84, &dev),
    ];
    let lenet = || {
        let h = F::max_pool2d(
            &F::conv2d(&x, &p[0], Some(&p[1]), &Default::default()).relu(),
            2,
        );
        let h = F::max_pool2d(
            &F::conv2d(&h, &p[2], Some(&p[3]), &Default::default()).relu(),
            2,
        );
        let h = F::linear(&h.flatten(1, -1), &p[4], Some(&p[5])).relu();
        let h = F::linear(&h, &p[6], Some(&p[7])).relu();
        F::cross_entropy(&F::linear(&h, &p[8], Some(&p[9])), &y)
    };
    let mut opt = Sgd::new(p.to_vec(), SgdConfig::new(0.01));
    results.push((
        "lenet_step_b256",
        median_time(30, || sgd_step(&mut opt, &lenet)),
    ));

    // A pre-norm transformer block: d_model 512, 8 heads, seq 256, batch 32, MLP 2048.
    let (d, heads, hidden) = (512usize, 8usize, 2048usize);
    let hd = d / heads;
    let x = Tensor::randn(&[bsz, seq, d], DType::F32, &dev).requires_grad(true);
    let p = [
        param(&[3 * d, d], d, &dev),
        param(&[3 * d], d, &dev),
        param(&[d, d], d, &dev),
        param(&[d], d, &dev),
        param(&[hidden, d], d, &dev),
        param(&[hidden], d, &dev),
        param(&[d, hidden], hidden, &dev),
        param(&[d], hidden, &dev),
    ];
    let block = || {
        let h = F::layer_norm(&x, &[d], None, None, 1e-5);
        let qkv = F::linear(&h, &p[0], Some(&p[1])).reshape(&[bsz, seq, 3, heads, hd]);
        let split = |i: usize| qkv.select(2, i).permute(&[0, 2, 1, 3]); // [b, h, s, hd]
        let (q, k, v) = (split(0), split(1), split(2));
        let scores = q
            .matmul(&k.transpose(-2, -1))
            .mul_scalar(1.0 / (hd as f64).sqrt());
        let att = scores
            .softmax(-1)
            .matmul(&v)
            .permute(&[0, 2, 1, 3])
            .reshape(&[bsz, seq, d]);
        let x1 = x.add(&F::linear(&att, &p[2], Some(&p[3])));
        let h = F::layer_norm(&x1, &[d], None, None, 1e-5);
        let m = F::linear(
            &F::linear(&h, &p[4], Some(&p[5])).gelu(),
            &p[6],
            Some(&p[7]),
        );
        x1.add(&m).sum_all()
    };
    results.push((
        "transformer_block_fwd_bwd",
        median_time(10, || {
            block().backward();
            for t in &p {
                t.zero_grad();
            }
            x.zero_grad();
        }),
    ));

    if std::env::var("FERROGRAD_BENCH_PROFILE").is_ok_and(|v| v == "1") && !dry_run() {
        profile_on_device("transformer block", || {
            block().backward();
            for t in &p {
                t.zero_grad();
            }
            x.zero_grad();
        });
    }

    let body: Vec<String> = results
        .iter()
        .map(|(k, v)| format!("\"{k}\": {v:e}"))
        .collect();
    println!("{{{}}}", body.join(", "));
    let fallbacks = cuda::host_fallbacks();
    if !fallbacks.is_empty() {
        eprintln!("ops that ran through the host: {fallbacks:?}");
    }
}
