//! LeNet-5 declared with `network!` (its shapes are checked when this file compiles),
//! trained on MNIST with AdamW and a cosine schedule; progress bar, test accuracy,
//! per-epoch checkpoint with `--resume`, metrics CSV and loss/accuracy plot.
//!
//! ```text
//! cargo run --release --example lenet_mnist                # bundled 2,000-image subset
//! cargo run --release --example lenet_mnist -- --full      # $FERROGRAD_DATA/mnist or ../shared/data/mnist
//! cargo run --release --example lenet_mnist -- --resume    # continue from runs/lenet_mnist/
//! ```

use ferrograd::data::DataLoader;
use ferrograd::data::datasets::MNIST;
use ferrograd::nn::Module;
use ferrograd::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use ferrograd::train::{EpochProgress, correct_predictions};

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
    let args = run::Args::parse("lenet_mnist", "mnist", 6, 3);
    let train = MNIST::new(&args.data, true)?;
    let (test_x, test_y) = MNIST::new(&args.data, false)?.tensors();
    println!("{}", LeNet::summary());

    manual_seed(0);
    let mut model = LeNet::new(&Device::Cpu);
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
    let mut run = run::Session::open(
        "lenet_mnist",
        &args,
        &mut model,
        &mut opt,
        &mut sched,
        &mut loader,
    )?;

    for epoch in run.start + 1..=args.epochs {
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
        let test = run::evaluate(|x| model.forward(&normalize(x)), &test_x, &test_y);
        run.end_epoch(epoch, &train, test, &model, &opt, &sched, loader.state())?;
    }
    run.finish(&args)
}
