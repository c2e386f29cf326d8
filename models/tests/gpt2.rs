//! GPT-2 against `transformers` on a tiny random checkpoint saved with
//! `save_pretrained` (fixtures: `fixtures/make_gpt2_fixtures.py`): logits of a sequence
//! and of a right-padded batch, and greedy generation of a prompt and a left-padded batch.

use ferrograd::prelude::*;
use ferrograd_models::generation::{CausalLM, GenerationConfig, generate};
use ferrograd_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};

mod common;
use common::{fixtures, floats, ints, json, max_diff};

fn model() -> Gpt2LMHeadModel {
    Gpt2LMHeadModel::from_pretrained(fixtures().join("tiny-gpt2")).unwrap()
}

#[test]
fn logits_equal_transformers() {
    let f = json("gpt2");
    let m = model();
    assert!(m.lm_head.is_none(), "the head is tied");
    let single = ints(&f["single"]);
    let logits = m.forward(&Tensor::from_vec(single.clone(), &[1, single.len()]), None);
    let d = max_diff(&logits.to_vec::<f32>(), &floats(&f["logits_single"]));
    assert!(d <= 1e-4, "single sequence: max abs diff {d}");

    // A right-padded batch: the padded row's real positions match.
    let batch = ints(&f["batch"]);
    let mask = ints(&f["batch_mask"]);
    let logits = m.forward(
        &Tensor::from_vec(batch, &[2, 10]),
        Some(&Tensor::from_vec(mask, &[2, 10])),
    );
    let want = floats(&f["logits_batch"]);
    let v = 256;
    let got = logits.to_vec::<f32>();
    let mut ours = got[..10 * v].to_vec();
    ours.extend_from_slice(&got[10 * v..15 * v]);
    let d = max_diff(&ours, &want);
    assert!(d <= 1e-4, "padded batch: max abs diff {d}");
}

#[test]
fn greedy_generation_equals_transformers() {
    let f = json("gpt2");
    let m = model();
    let prompt = ints(&f["single"]);
    let config = GenerationConfig {
        max_new_tokens: 32,
        pad_token_id: 255,
        ..Default::default()
    };
    let mut streamed = Vec::new();
    let out = generate(
        &m,
        &Tensor::from_vec(prompt.clone(), &[1, prompt.len()]),
        None,
        &config,
        |step| streamed.push(step[0] as i64),
    );
    let want = ints(&f["generate_single"]);
    assert_eq!(out.to_vec::<i64>(), want);
    assert_eq!(streamed, want[prompt.len()..]);

    // A left-padded batch.
    let left = ints(&f["left"]);
    let mask = ints(&f["left_mask"]);
    let out = generate(
        &m,
        &Tensor::from_vec(left, &[2, 6]),
        Some(&Tensor::from_vec(mask, &[2, 6])),
        &config,
        |_| {},
    );
    assert_eq!(out.to_vec::<i64>(), ints(&f["generate_batch"]));
}

#[test]
fn the_cache_equals_a_full_forward() {
    let m = model();
    let ids: Vec<i64> = (0..12).map(|i| (i * 37 % 250) as i64).collect();
    let full = m.forward(&Tensor::from_vec(ids.clone(), &[1, 12]), None);
    let mut cache = m.new_cache();
    let mut last = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let logits = m.forward_cached(
            &Tensor::from_vec(vec![id], &[1, 1]),
            &Tensor::from_vec(vec![i as i64], &[1, 1]),
            &Tensor::ones(&[1, i + 1], DType::I64, &Device::Cpu),
            &mut cache,
            true,
        );
        last = logits.to_vec::<f32>();
        let want = full.select(1, i).to_vec::<f32>();
        assert!(max_diff(&last, &want) < 1e-4, "step {i}");
    }
    assert_eq!(cache.len(), 12);
    assert_eq!(last.len(), 256);
}

#[test]
fn sampling_is_seeded_and_stops_at_eos() {
    let m = model();
    let prompt = Tensor::from_vec(vec![5i64, 17, 99], &[1, 3]);
    let sample = |seed| {
        let config = GenerationConfig {
            max_new_tokens: 20,
            do_sample: true,
            temperature: 0.8,
            top_k: Some(50),
            top_p: Some(0.95),
            repetition_penalty: 1.2,
            seed,
            pad_token_id: 255,
            ..Default::default()
        };
        generate(&m, &prompt, None, &config, |_| {}).to_vec::<i64>()
    };
    assert_eq!(sample(7), sample(7));
    assert_ne!(sample(7), sample(8));
    // A stop token ends the row: the greedy continuation's 3rd token as the stop.
    let greedy = generate(&m, &prompt, None, &GenerationConfig::default(), |_| {}).to_vec::<i64>();
    let stop = greedy[5] as u32;
    let first = greedy[3..].iter().position(|&t| t as u32 == stop).unwrap();
    let stopped = generate(
        &m,
        &prompt,
        None,
        &GenerationConfig {
            eos_token_ids: vec![stop],
            ..Default::default()
        },
        |_| {},
    )
    .to_vec::<i64>();
    assert_eq!(stopped, greedy[..3 + first + 1]);
}

#[test]
fn training_steps_reduce_the_loss() {
    // Fine-tuning works through the same model: a few AdamW steps on one sequence.
    manual_seed(0);
    let config = Gpt2Config {
        vocab_size: 32,
        n_positions: 16,
        n_embd: 16,
        n_layer: 2,
        n_head: 2,
        ..Default::default()
    };
    let mut m = Gpt2LMHeadModel::new(&config, &Device::Cpu);
    m.eval();
    let ids: Vec<i64> = (0..16).map(|i| (i * 5 % 32) as i64).collect();
    let x = Tensor::from_vec(ids[..15].to_vec(), &[1, 15]);
    let y = Tensor::from_vec(ids[1..].to_vec(), &[15]);
    use ferrograd::optim::Optimizer;
    let mut opt = ferrograd::optim::AdamW::new(
        m.parameters(),
        ferrograd::optim::AdamConfig::default().lr(1e-2),
    );
    let mut losses = Vec::new();
    for _ in 0..30 {
        let logits = m.forward(&x, None).reshape(&[15, 32]);
        let loss = F::cross_entropy(&logits, &y);
        losses.push(loss.item::<f32>());
        opt.zero_grad();
        loss.backward();
        opt.step();
    }
    assert!(losses[29] < losses[0] * 0.3, "{losses:?}");
}
