//! Saving and loading state dicts as safetensors files (the format of Hugging Face and of
//! `safetensors.torch.save_file`), so weights move between ferrograd and PyTorch both
//! ways. Saving is atomic: the file is written beside its destination, flushed to disk
//! and renamed over it, so a crash mid-save leaves the previous file intact. Loading maps
//! the file into memory and converts each tensor to the module's dtype; a malformed or
//! hostile file (bad header length, offsets out of range or overlapping, sizes that do
//! not match the dtype and shape) is an `Err`, never a panic or an absurd allocation.
//!
//! Large models save as shards with an index ([`save_sharded`], the Hugging Face layout);
//! every reader here accepts the index in place of a single file. A training run saves
//! and resumes everything it needs with [`Checkpoint`].
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::checkpoint::{load_safetensors, save_safetensors};
//! use ferrograd_runtime::nn::Linear;
//! let path = std::env::temp_dir().join("ferrograd-doc-linear.safetensors");
//! let fc = Linear::new(3, 2, &Device::Cpu);
//! save_safetensors(&fc, &path).unwrap();
//! let mut other = Linear::new(3, 2, &Device::Cpu);
//! load_safetensors(&mut other, &path, true).unwrap();
//! assert_eq!(other.weight.to_vec::<f32>(), fc.weight.to_vec::<f32>());
//! ```

mod sharded;
mod stream;
mod training;

pub use sharded::{read_sharded, save_sharded};
pub use stream::SafetensorsFile;
pub use training::{Checkpoint, RankState};

use crate::nn::{LoadReport, Module, StateDict, StateDictError};
use crate::{DType, Tensor};
use safetensors::Dtype as S;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a checkpoint could not be saved or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file could not be created, written, renamed or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a valid safetensors file, or holds a dtype ferrograd lacks.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file's tensors do not fit the module (missing, unexpected or mis-shaped keys).
    #[error("{}: {source}", path.display())]
    StateDict {
        /// The file.
        path: PathBuf,
        /// Which keys.
        source: StateDictError,
    },
}

fn dtype_to_st(d: DType) -> S {
    match d {
        DType::F32 => S::F32,
        DType::F64 => S::F64,
        DType::F16 => S::F16,
        DType::BF16 => S::BF16,
        DType::I64 => S::I64,
        DType::U8 => S::U8,
        DType::Bool => S::BOOL,
    }
}

/// A tensor's elements as little-endian bytes, row-major.
pub(crate) fn le_bytes(t: &Tensor) -> Vec<u8> {
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec::<half::f16>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec::<half::bf16>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::U8 => t.to_vec::<u8>(),
        DType::Bool => t.to_vec::<bool>().into_iter().map(u8::from).collect(),
    }
}

/// Writes `state` to `path` as safetensors with optional string `metadata`, atomically
/// (a temporary file beside `path`, flushed and renamed over it). The header's
/// `__metadata__` carries `"format": "pt"` (unless `metadata` sets `format`), as
/// Hugging Face's `save_pretrained` writes it: `from_pretrained` refuses a file whose
/// metadata has no such format.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::{read_state_dict, save_state_dict};
/// use ferrograd_runtime::nn::StateDict;
/// let path = std::env::temp_dir().join("ferrograd-doc-state.safetensors");
/// let mut state = StateDict::new();
/// state.insert("step".into(), Tensor::from_vec(vec![7i64], &[]));
/// save_state_dict(&state, &path, None).unwrap();
/// assert_eq!(read_state_dict(&path).unwrap()["step"].item::<i64>(), 7);
/// ```
pub fn save_state_dict(
    state: &StateDict,
    path: impl AsRef<Path>,
    metadata: Option<HashMap<String, String>>,
) -> Result<(), CheckpointError> {
    let path = path.as_ref();
    let bytes = serialize(state, path, metadata)?;
    write_atomic(path, &bytes)
}

