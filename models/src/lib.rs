//! # ferrograd-models
//!
//! Models someone else trained, run and fine-tuned with ferrograd: what
//! `transformers` and `sentence-transformers` are to PyTorch, read from a local Hugging
//! Face folder (nothing is downloaded: a user passes a directory).
//!
//! - [`hub`]: a model folder's `config.json` and weights (`model.safetensors`, or the
//!   shards an `model.safetensors.index.json` lists), loaded into a module whose
//!   parameter names are the checkpoint's own.
//! - [`tokenizer`]: `tokenizer.json` through the `tokenizers` crate, batches padded and
//!   truncated into id and attention-mask tensors, and decoding.
//! - [`bert`]: `BertModel` and the sentence-transformers encoder built on it
//!   ([`bert::SentenceEncoder`]).
//! - [`gpt2`]: `GPT2LMHeadModel`, with a KV cache.
//! - [`llama`]: `LlamaForCausalLM` and its Mistral and Qwen2 variants (RMSNorm, RoPE with
//!   Llama-3 scaling, SwiGLU, grouped-query attention, sliding windows).
//! - [`generation`]: `generate` for every decoder ([`generation::CausalLM`]): greedy or
//!   sampled (temperature, top-k, top-p, repetition penalty), stop tokens, streaming,
//!   left-padded batches.
//! - [`vision`]: torchvision's ResNet, MobileNetV2 and Vision Transformer, with its keys
//!   and its preprocessing.
//!
//! ```no_run
//! use ferrograd_models::bert::SentenceEncoder;
//! let encoder = SentenceEncoder::from_pretrained("all-minilm-l6-v2")?;
//! let e = encoder.encode(&["A man is eating food.", "A man is eating pasta."])?;
//! let similarity = e.select(0, 0).mul(&e.select(0, 1)).sum_all().item::<f32>();
//! assert!(similarity > 0.5);
//! # Ok::<(), ferrograd_models::ModelError>(())
//! ```
#![warn(missing_docs)]

pub mod auto;
pub mod bert;
mod error;
pub mod generation;
pub mod gpt2;
pub mod hub;
pub mod llama;
pub mod tokenizer;
pub mod vision;

pub use error::ModelError;
