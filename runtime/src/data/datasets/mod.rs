//! Readers for real data sets, as `torchvision.datasets`: the IDX digit and clothing sets
//! ([`MNIST`], [`FashionMNIST`], [`KMNIST`]), [`CIFAR10`]/[`CIFAR100`] binary batches, a
//! folder of images per class ([`ImageFolder`], PNG/JPEG), a
//! text file as characters or bytes ([`TextDataset`]), numeric CSV ([`CsvDataset`]), and
//! arrays in safetensors or `.npy` files. Nothing is downloaded (there may be no
//! network): each reads from a given directory or from `$FERROGRAD_DATA/<name>`, and a
//! missing file is a [`DataError::NotFound`] saying where it
//! was looked for. Malformed files (truncated, wrong magic, absurd dimensions) are a
//! [`DataError::Format`] naming the file, never a panic, and
//! never allocate the size a corrupt header claims.

mod cifar;
mod folder;
mod idx;
mod tabular;
mod text;

pub use cifar::{CIFAR10, CIFAR100, Cifar100Label};
pub use folder::{IMG_EXTENSIONS, ImageFolder, ImageFolderOptions, decode_image, read_image};
pub use idx::{FashionMNIST, KMNIST, MNIST, read_idx};
pub use tabular::{CsvDataset, decode_npy, npy_dataset, read_npy, safetensors_dataset};
pub use text::TextDataset;

use super::DataError;
use ferrograd_kernels::cpu::{HostBuffer, bytes_to_unit};
use std::path::{Path, PathBuf};

/// `$FERROGRAD_DATA/<name>`, or an error saying the variable is unset.
///
/// ```
/// use ferrograd_runtime::data::datasets::data_root;
/// // SAFETY (test only): no other thread reads the environment here.
/// unsafe { std::env::set_var("FERROGRAD_DATA", "/data") };
/// assert_eq!(data_root("mnist").unwrap(), std::path::PathBuf::from("/data/mnist"));
/// ```
pub fn data_root(name: &str) -> Result<PathBuf, DataError> {
    match std::env::var_os("FERROGRAD_DATA") {
        Some(root) => Ok(PathBuf::from(root).join(name)),
        None => Err(DataError::NotFound {
            name: name.to_string(),
            path: PathBuf::from("$FERROGRAD_DATA (unset)"),
        }),
    }
}

/// The first of `names` that exists in `dir` or `dir/raw` (torchvision's layout).
fn find(dir: &Path, dataset: &str, names: &[String]) -> Result<PathBuf, DataError> {
    for sub in [dir.to_path_buf(), dir.join("raw")] {
        for name in names {
            let p = sub.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(DataError::NotFound {
        name: format!("{dataset} ({})", names.join(" or ")),
        path: dir.to_path_buf(),
    })
}

/// The pixel rows `row(i)` (each `row_len` bytes) for every `i` of `indices`, scaled to
/// `[0, 1]`, written straight into one pooled buffer: a loader batch costs one pass
/// over its pixels and no copy.
fn scaled_pixels<'a>(
    indices: &[usize],
    row_len: usize,
    row: impl Fn(usize) -> Result<&'a [u8], DataError>,
) -> Result<HostBuffer<f32>, DataError> {
    let mut out = HostBuffer::<f32>::new_uninit(indices.len() * row_len);
    if row_len > 0 {
        for (dst, &i) in out.chunks_exact_mut(row_len).zip(indices) {
            // Asserts that `row` returned a whole row.
            bytes_to_unit(row(i)?, dst);
        }
    }
    // SAFETY: the chunks of `row_len` slots tile the buffer (one per index) and
    // `bytes_to_unit` wrote each whole chunk (it asserts the row is as long).
    Ok(unsafe { out.assume_init() })
}
