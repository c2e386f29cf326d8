//! Transfer learning as the PyTorch tutorials teach it, on real data: the pretrained
//! all-MiniLM-L6-v2 encoder plus a new linear head learns which of the eight plays in
//! `shakespeare_8plays.txt` a passage of four lines comes from (speaker names and stage
//! directions stripped; test passages come from held-out scenes). First the encoder is
//! frozen and only the head learns (on features computed once), then everything is
//! fine-tuned with a lower learning rate for the encoder than for the head (two
//! parameter groups of one AdamW). The same model from a random initialisation, trained
//! with the same recipe and budget, is the baseline.
//!
//! ```sh
//! cargo run --release --features models --example finetune                  # 96 training passages per play, 2 epochs
//! cargo run --release --features models --example finetune -- --per-play 256 --epochs 3
//! cargo run --release --features models --example finetune -- --show 10     # print some passages and stop
//! cargo run --release --features models --example finetune -- --model DIR --text FILE --out DIR
//! ```
//!
//! Needs the MiniLM folder and the corpus: `$FERROGRAD_DATA` or `../shared/data`
//! (`all-minilm-l6-v2/`, `text/shakespeare_8plays.txt`). Writes `metrics.csv` and
//! `metrics.png`/`.svg` (fine-tuning loss of both runs against the step) to
//! `runs/finetune/`.

use ferrograd::models::bert::{BertModel, Pooling};
use ferrograd::models::tokenizer::{EncodeOptions, Tokenizer};
use ferrograd::nn::{Linear, Module};
use ferrograd::optim::{AdamConfig, AdamW, Optimizer, ParamGroup};
use ferrograd::prelude::*;
use ferrograd::train::{EpochProgress, MetricsLog, correct_predictions};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::path::PathBuf;

/// Spoken lines per passage.
const LINES: usize = 4;
/// Tokens per passage at most ([CLS] and [SEP] included).
const MAX_TOKENS: usize = 64;
const BATCH: usize = 16;

/// A passage: the play it comes from, its scene (numbered across the corpus) and text.
struct Passage {
    play: usize,
    scene: usize,
    text: String,
}

/// The title glued to the end of the line before "by William Shakespeare" (the corpus
/// joins each play's last line to the next one's title): its trailing upper-case run.
/// Returns the text before the title and the title.
fn split_title(line: &str) -> (&str, String) {
    let mut start = line
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_uppercase() || " ,'".contains(*c))
        .last()
        .map_or(line.len(), |(i, _)| i);
    if line[start..].starts_with("THE END") {
        start += "THE END".len();
    }
    (&line[..start], line[start..].trim().to_string())
}

/// A speaker's name: a short line after a blank one, of capitalised words ending in a
/// period ("HAMLET.", "First Witch.", "Ham.", "1 Clown.") or in capitals ("OBERON").
fn is_speaker(line: &str, after_blank: bool) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let capitalised = words.iter().all(|w| {
        w.chars()
            .next()
            .is_some_and(|c| c.is_uppercase() || c.is_ascii_digit())
    });
    let capitals = !line.chars().any(|c| c.is_lowercase());
    after_blank
        && !words.is_empty()
        && words.len() <= 4
        && ((line.ends_with('.') && capitalised) || capitals)
}

