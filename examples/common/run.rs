//! Shared by the examples: the command line (`--data DIR`, `--full`, `--epochs N`,
//! `--resume`, `--out DIR`) and evaluation on the test set. The training tools
//! themselves (progress bar, metrics log and plot, checkpoints) are ferrograd's
//! (`ferrograd::train`, `ferrograd::checkpoint`).

// Each example uses a part of this file.
#![allow(dead_code)]

use ferrograd::nn::functional as F;
use ferrograd::prelude::*;
use ferrograd::train::correct_predictions;
use std::path::PathBuf;

/// The command line of an example.
pub struct Args {
    /// The IDX files' directory.
    pub data: PathBuf,
    /// Epochs to train (in all, counting those before a resume).
    pub epochs: usize,
    /// Continue from the checkpoint in `out`.
    pub resume: bool,
    /// Where the checkpoint, metrics CSV and plots go.
    pub out: PathBuf,
    /// Fail (exit 1) when the final test accuracy is lower (CI's proof of learning).
    pub min_accuracy: Option<f64>,
    /// Profile a few training steps instead of training (the examples that offer it).
    pub profile: bool,
}

impl Args {
    /// Parses `std::env::args()`. `data_name` picks the bundled subset
    /// (`examples/data/{data_name}-mini`, the default) and, with `--full`, the whole set
    /// in `$FERROGRAD_DATA/{data_name}` or `../shared/data/{data_name}`; `run_name` the
    /// output directory (`runs/{run_name}`).
    pub fn parse(
        run_name: &str,
        data_name: &str,
        epochs_bundled: usize,
        epochs_full: usize,
    ) -> Args {
        let mut args = std::env::args().skip(1);
        let (mut data, mut epochs, mut resume, mut min_accuracy) = (None, None, false, None);
        let mut profile = false;
        let mut out = PathBuf::from("runs").join(run_name);
        let usage = || -> ! {
            eprintln!(
                "usage: {run_name} [--data DIR | --full] [--epochs N] [--resume] [--out DIR] [--min-accuracy A] [--profile]\n\
                 (default data: the bundled subset in examples/data/{data_name}-mini)"
            );
            std::process::exit(2)
        };
        while let Some(a) = args.next() {
            match a.as_str() {
                "--data" => data = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
                "--full" => {
                    data = Some(match std::env::var_os("FERROGRAD_DATA") {
                        Some(root) => PathBuf::from(root).join(data_name),
                        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                            .join("../shared/data")
                            .join(data_name),
                    })
                }
                "--epochs" => {
                    epochs = Some(
                        args.next()
                            .and_then(|n| n.parse().ok())
                            .unwrap_or_else(|| usage()),
                    )
                }
                "--resume" => resume = true,
                "--profile" => profile = true,
                "--min-accuracy" => {
                    min_accuracy = Some(
                        args.next()
                            .and_then(|n| n.parse().ok())
                            .unwrap_or_else(|| usage()),
                    )
                }
                "--out" => out = PathBuf::from(args.next().unwrap_or_else(|| usage())),
                _ => usage(),
            }
        }
        let bundled = data.is_none();
        let data = data.unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("examples/data")
                .join(format!("{data_name}-mini"))
        });
        let epochs = epochs.unwrap_or(if bundled { epochs_bundled } else { epochs_full });
        Args {
            data,
            epochs,
            resume,
            out,
            min_accuracy,
            profile,
        }
    }

    /// `Err` when `--min-accuracy` was given and the final test accuracy (`None`: no
    /// epoch ran) is below it.
    pub fn check_accuracy(&self, accuracy: Option<f64>) -> Result<(), Box<dyn std::error::Error>> {
        match (self.min_accuracy, accuracy) {
            (Some(min), Some(a)) if a < min => Err(format!(
                "test accuracy {:.2}% is below the required {:.2}%",
                a * 100.0,
                min * 100.0
            )
            .into()),
            _ => Ok(()),
        }
    }
}

/// Mean loss and accuracy of `forward` over `(x, y)` in batches of 1,000, without grad.
pub fn evaluate(forward: impl Fn(&Tensor) -> Tensor, x: &Tensor, y: &Tensor) -> (f64, f64) {
    no_grad(|| {
        let n = x.size(0);
        let (mut loss, mut correct) = (0.0, 0);
        for start in (0..n).step_by(1000) {
            let len = 1000.min(n - start);
            let (xb, yb) = (x.narrow(0, start, len), y.narrow(0, start, len));
            let logits = forward(&xb);
            loss += F::cross_entropy(&logits, &yb).item::<f32>() as f64 * len as f64;
            correct += correct_predictions(&logits, &yb);
        }
        (loss / n as f64, correct as f64 / n as f64)
    })
}

