//! LeNet-5 with SyncBatchNorm trained on MNIST by several processes with DistributedDataParallel over MPI:
//! each rank reads its share of every epoch (DistributedSampler), backward averages the
//! gradients across ranks, the batch norms normalise over all ranks' batches, and rank 0
//! alone shows the progress bar, evaluates and writes the checkpoint (with every rank's
//! random state and data position, so `--resume` continues exactly).
//!
//! ```text
//! cargo build --release --features mpi --example ddp_mnist
//! mpirun -n 2 target/release/examples/ddp_mnist               # bundled 2,000-image subset
//! mpirun -n 2 target/release/examples/ddp_mnist -- --full     # the whole set
//! mpirun -n 2 target/release/examples/ddp_mnist -- --resume   # continue from runs/ddp_mnist/
//! ```
//! (As root, e.g. in a container, OpenMPI also wants `--allow-run-as-root`.)
//!
//! The ranks start from different random weights on purpose: DistributedDataParallel
//! copies rank 0's at construction, so they train one model.

use ferrograd::checkpoint::Checkpoint;
use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, Dataset, DistributedSampler};
use ferrograd::distributed::SyncBatchNorm;
use ferrograd::distributed::{self, Backend, DdpConfig, DistributedDataParallel, ReduceOp};
use ferrograd::nn::{BatchNorm2d, Conv2d, ConvOptions, Forward, Linear, Module};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use ferrograd::train::{EpochProgress, correct_predictions};

// The shared argument parser and evaluation.
#[path = "common/run.rs"]
mod run;

/// LeNet-5 with batch normalisation after each convolution; under several ranks the
/// BatchNorm layers become SyncBatchNorm, whose statistics cover every rank's batch.
#[derive(Module)]
struct LeNet {
    conv1: Conv2d,
    bn1: SyncBatchNorm,
    conv2: Conv2d,
    bn2: SyncBatchNorm,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
}

impl LeNet {
    fn new() -> LeNet {
        let dev = &Device::Cpu;
        LeNet {
            conv1: Conv2d::new(1, 6, 5, ConvOptions::default().padding(2), dev),
            // `SyncBatchNorm::from` is convert_sync_batchnorm for one layer.
            bn1: SyncBatchNorm::from(BatchNorm2d::new(6, dev)),
            conv2: Conv2d::new(6, 16, 5, ConvOptions::default(), dev),
            bn2: SyncBatchNorm::from(BatchNorm2d::new(16, dev)),
            fc1: Linear::new(400, 120, dev),
            fc2: Linear::new(120, 84, dev),
            fc3: Linear::new(84, 10, dev),
        }
    }
}

impl Forward<&Tensor> for LeNet {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        let x = F::max_pool2d(&self.bn1.forward(&self.conv1.forward(x)).relu(), 2);
        let x = F::max_pool2d(&self.bn2.forward(&self.conv2.forward(&x)).relu(), 2);
        let x = self.fc1.forward(&x.flatten(1, -1)).relu();
        self.fc3.forward(&self.fc2.forward(&x).relu())
    }
}

fn normalize(x: &Tensor) -> Tensor {
    (x - 0.1307) / 0.3081
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = distributed::init_process_group(Backend::Mpi)?;
    let (rank, size) = (world.rank(), world.size());
    let args = run::Args::parse("ddp_mnist", "mnist", 6, 3);
    let train = MNIST::new(&args.data, true)?;
    let n = train.len();
    let (test_x, test_y) = MNIST::new(&args.data, false)?.tensors();
    if rank == 0 {
        println!(
            "{size} ranks, {n} training images, batch 32 per rank ({} in all)",
            32 * size
        );
    }

    manual_seed(rank as u64); // different on each rank: DDP makes them rank 0's
    let mut model = DistributedDataParallel::new(LeNet::new(), &world, DdpConfig::default())?;
    let sampler = DistributedSampler::new(n, size, rank, true, 0, false)?;
    let mut loader = DataLoader::builder(train)
        .batch_size(32)
        .sampler(sampler)
        .build();
    let mut opt = AdamW::named(
        model.module().named_parameters(),
        AdamConfig::default().lr(2e-3).weight_decay(1e-4),
    );
    let checkpoint = args.out.join("checkpoint.safetensors");
    let mut start = 1;
    if args.resume {
        // Every rank reads the file and takes back its own random state and data position.
        let ckpt = distributed::load_checkpoint(&world, &checkpoint)?;
        ckpt.restore_model(model.module_mut(), true)?;
        ckpt.restore_optimizer(&mut opt)?;
        ckpt.restore_rng()?;
        if let Some(state) = &ckpt.loader {
            loader.load_state(state);
        }
        start = ckpt.epoch as usize + 1;
        if rank == 0 {
            println!("resumed after epoch {}", ckpt.epoch);
        }
    }

    let mut accuracy = 0.0;
    for epoch in start..=args.epochs {
        model.train();
        let mut bar = (rank == 0).then(|| EpochProgress::new(epoch, args.epochs, loader.len()));
        let (mut loss_sum, mut batches) = (0.0, 0usize);
        for batch in loader.iter() {
            let (x, y) = batch?;
            opt.zero_grad();
            let logits = model.forward(&normalize(&x));
            let loss = F::cross_entropy(&logits, &y);
            loss.backward(); // gradients are averaged over the ranks here
            opt.step();
            let l = loss.item::<f32>() as f64;
            loss_sum += l;
            batches += 1;
            if let Some(bar) = &mut bar {
                bar.update(x.size(0), l, Some(correct_predictions(&logits, &y)));
            }
        }
        if let Some(bar) = bar {
            bar.finish();
        }
        model.eval();
        // The mean training loss over every rank's batches.
        let mean = Tensor::from_vec(vec![loss_sum / batches.max(1) as f64], &[1]);
        world.all_reduce(&mean, ReduceOp::Avg)?;
        if rank == 0 {
            let (test_loss, test_acc) =
                run::evaluate(|x| model.module().forward(&normalize(x)), &test_x, &test_y);
            accuracy = test_acc;
            println!(
                "epoch {epoch}: train loss {:.4} (all ranks), test loss {test_loss:.4}, test accuracy {:.2}%",
                mean.item::<f64>(),
                100.0 * test_acc
            );
            std::fs::create_dir_all(&args.out)?;
        }
        // Rank 0 writes it, with every rank's random state and data position; the model's
        // keys are the wrapped model's (`conv1.weight`), loadable without DDP.
        let ckpt = Checkpoint::new(model.module())
            .optimizer(&opt)
            .epoch(epoch as u64);
        distributed::save_checkpoint(&world, ckpt, Some(loader.state()), &checkpoint)?;
    }
    let ok = args.min_accuracy.is_none_or(|min| accuracy >= min);
    let flag = Tensor::from_vec(vec![if rank == 0 && !ok { 1i64 } else { 0 }], &[1]);
    world.all_reduce(&flag, ReduceOp::Max)?;
    distributed::destroy_process_group();
    if flag.item::<i64>() != 0 {
        if rank == 0 {
            eprintln!(
                "test accuracy {accuracy:.4} is below the required {:?}",
                args.min_accuracy
            );
        }
        std::process::exit(1);
    }
    Ok(())
}
