//! Model folders made on the spot, to try the LLM endpoint (and to test and benchmark
//! it) without downloading weights: a word-level tokenizer with a chat template, and a
//! GPT-2 of any shape with random weights under Hugging Face's tensor names.
//!
//! ```
//! use ferrograd_serve::llm::fixtures::{write_random_gpt2, write_word_tokenizer};
//! let dir = std::env::temp_dir().join(format!("ferrograd-doc-gpt2-{}", std::process::id()));
//! write_random_gpt2(&dir, 32, 2, 4, 64, 256).unwrap();
//! write_word_tokenizer(&dir, 256).unwrap();
//! let app = ferrograd_serve::llm::router(&dir, &Default::default()).unwrap();
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use ferrograd::prelude::*;
use serde_json::json;
use std::path::Path;

/// The chat template [`write_word_tokenizer`] writes: the BOS token and a space, `w1 `
/// before a system message, each message's content stripped and followed by a space,
/// then `w2` as the assistant's cue.
pub const CHAT_TEMPLATE: &str = "{{ bos_token }} {% for m in messages %}{% if m.role == 'system' %}w1 {% endif %}{{ m.content.strip() }} {% endfor %}{% if add_generation_prompt %}w2{% endif %}";

/// Writes `tokenizer.json` (a word-level vocabulary `w0` … `w{vocab-2}`, whitespace
/// split, and `<|endoftext|>` as the last id, special) and `tokenizer_config.json`
/// ([`CHAT_TEMPLATE`], `w3` as BOS, `<|endoftext|>` as EOS) into `dir`.
pub fn write_word_tokenizer(dir: &Path, vocab: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let eos = vocab - 1;
    let mut words = serde_json::Map::new();
    for i in 0..eos {
        words.insert(format!("w{i}"), json!(i));
    }
    words.insert("<|endoftext|>".into(), json!(eos));
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": eos, "content": "<|endoftext|>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<|endoftext|>"},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string())?;
    let config = json!({"chat_template": CHAT_TEMPLATE, "bos_token": "w3",
        "eos_token": {"content": "<|endoftext|>"}});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string())
}

/// Writes `config.json` and `model.safetensors` of a GPT-2 with random weights (N(0,
/// 0.02), unit layer norms) into `dir`: `n_embd` wide, `n_layer` deep, `n_head` heads,
/// `n_positions` positions, `vocab` tokens (the last one is its end of text). 768, 12,
/// 12, 1024, 50257 is GPT-2 small's shape.
pub fn write_random_gpt2(
    dir: &Path,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_positions: usize,
    vocab: usize,
) -> Result<(), ferrograd::checkpoint::CheckpointError> {
    let io = |source| ferrograd::checkpoint::CheckpointError::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let config = json!({
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "n_embd": n_embd, "n_layer": n_layer, "n_head": n_head, "n_positions": n_positions,
        "vocab_size": vocab, "bos_token_id": vocab - 1, "eos_token_id": vocab - 1,
        "tie_word_embeddings": true, "scale_attn_weights": true,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).map_err(io)?;
    let mut g = Generator::new(3);
    let mut w = |shape: &[usize]| {
        Tensor::randn_with(shape, DType::F32, &Device::Cpu, &mut g).mul_scalar(0.02)
    };
    let e = n_embd;
    let ones = || Tensor::ones(&[e], DType::F32, &Device::Cpu);
    let zeros = || Tensor::zeros(&[e], DType::F32, &Device::Cpu);
    let mut state = ferrograd::nn::StateDict::new();
    state.insert("transformer.wte.weight".into(), w(&[vocab, e]));
    state.insert("transformer.wpe.weight".into(), w(&[n_positions, e]));
    for i in 0..n_layer {
        let p = format!("transformer.h.{i}.");
        for (k, shape) in [
            ("attn.c_attn.weight", vec![e, 3 * e]),
            ("attn.c_attn.bias", vec![3 * e]),
            ("attn.c_proj.weight", vec![e, e]),
            ("attn.c_proj.bias", vec![e]),
            ("mlp.c_fc.weight", vec![e, 4 * e]),
            ("mlp.c_fc.bias", vec![4 * e]),
            ("mlp.c_proj.weight", vec![4 * e, e]),
            ("mlp.c_proj.bias", vec![e]),
        ] {
            state.insert(format!("{p}{k}"), w(&shape));
        }
        for ln in ["ln_1", "ln_2"] {
            state.insert(format!("{p}{ln}.weight"), ones());
            state.insert(format!("{p}{ln}.bias"), zeros());
        }
    }
    state.insert("transformer.ln_f.weight".into(), ones());
    state.insert("transformer.ln_f.bias".into(), zeros());
    ferrograd::checkpoint::save_state_dict(&state, dir.join("model.safetensors"), None)
}
