//! CIFAR-10 and CIFAR-100 binary batches.

use super::super::{DataError, Dataset};
use super::{find, scaled_pixels};
use crate::{DType, Tensor};
use std::path::Path;
use std::sync::Arc;

const PIXELS: usize = 3 * 32 * 32;

/// Records of `label_bytes` label bytes and 3,072 pixel bytes, from each file in turn.
#[derive(Clone)]
struct Records {
    data: Arc<Vec<u8>>,
    label_bytes: usize,
    /// Which label byte is the label (CIFAR-100: 0 coarse, 1 fine).
    label_at: usize,
}

impl Records {
    fn read(
        files: &[std::path::PathBuf],
        label_bytes: usize,
        label_at: usize,
    ) -> Result<Self, DataError> {
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
            let classes = if label_bytes == 1 { 10 } else { 100 };
            if let Some(bad) = bytes
                .chunks_exact(record)
                .position(|r| r[..label_bytes].iter().any(|&l| l as usize >= classes))
            {
                return Err(DataError::format(
                    path,
                    format!("record {bad} has a label outside 0..{classes}"),
                ));
            }
            data.extend_from_slice(&bytes);
        }
        Ok(Records {
            data: Arc::new(data),
            label_bytes,
            label_at,
        })
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

macro_rules! cifar {
    ($name:ident, $dir:literal, $doc:literal, $train:expr, $test:expr, $label_bytes:expr, $label_at:expr) => {
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
            /// directory the official archive unpacks to).
            pub fn new(root: impl AsRef<Path>, train: bool) -> Result<Self, DataError> {
                let root = root.as_ref();
                let dir = [root.join($dir), root.to_path_buf()]
                    .into_iter()
                    .find(|d| d.is_dir())
                    .unwrap_or_else(|| root.to_path_buf());
                let names: &[&str] = if train { &$train } else { &$test };
                let files = names
                    .iter()
                    .map(|n| find(&dir, stringify!($name), &[n.to_string()]))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok($name {
                    records: Records::read(&files, $label_bytes, $label_at)?,
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
    1,
    0
);
cifar!(
    CIFAR100,
    "cifar-100-binary",
    "CIFAR-100 (`torchvision.datasets.CIFAR100`) from its binary files (`train.bin`, `test.bin`), with the fine labels.",
    ["train.bin"],
    ["test.bin"],
    2,
    1
);
