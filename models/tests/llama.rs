//! Llama, Qwen2 and Mistral against `transformers` on tiny random checkpoints saved with
//! `save_pretrained` (fixtures: `fixtures/make_llama_fixtures.py`): logits of a sequence
//! and of a right-padded batch (max abs diff <= 1e-4), and greedy generation of a prompt
//! and a left-padded batch token for token.

mod common;

use common::{fixtures, floats, ints, json, max_diff};
use ferrograd::prelude::*;
use ferrograd_models::generation::{CausalLM, GenerationConfig, generate};
use ferrograd_models::llama::{LlamaForCausalLM, RopeScaling};

fn check_family(name: &str) {
    let f = json(name);
    let (m, loaded) = LlamaForCausalLM::from_pretrained_with(
        fixtures().join(format!("tiny-{name}")),
        &Device::Cpu,
        None,
    )
    .unwrap();
    assert!(loaded.unused.is_empty(), "{name}: {:?}", loaded.unused);
    let single = ints(&f["single"]);
    let logits = m.forward(&Tensor::from_vec(single.clone(), &[1, single.len()]), None);
    let d = max_diff(&logits.to_vec::<f32>(), &floats(&f["logits_single"]));
    eprintln!("{name}: single sequence max abs diff {d:.2e}");
    assert!(d <= 1e-4, "{name}: single sequence max abs diff {d}");

    let logits = m.forward(
        &Tensor::from_vec(ints(&f["batch"]), &[2, 10]),
        Some(&Tensor::from_vec(ints(&f["batch_mask"]), &[2, 10])),
    );
    let v = 256;
    let got = logits.to_vec::<f32>();
    let mut ours = got[..10 * v].to_vec();
    ours.extend_from_slice(&got[10 * v..15 * v]);
    let d = max_diff(&ours, &floats(&f["logits_batch"]));
    assert!(d <= 1e-4, "{name}: padded batch max abs diff {d}");

    let config = GenerationConfig {
        max_new_tokens: 32,
        pad_token_id: 0,
        ..Default::default()
    };
    let out = generate(
        &m,
        &Tensor::from_vec(single.clone(), &[1, single.len()]),
        None,
        &config,
        |_| {},
    );
    assert_eq!(
        out.to_vec::<i64>(),
        ints(&f["generate_single"]),
        "{name}: batch 1"
    );
    let out = generate(
        &m,
        &Tensor::from_vec(ints(&f["left"]), &[2, 6]),
        Some(&Tensor::from_vec(ints(&f["left_mask"]), &[2, 6])),
        &config,
        |_| {},
    );
    assert_eq!(
        out.to_vec::<i64>(),
        ints(&f["generate_batch"]),
        "{name}: left-padded batch"
    );
}

#[test]
fn llama_with_grouped_query_attention_and_llama3_rope_equals_transformers() {
    let c = ferrograd_models::llama::LlamaConfig::from_pretrained(fixtures().join("tiny-llama"))
        .unwrap();
    assert_eq!((c.num_attention_heads, c.num_key_value_heads), (4, 2));
    assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { .. }));
    assert!(!c.tie_word_embeddings);
    check_family("llama");
}

#[test]
fn qwen2_with_biases_and_a_tied_head_equals_transformers() {
    let c = ferrograd_models::llama::LlamaConfig::from_pretrained(fixtures().join("tiny-qwen2"))
        .unwrap();
    assert!(c.qkv_bias && !c.o_bias && c.tie_word_embeddings);
    check_family("qwen2");
}

#[test]
fn mistral_with_a_sliding_window_equals_transformers() {
    let c = ferrograd_models::llama::LlamaConfig::from_pretrained(fixtures().join("tiny-mistral"))
        .unwrap();
    assert_eq!((c.sliding_window, c.num_key_value_heads), (Some(6), 1));
    check_family("mistral");
}

