//! Trains a character-level GPT from scratch on Shakespeare and samples from it: 4
//! layers, 4 heads, width 128, context 64, AdamW with a linear warm-up and a cosine
//! decay, gradient clipping, a validation loss every 200 steps, a checkpoint, a loss
//! plot, then text sampled with temperature and top-k.
//!
//! ```sh
//! cargo run --release --features models --example char_gpt            # bundled 200 KB slice, 400 steps
//! cargo run --release --features models --example char_gpt -- --full  # ../shared/data/text/shakespeare_8plays.txt, 2000 steps
//! cargo run --release --features models --example char_gpt -- --data FILE --steps N --out DIR
//! ```
//!
//! Writes `metrics.csv`, `metrics.png`/`.svg` (training and validation loss against the
//! step) and `checkpoint.safetensors` to `runs/char_gpt/`.

use ferrograd::checkpoint::save_safetensors;
use ferrograd::models::generation::{GenerationConfig, generate};
use ferrograd::models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
use ferrograd::nn::Module;
use ferrograd::optim::lr_scheduler::{LrScheduler, Schedule, Scheduler};
use ferrograd::optim::utils::clip_grad_norm_;
use ferrograd::optim::{AdamConfig, AdamW, Optimizer};
use ferrograd::prelude::*;
use ferrograd::train::{EpochProgress, MetricsLog};
use rand::{Rng, SeedableRng};
use std::path::PathBuf;

const CONTEXT: usize = 64;
const BATCH: usize = 32;

/// `BATCH` windows of `CONTEXT + 1` characters from random offsets: inputs and targets.
fn batch(data: &[i64], rng: &mut rand_chacha::ChaCha8Rng) -> (Tensor, Tensor) {
    let (mut x, mut y) = (
        Vec::with_capacity(BATCH * CONTEXT),
        Vec::with_capacity(BATCH * CONTEXT),
    );
    for _ in 0..BATCH {
        let i = rng.random_range(0..data.len() - CONTEXT - 1);
        x.extend_from_slice(&data[i..i + CONTEXT]);
        y.extend_from_slice(&data[i + 1..i + CONTEXT + 1]);
    }
    (
        Tensor::from_vec(x, &[BATCH, CONTEXT]),
        Tensor::from_vec(y, &[BATCH * CONTEXT]),
    )
}

fn loss_of(model: &Gpt2LMHeadModel, x: &Tensor, y: &Tensor, vocab: usize) -> Tensor {
    let logits = model.forward(x, None).reshape(&[BATCH * CONTEXT, vocab]);
    F::cross_entropy(&logits, y)
}

