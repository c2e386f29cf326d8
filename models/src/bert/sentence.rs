//! The sentence-transformers encoder: a BERT, a pooling of its token states, and an
//! optional L2 normalisation (`modules.json`'s `Transformer`, `Pooling`, `Normalize`).

use super::BertModel;
use crate::ModelError;
use crate::hub;
use crate::tokenizer::{EncodeOptions, Padding, Tokenizer};
use ferrograd::{DType, Device, Tensor};
use serde::Deserialize;
use std::path::Path;

/// How token states become one sentence vector (`1_Pooling/config.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over real tokens (`pooling_mode_mean_tokens`).
    Mean,
    /// The `[CLS]` token's state (`pooling_mode_cls_token`).
    Cls,
    /// The elementwise max over real tokens (`pooling_mode_max_tokens`).
    Max,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct ModuleEntry {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// A sentence-transformers model folder (`SentenceTransformer(dir)`): texts in,
/// `[n, hidden]` embeddings out.
///
/// ```no_run
/// use ferrograd_models::bert::SentenceEncoder;
/// let encoder = SentenceEncoder::from_pretrained("all-minilm-l6-v2")?;
/// let e = encoder.encode(&["The cat sits outside", "A man is playing guitar"])?;
/// assert_eq!(e.shape(), &[2, 384]);
/// # Ok::<(), ferrograd_models::ModelError>(())
/// ```
pub struct SentenceEncoder {
    /// The transformer.
    pub model: BertModel,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Token states to one vector.
    pub pooling: Pooling,
    /// L2-normalise the vectors (a `Normalize` module).
    pub normalize: bool,
    /// Longer texts are truncated to this many tokens.
    pub max_seq_length: usize,
    /// Texts per forward pass in [`SentenceEncoder::encode`].
    pub batch_size: usize,
}

impl SentenceEncoder {
    /// Reads a sentence-transformers folder: `modules.json` (a `Transformer`, a
    /// `Pooling`, optionally a `Normalize`), `sentence_bert_config.json`, the pooling
    /// config, the tokenizer and the BERT weights.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<SentenceEncoder, ModelError> {
        let dir = dir.as_ref();
        let modules: Vec<ModuleEntry> = hub::read_json(dir.join("modules.json"))?;
        let bad = |reason: String| ModelError::Config {
            path: dir.join("modules.json"),
            reason,
        };
        let mut pooling = None;
        let mut normalize = false;
        for m in &modules {
            match m.kind.rsplit('.').next().unwrap_or("") {
                "Transformer" => {
                    if !m.path.is_empty() {
                        return Err(bad(format!(
                            "the Transformer module is in {:?}: only one at the folder's root is read",
                            m.path
                        )));
                    }
                }
                "Pooling" => {
                    let c: PoolingConfig = hub::read_json(dir.join(&m.path).join("config.json"))?;
                    let chosen = [
                        (c.pooling_mode_mean_tokens, Pooling::Mean),
                        (c.pooling_mode_cls_token, Pooling::Cls),
                        (c.pooling_mode_max_tokens, Pooling::Max),
                    ];
                    let on: Vec<Pooling> =
                        chosen.iter().filter(|(b, _)| *b).map(|(_, p)| *p).collect();
                    if on.len() != 1 || c.pooling_mode_mean_sqrt_len_tokens {
                        return Err(ModelError::Config {
                            path: dir.join(&m.path).join("config.json"),
                            reason: "exactly one of mean, cls and max pooling is supported".into(),
                        });
                    }
                    pooling = Some(on[0]);
                }
                "Normalize" => normalize = true,
                other => return Err(bad(format!("module type {other:?} is not supported"))),
            }
        }
        let pooling = pooling.ok_or_else(|| bad("no Pooling module".into()))?;
        let sb = dir.join("sentence_bert_config.json");
        let max_seq_length = if sb.is_file() {
            hub::read_json::<SentenceBertConfig>(&sb)?.max_seq_length
        } else {
            None
        };
        let model = BertModel::from_pretrained(dir)?;
        let max_seq_length = max_seq_length
            .unwrap_or(model.config().max_position_embeddings)
            .min(model.config().max_position_embeddings);
        Ok(SentenceEncoder {
            model,
            tokenizer: Tokenizer::from_pretrained(dir)?,
            pooling,
            normalize,
            max_seq_length,
            batch_size: 32,
        })
    }

    /// Embeds `texts` (`model.encode(texts)`), `batch_size` at a time, each batch padded
    /// to its longest text: `[n, hidden]` f32 on the CPU, in the order given.
    pub fn encode(&self, texts: &[&str]) -> Result<Tensor, ModelError> {
        let options = EncodeOptions {
            padding: Padding::Longest,
            max_length: Some(self.max_seq_length),
            ..Default::default()
        };
        // Batches of similar length waste less on padding (as sentence-transformers
        // sorts by length); the results are put back in order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
        let mut rows: Vec<Option<Tensor>> = vec![None; texts.len()];
        let device = self.model.embeddings.word_embeddings.weight.device();
        for chunk in order.chunks(self.batch_size.max(1)) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let enc = self.tokenizer.encode_batch(&batch, &options)?;
            let to = |t: &Tensor| {
                t.to_device(&device)
                    .map_err(|e| ModelError::Input(e.to_string()))
            };
            let (ids, mask, types) = (
                to(&enc.input_ids)?,
                to(&enc.attention_mask)?,
                to(&enc.token_type_ids)?,
            );
            let out = ferrograd::prelude::no_grad(|| {
                let h = self
                    .model
                    .forward(&ids, Some(&mask), Some(&types))
                    .last_hidden_state;
                let e = self.pooling.pool(&h, &mask);
                if self.normalize { l2_normalize(&e) } else { e }
            });
            let out = out
                .to_dtype(DType::F32)
                .to_device(&Device::Cpu)
                .map_err(|e| ModelError::Input(e.to_string()))?;
            for (k, &i) in chunk.iter().enumerate() {
                rows[i] = Some(out.select(0, k));
            }
        }
        let rows: Vec<Tensor> = rows.into_iter().flatten().collect();
        if rows.is_empty() {
            let d = self.model.config().hidden_size;
            return Ok(Tensor::zeros(&[0, d], DType::F32, &Device::Cpu));
        }
        let refs: Vec<&Tensor> = rows.iter().collect();
        Ok(Tensor::stack(&refs, 0))
    }
}