/// The columns of the examples' metrics CSV.
pub const COLUMNS: [&str; 6] = [
    "epoch",
    "train_loss",
    "train_accuracy",
    "test_loss",
    "test_accuracy",
    "samples_per_sec",
];

/// A training run's files in `args.out`: `checkpoint.safetensors` (written after every
/// epoch; `--resume` restores model, optimizer, schedule, data order and random state
/// from it), `metrics.csv` (a row per epoch) and `metrics.png` / `metrics.svg`.
pub struct Session {
    ckpt_path: PathBuf,
    metrics: ferrograd::train::MetricsLog,
    /// The last epoch already done (0 for a fresh run).
    pub start: usize,
    last_accuracy: Option<f64>,
    name: String,
}

impl Session {
    /// Opens the run, resuming from the checkpoint with `--resume`.
    pub fn open<D, C>(
        name: &str,
        args: &Args,
        model: &mut impl ferrograd::nn::Module,
        opt: &mut dyn ferrograd::optim::Optimizer,
        sched: &mut dyn ferrograd::optim::lr_scheduler::LrScheduler,
        loader: &mut ferrograd::data::DataLoader<D, C>,
    ) -> Result<Session, Box<dyn std::error::Error>>
    where
        D: ferrograd::data::Dataset + 'static,
        C: ferrograd::data::Collate<D::Item>,
    {
        use ferrograd::checkpoint::Checkpoint;
        use ferrograd::train::MetricsLog;
        std::fs::create_dir_all(&args.out)?;
        let ckpt_path = args.out.join("checkpoint.safetensors");
        let csv = args.out.join("metrics.csv");
        let (metrics, start) = if args.resume && ckpt_path.exists() {
            let ckpt = Checkpoint::load(&ckpt_path)?;
            ckpt.restore_model(model, true)?;
            ckpt.restore_optimizer(opt)?;
            ckpt.restore_scheduler(sched)?;
            ckpt.restore_rng()?;
            if let Some(position) = &ckpt.loader {
                loader.load_state(position);
            }
            println!(
                "resuming after epoch {} from {}",
                ckpt.epoch,
                ckpt_path.display()
            );
            (
                MetricsLog::resume(&csv, &COLUMNS, ckpt.epoch as f64)?,
                ckpt.epoch as usize,
            )
        } else {
            (MetricsLog::create(&csv, &COLUMNS)?, 0)
        };
        Ok(Session {
            ckpt_path,
            metrics,
            start,
            last_accuracy: None,
            name: name.to_string(),
        })
    }

    /// Prints and records an epoch, saves the checkpoint and redraws the plot.
    #[allow(clippy::too_many_arguments)]
    pub fn end_epoch(
        &mut self,
        epoch: usize,
        train: &ferrograd::train::EpochSummary,
        (test_loss, test_acc): (f64, f64),
        model: &impl ferrograd::nn::Module,
        opt: &dyn ferrograd::optim::Optimizer,
        sched: &dyn ferrograd::optim::lr_scheduler::LrScheduler,
        loader: ferrograd::data::LoaderState,
    ) -> Result<(), Box<dyn std::error::Error>> {
        use ferrograd::checkpoint::Checkpoint;
        let train_acc = train.accuracy.unwrap_or(0.0);
        println!(
            "epoch {epoch}: train loss {:.4}, accuracy {:.2}% | test loss {test_loss:.4}, accuracy {:.2}% | {:.0} samples/s",
            train.loss,
            train_acc * 100.0,
            test_acc * 100.0,
            train.samples_per_sec
        );
        self.last_accuracy = Some(test_acc);
        self.metrics.append(&[
            epoch as f64,
            train.loss,
            train_acc,
            test_loss,
            test_acc,
            train.samples_per_sec,
        ])?;
        Checkpoint::new(model)
            .optimizer(opt)
            .scheduler(sched)
            .loader(loader)
            .epoch(epoch as u64)
            .meta("example", self.name.as_str())
            .save(&self.ckpt_path)?;
        let dir = self.ckpt_path.parent().unwrap_or(std::path::Path::new("."));
        self.metrics
            .plot(dir.join("metrics.png"), dir.join("metrics.svg"))?;
        Ok(())
    }

    /// Says where the files are and checks `--min-accuracy`.
    pub fn finish(self, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
        println!(
            "checkpoint, metrics.csv and the loss/accuracy plot (metrics.png, metrics.svg) are in {}",
            args.out.display()
        );
        args.check_accuracy(self.last_accuracy)
    }
}
