//! Embeds sentences with a sentence-transformers folder and ranks them by similarity to
//! the first (the query), as `SentenceTransformer(dir).encode(..)` and
//! `util.cos_sim` would.
//!
//! ```sh
//! cargo run --release --features models --example embed -- "How do I bake bread?" "Bread baking for beginners" "The stock market fell" "Kneading dough by hand"
//! cargo run --release --features models --example embed -- --model path/to/all-MiniLM-L6-v2 "query" "candidate" ..
//! ```
//!
//! The model folder defaults to `$FERROGRAD_DATA/all-minilm-l6-v2`, then
//! `../shared/data/all-minilm-l6-v2` (ferrograd downloads nothing).

use ferrograd::models::bert::SentenceEncoder;
use std::path::PathBuf;
use std::time::Instant;

/// Embeds sentences and ranks them by cosine similarity to the first.
#[derive(clap::Parser, Debug)]
#[command(name = "embed")]
struct Cli {
    /// A sentence-transformers folder (default `$FERROGRAD_DATA/all-minilm-l6-v2`, else
    /// `../shared/data/all-minilm-l6-v2`).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The query, then the candidates (a built-in set when none is given).
    texts: Vec<String>,
}

fn main() {
    let Cli { model, mut texts } = <Cli as clap::Parser>::parse();
    let model = model.unwrap_or_else(|| {
        std::env::var_os("FERROGRAD_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("../shared/data"))
            .join("all-minilm-l6-v2")
    });
    if texts.is_empty() {
        texts = [
            "How do I bake bread at home?",
            "A beginner's guide to baking bread",
            "Kneading dough by hand takes ten minutes.",
            "The stock market fell sharply on Monday.",
            "Sourdough needs a starter culture.",
            "Football results from the weekend",
        ]
        .map(String::from)
        .to_vec();
        println!(
            "(no sentences given: ranking a built-in set; pass your own, the first is the query)\n"
        );
    }
    let start = Instant::now();
    let encoder = match SentenceEncoder::from_pretrained(&model) {
        Ok(e) => e,
        Err(e) => {
            eprintln!(
                "cannot load the model: {e}\n(pass --model DIR, a sentence-transformers folder)"
            );
            std::process::exit(1);
        }
    };
    println!(
        "loaded {} in {:.2} s",
        model.display(),
        start.elapsed().as_secs_f64()
    );
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let start = Instant::now();
    let embeddings = match encoder.encode(&refs) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot encode: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "embedded {} sentences ({} dims) in {:.1} ms\n",
        refs.len(),
        embeddings.shape()[1],
        start.elapsed().as_secs_f64() * 1e3
    );
    // Cosine similarity of every sentence to the query (the rows are normalised when the
    // model ends with a Normalize module; divide by the norms either way).
    let norms = embeddings.norm(2.0, &[1], true);
    let unit = embeddings.div(&norms.clamp_min(1e-12));
    let scores = unit.matmul(&unit.select(0, 0).unsqueeze(1)).to_vec::<f32>();
    let mut ranked: Vec<(usize, f32)> = scores.into_iter().enumerate().skip(1).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("query: {}", texts[0]);
    for (i, s) in ranked {
        println!("  {s:+.4}  {}", texts[i]);
    }
}
