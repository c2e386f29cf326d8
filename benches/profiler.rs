//! What the profiler costs per op: a small op (adding two 16-element tensors, where the
//! per-op overhead dominates) and a LeNet-sized conv2d, with no profile running (the
//! hook is one relaxed atomic load, shared with the ONNX tracer) and while profiling.
//!
//!     cargo bench --bench profiler

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::nn::functional as F;
use ferrograd::prelude::*;
use ferrograd::profiler::{Profiler, ProfilerOptions};
use std::hint::black_box;

fn per_op(c: &mut Criterion) {
    let a = Tensor::randn(&[16], DType::F32, &Device::Cpu);
    let b = Tensor::randn(&[16], DType::F32, &Device::Cpu);
    let x = Tensor::randn(&[64, 1, 28, 28], DType::F32, &Device::Cpu);
    let w = Tensor::randn(&[6, 1, 5, 5], DType::F32, &Device::Cpu);
    let mut group = c.benchmark_group("profiler");
    group.bench_function("add_16/off", |bench| bench.iter(|| black_box(a.add(&b))));
    group.bench_function("conv2d_lenet/off", |bench| {
        bench.iter(|| black_box(F::conv2d(&x, &w, None, &Default::default())))
    });
    // Profiling: each iteration's events are kept, as a real profile keeps them; the
    // profiler restarts every 100,000 iterations so memory stays bounded.
    let options = ProfilerOptions::default();
    let mut profiler = Some(Profiler::start(options));
    let mut n = 0u64;
    group.bench_function("add_16/on", |bench| {
        bench.iter(|| {
            n += 1;
            if n.is_multiple_of(100_000) {
                drop(profiler.take());
                profiler = Some(Profiler::start(options));
            }
            black_box(a.add(&b))
        })
    });
    group.bench_function("conv2d_lenet/on", |bench| {
        bench.iter(|| black_box(F::conv2d(&x, &w, None, &Default::default())))
    });
    drop(profiler);
    group.finish();
}

criterion_group!(benches, per_op);
criterion_main!(benches);
