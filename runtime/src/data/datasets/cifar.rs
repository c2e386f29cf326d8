//! CIFAR-10 and CIFAR-100 binary batches.

use super::super::{DataError, Dataset};
use super::{find, scaled_pixels};
use crate::{DType, Tensor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const PIXELS: usize = 3 * 32 * 32;

/// Records of one byte per label kind and 3,072 pixel bytes, from each file in turn.
#[derive(Clone)]
struct Records {
    data: Arc<Vec<u8>>,
    label_bytes: usize,
    /// Which label byte is the label (CIFAR-100: 0 coarse, 1 fine).
    label_at: usize,
}

impl Records {
    /// Reads `files`, whose records start with one byte per entry of `labels` (its name
    /// and how many classes it has), each checked against its own range.
    fn read(
        files: &[std::path::PathBuf],
        labels: &[(&str, usize)],
        label_at: usize,
    ) -> Result<Self, DataError> {
        let label_bytes = labels.len();
        let record = label_bytes + PIXELS;
        let mut data = Vec::new();
        for path in files {
            let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
            if bytes.is_empty() || bytes.len() % record != 0 {
                return Err(DataError::format(
                    path,
                    format!(
                        "not a CIFAR binary batch: {} bytes is not a whole number of {record}-byte records",
                        bytes.len()
                    ),
                ));
            }
            for (r, rec) in bytes.chunks_exact(record).enumerate() {
                for (&l, &(kind, classes)) in rec.iter().zip(labels) {
                    if l as usize >= classes {
                        return Err(DataError::format(
                            path,
                            format!("record {r} has {kind} {l}, outside 0..{classes}"),
                        ));
                    }
                }
            }
            data.extend_from_slice(&bytes);
        }
        Ok(Records {
            data: Arc::new(data),
            label_bytes,
            label_at,
        })
    }

    /// Every record's label byte `at` as int64 `[N]`.
    fn labels(&self, at: usize) -> Tensor {
        let size = self.label_bytes + PIXELS;
        let labels: Vec<i64> = self.data.chunks_exact(size).map(|r| r[at] as i64).collect();
        let n = labels.len();
        Tensor::from_vec(labels, &[n])
    }

    fn len(&self) -> usize {
        self.data.len() / (self.label_bytes + PIXELS)
    }

    fn record(&self, index: usize) -> Result<&[u8], DataError> {
        if index >= self.len() {
            return Err(DataError::IndexOutOfRange {
                index,
                len: self.len(),
            });
        }
        let size = self.label_bytes + PIXELS;
        Ok(&self.data[index * size..(index + 1) * size])
    }

    fn get(&self, index: usize) -> Result<(Tensor, i64), DataError> {
        let r = self.record(index)?;
        let px = scaled_pixels(&[index], PIXELS, |_| Ok(&r[self.label_bytes..]))?;
        Ok((Tensor::from_host(px, &[3, 32, 32]), r[self.label_at] as i64))
    }

    fn batch(&self, indices: &[usize]) -> Result<(Tensor, Tensor), DataError> {
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            labels.push(self.record(i)?[self.label_at] as i64);
        }
        let px = scaled_pixels(
            indices,
            PIXELS,
            |i| Ok(&self.record(i)?[self.label_bytes..]),
        )?;
        let b = indices.len();
        Ok((
            Tensor::from_host(px, &[b, 3, 32, 32]),
            Tensor::from_vec(labels, &[b]),
        ))
    }

    fn tensors(&self) -> (Tensor, Tensor) {
        let n = self.len();
        let size = self.label_bytes + PIXELS;
        let mut px = Vec::with_capacity(n * PIXELS);
        let mut labels = Vec::with_capacity(n);
        for r in self.data.chunks_exact(size) {
            px.extend_from_slice(&r[self.label_bytes..]);
            labels.push(r[self.label_at] as i64);
        }
        (
            Tensor::from_vec(px, &[n, 3, 32, 32])
                .to_dtype(DType::F32)
                .div_scalar(255.0),
            Tensor::from_vec(labels, &[n]),
        )
    }
}

/// The files a CIFAR reader opens: `root` itself when it is a file, else the split's
/// files in `root`, `root/raw` or the directory the official archive unpacks to.
fn split_files(
    root: &Path,
    archive_dir: &str,
    dataset: &str,
    names: &[&str],
) -> Result<Vec<PathBuf>, DataError> {
    if root.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    let dir = [root.join(archive_dir), root.to_path_buf()]
        .into_iter()
        .find(|d| d.is_dir())
        .unwrap_or_else(|| root.to_path_buf());
    names
        .iter()
        .map(|n| find(&dir, dataset, &[n.to_string()]))
        .collect()
}