/// The plays' titles and every passage of `LINES` spoken lines (within one scene), with
/// speaker names, headings and stage directions (`[...]`, over several lines too) taken
/// out.
fn passages(text: &str) -> (Vec<String>, Vec<Passage>) {
    let lines: Vec<&str> = text.lines().collect();
    // The line holding each play's title: the last non-blank one before its byline.
    let title_lines: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim() == "by William Shakespeare")
        .filter_map(|i| (0..i).rev().find(|&j| !lines[j].trim().is_empty()))
        .collect();
    let mut titles = Vec::new();
    let mut out = Vec::new();
    let (mut scene, mut in_scene, mut in_direction) = (0usize, false, false);
    let mut spoken: Vec<String> = Vec::new();
    let mut after_blank = true;
    let mut flush = |spoken: &mut Vec<String>, play: usize, scene: usize| {
        for chunk in spoken.chunks_exact(LINES) {
            out.push(Passage {
                play,
                scene,
                text: chunk.join(" "),
            });
        }
        spoken.clear();
    };
    for (i, raw) in lines.iter().enumerate() {
        let mut line = raw.trim();
        let mut title = None;
        if title_lines.contains(&i) {
            // The previous play's last words, then the next play's title.
            let (before, t) = split_title(line);
            (line, title) = (before.trim(), Some(t));
        }
        if let Some(t) = title {
            if !line.is_empty() && in_scene && !in_direction && !line.starts_with('[') {
                spoken.push(line.to_string());
            }
            if !titles.is_empty() {
                flush(&mut spoken, titles.len() - 1, scene);
            }
            titles.push(t);
            (in_scene, in_direction) = (false, false);
            continue;
        }
        let heading = ["SCENE ", "Scene "].iter().any(|s| line.starts_with(s))
            && line[6..].starts_with(['I', 'V', 'X']);
        if heading {
            if !titles.is_empty() {
                flush(&mut spoken, titles.len() - 1, scene);
            }
            scene += 1;
            in_scene = true;
            after_blank = true;
            continue;
        }
        if line.starts_with("ACT ") || line == "THE END" {
            in_scene = false;
            continue;
        }
        // Stage directions, inline or over several lines.
        let mut kept = String::new();
        let mut rest = line;
        while !rest.is_empty() {
            if in_direction {
                match rest.find(']') {
                    Some(j) => {
                        in_direction = false;
                        rest = &rest[j + 1..];
                    }
                    None => rest = "",
                }
            } else {
                match rest.find('[') {
                    Some(j) => {
                        kept.push_str(&rest[..j]);
                        in_direction = true;
                        rest = &rest[j + 1..];
                    }
                    None => {
                        kept.push_str(rest);
                        rest = "";
                    }
                }
            }
        }
        let kept = kept.trim();
        if line.is_empty() {
            after_blank = true;
            continue;
        }
        if kept.is_empty() {
            continue;
        }
        if !in_scene || is_speaker(kept, after_blank) {
            after_blank = false;
            continue;
        }
        after_blank = false;
        spoken.push(kept.to_string());
    }
    if !titles.is_empty() {
        flush(&mut spoken, titles.len() - 1, scene);
    }
    (titles, out)
}

/// The encoder and a linear head on its mean-pooled token states.
#[derive(Module)]
struct Classifier {
    encoder: BertModel,
    head: Linear,
}

impl Classifier {
    fn features(&self, batch: &ferrograd::models::tokenizer::BatchEncoding) -> Tensor {
        let h = self
            .encoder
            .forward(&batch.input_ids, Some(&batch.attention_mask), None)
            .last_hidden_state;
        Pooling::Mean.pool(&h, &batch.attention_mask)
    }
}

struct Data<'a> {
    tokenizer: &'a Tokenizer,
    texts: Vec<&'a str>,
    labels: Vec<i64>,
}

impl Data<'_> {
    fn encode(&self, idx: &[usize]) -> ferrograd::models::tokenizer::BatchEncoding {
        let texts: Vec<&str> = idx.iter().map(|&i| self.texts[i]).collect();
        let options = EncodeOptions {
            max_length: Some(MAX_TOKENS),
            ..Default::default()
        };
        self.tokenizer
            .encode_batch(&texts, &options)
            .expect("the corpus encodes")
    }
    fn labels(&self, idx: &[usize]) -> Tensor {
        Tensor::from_vec(idx.iter().map(|&i| self.labels[i]).collect(), &[idx.len()])
    }
    fn len(&self) -> usize {
        self.texts.len()
    }
}

/// Test accuracy of the whole model (eval mode, no gradients).
fn accuracy(model: &mut Classifier, data: &Data) -> f64 {
    model.eval();
    let idx: Vec<usize> = (0..data.len()).collect();
    let correct: usize = no_grad(|| {
        idx.chunks(64)
            .map(|b| {
                let logits = model.head.forward(&model.features(&data.encode(b)));
                correct_predictions(&logits, &data.labels(b))
            })
            .sum()
    });
    correct as f64 / data.len() as f64
}

