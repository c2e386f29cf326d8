//! Writes a small random GPT-2 folder with a word-level tokenizer and a chat template
//! (`llm::fixtures`), for trying `ferrograd-serve --llm` without downloading a model:
//!
//! ```text
//! cargo run -p ferrograd-serve --example llm_fixture -- --out /tmp/tiny-llm
//! cargo run --release -p ferrograd-serve -- --llm /tmp/tiny-llm --port 8000
//! ```
//!
//! CI serves one to the official `openai` client (`serve/tests/openai/`).

use clap::Parser;
use ferrograd_serve::llm::fixtures::{write_random_gpt2, write_word_tokenizer};
use std::path::PathBuf;

/// Writes a random GPT-2 model folder (config, safetensors, tokenizer, chat template).
#[derive(Parser)]
struct Args {
    /// The folder to write.
    #[arg(long)]
    out: PathBuf,
    /// Width of the model.
    #[arg(long, default_value_t = 32)]
    n_embd: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 2)]
    n_layer: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    n_head: usize,
    /// Positions the model takes.
    #[arg(long, default_value_t = 1024)]
    n_positions: usize,
    /// Tokens (`w0`, `w1`, ... and an end-of-text token).
    #[arg(long, default_value_t = 256)]
    vocab: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    write_random_gpt2(
        &a.out,
        a.n_embd,
        a.n_layer,
        a.n_head,
        a.n_positions,
        a.vocab,
    )?;
    write_word_tokenizer(&a.out, a.vocab)?;
    println!("wrote {}", a.out.display());
    Ok(())
}
