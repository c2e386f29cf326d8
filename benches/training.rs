//! Whole training epochs as a user writes them (`bench/training_compare.py` runs the
//! same loops in PyTorch and prints the ratios): the MNIST MLP 784-128-10 and LeNet-5
//! at batch 64 with AdamW, through the DataLoader (shuffled), from the full MNIST
//! training set in `$FERROGRAD_DATA/mnist` or `../shared/data/mnist` (LeNet on its
//! first 10,000 images, to keep a sample short).

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::Module;
use ferrograd::optim::{AdamConfig, AdamW, Sgd, SgdConfig};
use ferrograd::prelude::*;
use std::path::PathBuf;

#[path = "common/models.rs"]
mod models;
use models::{LeNet, Mlp, epoch};

fn mnist() -> Option<(Tensor, Tensor)> {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"))
        .join("mnist");
    match MNIST::new(&root, true) {
        Ok(d) => Some(d.tensors()),
        Err(e) => {
            eprintln!("skipping the training benchmarks: {e}");
            None
        }
    }
}

fn training(c: &mut Criterion) {
    let Some((x, y)) = mnist() else { return };
    let mut group = c.benchmark_group("train_epoch");
    group.sample_size(10);

    manual_seed(0);
    let mlp = Mlp::new(&Device::Cpu);
    let mut opt = AdamW::named(mlp.named_parameters(), AdamConfig::default());
    let mut loader = DataLoader::builder(TensorDataset::new((x.clone(), y.clone())))
        .batch_size(64)
        .shuffle(true)
        .seed(0)
        .build();
    group.bench_function("mlp_60k_b64", |b| {
        b.iter(|| epoch(&mut loader, &mut opt, &|x| mlp.forward(x)))
    });

    let lenet = LeNet::new(&Device::Cpu);
    let mut opt = AdamW::named(lenet.named_parameters(), AdamConfig::default());
    let n = 10_000;
    let mut loader =
        DataLoader::builder(TensorDataset::new((x.narrow(0, 0, n), y.narrow(0, 0, n))))
            .batch_size(64)
            .shuffle(true)
            .seed(0)
            .build();
    group.bench_function("lenet_10k_b64", |b| {
        b.iter(|| epoch(&mut loader, &mut opt, &|x| lenet.forward(x)))
    });
    // The same with SGD (lr 0.01, momentum 0.9), the optimizer of #17's LeNet target.
    let mut sgd = Sgd::new(lenet.parameters(), SgdConfig::new(0.01).momentum(0.9));
    group.bench_function("lenet_10k_b64_sgd", |b| {
        b.iter(|| epoch(&mut loader, &mut sgd, &|x| lenet.forward(x)))
    });
    group.finish();
}

criterion_group!(benches, training);
criterion_main!(benches);
