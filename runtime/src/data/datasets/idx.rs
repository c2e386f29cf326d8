//! IDX files (`MNIST`, `FashionMNIST`, `KMNIST`), gzipped or raw.

use super::super::{DataError, Dataset};
use super::{find, scaled_pixels};
use crate::{DType, Tensor};
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Reads an unsigned-byte IDX file (gzipped when it starts with gzip's magic): its dims
/// and its bytes, checked against each other. Never reads or allocates more than the
/// header's dims promise, and rejects dims whose product overflows.
///
/// A gzipped file is read as Python's `gzip` reads it: every member of a multi-member
/// stream (RFC 1952), zero padding after the last one ignored; a corrupt or cut-short
/// stream is an error naming the file.
///
/// ```
/// use ferrograd_runtime::data::datasets::read_idx;
/// let dir = std::env::temp_dir().join("ferrograd-doc-idx");
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("two.idx");
/// std::fs::write(&path, [0, 0, 8, 1, 0, 0, 0, 2, 7, 9]).unwrap();
/// assert_eq!(read_idx(&path).unwrap(), (vec![2], vec![7, 9]));
/// std::fs::write(&path, [0, 0, 8, 1, 0, 0, 0, 3, 7]).unwrap();
/// assert!(read_idx(&path).unwrap_err().to_string().contains("truncated"));
/// ```
pub fn read_idx(path: &Path) -> Result<(Vec<usize>, Vec<u8>), DataError> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut file = std::io::BufReader::new(file);
    let gzipped = file
        .fill_buf()
        .map_err(|e| DataError::io(path, e))?
        .starts_with(&GZIP_MAGIC);
    let mut reader: Box<dyn Read> = if gzipped {
        Box::new(GzipMembers::new(file))
    } else {
        Box::new(file)
    };
    let bad = |why: String| DataError::format(path, format!("not a valid IDX file: {why}"));
    let mut head = [0u8; 4];
    read_exact(&mut reader, &mut head, path, "truncated magic number")?;
    if head[0] != 0 || head[1] != 0 {
        return Err(bad(format!(
            "wrong magic number {:02x}{:02x}{:02x}{:02x}",
            head[0], head[1], head[2], head[3]
        )));
    }
    if head[2] != 0x08 {
        return Err(bad(format!(
            "element type 0x{:02x} is not unsigned bytes (0x08)",
            head[2]
        )));
    }
    let rank = head[3] as usize;
    if rank == 0 {
        return Err(bad("rank 0".into()));
    }
    let mut dims_raw = vec![0u8; 4 * rank];
    read_exact(&mut reader, &mut dims_raw, path, "truncated header")?;
    let dims: Vec<usize> = dims_raw
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize / 2)
        .ok_or_else(|| bad(format!("dims {dims:?} are too large")))?;
    // Read at most one byte past what the dims promise; the buffer only grows as bytes
    // actually arrive, so a lying header cannot make it allocate its claimed size.
    let mut data = Vec::new();
    // Short of the limit, `read_to_end` reads until the stream ends, so every gzip
    // member, trailer and checksum has been decoded by the time the length is checked.
    reader
        .take(expected as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| stream_error(path, e))?;
    if data.len() != expected {
        let what = if data.len() < expected {
            "truncated data"
        } else {
            "trailing bytes"
        };
        return Err(bad(format!(
            "{what}: dims {dims:?} need {expected} bytes, found {}{}",
            data.len().min(expected),
            if data.len() > expected { "+" } else { "" }
        )));
    }
    Ok((dims, data))
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A gzip stream's decompressed bytes, member after member, as Python's `gzip` reads
/// them: a member may follow another (RFC 1952 §2.2), zero bytes after the last are
/// padding, anything else after a member is an error.
struct GzipMembers<R: BufRead> {
    member: Option<flate2::bufread::GzDecoder<R>>,
}

impl<R: BufRead> GzipMembers<R> {
    fn new(reader: R) -> Self {
        GzipMembers {
            member: Some(flate2::bufread::GzDecoder::new(reader)),
        }
    }

    /// After a member: the next one, or `None` at the end of the stream (or of its zero
    /// padding).
    fn next_member(mut reader: R) -> std::io::Result<Option<flate2::bufread::GzDecoder<R>>> {
        loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(None);
            }
            if buf[0] != 0 {
                break;
            }
            // Zero padding: consume it; only zeros (or the end) may follow.
            let zeros = buf.iter().take_while(|&&b| b == 0).count();
            let all = zeros == buf.len();
            reader.consume(zeros);
            if !all {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "corrupt gzip stream: bytes after the zero padding that ends it",
                ));
            }
        }
        let buf = reader.fill_buf()?;
        if buf.len() >= 2 && buf[..2] == GZIP_MAGIC || buf == [GZIP_MAGIC[0]] {
            Ok(Some(flate2::bufread::GzDecoder::new(reader)))
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "corrupt gzip stream: the bytes after a member are not another member",
            ))
        }
    }
}

