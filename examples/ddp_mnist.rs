//! LeNet-5 with SyncBatchNorm trained on MNIST by several processes with DistributedDataParallel over MPI:
//! each rank reads its share of every epoch (DistributedSampler), backward averages the
//! gradients across ranks, the batch norms normalise over all ranks' batches. The loop is
//! ferrograd's `Trainer` with the process group: every rank validates its share of the
//! test set and the loss and accuracy are summed over the ranks; rank 0 alone shows the
//! progress bar and writes the CSV, plot and TensorBoard logs; the checkpoint is saved
//! by all together (with every rank's random state and data position, so `--resume`
//! continues exactly).
//!
//! ```text
//! cargo build --release --features mpi --example ddp_mnist
//! mpirun -n 2 target/release/examples/ddp_mnist               # bundled 2,000-image subset
//! mpirun -n 2 target/release/examples/ddp_mnist --full     # the whole set
//! mpirun -n 2 target/release/examples/ddp_mnist --resume   # continue from runs/ddp_mnist/
//! ```
//! (As root, e.g. in a container, OpenMPI also wants `--allow-run-as-root`.)
//!
//! The ranks start from different random weights on purpose: DistributedDataParallel
//! copies rank 0's at construction, so they train one model.

use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, Dataset, DistributedSampler};
use ferrograd::distributed::SyncBatchNorm;
use ferrograd::distributed::{self, Backend, DdpConfig, DistributedDataParallel};
use ferrograd::nn::{BatchNorm2d, Conv2d, ConvOptions, Forward, Linear, Module};
use ferrograd::optim::{AdamConfig, AdamW};
use ferrograd::prelude::*;
use ferrograd::train::metrics::Accuracy;
use ferrograd::train::{ModelCheckpoint, StepOutput, Trainer, TrainerConfig};

// The shared argument parser.
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
    let test = MNIST::new(&args.data, false)?;
    let (n, n_test) = (train.len(), test.len());
    if rank == 0 {
        println!(
            "{size} ranks, {n} training images, batch 32 per rank ({} in all)",
            32 * size
        );
    }

    manual_seed(rank as u64); // different on each rank: DDP makes them rank 0's
    let mut model = DistributedDataParallel::new(LeNet::new(), &world, DdpConfig::default())?;
    // Each rank reads its share: of every epoch's shuffle, and of the test set.
    let mut train = DataLoader::builder(train)
        .batch_size(32)
        .sampler(DistributedSampler::new(n, size, rank, true, 0, false)?)
        .build();
    let mut test = DataLoader::builder(test)
        .batch_size(500)
        .sampler(DistributedSampler::new(
            n_test, size, rank, false, 0, false,
        )?)
        .build();
    let mut opt = AdamW::named(
        model.module().named_parameters(),
        AdamConfig::default().lr(2e-3).weight_decay(1e-4),
    );
    let last = args.out.join("checkpoints/last.safetensors");
    let mut trainer = Trainer::new(TrainerConfig {
        max_epochs: args.epochs,
        root_dir: args.out.clone(),
        resume_from: (args.resume && last.exists()).then_some(last),
        process_group: Some(world.clone()),
        dashboard: args.dashboard,
        ..Default::default()
    })
    .metric(Accuracy::new())
    // The model's keys are the wrapped model's (`conv1.weight`), loadable without DDP.
    .callback(ModelCheckpoint::last_only());
    let report = trainer.fit(
        &mut model,
        &mut opt,
        None,
        &mut train,
        Some(&mut test),
        &mut |m: &mut DistributedDataParallel<LeNet>, (x, y): (Tensor, Tensor)| {
            // Backward averages the gradients over the ranks.
            let logits = m.forward(&normalize(&x));
            StepOutput::new(F::cross_entropy(&logits, &y)).with_predictions(logits, y)
        },
    )?;
    // Every rank holds the same reduced values, so every rank decides alike.
    let accuracy = report.metrics["val_accuracy"];
    if rank == 0 {
        println!(
            "after {} epochs: test loss {:.4}, accuracy {:.2}% (all ranks); files in {}",
            report.epochs,
            report.metrics["val_loss"],
            accuracy * 100.0,
            args.out.display()
        );
    }
    distributed::destroy_process_group();
    if args.min_accuracy.is_some_and(|min| accuracy < min) {
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
