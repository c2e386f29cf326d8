//! Data loading against training: one epoch of the full MNIST training set through a
//! shuffling `DataLoader` (batches of 64, 2 workers) and one epoch of training the
//! `mnist` example's network (AdamW, cosine schedule) on the same batches. The target is the first
//! at most 5% of the second. Needs MNIST in `$FERROGRAD_DATA` or `../shared/data`
//! (skipped with a message otherwise). `image_folder` is the ImageFolder half of
//! `bench/data_compare.py`.

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, Dataset, TensorDataset};
use ferrograd::nn::Module;
use ferrograd::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use std::hint::black_box;
use std::path::PathBuf;

network! {
    /// The `mnist` example's MLP.
    struct Mlp(x: [N, 1, 28, 28]) -> [N, 10] {
        flatten,
        fc1: Linear(784 -> 128), relu,
        fc2: Linear(128 -> 10),
    }
}

fn mnist() -> Option<MNIST> {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"))
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

    // The training epoch of the `mnist` example (its MLP, AdamW, the cosine schedule),
    // over batches already loaded, so the loader's share of an epoch is
    // loader_samples_2_workers / mlp_train.
    manual_seed(0);
    let net = Mlp::new(&Device::Cpu);
    let mut opt = AdamW::named(
        net.named_parameters(),
        AdamConfig::default().lr(3e-3).weight_decay(1e-4),
    );
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: 3 * 938,
            eta_min: 1e-5,
        },
    );
    let batches: Vec<(Tensor, Tensor)> = tensors
        .iter()
        .map(Result::unwrap)
        .map(|(x, y)| (x.reshape(&[x.size(0), 1, 28, 28]), y))
        .collect();
    group.bench_function("mlp_train", |b| {
        b.iter(|| {
            for (x, y) in &batches {
                opt.zero_grad();
                let loss = F::cross_entropy(&net.forward(&((x - 0.1307) / 0.3081)), y);
                loss.backward();
                opt.step();
                sched.step(&mut opt);
            }
        })
    });
    group.finish();
}

/// An ImageFolder of JPEGs (`$FERROGRAD_IMAGE_FOLDER`, written by `bench/data_compare.py`)
/// through Resize(64) + RandomCrop(56, padding 4) + RandomHorizontalFlip + Normalize, in
/// batches of 32 on 2 persistent workers: one epoch.
fn image_folder(c: &mut Criterion) {
    use ferrograd::data::datasets::ImageFolder;
    use ferrograd::data::transforms::*;
    let Some(root) = std::env::var_os("FERROGRAD_IMAGE_FOLDER") else {
        eprintln!("skipping image_folder: set FERROGRAD_IMAGE_FOLDER (bench/data_compare.py does)");
        return;
    };
    let folder = ImageFolder::new(root).expect("a readable image folder");
    let pipeline = Compose::new()
        .then(ToTensor)
        .then(Resize::shorter_side(64))
        .then(RandomCrop::new([56, 56], 4))
        .then(RandomHorizontalFlip::new(0.5))
        .then(Normalize::new(&[0.5, 0.5, 0.5], &[0.25, 0.25, 0.25]));
    let data = folder.map(move |(img, y)| (pipeline.apply(img), y));
    let mut loader = DataLoader::builder(data)
        .batch_size(32)
        .shuffle(true)
        .num_workers(2)
        .persistent_workers(true)
        .seed(0)
        .build();
    let mut group = c.benchmark_group("image_folder_epoch");
    group.sample_size(10);
    group.bench_function("2_workers", |b| {
        b.iter(|| {
            loader
                .iter()
                .map(|batch| black_box(batch.unwrap()).1.shape()[0])
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, data, image_folder);
criterion_main!(benches);
