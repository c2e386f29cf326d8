//! LeNet-5 declared with `network!` (its shapes are checked when this file compiles),
//! trained on MNIST with AdamW and a cosine schedule by ferrograd's `Trainer`: progress
//! bar, validation accuracy, checkpoints (`last` and the best) with `--resume`, metrics
//! CSV and plot, TensorBoard logs. `examples/mnist.rs` writes the same kind of training
//! as an explicit loop.
//!
//! ```text
//! cargo run --release --example lenet_mnist                # bundled 2,000-image subset
//! cargo run --release --example lenet_mnist -- --full      # $FERROGRAD_DATA/mnist or ../shared/data/mnist
//! cargo run --release --example lenet_mnist -- --resume    # continue from runs/lenet_mnist/
//! cargo run --release --example lenet_mnist -- --dashboard # live curves, throughput, memory in the terminal
//! cargo run --release --example lenet_mnist -- --profile   # profile 20 steps: table + Chrome trace
//! tensorboard --logdir runs/lenet_mnist/tensorboard
//! ```

use ferrograd::data::DataLoader;
use ferrograd::data::datasets::MNIST;
use ferrograd::nn::Module;
use ferrograd::optim::lr_scheduler::{Schedule, Scheduler};
use ferrograd::optim::{AdamConfig, AdamW};
use ferrograd::prelude::*;
use ferrograd::profiler::{self, ProfilerOptions, SortBy};
use ferrograd::train::metrics::Accuracy;
use ferrograd::train::{
    Interval, LearningRateMonitor, Mode, ModelCheckpoint, StepOutput, Trainer, TrainerConfig,
};

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

/// One batch: the loss, and the logits for the accuracy.
fn step(model: &mut LeNet, (x, y): (Tensor, Tensor)) -> StepOutput {
    let logits = model.forward(&normalize(&x));
    StepOutput::new(F::cross_entropy(&logits, &y)).with_predictions(logits, y)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = run::Args::parse("lenet_mnist", "mnist", 6, 3);
    let mut train = DataLoader::builder(MNIST::new(&args.data, true)?)
        .batch_size(64)
        .shuffle(true)
        .build();
    let mut test = DataLoader::builder(MNIST::new(&args.data, false)?)
        .batch_size(1000)
        .build();
    println!("{}", LeNet::summary());

    let mut model = LeNet::new(&Device::Cpu);
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamConfig::default().lr(3e-3).weight_decay(1e-4),
    );
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: (args.epochs * train.len()) as u64,
            eta_min: 1e-5,
        },
    );
    let last = args.out.join("checkpoints/last.safetensors");
    let config = TrainerConfig {
        max_epochs: args.epochs,
        scheduler_interval: Interval::Step,
        seed: Some(0),
        root_dir: args.out.clone(),
        resume_from: (args.resume && last.exists()).then_some(last),
        dashboard: args.dashboard,
        ..Default::default()
    };

    if args.profile {
        // 20 training steps under the profiler: the per-op table and a Chrome trace.
        let config = TrainerConfig {
            max_steps: Some(20),
            root_dir: args.out.join("profile"),
            tensorboard: false,
            progress: false,
            resume_from: None,
            ..config
        };
        let (fit, profile) = profiler::profile(ProfilerOptions::default(), || {
            Trainer::new(config).fit(
                &mut model,
                &mut opt,
                Some(&mut sched),
                &mut train,
                None::<&mut DataLoader<MNIST>>,
                &mut step,
            )
        });
        fit?;
        println!("{}", profile.table(SortBy::SelfTime, 15));
        let trace = args.out.join("profile/trace.json");
        profile.export_chrome_trace(&trace)?;
        println!(
            "Chrome trace (chrome://tracing, ui.perfetto.dev): {}",
            trace.display()
        );
        return Ok(());
    }

    let mut trainer = Trainer::new(config)
        .metric(Accuracy::new())
        .callback(ModelCheckpoint::new("val_accuracy", Mode::Max))
        .callback(LearningRateMonitor::new());
    let report = trainer.fit(
        &mut model,
        &mut opt,
        Some(&mut sched),
        &mut train,
        Some(&mut test),
        &mut step,
    )?;
    println!(
        "after {} epochs: test loss {:.4}, accuracy {:.2}%",
        report.epochs,
        report.metrics["val_loss"],
        report.metrics["val_accuracy"] * 100.0
    );
    println!(
        "checkpoints, metrics.csv, the plot and TensorBoard logs are in {}",
        args.out.display()
    );
    args.check_accuracy(report.metrics.get("val_accuracy").copied())
}
