//! A local Hugging Face model folder: its `config.json` and its weights.
//!
//! [`load_weights`] fills a module whose parameter names are the checkpoint's own
//! (`encoder.layer.0.attention.self.query.weight`): every key and shape is checked from
//! the headers first, then each tensor is read from the memory-mapped safetensors
//! file(s), converted to the module's device (and, on request, to another dtype) and
//! moved into the module, one at a time, so loading a model built under
//! `nn::init::skip_init` holds about the checkpoint's size.

use crate::ModelError;
use ferrograd::DType;
use ferrograd::checkpoint::SafetensorsFile;
use ferrograd::nn::{Module, TensorKind};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Reads and deserialises a JSON file.
///
/// ```
/// # let dir = std::env::temp_dir().join("ferrograd-doc-read-json");
/// # std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("c.json"), r#"{"hidden_size": 8}"#).unwrap();
/// let v: serde_json::Value = ferrograd_models::hub::read_json(dir.join("c.json")).unwrap();
/// assert_eq!(v["hidden_size"], 8);
/// assert!(ferrograd_models::hub::read_json::<serde_json::Value>(dir.join("none.json")).is_err());
/// ```
pub fn read_json<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T, ModelError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ModelError::Config {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// `dir/config.json`, deserialised as the family's config.
pub fn read_config<T: DeserializeOwned>(dir: impl AsRef<Path>) -> Result<T, ModelError> {
    read_json(dir.as_ref().join("config.json"))
}

/// The weights of a folder: `model.safetensors`, else the index of a sharded checkpoint
/// (`model.safetensors.index.json`, which names its shards); an `Err` saying what was
/// found instead (`pytorch_model.bin` is not read: convert it with `safetensors`). A
/// path to a file is that file (a `.safetensors` state dict, or an index).
///
/// ```
/// let dir = std::env::temp_dir().join("ferrograd-doc-no-weights");
/// std::fs::create_dir_all(&dir).unwrap();
/// assert!(ferrograd_models::hub::weights_file(&dir).is_err());
/// ```
pub fn weights_file(dir: impl AsRef<Path>) -> Result<PathBuf, ModelError> {
    let dir = dir.as_ref();
    if dir.is_file() {
        // A weights file itself (a torchvision state dict saved with `save_file`).
        return Ok(dir.to_path_buf());
    }
    for name in ["model.safetensors", "model.safetensors.index.json"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    let hint = if dir.join("pytorch_model.bin").is_file() {
        " (found pytorch_model.bin, a pickle: save it with safetensors first)".to_string()
    } else if !dir.is_dir() {
        " (the folder does not exist)".to_string()
    } else {
        String::new()
    };
    Err(ModelError::NoWeights {
        dir: dir.to_path_buf(),
        hint,
    })
}

/// The dtype floating-point weights are loaded in (transformers' `torch_dtype`).
/// `from_pretrained_with` takes it or anything that converts: `None` (the module's),
/// `Some(DType::BF16)` or `DType::BF16` (converted), `LoadDType::Checkpoint` (kept).
///
/// ```
/// use ferrograd::DType;
/// use ferrograd_models::hub::LoadDType;
/// assert_eq!(LoadDType::from(None), LoadDType::Module);
/// assert_eq!(LoadDType::from(DType::F16), LoadDType::To(DType::F16));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadDType {
    /// The module's dtype (f32 as built): `torch_dtype=None`.
    #[default]
    Module,
    /// The checkpoint's own, tensor by tensor (an f16 or bf16 file stays so, holding
    /// half the memory of f32; `torch_dtype="auto"`).
    Checkpoint,
    /// Converted to this dtype (`torch_dtype=torch.bfloat16`).
    To(DType),
}

impl From<DType> for LoadDType {
    fn from(d: DType) -> Self {
        LoadDType::To(d)
    }
}

impl From<Option<DType>> for LoadDType {
    fn from(d: Option<DType>) -> Self {
        d.map_or(LoadDType::Module, LoadDType::To)
    }
}

/// How checkpoint tensors map onto a module.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The dtype of the loaded floating-point weights.
    pub dtype: LoadDType,
    /// Prefixes a checkpoint's keys may have that the module's lack (`bert.` in a
    /// `BertForSequenceClassification` file), or lack where the module's have them
    /// (`transformer.` in a bare `GPT2Model` file), tried in turn for a key the module
    /// lacks.
    pub prefixes: Vec<String>,
}

/// Builds a module with `build` under `nn::init::skip_init` (no random weights: the
/// checkpoint's replace them), loads the folder `dir` into it with `options`, and puts
/// it in eval mode: `from_pretrained` of every family.
pub fn build_and_load<M: Module>(
    dir: &Path,
    options: &LoadOptions,
    build: impl FnOnce() -> M,
) -> Result<(M, Loaded), ModelError> {
    let mut model = ferrograd::nn::init::skip_init(build);
    let loaded = load_weights(&mut model, dir, options)?;
    model.eval();
    Ok((model, loaded))
}

/// What [`load_weights`] did.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The weights file read.
    pub path: PathBuf,
    /// Checkpoint keys the module has no use for (a task head, `position_ids`), in file
    /// order.
    pub unused: Vec<String>,
    /// The number of tensors loaded.
    pub loaded: usize,
}