impl<R: BufRead> Read for GzipMembers<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while let Some(member) = self.member.as_mut() {
            let n = member.read(out).map_err(|e| {
                let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "truncated gzip stream: it ends before its end-of-stream marker".to_string()
                } else {
                    format!("corrupt gzip stream: {e}")
                };
                std::io::Error::new(std::io::ErrorKind::InvalidData, why)
            })?;
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            let done = self.member.take().expect("a member").into_inner();
            self.member = Self::next_member(done)?;
        }
        Ok(0)
    }
}

/// A read error of a (possibly gzipped) IDX stream: [`GzipMembers`]' complaints (a
/// corrupt or truncated gzip stream) are format errors, anything else the operating
/// system's.
fn stream_error(path: &Path, e: std::io::Error) -> DataError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        DataError::format(path, e.to_string())
    } else {
        DataError::io(path, e)
    }
}

fn read_exact(
    reader: &mut dyn Read,
    buf: &mut [u8],
    path: &Path,
    what: &str,
) -> Result<(), DataError> {
    reader.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            DataError::format(path, format!("not a valid IDX file: {what}"))
        } else {
            stream_error(path, e)
        }
    })
}

/// Images `[N, H, W]` and labels `[N]` of one IDX split, checked against each other.
#[derive(Clone)]
struct IdxSplit {
    pixels: Arc<Vec<u8>>,
    labels: Arc<Vec<u8>>,
    h: usize,
    w: usize,
}

impl IdxSplit {
    fn open(dir: &Path, dataset: &str, train: bool) -> Result<Self, DataError> {
        let prefix = if train { "train" } else { "t10k" };
        let names = |kind: &str| {
            let base = format!("{prefix}-{kind}");
            vec![format!("{base}.gz"), base]
        };
        let images_path = find(dir, dataset, &names("images-idx3-ubyte"))?;
        let labels_path = find(dir, dataset, &names("labels-idx1-ubyte"))?;
        Self::from_files(&images_path, &labels_path)
    }

    fn from_files(images_path: &Path, labels_path: &Path) -> Result<Self, DataError> {
        let (dims, pixels) = read_idx(images_path)?;
        let (ldims, labels) = read_idx(labels_path)?;
        if dims.len() != 3 {
            return Err(DataError::format(
                images_path,
                format!("expected images [N, H, W], found dims {dims:?}"),
            ));
        }
        if ldims != [dims[0]] {
            return Err(DataError::format(
                labels_path,
                format!(
                    "expected {} labels for the images in {}, found dims {ldims:?}",
                    dims[0],
                    images_path.display()
                ),
            ));
        }
        Ok(IdxSplit {
            pixels: Arc::new(pixels),
            labels: Arc::new(labels),
            h: dims[1],
            w: dims[2],
        })
    }

    fn len(&self) -> usize {
        self.labels.len()
    }

    fn get(&self, index: usize) -> Result<(Tensor, i64), DataError> {
        if index >= self.len() {
            return Err(DataError::IndexOutOfRange {
                index,
                len: self.len(),
            });
        }
        let plane = self.h * self.w;
        let px = scaled_pixels(&[index], plane, |i| {
            Ok(&self.pixels[i * plane..(i + 1) * plane])
        })?;
        Ok((
            Tensor::from_host(px, &[1, self.h, self.w]),
            self.labels[index] as i64,
        ))
    }

    /// The samples at `indices` as one batch: images `[B, 1, H, W]`, labels `[B]`.
    fn batch(&self, indices: &[usize]) -> Result<(Tensor, Tensor), DataError> {
        let plane = self.h * self.w;
        let mut labels = Vec::with_capacity(indices.len());
        for &index in indices {
            if index >= self.len() {
                return Err(DataError::IndexOutOfRange {
                    index,
                    len: self.len(),
                });
            }
            labels.push(self.labels[index] as i64);
        }
        let px = scaled_pixels(indices, plane, |i| {
            Ok(&self.pixels[i * plane..(i + 1) * plane])
        })?;
        let b = indices.len();
        Ok((
            Tensor::from_host(px, &[b, 1, self.h, self.w]),
            Tensor::from_vec(labels, &[b]),
        ))
    }

    fn tensors(&self) -> (Tensor, Tensor) {
        let n = self.len();
        let images = Tensor::from_slice(&self.pixels, &[n, 1, self.h, self.w])
            .to_dtype(DType::F32)
            .div_scalar(255.0);
        let labels = Tensor::from_vec(
            self.labels.iter().map(|&l| l as i64).collect::<Vec<i64>>(),
            &[n],
        );
        (images, labels)
    }
}

