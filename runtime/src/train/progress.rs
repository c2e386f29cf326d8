//! The per-epoch progress bar.

use crate::autograd::no_grad;
use crate::{DType, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;

/// A progress bar over one epoch's batches showing the running mean loss, the running
/// accuracy (when given) and the throughput; drawn on standard error when it is a
/// terminal, silent otherwise (logs and CI).
#[derive(Debug)]
pub struct EpochProgress {
    bar: ProgressBar,
    start: Instant,
    samples: usize,
    batches: usize,
    loss_sum: f64,
    correct: Option<usize>,
}

/// One epoch's totals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochSummary {
    /// Mean of the batch losses.
    pub loss: f64,
    /// Fraction of correct predictions, when counted.
    pub accuracy: Option<f64>,
    /// Samples per second over the epoch.
    pub samples_per_sec: f64,
    /// Samples seen.
    pub samples: usize,
}

impl EpochProgress {
    /// A bar for epoch `epoch` of `epochs`, `steps` batches long.
    pub fn new(epoch: usize, epochs: usize, steps: usize) -> Self {
        let bar = ProgressBar::new(steps as u64)
            .with_style(
                ProgressStyle::with_template(
                    "epoch {prefix} {bar:28} {pos}/{len} [{elapsed}<{eta}] {msg}",
                )
                .expect("a valid template"),
            )
            .with_prefix(format!("{epoch}/{epochs}"));
        EpochProgress {
            bar,
            start: Instant::now(),
            samples: 0,
            batches: 0,
            loss_sum: 0.0,
            correct: None,
        }
    }

    /// Records a batch of `batch_size` samples with mean loss `loss` and `correct`
    /// right predictions (if counted).
    pub fn update(&mut self, batch_size: usize, loss: f64, correct: Option<usize>) {
        self.samples += batch_size;
        self.batches += 1;
        self.loss_sum += loss;
        if let Some(c) = correct {
            *self.correct.get_or_insert(0) += c;
        }
        let s = self.summary();
        let mut msg = format!("loss {:.4}", s.loss);
        if let Some(a) = s.accuracy {
            msg += &format!(" acc {:.2}%", a * 100.0);
        }
        msg += &format!(" {:.0} samples/s", s.samples_per_sec);
        self.bar.set_message(msg);
        self.bar.inc(1);
    }

    /// The totals so far.
    pub fn summary(&self) -> EpochSummary {
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        EpochSummary {
            loss: self.loss_sum / self.batches.max(1) as f64,
            accuracy: self.correct.map(|c| c as f64 / self.samples.max(1) as f64),
            samples_per_sec: self.samples as f64 / secs,
            samples: self.samples,
        }
    }

    /// Ends the bar (left on screen) and returns the epoch's totals.
    pub fn finish(self) -> EpochSummary {
        self.bar.finish();
        self.summary()
    }
}

/// How many rows of `logits` (`[N, C]`) have their argmax equal to `labels` (`[N]`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::train::correct_predictions;
/// let logits = Tensor::from_vec(vec![0.1f32, 0.9, 0.8, 0.2], &[2, 2]);
/// assert_eq!(correct_predictions(&logits, &Tensor::from_vec(vec![1i64, 1], &[2])), 1);
/// ```
pub fn correct_predictions(logits: &Tensor, labels: &Tensor) -> usize {
    no_grad(|| {
        logits
            .argmax(-1, false)
            .eq(labels)
            .to_dtype(DType::I64)
            .sum_all()
            .item::<i64>() as usize
    })
}