/// Pooled features of every passage, computed once (the frozen encoder's output).
fn frozen_features(model: &mut Classifier, data: &Data, what: &str) -> Tensor {
    model.eval();
    let idx: Vec<usize> = (0..data.len()).collect();
    let mut bar = EpochProgress::new(1, 1, idx.len().div_ceil(64));
    let parts: Vec<Tensor> = no_grad(|| {
        idx.chunks(64)
            .map(|b| {
                let f = model.features(&data.encode(b));
                bar.update(b.len(), 0.0, None);
                f
            })
            .collect()
    });
    bar.finish();
    println!("  {what}: features of {} passages", data.len());
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
}

/// Phase 1 (encoder frozen: only the head learns, on precomputed features), then phase
/// 2 (everything, the encoder at a lower learning rate than the head), returning the test
/// accuracies after each and the fine-tuning losses.
fn run(
    name: &str,
    model: &mut Classifier,
    train: &Data,
    test: &Data,
    epochs: usize,
    seed: u64,
) -> (f64, f64, Vec<f64>) {
    println!("{name}: phase 1, encoder frozen, the head learns");
    let features = frozen_features(model, train, "train");
    let labels = train.labels(&(0..train.len()).collect::<Vec<_>>());
    let mut opt = AdamW::named(
        model.head.named_parameters(),
        AdamConfig::default().lr(3e-3).weight_decay(0.01),
    );
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    for _ in 0..60 {
        order.shuffle(&mut rng);
        for b in order.chunks(32) {
            let ids = Tensor::from_vec(b.iter().map(|&i| i as i64).collect(), &[b.len()]);
            let x = features.index_select(0, &ids);
            let y = labels.index_select(0, &ids);
            let loss = F::cross_entropy(&model.head.forward(&x), &y);
            opt.zero_grad();
            loss.backward();
            opt.step();
        }
    }
    let frozen = accuracy(model, test);
    println!(
        "{name}: test accuracy with the encoder frozen: {:.1}%",
        100.0 * frozen
    );

    println!("{name}: phase 2, fine-tuning everything (encoder lr 5e-5, head lr 1e-3)");
    let mut opt = AdamW::with_groups(vec![
        ParamGroup::named(
            model.encoder.named_parameters(),
            AdamConfig::default().lr(5e-5).weight_decay(0.01),
        ),
        ParamGroup::named(
            model.head.named_parameters(),
            AdamConfig::default().lr(1e-3).weight_decay(0.01),
        ),
    ]);
    let mut losses = Vec::new();
    for epoch in 1..=epochs {
        model.train();
        order.shuffle(&mut rng);
        let mut bar = EpochProgress::new(epoch, epochs, order.len().div_ceil(BATCH));
        for b in order.chunks(BATCH) {
            let batch = train.encode(b);
            let y = train.labels(b);
            let logits = model.head.forward(&model.features(&batch));
            let loss = F::cross_entropy(&logits, &y);
            opt.zero_grad();
            loss.backward();
            opt.step();
            let l = loss.item::<f32>() as f64;
            losses.push(l);
            bar.update(b.len(), l, Some(correct_predictions(&logits, &y)));
        }
        bar.finish();
    }
    let tuned = accuracy(model, test);
    println!(
        "{name}: test accuracy after fine-tuning: {:.1}%",
        100.0 * tuned
    );
    (frozen, tuned, losses)
}

