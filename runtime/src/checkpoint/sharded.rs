//! Sharded checkpoints (the Hugging Face layout): `model-00001-of-00003.safetensors`, …
//! beside `model.safetensors.index.json`, whose `weight_map` names each tensor's shard.

use super::{CheckpointError, read_file, save_state_dict, write_atomic};
use crate::nn::StateDict;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Saves `state` in `dir` as shards of at most `max_shard_bytes` of tensor data each
/// (a larger tensor gets a shard of its own), named `{prefix}-0000i-of-0000n.safetensors`,
/// and the index `{prefix}.safetensors.index.json` (`{"metadata": {"total_size": …},
/// "weight_map": {key: shard}}`). Each file is written atomically, the index last.
/// Returns the index's path.
///
/// # Errors
/// [`CheckpointError::Io`] when `dir` cannot be written.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::checkpoint::{read_state_dict, save_sharded};
/// use ferrograd_runtime::nn::StateDict;
/// let dir = std::env::temp_dir().join("ferrograd-doc-shards");
/// std::fs::create_dir_all(&dir).unwrap();
/// let mut state = StateDict::new();
/// for i in 0..3 {
///     state.insert(format!("layers.{i}.weight"), Tensor::ones(&[64], DType::F32, &Device::Cpu));
/// }
/// let index = save_sharded(&state, &dir, "model", 300).unwrap(); // 256 bytes per tensor
/// assert!(dir.join("model-00003-of-00003.safetensors").exists());
/// assert_eq!(read_state_dict(&index).unwrap().len(), 3);
/// ```
pub fn save_sharded(
    state: &StateDict,
    dir: impl AsRef<Path>,
    prefix: &str,
    max_shard_bytes: usize,
) -> Result<PathBuf, CheckpointError> {
    let dir = dir.as_ref();
    let bytes_of = |t: &crate::Tensor| t.numel() * t.dtype().size_in_bytes();
    let mut shards: Vec<StateDict> = Vec::new();
    let mut current = StateDict::new();
    let mut current_bytes = 0;
    for (k, t) in state {
        let n = bytes_of(t);
        if !current.is_empty() && current_bytes + n > max_shard_bytes {
            shards.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
        current.insert(k.clone(), t.clone());
        current_bytes += n;
    }
    if !current.is_empty() || shards.is_empty() {
        shards.push(current);
    }
    let total = shards.len();
    let mut weight_map = serde_json::Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let name = format!("{prefix}-{:05}-of-{total:05}.safetensors", i + 1);
        save_state_dict(shard, dir.join(&name), None)?;
        for k in shard.keys() {
            weight_map.insert(k.clone(), serde_json::Value::String(name.clone()));
        }
    }
    let total_size: usize = state.values().map(bytes_of).sum();
    let index = serde_json::json!({
        "metadata": {"total_size": total_size},
        "weight_map": weight_map,
    });
    let path = dir.join(format!("{prefix}.safetensors.index.json"));
    write_atomic(&path, index.to_string().as_bytes())?;
    Ok(path)
}

/// Reads every tensor a sharded checkpoint's index lists (see [`save_sharded`]; also
/// the `*.safetensors.index.json` of Hugging Face models).
///
/// # Errors
/// [`CheckpointError::Format`] for an index that is not JSON with a `weight_map` of
/// plain shard file names (no paths: an index cannot reach outside its directory), or a
/// shard lacking a tensor the index gives it; [`CheckpointError::Io`] for a missing shard.
pub fn read_sharded(index: impl AsRef<Path>) -> Result<StateDict, CheckpointError> {
    read_sharded_with(index, |k| Some(k.to_string()))
}

pub(crate) fn read_sharded_with(
    index: impl AsRef<Path>,
    rename: impl Fn(&str) -> Option<String>,
) -> Result<StateDict, CheckpointError> {
    let index = index.as_ref();
    let bad = |reason: String| CheckpointError::Format {
        path: index.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(index).map_err(|source| CheckpointError::Io {
        path: index.to_path_buf(),
        source,
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no weight_map object".into()))?;
    let mut by_shard: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("weight_map[{key:?}] is not a file name")))?;
        let plain = !file.is_empty()
            && file != "."
            && file != ".."
            && !file.contains(['/', '\\'])
            && Path::new(file).file_name().is_some_and(|n| n == file);
        if !plain {
            return Err(bad(format!(
                "weight_map[{key:?}] = {file:?} is not a file name beside the index"
            )));
        }
        by_shard
            .entry(file.to_string())
            .or_default()
            .push(key.clone());
    }
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut out = StateDict::new();
    for (file, keys) in by_shard {
        let wanted: HashMap<&str, Option<String>> =
            keys.iter().map(|k| (k.as_str(), rename(k))).collect();
        let path = dir.join(&file);
        let (state, _) = read_file(&path, |k| wanted.get(k).cloned().flatten())?;
        for k in &keys {
            if let Some(Some(new)) = wanted.get(k.as_str())
                && !state.contains_key(new)
            {
                return Err(CheckpointError::Format {
                    path,
                    reason: format!("the index puts {k:?} here, but the shard lacks it"),
                });
            }
        }
        out.extend(state);
    }
    Ok(out)
}
