//! Tokenizers: a model folder's `tokenizer.json` through the `tokenizers` crate (the
//! one `transformers`' fast tokenizers are), batches padded and truncated into tensors.

use crate::ModelError;
use ferrograd::Tensor;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tokenizers::{PaddingDirection, PaddingParams, PaddingStrategy, TruncationParams};

/// How a batch is padded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Padding {
    /// To the longest sequence of the batch (`padding=True`).
    #[default]
    Longest,
    /// To a fixed length (`padding="max_length"`): sequences are also truncated to it.
    MaxLength(usize),
}

/// Which end padding goes on: right for encoders, left for batched generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Side {
    /// After the tokens.
    #[default]
    Right,
    /// Before the tokens.
    Left,
}

/// Options of [`Tokenizer::encode_batch`] (`tokenizer(texts, padding=.., truncation=..,
/// max_length=..)`).
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    /// Add the model's special tokens (`[CLS]` .. `[SEP]`, `<|begin_of_text|>`).
    pub add_special_tokens: bool,
    /// How the batch is padded.
    pub padding: Padding,
    /// Where the padding goes.
    pub side: Side,
    /// Truncate every sequence to at most this many tokens (special tokens included).
    pub max_length: Option<usize>,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            add_special_tokens: true,
            padding: Padding::Longest,
            side: Side::Right,
            max_length: None,
        }
    }
}

/// A tokenized batch: `[batch, len]` int64 tensors, as `transformers` returns them.
#[derive(Clone, Debug)]
pub struct BatchEncoding {
    /// Token ids, padded with the tokenizer's pad id.
    pub input_ids: Tensor,
    /// 1 for a token, 0 for padding.
    pub attention_mask: Tensor,
    /// Segment ids (0 for a single sentence).
    pub token_type_ids: Tensor,
    /// Each sequence's length before padding.
    pub lengths: Vec<usize>,
}

/// A tokenizer read from `tokenizer.json`.
///
/// ```no_run
/// use ferrograd_models::tokenizer::{EncodeOptions, Tokenizer};
/// let tok = Tokenizer::from_pretrained("all-minilm-l6-v2")?;
/// let batch = tok.encode_batch(&["Hello world!", "A longer sentence here."], &EncodeOptions::default())?;
/// assert_eq!(batch.input_ids.shape()[0], 2);
/// let text = tok.decode(&tok.encode("Hello world!", false)?, true)?;
/// assert_eq!(text, "hello world!");
/// # Ok::<(), ferrograd_models::ModelError>(())
/// ```
pub struct Tokenizer {
    /// Without padding or truncation between calls; `encode_batch` sets its own for the
    /// call (under the lock, instead of cloning the vocabulary per batch).
    inner: Mutex<tokenizers::Tokenizer>,
    path: PathBuf,
    pad_id: u32,
}

impl Tokenizer {
    /// Reads a `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer, ModelError> {
        let path = path.as_ref().to_path_buf();
        if !path.is_file() {
            return Err(ModelError::Io {
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                path,
            });
        }
        let mut inner =
            tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::Tokenizer {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        // The file's own padding and truncation (all-MiniLM's pads everything to 128)
        // are replaced per call by `EncodeOptions`.
        let pad_id = inner.get_padding().map(|p| p.pad_id).unwrap_or_else(|| {
            ["[PAD]", "<pad>", "<|endoftext|>", "</s>"]
                .iter()
                .find_map(|t| inner.token_to_id(t))
                .unwrap_or(0)
        });
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| ModelError::Tokenizer {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        Ok(Tokenizer {
            inner: Mutex::new(inner),
            path,
            pad_id,
        })
    }

    /// `dir/tokenizer.json` of a model folder.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Tokenizer, ModelError> {
        Tokenizer::from_file(dir.as_ref().join("tokenizer.json"))
    }

