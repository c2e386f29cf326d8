//! Pretrained-model workloads (`bench/models_compare.py` runs PyTorch's on the same
//! machine and threads and prints the ratios):
//!
//! - `minilm_b32_t128`: all-MiniLM-L6-v2 (`$FERROGRAD_DATA` or `../shared/data`; a
//!   random model of its shape when absent) over 32 sequences of 128 tokens, forward
//!   without gradients;
//! - `gpt2_small_prefill_512`: a GPT-2-small-shaped model (124M parameters, random
//!   weights), the next-token logits of a 512-token prompt;
//! - `gpt2_small_generate_32`: the same model, greedy, 32 new tokens after a 16-token
//!   prompt at batch 1 (KV cache);
//! - `char_gpt_step`: one training step of `examples/char_gpt.rs`'s model (4 layers, 4
//!   heads, width 128, context 64, 65 characters) at batch 32: forward, cross-entropy,
//!   backward, gradient clipping, AdamW.

use criterion::{Criterion, criterion_group, criterion_main};
use ferrograd::models::bert::{BertConfig, BertModel};
use ferrograd::models::generation::{CausalLM, GenerationConfig, generate};
use ferrograd::models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
use ferrograd::nn::Module;
use ferrograd::optim::utils::clip_grad_norm_;
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use std::path::PathBuf;

fn ids(n: usize, t: usize, vocab: usize) -> Tensor {
    Tensor::from_vec(
        (0..n * t)
            .map(|i| ((i * 7919 + 13) % (vocab - 1) + 1) as i64)
            .collect(),
        &[n, t],
    )
}

fn minilm() -> BertModel {
    let dir = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
        .join("all-minilm-l6-v2");
    BertModel::from_pretrained(&dir).unwrap_or_else(|_| {
        eprintln!("all-MiniLM-L6-v2 not found: a random model of its shape");
        let c = BertConfig {
            vocab_size: 30522,
            hidden_size: 384,
            num_hidden_layers: 6,
            num_attention_heads: 12,
            intermediate_size: 1536,
            hidden_act: "gelu".into(),
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            position_embedding_type: "absolute".into(),
        };
        let mut m = BertModel::new(&c, true, &Device::Cpu);
        m.eval();
        m
    })
}

fn models(c: &mut Criterion) {
    let mut g = c.benchmark_group("models");
    g.sample_size(10);
    let bert = minilm();
    let x = ids(32, 128, 30522);
    let mask = Tensor::ones(&[32, 128], DType::I64, &Device::Cpu);
    g.bench_function("minilm_b32_t128", |b| {
        b.iter(|| no_grad(|| bert.forward(&x, Some(&mask), None).last_hidden_state))
    });
    drop(bert);

    manual_seed(0);
    let mut gpt = Gpt2LMHeadModel::new(&Gpt2Config::default(), &Device::Cpu);
    gpt.eval();
    let prompt = ids(1, 512, 50257);
    let positions = Tensor::arange(0.0, 512.0, 1.0, DType::I64, &Device::Cpu).reshape(&[1, 512]);
    let ones = Tensor::ones(&[1, 512], DType::I64, &Device::Cpu);
    g.bench_function("gpt2_small_prefill_512", |b| {
        b.iter(|| {
            no_grad(|| {
                let mut cache = gpt.new_cache();
                gpt.forward_cached(&prompt, &positions, &ones, &mut cache, true)
            })
        })
    });
    let short = ids(1, 16, 50257);
    let config = GenerationConfig {
        max_new_tokens: 32,
        ..Default::default()
    };
    g.bench_function("gpt2_small_generate_32", |b| {
        b.iter(|| generate(&gpt, &short, None, &config, |_| {}))
    });
    drop(gpt);

    manual_seed(0);
    let config = Gpt2Config {
        vocab_size: 65,
        n_positions: 64,
        n_embd: 128,
        n_layer: 4,
        n_head: 4,
        resid_pdrop: 0.0,
        embd_pdrop: 0.0,
        attn_pdrop: 0.0,
        eos_token_id: None,
        ..Default::default()
    };
    let mut model = Gpt2LMHeadModel::new(&config, &Device::Cpu);
    model.train();
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamConfig::default()
            .lr(2e-3)
            .betas(0.9, 0.99)
            .weight_decay(0.1),
    );
    let params = model.parameters();
    let x = ids(32, 64, 65);
    let y = ids(32, 64, 65).reshape(&[32 * 64]);
    g.bench_function("char_gpt_step", |b| {
        b.iter(|| {
            let logits = model.forward(&x, None).reshape(&[32 * 64, 65]);
            let loss = F::cross_entropy(&logits, &y);
            opt.zero_grad();
            loss.backward();
            clip_grad_norm_(&params, 1.0, 2.0, false).unwrap();
            opt.step();
            loss
        })
    });
    g.finish();
}

criterion_group!(benches, models);
criterion_main!(benches);
