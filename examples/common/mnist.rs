//! Shared by the examples: reading MNIST's gzipped IDX files (every malformed input is an
//! `Err`, never a panic), the per-epoch progress bar, and test accuracy.

use ferrograd::prelude::*;
use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a data set could not be read.
#[derive(Debug)]
pub enum DataError {
    Io(PathBuf, std::io::Error),
    Format(PathBuf, String),
}

impl std::fmt::Display for DataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            DataError::Format(p, why) => write!(f, "{}: not a valid IDX file: {why}", p.display()),
        }
    }
}

impl std::error::Error for DataError {}

/// Reads a gzipped IDX file: its dims and its bytes, validated against each other.
pub fn read_idx(path: &Path) -> Result<(Vec<usize>, Vec<u8>), DataError> {
    let file = std::fs::File::open(path).map_err(|e| DataError::Io(path.into(), e))?;
    let mut raw = Vec::new();
    GzDecoder::new(file)
        .read_to_end(&mut raw)
        .map_err(|e| DataError::Io(path.into(), e))?;
    let bad = |why: &str| DataError::Format(path.into(), why.to_string());
    if raw.len() < 4 || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 {
        return Err(bad("expected the magic number of unsigned-byte data"));
    }
    let rank = raw[3] as usize;
    let header = 4 + 4 * rank;
    if raw.len() < header {
        return Err(bad("truncated header"));
    }
    let dims: Vec<usize> = (0..rank)
        .map(|i| {
            u32::from_be_bytes(raw[4 + 4 * i..8 + 4 * i].try_into().expect("4 bytes")) as usize
        })
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad("dims overflow"))?;
    if raw.len() - header != expected {
        return Err(bad(&format!(
            "dims {dims:?} need {expected} bytes, found {}",
            raw.len() - header
        )));
    }
    Ok((dims, raw.split_off(header)))
}

/// Images as `[N, 784]` floats in [0, 1] and labels as int64 `[N]`.
pub fn load_split(dir: &Path, prefix: &str) -> Result<(Tensor, Tensor), DataError> {
    let (dims, pixels) = read_idx(&dir.join(format!("{prefix}-images-idx3-ubyte.gz")))?;
    let (ldims, labels) = read_idx(&dir.join(format!("{prefix}-labels-idx1-ubyte.gz")))?;
    if dims.len() != 3 || ldims.len() != 1 || dims[0] != ldims[0] {
        return Err(DataError::Format(
            dir.into(),
            format!("images {dims:?} and labels {ldims:?} disagree"),
        ));
    }
    let n = dims[0];
    let images = Tensor::from_vec(pixels, &[n, dims[1] * dims[2]]).to_dtype(DType::F32) / 255.0;
    let labels = Tensor::from_vec(labels.into_iter().map(i64::from).collect(), &[n]);
    Ok((images, labels))
}

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
