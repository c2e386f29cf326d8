//! Shared by the examples: where MNIST is read from, the per-epoch progress bar, and test
//! accuracy. The files themselves are read by `ferrograd::data::datasets::MNIST`.

use ferrograd::prelude::*;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// The bundled 2,000-image subset, or (`full`) the whole set from `$FERROGRAD_DATA/mnist`
/// or `../shared/data/mnist`.
pub fn data_dir(full: bool) -> PathBuf {
    if !full {
        return PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/data/mnist-mini"
        ));
    }
    match std::env::var_os("FERROGRAD_DATA") {
        Some(root) => PathBuf::from(root).join("mnist"),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/mnist")),
    }
}

/// A progress bar over one epoch's steps, showing the running mean loss.
pub fn epoch_bar(epoch: usize, steps: usize) -> ProgressBar {
    ProgressBar::new(steps as u64)
        .with_style(
            ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} loss {msg}")
                .expect("valid template"),
        )
        .with_prefix(epoch.to_string())
}

/// The fraction of rows of `logits` whose argmax equals `labels`, computed without grad.
pub fn accuracy(logits: impl FnOnce() -> Tensor, labels: &Tensor) -> f32 {
    no_grad(|| {
        logits()
            .argmax(1, false)
            .eq(labels)
            .to_dtype(DType::F32)
            .mean_all()
            .item::<f32>()
    })
}