macro_rules! idx_dataset {
    ($name:ident, $dir:literal, $title:literal) => {
        #[doc = concat!("The ", $title, " set (`torchvision.datasets.", stringify!($name), "`) from its IDX files")]
        /// (`train-images-idx3-ubyte[.gz]`, `t10k-labels-idx1-ubyte[.gz]`, ... in `root` or
        /// `root/raw`). A sample is the image as `[1, H, W]` f32 in [0, 1] (torchvision's
        /// `ToTensor`) and its label.
        ///
        /// ```
        /// use ferrograd_runtime::data::Dataset;
        #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
        #[doc = concat!("let err = ", stringify!($name), "::new(\"/nonexistent\", true).err().unwrap();")]
        /// assert!(err.to_string().contains("does not download"));
        /// ```
        #[derive(Clone)]
        pub struct $name {
            split: IdxSplit,
        }

        impl $name {
            /// The training (`train`) or test split from the IDX files in `root`.
            pub fn new(root: impl AsRef<Path>, train: bool) -> Result<Self, DataError> {
                Ok($name {
                    split: IdxSplit::open(root.as_ref(), $title, train)?,
                })
            }

            /// The images and labels of two IDX files anywhere (raw or gzipped), checked
            /// against each other.
            ///
            /// ```
            #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
            /// let dir = std::env::temp_dir().join("ferrograd-doc-idx-files");
            /// std::fs::create_dir_all(&dir).unwrap();
            /// std::fs::write(dir.join("x.idx"), [0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 255]).unwrap();
            /// std::fs::write(dir.join("y.idx"), [0, 0, 8, 1, 0, 0, 0, 1, 7]).unwrap();
            #[doc = concat!("let d = ", stringify!($name), "::from_files(dir.join(\"x.idx\"), dir.join(\"y.idx\")).unwrap();")]
            /// use ferrograd_runtime::data::Dataset;
            /// let (x, y) = d.get(0).unwrap();
            /// assert_eq!((x.to_vec::<f32>(), y), (vec![0.0, 1.0], 7));
            /// ```
            pub fn from_files(
                images: impl AsRef<Path>,
                labels: impl AsRef<Path>,
            ) -> Result<Self, DataError> {
                Ok($name {
                    split: IdxSplit::from_files(images.as_ref(), labels.as_ref())?,
                })
            }

            #[doc = concat!("The split from `$FERROGRAD_DATA/", $dir, "`.")]
            ///
            /// ```
            #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
            #[doc = concat!("if let Ok(d) = ", stringify!($name), "::from_data_root(false) {")]
            ///     use ferrograd_runtime::data::Dataset;
            ///     assert_eq!(d.len(), 10_000);
            /// }
            /// ```
            pub fn from_data_root(train: bool) -> Result<Self, DataError> {
                Self::new(super::data_root($dir)?, train)
            }

            /// Every image as `[N, 1, H, W]` f32 in [0, 1] and every label as int64 `[N]`,
            /// in one go (for a [`TensorDataset`](crate::data::TensorDataset)).
            ///
            /// ```
            #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
            #[doc = concat!("if let Ok(d) = ", stringify!($name), "::from_data_root(false) {")]
            ///     let (x, y) = d.tensors();
            ///     assert_eq!((x.shape(), y.shape()), (&[10_000, 1, 28, 28][..], &[10_000][..]));
            /// }
            /// ```
            pub fn tensors(&self) -> (Tensor, Tensor) {
                self.split.tensors()
            }

            /// The path a data set of this kind is read from by default.
            ///
            /// ```
            #[doc = concat!("use ferrograd_runtime::data::datasets::", stringify!($name), ";")]
            #[doc = concat!("assert!(", stringify!($name), "::default_dir().is_ok() || std::env::var_os(\"FERROGRAD_DATA\").is_none());")]
            /// ```
            pub fn default_dir() -> Result<PathBuf, DataError> {
                super::data_root($dir)
            }
        }

        impl Dataset for $name {
            type Item = (Tensor, i64);
            fn len(&self) -> usize {
                self.split.len()
            }
            fn get(&self, index: usize) -> Result<(Tensor, i64), DataError> {
                self.split.get(index)
            }
            fn get_stacked(&self, indices: &[usize]) -> Option<Result<(Tensor, Tensor), DataError>> {
                Some(self.split.batch(indices))
            }
        }
    };
}

idx_dataset!(MNIST, "mnist", "MNIST");
idx_dataset!(FashionMNIST, "fashion-mnist", "Fashion-MNIST");
idx_dataset!(KMNIST, "kmnist", "KMNIST");