/// A state dict as the bytes of a safetensors file (what [`save_state_dict`] writes), for
/// a network answer or an in-memory store.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::{state_dict_from_bytes, state_dict_to_bytes};
/// use ferrograd_runtime::nn::StateDict;
/// let mut state = StateDict::new();
/// state.insert("x".into(), Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let bytes = state_dict_to_bytes(&state, None).unwrap();
/// assert_eq!(state_dict_from_bytes(&bytes).unwrap()["x"].to_vec::<f32>(), vec![1.0, 2.0]);
/// assert!(state_dict_from_bytes(b"not safetensors").is_err());
/// ```
pub fn state_dict_to_bytes(
    state: &StateDict,
    metadata: Option<HashMap<String, String>>,
) -> Result<Vec<u8>, CheckpointError> {
    serialize(state, Path::new("<bytes>"), metadata)
}

/// Reads the tensors of safetensors bytes (a request body, say): the same checks as
/// [`read_state_dict`], errors naming `<bytes>`.
pub fn state_dict_from_bytes(bytes: &[u8]) -> Result<StateDict, CheckpointError> {
    parse(bytes, Path::new("<bytes>"), |k| Some(k.to_string())).map(|(state, _)| state)
}

fn serialize(
    state: &StateDict,
    path: &Path,
    metadata: Option<HashMap<String, String>>,
) -> Result<Vec<u8>, CheckpointError> {
    let data: Vec<(String, Tensor, Vec<u8>)> = state
        .iter()
        .map(|(k, t)| (k.clone(), t.clone(), le_bytes(t)))
        .collect();
    let views = data
        .iter()
        .map(|(k, t, bytes)| {
            safetensors::tensor::TensorView::new(dtype_to_st(t.dtype()), t.shape().to_vec(), bytes)
                .map(|v| (k.as_str(), v))
                .map_err(|e| CheckpointError::Format {
                    path: path.to_path_buf(),
                    reason: format!("tensor {k:?}: {e}"),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut metadata = metadata.unwrap_or_default();
    metadata
        .entry("format".to_string())
        .or_insert_with(|| "pt".to_string());
    safetensors::serialize(views, Some(metadata)).map_err(|e| CheckpointError::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed to disk and
/// renamed over it (then the directory synced where it can be), so a crash mid-write
/// leaves the previous file intact; the temporary file is removed on failure.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // Make the rename itself durable where directories can be synced.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Saves `module`'s state dict (`torch.save(model.state_dict())` in safetensors form).
pub fn save_safetensors(
    module: &impl Module,
    path: impl AsRef<Path>,
) -> Result<(), CheckpointError> {
    save_state_dict(&module.state_dict(), path, None)
}

/// Reads every tensor of a safetensors file into a state dict (on the CPU, in the file's
/// dtypes), from a memory map of the file; given a sharded checkpoint's
/// `*.index.json`, reads every shard it lists.
pub fn read_state_dict(path: impl AsRef<Path>) -> Result<StateDict, CheckpointError> {
    read_state_dict_with(path, |k| Some(k.to_string()))
}

/// [`read_state_dict`] with a key-renaming hook: `rename(key)` gives the key to store
/// the tensor under, or `None` to skip it (for loading a checkpoint saved under another
/// prefix or naming scheme).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::{read_state_dict_with, save_state_dict};
/// use ferrograd_runtime::nn::StateDict;
/// let path = std::env::temp_dir().join("ferrograd-doc-rename.safetensors");
/// let mut state = StateDict::new();
/// state.insert("model.fc.weight".into(), Tensor::ones(&[2], DType::F32, &Device::Cpu));
/// state.insert("optimizer.step".into(), Tensor::ones(&[1], DType::F32, &Device::Cpu));
/// save_state_dict(&state, &path, None).unwrap();
/// let model = read_state_dict_with(&path, |k| k.strip_prefix("model.").map(str::to_string)).unwrap();
/// assert_eq!(model.keys().collect::<Vec<_>>(), ["fc.weight"]);
/// ```
pub fn read_state_dict_with(
    path: impl AsRef<Path>,
    rename: impl Fn(&str) -> Option<String>,
) -> Result<StateDict, CheckpointError> {
    let path = path.as_ref();
    if is_index(path) {
        return sharded::read_sharded_with(path, rename);
    }
    read_file(path, |k| rename(k)).map(|(state, _)| state)
}

/// Whether `path` names a sharded checkpoint's index (`*.index.json`).
fn is_index(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".index.json"))
}

/// Every tensor of one safetensors file that `rename` keeps, and the file's metadata.
pub(crate) fn read_file(
    path: &Path,
    rename: impl FnMut(&str) -> Option<String>,
) -> Result<(StateDict, HashMap<String, String>), CheckpointError> {
    let file = std::fs::File::open(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: the map is read-only and dropped before this function returns; every tensor
    // is copied out of it. A file truncated by another process while mapped could raise
    // SIGBUS, as with any memory-mapped reader (PyTorch's safetensors loader included);
    // checkpoints are not expected to change while they are being loaded.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&map, path, rename)
}

/// The tensors of safetensors `bytes` that `rename` keeps, and their metadata; errors name
/// `path`.
fn parse(
    map: &[u8],
    path: &Path,
    mut rename: impl FnMut(&str) -> Option<String>,
) -> Result<(StateDict, HashMap<String, String>), CheckpointError> {
    let bad = |reason: String| CheckpointError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(map)
        .map_err(|e| bad(format!("not a valid safetensors file: {e}")))?;
    let metadata = header.metadata().clone().unwrap_or_default();
    let st = safetensors::SafeTensors::deserialize(map)
        .map_err(|e| bad(format!("not a valid safetensors file: {e}")))?;
    // File order (by data offset), so that what is read, and which tensors an error
    // names, never depends on a hash map's order.
    let mut out = StateDict::new();
    let mut refused = Vec::new();
    for name in header.offset_keys() {
        let Some(key) = rename(&name) else { continue };
        let view = st
            .tensor(&name)
            .map_err(|e| bad(format!("tensor {name:?}: {e}")))?;
        match crate::tensor::tensor_from_view(&view) {
            Ok(t) => {
                out.insert(key, t);
            }
            Err(reason) => refused.push(format!("tensor {name:?}: {reason}")),
        }
    }
    if !refused.is_empty() {
        return Err(bad(refused.join("; ")));
    }
    Ok((out, metadata))
}

/// Loads a safetensors file into `module` (`model.load_state_dict(load_file(path),
/// strict)`): values converted to each tensor's dtype and device; with `strict`, missing
/// and unexpected keys are errors. On error the module is unchanged.
pub fn load_safetensors(
    module: &mut impl Module,
    path: impl AsRef<Path>,
    strict: bool,
) -> Result<LoadReport, CheckpointError> {
    load_safetensors_with(module, path, strict, |k| Some(k.to_string()))
}

/// [`load_safetensors`] with a key-renaming hook (see [`read_state_dict_with`]).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::{load_safetensors_with, save_state_dict};
/// use ferrograd_runtime::nn::{Linear, Module};
/// let path = std::env::temp_dir().join("ferrograd-doc-prefixed.safetensors");
/// let fc = Linear::new(2, 2, &Device::Cpu);
/// let prefixed = fc.state_dict().into_iter().map(|(k, v)| (format!("head.{k}"), v)).collect();
/// save_state_dict(&prefixed, &path, None).unwrap();
/// let mut other = Linear::new(2, 2, &Device::Cpu);
/// load_safetensors_with(&mut other, &path, true, |k| k.strip_prefix("head.").map(str::to_string)).unwrap();
/// assert_eq!(other.weight.to_vec::<f32>(), fc.weight.to_vec::<f32>());
/// ```
pub fn load_safetensors_with(
    module: &mut impl Module,
    path: impl AsRef<Path>,
    strict: bool,
    rename: impl Fn(&str) -> Option<String>,
) -> Result<LoadReport, CheckpointError> {
    let path = path.as_ref();
    let state = read_state_dict_with(path, rename)?;
    module
        .load_state_dict(&state, strict)
        .map_err(|source| CheckpointError::StateDict {
            path: path.to_path_buf(),
            source,
        })
}
