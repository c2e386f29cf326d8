//! An MLP written with `network!`, trained on MNIST with the DataLoader, AdamW and a
//! cosine schedule: a progress bar per epoch, test accuracy, a checkpoint every epoch
//! (`--resume` continues from it), metrics appended to a CSV file and drawn as a
//! loss/accuracy plot (PNG and SVG). Everything is written out as the loop a user copies;
//! `examples/lenet_mnist.rs` runs the same kind of training through ferrograd's `Trainer`.
//!
//! ```text
//! cargo run --release --example mnist                   # bundled 2,000-image subset
//! cargo run --release --example mnist -- --data DIR     # the full set's IDX files in DIR
//! cargo run --release --example mnist -- --full         # $FERROGRAD_DATA/mnist or ../shared/data/mnist
//! cargo run --release --example mnist -- --resume       # continue from runs/mnist/
//! ```

use ferrograd::checkpoint::Checkpoint;
use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, Dataset};
use ferrograd::nn::Module;
use ferrograd::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use ferrograd::train::{EpochProgress, MetricsLog, correct_predictions};

#[path = "common/run.rs"]
mod run;

network! {
    /// A 784-128-10 perceptron for 28x28 digits.
    pub struct Mlp(x: [N, 1, 28, 28]) -> [N, 10] {
        flatten,
        fc1: Linear(784 -> 128), relu,
        fc2: Linear(128 -> 10),
    }
}

/// MNIST's pixel mean and standard deviation, as torchvision's examples normalise.
fn normalize(x: &Tensor) -> Tensor {
    (x - 0.1307) / 0.3081
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = run::Args::parse("mnist", "mnist", 8, 3);
    let train = MNIST::new(&args.data, true)?;
    let (test_x, test_y) = MNIST::new(&args.data, false)?.tensors();
    println!(
        "MNIST from {}: {} training and {} test images\n{}",
        args.data.display(),
        train.len(),
        test_x.size(0),
        Mlp::summary()
    );

    manual_seed(0);
    let mut model = Mlp::new(&Device::Cpu);
    let mut loader = DataLoader::builder(train)
        .batch_size(64)
        .shuffle(true)
        .build();
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamConfig::default().lr(3e-3).weight_decay(1e-4),
    );
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: (args.epochs * loader.len()) as u64,
            eta_min: 1e-5,
        },
    );
    // Resuming restores model, optimizer, schedule, data position and random state.
    std::fs::create_dir_all(&args.out)?;
    let ckpt_path = args.out.join("checkpoint.safetensors");
    let columns = [
        "epoch",
        "train_loss",
        "train_accuracy",
        "test_loss",
        "test_accuracy",
        "samples_per_sec",
    ];
    let csv = args.out.join("metrics.csv");
    let (mut log, start) = if args.resume && ckpt_path.exists() {
        let ckpt = Checkpoint::load(&ckpt_path)?;
        ckpt.restore_model(&mut model, true)?;
        ckpt.restore_optimizer(&mut opt)?;
        ckpt.restore_scheduler(&mut sched)?;
        ckpt.restore_rng()?;
        if let Some(position) = &ckpt.loader {
            loader.load_state(position);
        }
        println!(
            "resuming after epoch {} from {}",
            ckpt.epoch,
            ckpt_path.display()
        );
        let log = MetricsLog::resume(&csv, &columns, ckpt.epoch as f64)?;
        (log, ckpt.epoch as usize)
    } else {
        (MetricsLog::create(&csv, &columns)?, 0)
    };

    let mut accuracy = None;
    for epoch in start + 1..=args.epochs {
        model.train();
        let mut bar = EpochProgress::new(epoch, args.epochs, loader.len());
        for batch in loader.iter() {
            let (x, y) = batch?;
            opt.zero_grad();
            let logits = model.forward(&normalize(&x));
            let loss = F::cross_entropy(&logits, &y);
            loss.backward();
            opt.step();
            sched.step(&mut opt);
            let correct = correct_predictions(&logits, &y);
            bar.update(x.size(0), loss.item::<f32>() as f64, Some(correct));
        }
        let train = bar.finish();
        model.eval();
        let (test_loss, test_acc) =
            run::evaluate(|x| model.forward(&normalize(x)), &test_x, &test_y);
        let train_acc = train.accuracy.unwrap_or(0.0);
        println!(
            "epoch {epoch}: train loss {:.4}, accuracy {:.2}% | test loss {test_loss:.4}, accuracy {:.2}% | {:.0} samples/s",
            train.loss,
            train_acc * 100.0,
            test_acc * 100.0,
            train.samples_per_sec
        );
        accuracy = Some(test_acc);
        log.append(&[
            epoch as f64,
            train.loss,
            train_acc,
            test_loss,
            test_acc,
            train.samples_per_sec,
        ])?;
        Checkpoint::new(&model)
            .optimizer(&opt)
            .scheduler(&sched)
            .loader(loader.state())
            .epoch(epoch as u64)
            .save(&ckpt_path)?;
        log.plot(args.out.join("metrics.png"), args.out.join("metrics.svg"))?;
    }
    println!(
        "checkpoint, metrics.csv and the loss/accuracy plot (metrics.png, metrics.svg) are in {}",
        args.out.display()
    );
    args.check_accuracy(accuracy)
}