    fn lock(&self) -> MutexGuard<'_, tokenizers::Tokenizer> {
        // A panic inside the tokenizer leaves it usable: its settings are reset below
        // before every use that depends on them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, e: impl std::fmt::Display) -> ModelError {
        ModelError::Tokenizer {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    /// The id padding uses.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Uses `id` for padding (GPT-2 has no pad token; `transformers` users set it to
    /// the end-of-text id).
    pub fn set_pad_id(&mut self, id: u32) {
        self.pad_id = id;
    }

    /// The vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.lock().get_vocab_size(true)
    }

    /// The id of a token, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.lock().token_to_id(token)
    }

    /// The ids of one text, without padding or truncation.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ModelError> {
        let e = self
            .lock()
            .encode(text, add_special_tokens)
            .map_err(|e| self.err(e))?;
        Ok(e.get_ids().to_vec())
    }

    /// The tokens of one text (as strings), for inspection.
    pub fn tokenize(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<String>, ModelError> {
        let e = self
            .lock()
            .encode(text, add_special_tokens)
            .map_err(|e| self.err(e))?;
        Ok(e.get_tokens().to_vec())
    }

    /// Encodes a batch into padded `[batch, len]` tensors on the CPU (in parallel over
    /// the texts).
    pub fn encode_batch(
        &self,
        texts: &[&str],
        options: &EncodeOptions,
    ) -> Result<BatchEncoding, ModelError> {
        let mut t = self.lock();
        let max_length = match options.padding {
            Padding::MaxLength(n) => Some(options.max_length.map_or(n, |m| m.min(n))),
            Padding::Longest => options.max_length,
        };
        let pad_token = t
            .id_to_token(self.pad_id)
            .unwrap_or_else(|| "[PAD]".to_string());
        let truncation = max_length.map(|max_length| TruncationParams {
            max_length,
            ..Default::default()
        });
        let encodings = t
            .with_truncation(truncation)
            .map_err(|e| self.err(e))
            .and_then(|t| {
                t.with_padding(Some(PaddingParams {
                    strategy: match options.padding {
                        Padding::Longest => PaddingStrategy::BatchLongest,
                        Padding::MaxLength(n) => PaddingStrategy::Fixed(n),
                    },
                    direction: match options.side {
                        Side::Right => PaddingDirection::Right,
                        Side::Left => PaddingDirection::Left,
                    },
                    pad_id: self.pad_id,
                    pad_token,
                    ..Default::default()
                }))
                .encode_batch(texts.to_vec(), options.add_special_tokens)
                .map_err(|e| self.err(e))
            });
        // Back to no padding and no truncation, for `encode` and the next call.
        t.with_padding(None);
        t.with_truncation(None).map_err(|e| self.err(e))?;
        drop(t);
        let encodings = encodings?;
        let n = encodings.len();
        let len = encodings.first().map_or(0, |e| e.len());
        let (mut ids, mut mask, mut types, mut lengths) = (
            Vec::with_capacity(n * len),
            Vec::with_capacity(n * len),
            Vec::with_capacity(n * len),
            Vec::with_capacity(n),
        );
        for e in &encodings {
            ids.extend(e.get_ids().iter().map(|&i| i as i64));
            mask.extend(e.get_attention_mask().iter().map(|&m| m as i64));
            types.extend(e.get_type_ids().iter().map(|&m| m as i64));
            lengths.push(e.get_attention_mask().iter().filter(|&&m| m == 1).count());
        }
        let shape = [n, len];
        Ok(BatchEncoding {
            input_ids: Tensor::from_vec(ids, &shape),
            attention_mask: Tensor::from_vec(mask, &shape),
            token_type_ids: Tensor::from_vec(types, &shape),
            lengths,
        })
    }

    /// The text of `ids` (`tokenizer.decode(ids, skip_special_tokens=..)`).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ModelError> {
        self.lock()
            .decode(ids, skip_special_tokens)
            .map_err(|e| self.err(e))
    }
}