/// Fine-tunes a sentence encoder to tell which play a passage comes from.
#[derive(clap::Parser, Debug)]
#[command(name = "finetune")]
struct Cli {
    /// The sentence-transformers folder (default `<data>/all-minilm-l6-v2`; the data
    /// folder is `$FERROGRAD_DATA`, else `../shared/data`).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The plays (default `<data>/text/shakespeare_8plays.txt`).
    #[arg(long, value_name = "FILE")]
    text: Option<PathBuf>,
    /// Where the checkpoints and logs go.
    #[arg(long, value_name = "DIR", default_value = "runs/finetune")]
    out: PathBuf,
    /// Training passages per play.
    #[arg(long, value_name = "N", default_value_t = 96)]
    per_play: usize,
    /// Test passages per play.
    #[arg(long, value_name = "N", default_value_t = 48)]
    test_per_play: usize,
    /// Epochs to train.
    #[arg(long, value_name = "N", default_value_t = 2)]
    epochs: usize,
    /// Test passages to print with their predicted play.
    #[arg(long, value_name = "N", default_value_t = 0)]
    show: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = <Cli as clap::Parser>::parse();
    let data_dir = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/data"));
    let model_dir = cli
        .model
        .unwrap_or_else(|| data_dir.join("all-minilm-l6-v2"));
    let text_path = cli
        .text
        .unwrap_or_else(|| data_dir.join("text/shakespeare_8plays.txt"));
    let (out, per_play, test_per_play, epochs, show) = (
        cli.out,
        cli.per_play,
        cli.test_per_play,
        cli.epochs,
        cli.show,
    );
    let text = std::fs::read_to_string(&text_path).map_err(|e| {
        format!(
            "{}: {e} (set FERROGRAD_DATA or pass --text FILE)",
            text_path.display()
        )
    })?;
    let tokenizer = Tokenizer::from_pretrained(&model_dir)?;
    let (titles, all) = passages(&text);
    // Held-out scenes: every fourth scene of the corpus (each play has 9 to 27).
    let is_test = |p: &Passage| p.scene % 4 == 3;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let (mut train_idx, mut test_idx) = (Vec::new(), Vec::new());
    for play in 0..titles.len() {
        for (held_out, n, into) in [
            (false, per_play, &mut train_idx),
            (true, test_per_play, &mut test_idx),
        ] {
            let mut of_play: Vec<usize> = (0..all.len())
                .filter(|&i| all[i].play == play && is_test(&all[i]) == held_out)
                .collect();
            of_play.shuffle(&mut rng);
            into.extend(of_play.into_iter().take(n));
        }
    }
    for (i, title) in titles.iter().enumerate() {
        let n = all.iter().filter(|p| p.play == i).count();
        println!("{i}: {title} ({n} passages)");
    }
    let subset = |idx: &[usize]| Data {
        tokenizer: &tokenizer,
        texts: idx.iter().map(|&i| all[i].text.as_str()).collect(),
        labels: idx.iter().map(|&i| all[i].play as i64).collect(),
    };
    let (train, test) = (subset(&train_idx), subset(&test_idx));
    if let Some(every) = train_idx.len().checked_div(show) {
        // A look at the data: `show` training passages and their labels, then stop.
        for i in train_idx.iter().step_by(every.max(1)).take(show) {
            println!("[{}] {}", titles[all[*i].play], all[*i].text);
        }
        return Ok(());
    }
    println!(
        "{} training passages, {} test passages from held-out scenes; e.g. {:?}",
        train.len(),
        test.len(),
        train.texts[0]
    );

    manual_seed(0);
    let encoder = BertModel::from_pretrained(&model_dir)?;
    let config = encoder.config().clone();
    let hidden = config.hidden_size;
    let mut pretrained = Classifier {
        encoder,
        head: Linear::new(hidden, titles.len(), &Device::Cpu),
    };
    let start = std::time::Instant::now();
    let (p_frozen, p_tuned, p_losses) =
        run("pretrained", &mut pretrained, &train, &test, epochs, 1);
    let p_time = start.elapsed().as_secs_f64();

    manual_seed(0);
    let mut random = Classifier {
        encoder: BertModel::new(&config, false, &Device::Cpu),
        head: Linear::new(hidden, titles.len(), &Device::Cpu),
    };
    let start = std::time::Instant::now();
    let (r_frozen, r_tuned, r_losses) = run("random init", &mut random, &train, &test, epochs, 1);
    let r_time = start.elapsed().as_secs_f64();

    std::fs::create_dir_all(&out)?;
    let mut log = MetricsLog::create(
        out.join("metrics.csv"),
        &["step", "pretrained_loss", "random_init_loss"],
    )?;
    for (i, (p, r)) in p_losses.iter().zip(&r_losses).enumerate() {
        log.append(&[(i + 1) as f64, *p, *r])?;
    }
    log.plot(out.join("metrics.png"), out.join("metrics.svg"))?;
    let chance = 100.0 / titles.len() as f64;
    println!();
    println!(
        "test accuracy ({} passages, chance {chance:.1}%):",
        test.len()
    );
    println!("                 encoder frozen   fine-tuned   time");
    println!(
        "  pretrained     {:>13.1}%   {:>9.1}%   {p_time:.0} s",
        100.0 * p_frozen,
        100.0 * p_tuned
    );
    println!(
        "  random init    {:>13.1}%   {:>9.1}%   {r_time:.0} s",
        100.0 * r_frozen,
        100.0 * r_tuned
    );
    Ok(())
}
