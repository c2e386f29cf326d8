//! Data loading against training: one epoch of the full MNIST training set through a
//! shuffling `DataLoader` (batches of 64, 2 workers) and one epoch of training the
//! `mnist_mlp` example's network on the same batches. The target is the first
//! at most 5% of the second. Needs MNIST in `$FERROGRAD_DATA` or `../shared/data`
//! (skipped with a message otherwise).

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{Linear, Module, ReLU, Sequential};
use ferrograd::prelude::*;
use std::hint::black_box;
use std::path::PathBuf;

fn mnist() -> Option<MNIST> {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"))
        .join("mnist");
    match MNIST::new(&root, true) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipping the data benchmarks: {e}");
            None
        }
    }
}

fn data(c: &mut Criterion) {
    let Some(train) = mnist() else { return };
    let (x, y) = train.tensors();
    let x = x.flatten(1, -1);
    let mut group = c.benchmark_group("mnist_epoch");
    group.sample_size(10);

    let mut samples = DataLoader::builder(train)
        .batch_size(64)
        .shuffle(true)
        .num_workers(2)
        .seed(0)
        .build();
    group.bench_function("loader_samples_2_workers", |b| {
        b.iter(|| {
            samples
                .iter()
                .map(|batch| black_box(batch.unwrap()).1.shape()[0])
                .sum::<usize>()
        })
    });

    let mut tensors = DataLoader::builder(TensorDataset::new((x, y)))
        .batch_size(64)
        .shuffle(true)
        .num_workers(2)
        .seed(0)
        .build();
    group.bench_function("loader_tensors_2_workers", |b| {
        b.iter(|| {
            tensors
                .iter()
                .map(|batch| black_box(batch.unwrap()).1.shape()[0])
                .sum::<usize>()
        })
    });

    manual_seed(0);
    let net = Sequential::new()
        .append(Linear::new(784, 128, &Device::Cpu))
        .append(ReLU)
        .append(Linear::new(128, 10, &Device::Cpu));
    let params = net.parameters();
    let batches: Vec<(Tensor, Tensor)> = tensors.iter().map(Result::unwrap).collect();
    group.bench_function("mlp_train", |b| {
        b.iter(|| {
            for (x, y) in &batches {
                let loss = F::cross_entropy(&net.forward(x), y);
                loss.backward();
                no_grad(|| {
                    for p in &params {
                        p.add_scaled_(&p.grad().unwrap(), -0.1);
                        p.zero_grad();
                    }
                });
            }
        })
    });
    group.finish();
}

criterion_group!(benches, data);
criterion_main!(benches);
