//! LeNet-5 trained on MNIST by several processes with DistributedDataParallel over MPI:
//! each rank reads its share of every epoch (DistributedSampler), backward averages the
//! gradients across ranks, and rank 0 alone shows the progress bar, evaluates and saves
//! the checkpoint.
//!
//! ```text
//! cargo build --release --features mpi --example ddp_mnist
//! mpirun -n 2 target/release/examples/ddp_mnist               # bundled 2,000-image subset
//! mpirun -n 2 target/release/examples/ddp_mnist -- --full     # the whole set
//! ```
//! (As root, e.g. in a container, OpenMPI also wants `--allow-run-as-root`.)
//!
//! The ranks start from different random weights on purpose: DistributedDataParallel
//! copies rank 0's at construction, so they train one model.

use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, Dataset, DistributedSampler};
use ferrograd::distributed::{self, Backend, DdpConfig, DistributedDataParallel, ReduceOp};
use ferrograd::nn::Module;
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use ferrograd::train::{EpochProgress, correct_predictions};

// The shared argument parser and evaluation; the single-process checkpoint session of
// the other examples is not used here.
#[allow(dead_code)]
#[path = "common/run.rs"]
mod run;

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
    let model =
        DistributedDataParallel::new(LeNet::new(&Device::Cpu), &world, DdpConfig::default())?;
    let sampler = DistributedSampler::new(n, size, rank, true, 0, false)?;
    let mut loader = DataLoader::builder(train)
        .batch_size(32)
        .sampler(sampler)
        .build();
    let mut opt = AdamW::new(
        model.parameters(),
        AdamConfig::default().lr(2e-3).weight_decay(1e-4),
    );

    let mut accuracy = 0.0;
    for epoch in 1..=args.epochs {
        loader.set_epoch(epoch as u64);
        let mut bar = (rank == 0).then(|| EpochProgress::new(epoch, args.epochs, loader.len()));
        let (mut loss_sum, mut batches) = (0.0, 0usize);
        for batch in loader.iter() {
            let (x, y) = batch?;
            opt.zero_grad();
            let logits = model.forward_with(|m| m.forward(&normalize(&x)));
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
            // The wrapped model's keys (`conv1.weight`), loadable without DDP.
            ferrograd::checkpoint::save_safetensors(
                model.module(),
                args.out.join("model.safetensors"),
            )?;
        }
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
