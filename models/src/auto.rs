//! `AutoModelForCausalLM`: the decoder family a folder holds, read from its
//! `config.json`'s `model_type`.

use crate::ModelError;
use crate::generation::{CausalLM, KvCache};
use crate::gpt2::Gpt2LMHeadModel;
use crate::hub::{self, LoadDType};
use crate::llama::LlamaForCausalLM;
use ferrograd::{Device, Tensor};
use std::path::Path;

/// Any decoder of this crate, chosen by `model_type` (`gpt2`, `llama`, `mistral`,
/// `qwen2`).
///
/// ```
/// use ferrograd_models::auto::AutoModelForCausalLM;
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-gpt2");
/// let model = AutoModelForCausalLM::from_pretrained(dir).unwrap();
/// assert_eq!(model.model_type(), "gpt2");
/// ```
pub enum AutoModelForCausalLM {
    /// GPT-2.
    Gpt2(Gpt2LMHeadModel),
    /// Llama, Mistral or Qwen2.
    Llama(LlamaForCausalLM),
}

impl AutoModelForCausalLM {
    /// Loads a folder on the CPU, in f32 (eval mode).
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<AutoModelForCausalLM, ModelError> {
        AutoModelForCausalLM::from_pretrained_with(dir, &Device::Cpu, None)
    }

    /// Loads a folder on `device`, in `dtype` ([`LoadDType`]: the module's f32, the
    /// checkpoint's own, or a given one).
    pub fn from_pretrained_with(
        dir: impl AsRef<Path>,
        device: &Device,
        dtype: impl Into<LoadDType>,
    ) -> Result<AutoModelForCausalLM, ModelError> {
        let dir = dir.as_ref();
        let dtype = dtype.into();
        let config: serde_json::Value = hub::read_config(dir)?;
        match config.get("model_type").and_then(|v| v.as_str()) {
            Some("gpt2") => Ok(AutoModelForCausalLM::Gpt2(
                Gpt2LMHeadModel::from_pretrained_with(dir, device, dtype)?.0,
            )),
            Some("llama" | "mistral" | "qwen2") => Ok(AutoModelForCausalLM::Llama(
                LlamaForCausalLM::from_pretrained_with(dir, device, dtype)?.0,
            )),
            other => Err(ModelError::Config {
                path: dir.join("config.json"),
                reason: format!(
                    "model_type {other:?} is not a decoder of this crate (gpt2, llama, mistral, qwen2)"
                ),
            }),
        }
    }

    /// The family's `model_type`.
    pub fn model_type(&self) -> &str {
        match self {
            AutoModelForCausalLM::Gpt2(_) => "gpt2",
            AutoModelForCausalLM::Llama(m) => &m.config().model_type,
        }
    }

    /// Trainable parameters.
    pub fn num_parameters(&self) -> usize {
        use ferrograd::nn::Module;
        match self {
            AutoModelForCausalLM::Gpt2(m) => m.num_parameters(),
            AutoModelForCausalLM::Llama(m) => m.num_parameters(),
        }
    }
}

impl CausalLM for AutoModelForCausalLM {
    fn new_cache(&self) -> KvCache {
        match self {
            AutoModelForCausalLM::Gpt2(m) => m.new_cache(),
            AutoModelForCausalLM::Llama(m) => m.new_cache(),
        }
    }

    fn forward_cached(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: &mut KvCache,
        last_only: bool,
    ) -> Tensor {
        match self {
            AutoModelForCausalLM::Gpt2(m) => {
                m.forward_cached(ids, positions, mask, cache, last_only)
            }
            AutoModelForCausalLM::Llama(m) => {
                m.forward_cached(ids, positions, mask, cache, last_only)
            }
        }
    }

    fn device(&self) -> Device {
        match self {
            AutoModelForCausalLM::Gpt2(m) => m.device(),
            AutoModelForCausalLM::Llama(m) => m.device(),
        }
    }
}