/// Pools `[batch, len, hidden]` token states over the tokens `mask` marks.
impl Pooling {
    /// One vector per sequence `[batch, hidden]` from the token states `h`
    /// `[batch, len, hidden]` and the attention mask `[batch, len]` (1 for a token, 0 for
    /// padding), differentiable (a classifier head on a fine-tuned encoder uses it).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// use ferrograd_models::bert::Pooling;
    /// let h = Tensor::from_vec(vec![1.0f32, 3.0, 100.0], &[1, 3, 1]);
    /// let mask = Tensor::from_vec(vec![1i64, 1, 0], &[1, 3]);
    /// assert_eq!(Pooling::Mean.pool(&h, &mask).to_vec::<f32>(), vec![2.0]);
    /// assert_eq!(Pooling::Max.pool(&h, &mask).to_vec::<f32>(), vec![3.0]);
    /// assert_eq!(Pooling::Cls.pool(&h, &mask).to_vec::<f32>(), vec![1.0]);
    /// ```
    pub fn pool(self, h: &Tensor, mask: &Tensor) -> Tensor {
        let m = mask.to_dtype(h.dtype()).unsqueeze(-1);
        match self {
            Pooling::Cls => h.select(1, 0),
            Pooling::Mean => h
                .mul(&m)
                .sum(&[1], false)
                .div(&m.sum(&[1], false).clamp_min(1e-9)),
            Pooling::Max => h.masked_fill(&m.eq_scalar(0.0), -1e9).max_dim(1, false).0,
        }
    }
}

/// `F.normalize(x, p=2, dim=1)`.
fn l2_normalize(x: &Tensor) -> Tensor {
    x.div(&x.norm(2.0, &[1], true).clamp_min(1e-12))
}
