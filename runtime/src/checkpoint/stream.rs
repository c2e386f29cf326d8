//! One tensor at a time from a safetensors file, for loading models larger than the
//! memory left beside them: the file is mapped, its header read, and each tensor copied
//! out in chunks whose mapped pages are released as soon as they are copied, so a
//! loader holds what it has loaded plus one chunk.

use super::CheckpointError;
use crate::Tensor;
use ferrograd_kernels::Element;
use ferrograd_kernels::cpu::HostBuffer;
use std::path::{Path, PathBuf};

/// Bytes copied between releases of mapped pages.
const CHUNK: usize = 4 << 20;

/// One entry of the header: dtype, shape, and the data's byte range in the file.
struct Entry {
    name: String,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    range: (usize, usize),
}

/// A safetensors file opened for reading tensor by tensor
/// (`safetensors.safe_open(path, "pt")`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::{SafetensorsFile, save_state_dict};
/// use ferrograd_runtime::nn::StateDict;
/// let path = std::env::temp_dir().join("ferrograd-doc-stream.safetensors");
/// let mut state = StateDict::new();
/// state.insert("w".into(), Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]));
/// save_state_dict(&state, &path, None).unwrap();
/// let file = SafetensorsFile::open(&path).unwrap();
/// assert_eq!(file.shape("w"), Some(&[3usize][..]));
/// assert_eq!(file.read("w").unwrap().to_vec::<f32>(), [1.0, 2.0, 3.0]);
/// assert!(file.read("v").is_err());
/// ```
pub struct SafetensorsFile {
    path: PathBuf,
    map: memmap2::Mmap,
    entries: Vec<Entry>,
}

impl SafetensorsFile {
    /// Maps `path` and reads its header (validated: offsets in bounds, contiguous, no
    /// overlap), reading no tensor data.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile, CheckpointError> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|source| CheckpointError::Io {
            path: path.clone(),
            source,
        })?;
        // SAFETY: the map is read-only; tensors are copied out of it. A file truncated by
        // another process while mapped could raise SIGBUS, as with any memory-mapped
        // reader (PyTorch's safetensors loader included).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| CheckpointError::Io {
            path: path.clone(),
            source,
        })?;
        let bad = |e: safetensors::SafeTensorError| CheckpointError::Format {
            path: path.clone(),
            reason: format!("not a valid safetensors file: {e}"),
        };
        // `deserialize` validates every tensor's offsets against the data's length.
        safetensors::SafeTensors::deserialize(&map).map_err(bad)?;
        let (n, header) = safetensors::SafeTensors::read_metadata(&map).map_err(bad)?;
        let start = 8 + n;
        let mut entries = Vec::new();
        for name in header.offset_keys() {
            let Some(info) = header.info(&name) else {
                continue;
            };
            entries.push(Entry {
                range: (start + info.data_offsets.0, start + info.data_offsets.1),
                dtype: info.dtype,
                shape: info.shape.clone(),
                name,
            });
        }
        Ok(SafetensorsFile { path, map, entries })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor's name, in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// The shape of `name`, if the file has it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entry(name).map(|e| e.shape.as_slice())
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// Reads `name` into a new CPU tensor (dtypes as [`super::read_state_dict`] reads
    /// them), releasing the mapped pages it read.
    pub fn read(&self, name: &str) -> Result<Tensor, CheckpointError> {
        let bad = |reason: String| CheckpointError::Format {
            path: self.path.clone(),
            reason,
        };
        let e = self
            .entry(name)
            .ok_or_else(|| bad(format!("no tensor {name:?}")))?;
        let data = &self.map[e.range.0..e.range.1];
        use safetensors::Dtype as S;
        let at = e.range.0;
        let t = match e.dtype {
            S::F32 if cfg!(target_endian = "little") => self.copy::<f32>(data, &e.shape, at),
            S::F64 if cfg!(target_endian = "little") => self.copy::<f64>(data, &e.shape, at),
            S::F16 if cfg!(target_endian = "little") => self.copy::<half::f16>(data, &e.shape, at),
            S::BF16 if cfg!(target_endian = "little") => {
                self.copy::<half::bf16>(data, &e.shape, at)
            }
            S::I64 if cfg!(target_endian = "little") => self.copy::<i64>(data, &e.shape, at),
            S::U8 => self.copy::<u8>(data, &e.shape, at),
            // Widened or converted (and every dtype on a big-endian target).
            _ => {
                let view = safetensors::tensor::TensorView::new(e.dtype, e.shape.clone(), data)
                    .map_err(|err| bad(format!("tensor {name:?}: {err}")))?;
                let t = crate::tensor::tensor_from_view(&view)
                    .map_err(|reason| bad(format!("tensor {name:?}: {reason}")))?;
                self.release(at, data.len());
                t
            }
        };
        Ok(t)
    }

    /// Copies the little-endian elements of `T` in `data` (at `offset` in the file) into
    /// a new tensor, a chunk at a time, releasing each chunk's pages (little-endian
    /// targets only: `read` converts on big-endian ones).
    fn copy<T: Element>(&self, data: &[u8], shape: &[usize], offset: usize) -> Tensor {
        let size = std::mem::size_of::<T>();
        let n = data.len() / size;
        let mut out = HostBuffer::<T>::new_uninit(n);
        let per_chunk = (CHUNK / size).max(1);
        for (k, slots) in out.chunks_mut(per_chunk).enumerate() {
            let bytes = &data[k * per_chunk * size..][..slots.len() * size];
            // SAFETY: `slots` is `slots.len()` writable elements of `T`, that is
            // `bytes.len()` bytes, disjoint from the mapped file; the bytes are the
            // elements' little-endian (native) representation, a valid value of every
            // element type read here (floats, i64, u8).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    slots.as_mut_ptr().cast::<u8>(),
                    bytes.len(),
                );
            }
            self.release(offset + k * per_chunk * size, bytes.len());
        }
        // SAFETY: every slot was written: the chunks cover `out`, and the header's byte
        // length was validated as the element count times the element size.
        let out = unsafe { out.assume_init() };
        Tensor::from_host(out, shape)
    }

    /// Drops the mapped pages of `len` bytes at `offset` from the process (they stay in
    /// the page cache; reading them again faults them back in from the file).
    fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        {
            const PAGE: usize = 4096;
            let start = offset / PAGE * PAGE;
            let end = (offset + len).min(self.map.len());
            if end > start {
                // SAFETY: the map is a read-only shared file mapping: MADV_DONTNEED only
                // drops resident pages, and a later read faults the file's unchanged
                // bytes back in; no reference into the dropped range outlives this call's
                // callers' copies (every tensor is copied out first).
                let _ = unsafe {
                    self.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }
}