/// Loads the weights of the folder `dir` into `module`, whose keys are the checkpoint's
/// (after `options.prefixes`): every parameter and buffer must be found, with its shape;
/// extra checkpoint tensors are listed in [`Loaded::unused`]. Each tensor is moved into
/// the module (on the module's device, in the module's dtype or `options.dtype`), and a
/// parameter keeps `requires_grad`. On a read, key or shape error the module is
/// unchanged.
pub fn load_weights(
    module: &mut impl Module,
    dir: impl AsRef<Path>,
    options: &LoadOptions,
) -> Result<Loaded, ModelError> {
    let path = weights_file(&dir)?;
    let files = open_files(&path)?;
    let mut own: Vec<(String, Vec<usize>)> = Vec::new();
    module.visit("", &mut |name, t, _| {
        own.push((name.to_string(), t.shape().to_vec()));
    });
    let own_keys: HashMap<&str, usize> = own
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.as_str(), i))
        .collect();
    let wanted = |k: &str| own_keys.contains_key(k);
    // Module key -> (file, checkpoint key), from the headers only.
    let mut source: HashMap<String, (usize, String)> = HashMap::new();
    let mut unused = Vec::new();
    for (f, file) in files.iter().enumerate() {
        for k in file.keys() {
            let key = if wanted(k) {
                Some(k.to_string())
            } else {
                options.prefixes.iter().find_map(|p| {
                    // `bert.embeddings..` in a task model's file for `embeddings..`, or
                    // `h.0..` in a bare `GPT2Model` file for `transformer.h.0..`.
                    if let Some(rest) = k.strip_prefix(p.as_str())
                        && wanted(rest)
                    {
                        return Some(rest.to_string());
                    }
                    let longer = format!("{p}{k}");
                    wanted(&longer).then_some(longer)
                })
            };
            match key {
                Some(key) => {
                    source.insert(key, (f, k.to_string()));
                }
                None => unused.push(k.to_string()),
            }
        }
    }
    // Check every key and shape before touching the module.
    let mut missing = Vec::new();
    let mut sorted: Vec<&(String, Vec<usize>)> = own.iter().collect();
    sorted.sort();
    for (key, shape) in sorted {
        let Some((f, k)) = source.get(key) else {
            missing.push(key.clone());
            continue;
        };
        let stored = files[*f].shape(k).unwrap_or(&[]).to_vec();
        if &stored != shape {
            return Err(ModelError::Shape {
                path: files[*f].path().to_path_buf(),
                key: key.clone(),
                expected: shape.clone(),
                found: stored,
            });
        }
    }
    if !missing.is_empty() {
        return Err(ModelError::Missing {
            path,
            keys: missing,
        });
    }
    // One tensor at a time: read, convert, move in (the tensor it replaces is freed).
    let mut failure = None;
    let mut loaded = 0;
    module.visit_mut("", &mut |name, t, kind| {
        if failure.is_some() {
            return;
        }
        let Some((f, k)) = source.get(name) else {
            return;
        };
        let mut v = match files[*f].read(k) {
            Ok(v) => v,
            Err(e) => {
                failure = Some(ModelError::Checkpoint(e));
                return;
            }
        };
        let dtype = match options.dtype {
            LoadDType::To(d) if t.dtype().is_float() => d,
            LoadDType::Checkpoint if t.dtype().is_float() && v.dtype().is_float() => v.dtype(),
            _ => t.dtype(),
        };
        if v.dtype() != dtype {
            v = v.to_dtype(dtype);
        }
        let device = t.device();
        if v.device() != device {
            match v.to_device(&device) {
                Ok(d) => v = d,
                Err(e) => {
                    failure = Some(ModelError::Config {
                        path: files[*f].path().to_path_buf(),
                        reason: format!("{name}: {e}"),
                    });
                    return;
                }
            }
        }
        let grad = matches!(kind, TensorKind::Parameter) && t.requires_grad_flag();
        *t = v.requires_grad(grad);
        loaded += 1;
    });
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Loaded {
        path,
        unused,
        loaded,
    })
}

/// The safetensors files of `path`: itself, or every shard a `*.index.json` names (its
/// `weight_map`, in order of first appearance).
fn open_files(path: &Path) -> Result<Vec<SafetensorsFile>, ModelError> {
    let is_index = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".index.json"));
    if !is_index {
        return Ok(vec![SafetensorsFile::open(path)?]);
    }
    let index: serde_json::Value = read_json(path)?;
    let map = index
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| ModelError::Config {
            path: path.to_path_buf(),
            reason: "no \"weight_map\" object".into(),
        })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut names: Vec<&str> = Vec::new();
    for v in map.values() {
        let name = v.as_str().ok_or_else(|| ModelError::Config {
            path: path.to_path_buf(),
            reason: format!("weight_map value {v} is not a file name"),
        })?;
        if name.contains('/') || name.contains('\\') || name == ".." {
            return Err(ModelError::Config {
                path: path.to_path_buf(),
                reason: format!("shard {name:?} is not a file of the folder"),
            });
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|n| SafetensorsFile::open(dir.join(n)).map_err(ModelError::from))
        .collect()
}
