//! Shared by the examples: the command line (clap: `--data DIR`, `--full`, `--epochs N`,
//! `--resume`, `--out DIR`, `--min-accuracy A`, `--profile`, `--dashboard`; `--help`) and the explicit loops'
//! evaluation on the test set. Everything that trains, checkpoints, resumes and logs is
//! ferrograd's (`ferrograd::train::Trainer`, or `Checkpoint` and `MetricsLog` in the
//! explicit loop of `mnist.rs`).

// Each example uses a part of this file.
#![allow(dead_code)]

use ferrograd::nn::functional as F;
use ferrograd::prelude::*;
use ferrograd::train::correct_predictions;
use std::path::PathBuf;

// The flags every training example takes (clap's derive; `--help` lists them).
/// Trains on an IDX image set (MNIST or Fashion-MNIST) and reports the test accuracy.
#[derive(clap::Parser, Debug)]
struct Cli {
    /// The IDX files' directory (default: the bundled subset in `examples/data`).
    #[arg(long, value_name = "DIR", conflicts_with = "full")]
    data: Option<PathBuf>,
    /// The whole set: `$FERROGRAD_DATA/<name>`, else `../shared/data/<name>`.
    #[arg(long)]
    full: bool,
    /// Epochs to train, in all (counting those before a resume).
    #[arg(long, value_name = "N")]
    epochs: Option<usize>,
    /// Continue from the checkpoint in `--out`.
    #[arg(long)]
    resume: bool,
    /// Where the checkpoint, metrics CSV and plots go (default `runs/<example>`).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Fail (exit 1) when the final test accuracy is lower, e.g. 0.9.
    #[arg(long, value_name = "A")]
    min_accuracy: Option<f64>,
    /// Profile a few training steps instead of training (the examples that offer it).
    #[arg(long)]
    profile: bool,
    /// Show the live terminal dashboard instead of the progress bar.
    #[arg(long)]
    dashboard: bool,
}

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
    /// Show the live terminal dashboard instead of the progress bar (the `Trainer`
    /// examples).
    pub dashboard: bool,
}

impl Args {
    /// Parses the command line (clap; `--help` prints the flags). `data_name` picks the
    /// bundled subset (`examples/data/{data_name}-mini`, the default) and, with `--full`,
    /// the whole set in `$FERROGRAD_DATA/{data_name}` or `../shared/data/{data_name}`;
    /// `run_name` the output directory (`runs/{run_name}`).
    pub fn parse(
        run_name: &str,
        data_name: &str,
        epochs_bundled: usize,
        epochs_full: usize,
    ) -> Args {
        use clap::{CommandFactory, FromArgMatches};
        let command = Cli::command()
            .name(run_name.to_string())
            .after_help(format!(
                "Default data: the bundled subset in examples/data/{data_name}-mini; \
             {epochs_bundled} epochs on it, {epochs_full} on the whole set."
            ));
        let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
        let data = if cli.full {
            Some(match std::env::var_os("FERROGRAD_DATA") {
                Some(root) => PathBuf::from(root).join(data_name),
                None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../shared/data")
                    .join(data_name),
            })
        } else {
            cli.data
        };
        let bundled = data.is_none();
        let data = data.unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("examples/data")
                .join(format!("{data_name}-mini"))
        });
        Args {
            data,
            epochs: cli
                .epochs
                .unwrap_or(if bundled { epochs_bundled } else { epochs_full }),
            resume: cli.resume,
            out: cli
                .out
                .unwrap_or_else(|| PathBuf::from("runs").join(run_name)),
            min_accuracy: cli.min_accuracy,
            profile: cli.profile,
            dashboard: cli.dashboard,
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
