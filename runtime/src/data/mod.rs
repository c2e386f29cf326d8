//! Data loading, as `torch.utils.data`: map-style [`Dataset`]s (and
//! [`IterableDataset`]s), [`samplers`](Sampler) for the order, and a [`DataLoader`] that
//! batches samples with a [`Collate`] function on worker threads, delivering batches in
//! order and reproducibly under a seed whatever the number of workers. Readers for real
//! formats live in [`datasets`].
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::data::{DataLoader, TensorDataset};
//! let x = Tensor::randn(&[10, 3], DType::F32, &Device::Cpu);
//! let y = Tensor::arange(0.0, 10.0, 1.0, DType::F32, &Device::Cpu);
//! let mut loader = DataLoader::builder(TensorDataset::new((x, y)))
//!     .batch_size(4)
//!     .shuffle(true)
//!     .seed(7)
//!     .build();
//! assert_eq!(loader.len(), 3);
//! for batch in loader.iter() {
//!     let (xb, yb) = batch.unwrap();
//!     assert_eq!(xb.shape()[1], 3);
//!     assert_eq!(xb.shape()[0], yb.shape()[0]);
//! }
//! ```

mod collate;
mod dataset;
pub mod datasets;
mod loader;
mod rng;
mod sampler;
pub mod transforms;

pub use collate::{Collate, DefaultCollate, Stack};
pub use dataset::{
    ConcatDataset, Dataset, IterableDataset, Map, Subset, TensorDataset, TensorRows, random_split,
};
pub use loader::{Batches, DataLoader, DataLoaderBuilder, LoaderState};
pub use rng::with_sample_rng;
pub use sampler::{
    BatchSampler, DistributedSampler, RandomSampler, Sampler, SequentialSampler,
    WeightedRandomSampler,
};

use std::path::PathBuf;

/// Why data could not be read or a sample could not be produced.
///
/// ```
/// use ferrograd_runtime::data::DataError;
/// let e = DataError::Format { path: "x.idx".into(), reason: "bad magic".into() };
/// assert_eq!(e.to_string(), "x.idx: bad magic");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file's contents are malformed (truncated, wrong magic, absurd dimensions, ...).
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A data set's files are not where they were looked for; nothing is downloaded.
    #[error(
        "{name} not found at {}: ferrograd does not download data sets (there may be no network); place the files there or set $FERROGRAD_DATA",
        path.display()
    )]
    NotFound {
        /// The data set.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// An index beyond the data set.
    #[error("index {index} is out of range for a data set of {len} samples")]
    IndexOutOfRange {
        /// The index asked for.
        index: usize,
        /// The data set's length.
        len: usize,
    },
    /// A sample failed in the data set, a transform or the collate function (its own
    /// error or a panic, caught on the worker).
    #[error("sample {index}: {message}")]
    Sample {
        /// The sample's index in the data set.
        index: usize,
        /// What went wrong.
        message: String,
    },
    /// Samples that cannot be batched together (different shapes, lengths, keys).
    #[error("collate: {0}")]
    Collate(String),
    /// Invalid arguments to a data utility (split lengths, sampler weights, ...).
    #[error("{0}")]
    Invalid(String),
}

impl DataError {
    pub(crate) fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        DataError::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            source,
        }
    }
}