/// Trains a character-level GPT on text and samples from it.
#[derive(clap::Parser, Debug)]
#[command(name = "char_gpt")]
struct Cli {
    /// The text to learn (default: the bundled Shakespeare sample).
    #[arg(long, value_name = "FILE", conflicts_with = "full")]
    data: Option<PathBuf>,
    /// The whole eight plays (`$FERROGRAD_DATA/text/shakespeare_8plays.txt`, else
    /// `../shared/data/...`), 2,000 steps by default.
    #[arg(long)]
    full: bool,
    /// Optimizer steps (400; 2,000 with `--full`).
    #[arg(long, value_name = "N")]
    steps: Option<usize>,
    /// Where the checkpoint and logs go.
    #[arg(long, value_name = "DIR", default_value = "runs/char_gpt")]
    out: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = <Cli as clap::Parser>::parse();
    let (path, default_steps) = if cli.full {
        let root = std::env::var_os("FERROGRAD_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("../shared/data"));
        (root.join("text/shakespeare_8plays.txt"), 2000)
    } else {
        (
            cli.data
                .unwrap_or_else(|| PathBuf::from("examples/data/shakespeare-mini/input.txt")),
            400,
        )
    };
    let steps = cli.steps.unwrap_or(default_steps);
    let out = cli.out;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    let vocab = chars.len();
    let index = |c: char| chars.binary_search(&c).map_or(0, |i| i as i64);
    let data: Vec<i64> = text.chars().map(index).collect();
    let split = data.len() * 9 / 10;
    let (train, val) = (&data[..split], &data[split..]);
    println!(
        "{}: {} characters, vocabulary {vocab}, {} for training, {} for validation",
        path.display(),
        data.len(),
        train.len(),
        val.len()
    );

    manual_seed(0);
    let config = Gpt2Config {
        vocab_size: vocab,
        n_positions: CONTEXT,
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
    println!("model: {} parameters", model.num_parameters());
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamConfig::default()
            .lr(2e-3)
            .betas(0.9, 0.99)
            .weight_decay(0.1),
    );
    let warmup = (steps / 20).max(1) as u64;
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::Sequential {
            schedules: vec![
                Schedule::Linear {
                    start_factor: 0.01,
                    end_factor: 1.0,
                    total_iters: warmup,
                },
                Schedule::CosineAnnealing {
                    t_max: steps as u64 - warmup,
                    eta_min: 1e-4,
                },
            ],
            milestones: vec![warmup],
        },
    );
    std::fs::create_dir_all(&out)?;
    let mut log = MetricsLog::create(out.join("metrics.csv"), &["step", "train_loss", "val_loss"])?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut val_rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let params = model.parameters();
    let start = std::time::Instant::now();
    let mut bar = EpochProgress::new(1, 1, steps);
    let (mut recent, mut recent_n) = (0.0, 0);
    let mut last_val = f64::NAN;
    for step in 1..=steps {
        model.train();
        let (x, y) = batch(train, &mut rng);
        let loss = loss_of(&model, &x, &y, vocab);
        opt.zero_grad();
        loss.backward();
        clip_grad_norm_(&params, 1.0, 2.0, false)?;
        opt.step();
        sched.step(&mut opt);
        let l = loss.item::<f32>() as f64;
        (recent, recent_n) = (recent + l, recent_n + 1);
        bar.update(BATCH, l, None);
        if step % 200 == 0 || step == steps {
            model.eval();
            let val_loss = no_grad(|| {
                (0..20)
                    .map(|_| {
                        let (x, y) = batch(val, &mut val_rng);
                        loss_of(&model, &x, &y, vocab).item::<f32>() as f64
                    })
                    .sum::<f64>()
                    / 20.0
            });
            log.append(&[step as f64, recent / recent_n as f64, val_loss])?;
            (recent, recent_n) = (0.0, 0);
            last_val = val_loss;
            save_safetensors(&model, out.join("checkpoint.safetensors"))?;
        }
    }
    bar.finish();
    println!(
        "{steps} steps in {:.1} s; validation loss {last_val:.3} nats/char",
        start.elapsed().as_secs_f64()
    );
    log.plot(out.join("metrics.png"), out.join("metrics.svg"))?;

    // Sampling: 400 characters, the last 32 of each window as the next prompt (the model
    // has 64 positions).
    model.eval();
    let mut text_ids: Vec<i64> = "ROMEO:".chars().map(index).collect();
    let config = GenerationConfig {
        max_new_tokens: 32,
        do_sample: true,
        temperature: 0.8,
        top_k: Some(10),
        seed: 7,
        ..Default::default()
    };
    while text_ids.len() < 400 {
        let from = text_ids.len().saturating_sub(32);
        let prompt = &text_ids[from..];
        let out = generate(
            &model,
            &Tensor::from_vec(prompt.to_vec(), &[1, prompt.len()]),
            None,
            &config,
            |_| {},
        );
        text_ids.extend_from_slice(&out.to_vec::<i64>()[prompt.len()..]);
    }
    let sample: String = text_ids.iter().map(|&i| chars[i as usize]).collect();
    println!("\nsample (temperature 0.8, top-k 10):\n{sample}");
    println!("\nmetrics, plot and checkpoint in {}", out.display());
    Ok(())
}