macro_rules! cifar {
    ($name:ident, $dir:literal, $doc:literal, $train:expr, $test:expr, $labels:expr, $label_at:expr) => {
        #[doc = $doc]
        ///
        /// A sample is the image as `[3, 32, 32]` f32 in [0, 1] and its label.
        ///
        /// ```
        #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
        #[doc = concat!("assert!(", stringify!($name), "::new(\"/nonexistent\", true).is_err());")]
        /// ```
        #[derive(Clone)]
        pub struct $name {
            records: Records,
        }

        impl $name {
            /// The training (`train`) or test batches in `root` (or `root/raw`, or the
            /// directory the official archive unpacks to); `root` may also be one batch
            /// file, read whatever `train` says.
            pub fn new(root: impl AsRef<Path>, train: bool) -> Result<Self, DataError> {
                let names: &[&str] = if train { &$train } else { &$test };
                let files = split_files(root.as_ref(), $dir, stringify!($name), names)?;
                Self::from_files(&files)
            }

            /// The records of `files`, in order (any batch files of this format).
            ///
            /// ```
            #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
            #[doc = concat!("assert!(", stringify!($name), "::from_files(&[\"/nonexistent.bin\"]).is_err());")]
            /// ```
            pub fn from_files(files: &[impl AsRef<Path>]) -> Result<Self, DataError> {
                let files: Vec<PathBuf> = files.iter().map(|f| f.as_ref().to_path_buf()).collect();
                Ok($name {
                    records: Records::read(&files, &$labels, $label_at)?,
                })
            }

            /// Every image as `[N, 3, 32, 32]` f32 in [0, 1] and every label as `[N]`.
            ///
            /// ```
            #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
            #[doc = concat!("if let Ok(d) = ", stringify!($name), "::new(\"/data\", false) { assert_eq!(d.tensors().0.shape()[1..], [3, 32, 32]); }")]
            /// ```
            pub fn tensors(&self) -> (Tensor, Tensor) {
                self.records.tensors()
            }
        }

        impl Dataset for $name {
            type Item = (Tensor, i64);
            fn len(&self) -> usize {
                self.records.len()
            }
            fn get(&self, index: usize) -> Result<(Tensor, i64), DataError> {
                self.records.get(index)
            }
            fn get_stacked(&self, indices: &[usize]) -> Option<Result<(Tensor, Tensor), DataError>> {
                Some(self.records.batch(indices))
            }
        }
    };
}

cifar!(
    CIFAR10,
    "cifar-10-batches-bin",
    "CIFAR-10 (`torchvision.datasets.CIFAR10`) from its binary batches (`data_batch_1.bin` ... `data_batch_5.bin`, `test_batch.bin`).",
    [
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin"
    ],
    ["test_batch.bin"],
    [("label", 10)],
    0
);
cifar!(
    CIFAR100,
    "cifar-100-binary",
    "CIFAR-100 (`torchvision.datasets.CIFAR100`) from its binary files (`train.bin`, `test.bin`): each record carries a coarse label (20 superclasses) and a fine one (100 classes), both checked; samples carry the fine label (torchvision's) unless [`CIFAR100::target_type`] picks the coarse one, and [`CIFAR100::targets`] gives either for every record.",
    ["train.bin"],
    ["test.bin"],
    [("coarse label", 20), ("fine label", 100)],
    1
);

/// Which CIFAR-100 label a sample carries: the fine class (0..100, torchvision's) or the
/// coarse superclass (0..20).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Cifar100Label {
    /// One of the 100 classes.
    #[default]
    Fine,
    /// One of the 20 superclasses.
    Coarse,
}

impl Cifar100Label {
    fn byte(self) -> usize {
        match self {
            Cifar100Label::Coarse => 0,
            Cifar100Label::Fine => 1,
        }
    }
}

impl CIFAR100 {
    /// The same records with samples (and batches, and [`tensors`](Self::tensors))
    /// carrying the `label` kind.
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::{Cifar100Label, CIFAR100};
    /// let path = std::env::temp_dir().join("ferrograd-doc-cifar100.bin");
    /// let mut record = vec![7u8, 42]; // coarse 7, fine 42
    /// record.resize(2 + 3 * 32 * 32, 0);
    /// std::fs::write(&path, &record).unwrap();
    /// use ferrograd_runtime::data::Dataset;
    /// let fine = CIFAR100::new(&path, true).unwrap();
    /// assert_eq!(fine.get(0).unwrap().1, 42);
    /// let coarse = fine.target_type(Cifar100Label::Coarse);
    /// assert_eq!(coarse.get(0).unwrap().1, 7);
    /// ```
    pub fn target_type(mut self, label: Cifar100Label) -> Self {
        self.records.label_at = label.byte();
        self
    }

    /// Every record's `label` as int64 `[N]` (both kinds of one record share an index).
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::{Cifar100Label, CIFAR100};
    /// let path = std::env::temp_dir().join("ferrograd-doc-cifar100-targets.bin");
    /// let mut records = vec![0u8; 2 * (2 + 3 * 32 * 32)];
    /// records[..2].copy_from_slice(&[3, 30]);
    /// records[2 + 3 * 32 * 32..][..2].copy_from_slice(&[19, 99]);
    /// std::fs::write(&path, &records).unwrap();
    /// let d = CIFAR100::new(&path, false).unwrap();
    /// assert_eq!(d.targets(Cifar100Label::Coarse).to_vec::<i64>(), vec![3, 19]);
    /// assert_eq!(d.targets(Cifar100Label::Fine).to_vec::<i64>(), vec![30, 99]);
    /// ```
    pub fn targets(&self, label: Cifar100Label) -> Tensor {
        self.records.labels(label.byte())
    }
}
