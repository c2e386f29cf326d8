//! Streams text from a decoder folder (GPT-2, Llama, Mistral, Qwen2 in Hugging Face's
//! layout: `config.json`, `model.safetensors`, `tokenizer.json`), printing tokens/s.
//!
//! ```sh
//! cargo run --release --features models --example generate -- --model path/to/Qwen2.5-0.5B --prompt "The capital of France is" --max-new-tokens 40
//! cargo run --release --features models --example generate -- --model path/to/gpt2 --prompt "Once upon a time" --sample --temperature 0.8 --top-k 50 --top-p 0.95 --seed 1
//! ```
//!
//! Without `--model` it runs the tiny random GPT-2 bundled with the tests (256 tokens,
//! read as bytes), which shows the pipeline, not language.

use ferrograd::models::auto::AutoModelForCausalLM;
use ferrograd::models::generation::{GenerationConfig, generate};
use ferrograd::models::tokenizer::Tokenizer;
use ferrograd::prelude::*;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Generates text with a causal language model folder, as `model.generate(..)` does.
#[derive(clap::Parser, Debug)]
#[command(name = "generate")]
struct Cli {
    /// A Hugging Face folder (gpt2, llama, mistral, qwen2).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "models/tests/fixtures/tiny-gpt2"
    )]
    model: PathBuf,
    /// The text to continue.
    #[arg(long, default_value = "Once upon a time")]
    prompt: String,
    /// Tokens to add at most.
    #[arg(long, value_name = "N", default_value_t = 40)]
    max_new_tokens: usize,
    /// Sample (else greedy).
    #[arg(long)]
    sample: bool,
    /// Softmax temperature when sampling.
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Sample among the `K` likeliest tokens.
    #[arg(long, value_name = "K")]
    top_k: Option<usize>,
    /// Sample within the smallest set of tokens of probability `P`.
    #[arg(long, value_name = "P")]
    top_p: Option<f64>,
    /// Penalize tokens already present (transformers' `repetition_penalty`).
    #[arg(long, value_name = "R")]
    repetition_penalty: Option<f64>,
    /// The sampling seed.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    let dir = cli.model;
    let prompt = cli.prompt;
    let mut config = GenerationConfig {
        max_new_tokens: cli.max_new_tokens,
        do_sample: cli.sample,
        top_k: cli.top_k,
        top_p: cli.top_p,
        ..Default::default()
    };
    if let Some(t) = cli.temperature {
        config.temperature = t;
    }
    if let Some(r) = cli.repetition_penalty {
        config.repetition_penalty = r;
    }
    if let Some(s) = cli.seed {
        config.seed = s;
    }
    let start = Instant::now();
    let model = AutoModelForCausalLM::from_pretrained(&dir).unwrap_or_else(|e| {
        eprintln!("cannot load {}: {e}", dir.display());
        std::process::exit(1)
    });
    // The tokenizer, or bytes for a folder without one (the bundled tiny model).
    let tokenizer = if dir.join("tokenizer.json").is_file() {
        Some(Tokenizer::from_pretrained(&dir).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        }))
    } else {
        None
    };
    let config_json: serde_json::Value =
        ferrograd::models::hub::read_config(&dir).unwrap_or(serde_json::Value::Null);
    config.eos_token_ids = match &config_json["eos_token_id"] {
        serde_json::Value::Number(n) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as u32)
            .collect(),
        _ => Vec::new(),
    };
    if tokenizer.is_none() {
        config.eos_token_ids.clear();
    }
    config.pad_token_id = config.eos_token_ids.first().copied().unwrap_or(0);
    eprintln!(
        "loaded {} ({}, {:.1}M parameters) in {:.2} s",
        dir.display(),
        model.model_type(),
        model.num_parameters() as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    let ids: Vec<u32> = match &tokenizer {
        Some(t) => t.encode(&prompt, true).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        }),
        None => prompt.bytes().map(u32::from).collect(),
    };
    let n = ids.len();
    let prompt_t = Tensor::from_vec(ids.iter().map(|&i| i as i64).collect(), &[1, n]);
    print!("{prompt}");
    std::io::stdout().flush().ok();
    let mut generated: Vec<u32> = Vec::new();
    let mut shown = String::new();
    let mut first_token = None;
    let start = Instant::now();
    generate(&model, &prompt_t, None, &config, |step| {
        first_token.get_or_insert_with(|| start.elapsed());
        generated.push(step[0]);
        let text = match &tokenizer {
            Some(t) => t.decode(&generated, true).unwrap_or_default(),
            None => {
                String::from_utf8_lossy(&generated.iter().map(|&b| b as u8).collect::<Vec<_>>())
                    .into_owned()
            }
        };
        // Print what decoding added (a token may complete a multi-byte character later).
        if let Some(new) = text.strip_prefix(shown.as_str()) {
            print!("{new}");
            std::io::stdout().flush().ok();
        }
        shown = text;
    });
    let total = start.elapsed().as_secs_f64();
    let prefill = first_token.map_or(0.0, |d| d.as_secs_f64());
    let steps = generated.len().saturating_sub(1).max(1);
    println!();
    eprintln!(
        "{} prompt tokens, {} new: prefill {:.1} ms, then {:.1} tokens/s",
        n,
        generated.len(),
        prefill * 1e3,
        steps as f64 / (total - prefill).max(1e-9)
    );
}
