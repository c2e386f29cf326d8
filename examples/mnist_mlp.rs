//! Trains a two-layer perceptron on MNIST with ferrograd's tensors and autograd.
//!
//! ```text
//! cargo run --release --example mnist_mlp            # bundled 2,000-image subset
//! cargo run --release --example mnist_mlp -- --full  # full set from $FERROGRAD_DATA or ../shared/data
//! ```

use ferrograd::prelude::*;
use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a data set could not be read.
#[derive(Debug)]
enum DataError {
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
fn read_idx(path: &Path) -> Result<(Vec<usize>, Vec<u8>), DataError> {
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
fn load_split(dir: &Path, prefix: &str) -> Result<(Tensor, Tensor), DataError> {
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

fn data_dir(full: bool) -> PathBuf {
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

/// PyTorch's default `nn.Linear` initialisation: U(-1/sqrt(in), 1/sqrt(in)).
fn linear_params(inputs: usize, outputs: usize) -> (Tensor, Tensor) {
    let bound = 1.0 / (inputs as f64).sqrt();
    let uniform = |shape: &[usize]| {
        (Tensor::rand(shape, DType::F32, &Device::Cpu) * (2.0 * bound) - bound).requires_grad(true)
    };
    (uniform(&[outputs, inputs]), uniform(&[outputs]))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let full = std::env::args().any(|a| a == "--full");
    let dir = data_dir(full);
    let (train_x, train_y) = load_split(&dir, "train")?;
    let (test_x, test_y) = load_split(&dir, "t10k")?;
    println!(
        "MNIST from {}: {} training and {} test images",
        dir.display(),
        train_x.size(0),
        test_x.size(0)
    );

    manual_seed(0);
    let (w1, b1) = linear_params(784, 128);
    let (w2, b2) = linear_params(128, 10);
    let params = [&w1, &b1, &w2, &b2];
    let forward = |x: &Tensor| F::linear(&F::linear(x, &w1, Some(&b1)).relu(), &w2, Some(&b2));

    let (epochs, batch, lr) = (if full { 3 } else { 8 }, 64, 0.1);
    let n = train_x.size(0);
    for epoch in 1..=epochs {
        let order = Tensor::randperm(n, &Device::Cpu);
        let bar = ProgressBar::new(n.div_ceil(batch) as u64)
            .with_style(
                ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} loss {msg}")
                    .expect("valid template"),
            )
            .with_prefix(epoch.to_string());
        let mut total = 0.0;
        for (step, start) in (0..n).step_by(batch).enumerate() {
            let idx = order.narrow(0, start, batch.min(n - start));
            let (x, y) = (train_x.index_select(0, &idx), train_y.index_select(0, &idx));
            let loss = F::cross_entropy(&forward(&x), &y);
            loss.backward();
            no_grad(|| {
                for p in params {
                    p.add_scaled_(&p.grad().expect("every parameter is used"), -lr);
                    p.zero_grad();
                }
            });
            total += loss.item::<f32>() as f64;
            bar.set_message(format!("{:.4}", total / (step + 1) as f64));
            bar.inc(1);
        }
        bar.finish();
        let accuracy = no_grad(|| {
            forward(&test_x)
                .argmax(1, false)
                .eq(&test_y)
                .to_dtype(DType::F32)
                .mean_all()
                .item::<f32>()
        });
        println!(
            "epoch {epoch}: mean loss {:.4}, test accuracy {:.2}%",
            total / n.div_ceil(batch) as f64,
            accuracy * 100.0
        );
    }
    Ok(())
}
