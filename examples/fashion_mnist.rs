//! A CNN for Fashion-MNIST that mixes `network!` blocks (convolutions with BatchNorm; a
//! classifier head with Dropout) inside a `#[derive(Module)]` struct, trained with data
//! augmentation (random crops and flips), AdamW, a one-cycle schedule and gradient
//! clipping, by ferrograd's `Trainer`: progress bar, validation accuracy, checkpoints
//! (`last` and the best) with `--resume`, metrics CSV and plot, TensorBoard logs.
//!
//! ```text
//! cargo run --release --example fashion_mnist                # bundled 1,000-image subset
//! cargo run --release --example fashion_mnist -- --full      # $FERROGRAD_DATA/fashion-mnist or ../shared/data/fashion-mnist
//! cargo run --release --example fashion_mnist -- --resume    # continue from runs/fashion_mnist/
//! ```

use ferrograd::data::datasets::FashionMNIST;
use ferrograd::data::transforms::{Compose, RandomCrop, RandomHorizontalFlip, Transform};
use ferrograd::data::{DataLoader, Dataset};
use ferrograd::nn::Module;
use ferrograd::optim::lr_scheduler::{Schedule, Scheduler};
use ferrograd::optim::{AdamConfig, AdamW};
use ferrograd::prelude::*;
use ferrograd::train::metrics::Accuracy;
use ferrograd::train::{
    Interval, LearningRateMonitor, Mode, ModelCheckpoint, StepOutput, Trainer, TrainerConfig,
};

#[path = "common/run.rs"]
mod run;

network! {
    /// Two convolution blocks: 28x28 images to 64 maps of 7x7.
    pub struct Features(x: [N, 1, 28, 28]) -> [N, 64, 7, 7] {
        conv1: Conv2d(1 -> 32, kernel = 3, padding = 1),
        bn1: BatchNorm2d(32),
        relu,
        max_pool2d(2),
        conv2: Conv2d(32 -> 64, kernel = 3, padding = 1),
        bn2: BatchNorm2d(64),
        relu,
        max_pool2d(2),
    }
}

network! {
    /// The classifier over the flattened features.
    pub struct Head(x: [N, 3136]) -> [N, 10] {
        drop1: Dropout(0.25),
        fc1: Linear(3136 -> 128),
        relu,
        drop2: Dropout(0.25),
        fc2: Linear(128 -> 10),
    }
}

/// The whole network: its state dict keys are `features.conv1.weight`, …,
/// `head.fc2.bias`, as PyTorch names a module with these two children.
#[derive(Module)]
pub struct FashionCnn {
    features: Features,
    head: Head,
}

impl FashionCnn {
    fn new(device: &Device) -> Self {
        FashionCnn {
            features: Features::new(device),
            head: Head::new(device),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let x = (x - 0.2860) / 0.3530; // Fashion-MNIST's pixel mean and deviation
        self.head.forward(&self.features.forward(&x).flatten(1, -1))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = run::Args::parse("fashion_mnist", "fashion-mnist", 12, 5);
    let augment = Compose::new()
        .then(RandomCrop::new([28, 28], 2))
        .then(RandomHorizontalFlip::new(0.5));
    let train = FashionMNIST::new(&args.data, true)?.map(move |(x, y)| (augment.apply(x), y));
    let test = FashionMNIST::new(&args.data, false)?;
    println!(
        "Fashion-MNIST from {}: {} training and {} test images",
        args.data.display(),
        train.len(),
        test.len()
    );

    manual_seed(0);
    let mut model = FashionCnn::new(&Device::Cpu);
    let mut loader = DataLoader::builder(train)
        .batch_size(64)
        .shuffle(true)
        .num_workers(2)
        .build();
    let mut test = DataLoader::builder(test).batch_size(1000).build();
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamConfig::default().weight_decay(5e-4),
    );
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::OneCycle {
            max_lr: 3e-3,
            total_steps: (args.epochs * loader.len()) as u64,
            pct_start: 0.25,
            div_factor: 25.0,
            final_div_factor: 1e4,
            momentum: Some((0.85, 0.95)),
        },
    );
    let last = args.out.join("checkpoints/last.safetensors");
    let mut trainer = Trainer::new(TrainerConfig {
        max_epochs: args.epochs,
        grad_clip: Some(2.0),
        scheduler_interval: Interval::Step,
        root_dir: args.out.clone(),
        resume_from: (args.resume && last.exists()).then_some(last),
        dashboard: args.dashboard,
        ..Default::default()
    })
    .metric(Accuracy::new())
    .callback(ModelCheckpoint::new("val_accuracy", Mode::Max))
    .callback(LearningRateMonitor::new());
    let report = trainer.fit(
        &mut model,
        &mut opt,
        Some(&mut sched),
        &mut loader,
        Some(&mut test),
        &mut |m: &mut FashionCnn, (x, y): (Tensor, Tensor)| {
            let logits = m.forward(&x);
            StepOutput::new(F::cross_entropy(&logits, &y)).with_predictions(logits, y)
        },
    )?;
    println!(
        "after {} epochs: test loss {:.4}, accuracy {:.2}%; files in {}",
        report.epochs,
        report.metrics["val_loss"],
        report.metrics["val_accuracy"] * 100.0,
        args.out.display()
    );
    args.check_accuracy(report.metrics.get("val_accuracy").copied())
}
