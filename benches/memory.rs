//! Workloads whose cost is dominated by memory traffic, for `bench/memory_compare.py`:
//! each runs in its own process and prints one JSON line with its wall time, user and
//! system CPU time, minor page faults and peak RSS (`getrusage`), so the driver can set
//! them beside the same workloads in PyTorch.
//!
//! ```text
//! cargo bench --bench memory -- mobilenet      # MobileNetV2 eval: 5 forwards at batch 20, 2 at batch 1, 224²
//! cargo bench --bench memory -- lenet_infer    # LeNet-5, no_grad, 70,000 images in chunks of 2,000
//! cargo bench --bench memory -- lenet_epoch    # LeNet-5 training epoch, 10,000 images, batch 64, AdamW
//! cargo bench --bench memory -- mlp_epoch      # MLP 784-128-10 training epoch, 60,000 images, batch 64
//! cargo bench --bench memory -- mlp_rss        # RSS over 10,000 MLP steps, then after empty_cache
//! ```
//!
//! `MEMORY_TRACE=1` prints the allocator statistics after each MobileNet forward.
//! Inputs are random (the memory behaviour does not depend on the pixels); threads are
//! `BENCH_THREADS` (default 2).

use ferrograd::autograd::NoGradGuard;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{Forward, Module};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use std::time::Instant;

#[path = "common/models.rs"]
mod models;
use models::{LeNet, Mlp, epoch};

/// Resident set size in bytes, from `/proc/self/statm` (0 where there is none).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn images(n: usize) -> (Tensor, Tensor) {
    let x = Tensor::rand(&[n, 1, 28, 28], DType::F32, &Device::Cpu);
    let y = (Tensor::rand(&[n], DType::F32, &Device::Cpu) * 9.99).to_dtype(DType::I64);
    (x, y)
}

fn train_epoch(model: &dyn Fn(&Tensor) -> Tensor, params: Vec<(String, Tensor)>, n: usize) {
    let (x, y) = images(n);
    let mut opt = AdamW::named(params, AdamConfig::default());
    let mut loader = DataLoader::builder(TensorDataset::new((x, y)))
        .batch_size(64)
        .shuffle(true)
        .seed(0)
        .build();
    epoch(&mut loader, &mut opt, model);
}

fn main() {
    let workload = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "mobilenet".into());
    let threads = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    ferrograd::set_num_threads(threads);
    manual_seed(0);
    let start = Instant::now();
    let mut extra = String::new();
    match workload.as_str() {
        "mobilenet" => {
            let mut model =
                ferrograd::models::vision::mobilenet::MobileNetV2::new(1000, 1.0, &Device::Cpu);
            model.eval();
            let _guard = NoGradGuard::new();
            for batch in [20, 20, 20, 20, 20, 1, 1] {
                let x = Tensor::randn(&[batch, 3, 224, 224], DType::F32, &Device::Cpu);
                std::hint::black_box(model.forward(&x).sum_all().item::<f32>());
                if std::env::var_os("MEMORY_TRACE").is_some() {
                    eprintln!("batch {batch}: {:?}", ferrograd::cpu::memory_stats());
                }
            }
        }
        "lenet_infer" => {
            let mut model = LeNet::new(&Device::Cpu);
            model.eval();
            let _guard = NoGradGuard::new();
            let (x, _) = images(70_000);
            for chunk in 0..35 {
                let logits = model.forward(&x.narrow(0, chunk * 2000, 2000));
                std::hint::black_box(logits.argmax(1, false).sum_all().item::<i64>());
            }
        }
        "lenet_epoch" => {
            let model = LeNet::new(&Device::Cpu);
            train_epoch(&|x| model.forward(x), model.named_parameters(), 10_000);
        }
        "mlp_epoch" => {
            let model = Mlp::new(&Device::Cpu);
            train_epoch(&|x| model.forward(x), model.named_parameters(), 60_000);
        }
        "mlp_rss" => {
            let model = Mlp::new(&Device::Cpu);
            let mut opt = AdamW::named(model.named_parameters(), AdamConfig::default());
            let (x, y) = images(640);
            let mut samples = Vec::new();
            for step in 1..=10_000usize {
                let i = (step % 10) * 64;
                opt.zero_grad();
                let loss =
                    F::cross_entropy(&model.forward(&x.narrow(0, i, 64)), &y.narrow(0, i, 64));
                loss.backward();
                opt.step();
                if [100, 1000, 2500, 5000, 7500, 10_000].contains(&step) {
                    samples.push(format!("[{step}, {}]", rss()));
                }
            }
            let live = model
                .parameters()
                .iter()
                .map(|p| p.numel() * 4)
                .sum::<usize>();
            drop(opt);
            let before = rss();
            ferrograd::cpu::empty_cache();
            extra = format!(
                ", \"rss_by_step\": [{}], \"rss_before_empty_cache\": {before}, \"rss_after_empty_cache\": {}, \"parameter_bytes\": {live}, \"memory_allocated\": {}",
                samples.join(", "),
                rss(),
                ferrograd::cpu::memory_allocated(),
            );
        }
        other => {
            eprintln!(
                "unknown workload {other:?}: mobilenet, lenet_infer, lenet_epoch, mlp_epoch or mlp_rss"
            );
            std::process::exit(2);
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let pool = ferrograd::cpu::memory_stats();
    extra += &format!(
        ", \"pool\": {{\"system_allocations\": {}, \"cache_hits\": {}, \"max_allocated\": {}, \"max_reserved\": {}}}",
        pool.segments_allocated, pool.cache_hits, pool.max_allocated, pool.max_reserved
    );
    // SAFETY: getrusage only writes the struct we hand it, which is zero-initialised
    // plain data of the right type.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    println!(
        "{{\"workload\": \"{workload}\", \"wall_s\": {wall:.4}, \"user_s\": {:.3}, \"sys_s\": {:.3}, \"minflt\": {}, \"maxrss_kb\": {}{extra}}}",
        secs(usage.ru_utime),
        secs(usage.ru_stime),
        usage.ru_minflt,
        usage.ru_maxrss,
    );
}