#[test]
fn unsupported_configs_are_errors() {
    use ferrograd_models::llama::LlamaConfig;
    let base = r#""vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2"#;
    assert!(LlamaConfig::from_json(&format!(r#"{{"model_type": "gemma", {base}}}"#)).is_err());
    assert!(LlamaConfig::from_json(&format!(r#"{{{base}, "num_key_value_heads": 3}}"#)).is_err());
    let e = LlamaConfig::from_json(&format!(
        r#"{{{base}, "rope_scaling": {{"rope_type": "yarn", "factor": 4.0}}}}"#
    ))
    .unwrap_err();
    assert!(e.contains("yarn"), "{e}");
    // rope_theta under rope_scaling (4.x) and at the top level.
    let c = LlamaConfig::from_json(&format!(r#"{{{base}, "rope_theta": 1e6}}"#)).unwrap();
    assert_eq!(c.rope_theta, 1e6);
    // The cache: one step at a time equals the full forward.
    let c = LlamaConfig::from_json(&format!(r#"{{{base}, "num_key_value_heads": 1}}"#)).unwrap();
    let m = LlamaForCausalLM::new(&c, &Device::Cpu);
    let ids: Vec<i64> = vec![1, 5, 3, 7, 2];
    let full = m.forward(&Tensor::from_vec(ids.clone(), &[1, 5]), None);
    let mut cache = m.new_cache();
    for (i, &id) in ids.iter().enumerate() {
        let step = m.forward_cached(
            &Tensor::from_vec(vec![id], &[1, 1]),
            &Tensor::from_vec(vec![i as i64], &[1, 1]),
            &Tensor::ones(&[1, i + 1], DType::I64, &Device::Cpu),
            &mut cache,
            true,
        );
        assert!(max_diff(&step.to_vec::<f32>(), &full.select(1, i).to_vec::<f32>()) < 1e-4);
    }
}

/// `tiny-llama` rewritten with its floating-point tensors in `dtype`, in a fresh folder.
fn tiny_llama_in(dtype: DType) -> std::path::PathBuf {
    let src = fixtures().join("tiny-llama");
    let dir = std::env::temp_dir().join(format!(
        "ferrograd-tiny-llama-{dtype:?}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let state: ferrograd::nn::StateDict =
        ferrograd::checkpoint::read_state_dict(src.join("model.safetensors"))
            .unwrap()
            .into_iter()
            .map(|(k, t)| {
                let t = if t.dtype().is_float() {
                    t.to_dtype(dtype)
                } else {
                    t
                };
                (k, t)
            })
            .collect();
    ferrograd::checkpoint::save_state_dict(&state, dir.join("model.safetensors"), None).unwrap();
    dir
}

#[test]
fn a_half_precision_checkpoint_is_kept_or_converted_on_request() {
    use ferrograd::nn::Module;
    use ferrograd_models::hub::LoadDType;
    let dir = tiny_llama_in(DType::BF16);
    let dtypes = |m: &LlamaForCausalLM| {
        let mut d: Vec<DType> = m.parameters().iter().map(|p| p.dtype()).collect();
        d.dedup();
        d
    };
    // By default the module's f32, as transformers without torch_dtype.
    let (f32_model, _) = LlamaForCausalLM::from_pretrained_with(&dir, &Device::Cpu, None).unwrap();
    assert_eq!(dtypes(&f32_model), [DType::F32]);
    // torch_dtype="auto": the file's bf16, half the memory.
    let (kept, _) =
        LlamaForCausalLM::from_pretrained_with(&dir, &Device::Cpu, LoadDType::Checkpoint).unwrap();
    assert_eq!(dtypes(&kept), [DType::BF16]);
    // Converted on request.
    let (f16, _) = LlamaForCausalLM::from_pretrained_with(&dir, &Device::Cpu, DType::F16).unwrap();
    assert_eq!(dtypes(&f16), [DType::F16]);

    // The bf16 model runs, and its logits are the f32 model's to bf16 precision.
    let ids = Tensor::from_vec(vec![1i64, 5, 9, 42, 7, 3], &[1, 6]);
    let want = f32_model.forward(&ids, None).to_vec::<f32>();
    for (name, m) in [("bf16", &kept), ("f16", &f16)] {
        let got = m.forward(&ids, None).to_dtype(DType::F32).to_vec::<f32>();
        let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = max_diff(&got, &want);
        eprintln!("{name}: max abs diff {d:.2e} (logits up to {scale:.2})");
        assert!(d <= 0.05 * scale.max(1.0), "{name}: max abs diff {d}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mlp_bias` switches the MLP's biases (the `network!`'s `bias: bool` parameter): the
/// keys `transformers` writes for such a model, and the count the DSL computes for it.
#[test]
fn mlp_bias_adds_the_biases_and_counts_them() {
    use ferrograd_models::llama::{LlamaConfig, LlamaMlp};
    for bias in [false, true] {
        let c = LlamaConfig::from_json(&format!(
            r#"{{"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
                "num_hidden_layers": 1, "num_attention_heads": 4, "mlp_bias": {bias}}}"#
        ))
        .unwrap();
        let m = LlamaForCausalLM::new(&c, &Device::Cpu);
        let keys: Vec<String> = m.state_dict().keys().cloned().collect();
        for proj in ["gate_proj", "up_proj", "down_proj"] {
            let key = format!("model.layers.0.mlp.{proj}.bias");
            assert_eq!(keys.contains(&key), bias, "{key} in {keys:?}");
        }
        let mlp = &m.model.layers[0].mlp;
        assert_eq!(
            mlp.num_parameters(),
            LlamaMlp::num_parameters_for(32, 48, bias)
        );
        let want = 3 * 32 * 48 + if bias { 2 * 48 + 32 } else { 0 };
        assert_eq!(mlp.num_parameters(), want);
        assert!(
            mlp.summary()
                .contains(&format!("Total trainable parameters: {want}"))
        );
    }
}
