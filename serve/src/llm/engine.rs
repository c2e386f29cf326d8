//! The generation engine behind the LLM endpoint: one thread that runs every sequence in
//! flight as one batch, continuously. Between decode steps new requests join (their
//! prompt run alone, its keys and values then added to the batch's cache as new rows)
//! and finished or cancelled ones leave (their rows dropped), so a long answer never
//! holds up a short one and the model runs one batched step for all of them.
//!
//! The batch's cache is one [`KvCache`] whose rows are left-padded to the same length,
//! with a mask marking each row's real positions (the layout `generate` uses for a
//! left-padded batch, so a row's answer equals its request's generation alone). Its
//! buffers are reserved once for `max_batch` rows (slots) of the whole context and
//! reused for every request after: a decode step writes each row's new keys and values
//! in place, a joining request's prompt is copied into the next free row, a leaving one's
//! row is filled by the rows after it, and leading positions no row needs are shifted out
//! — so the cache's memory is bounded by `max_batch` × the context and never reallocated.

use ferrograd::models::auto::AutoModelForCausalLM;
use ferrograd::models::generation::{CausalLM, KvCache};
use ferrograd::{DType, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// How one request samples.
#[derive(Clone, Debug)]
pub struct Sampling {
    /// New tokens at most.
    pub max_tokens: usize,
    /// 0: greedy (the first of equal largest logits, as `argmax`); else the logits are
    /// divided by it before sampling.
    pub temperature: f64,
    /// Nucleus sampling: the smallest set of tokens whose probability reaches this.
    pub top_p: f64,
    /// The sampler's seed (a request without one gets a random seed).
    pub seed: u64,
}

/// What the engine tells a request's handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A new token.
    Token(u32),
    /// The sequence is done.
    Done {
        /// `length` (max_tokens reached) or `stop` (an end-of-sequence token).
        finish_reason: &'static str,
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Tokens generated.
        completion_tokens: usize,
    },
    /// The model failed on this request.
    Error(String),
}

/// A request for the engine.
pub struct Job {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// How to sample.
    pub sampling: Sampling,
    /// Where its events go; a closed channel (the client left) cancels it.
    pub events: UnboundedSender<Event>,
    /// When the request arrived (for the time to first token).
    pub arrived: Instant,
}

/// Counters the metrics page shows.
pub struct EngineStats {
    /// Requests waiting to join the batch.
    pub queued: AtomicUsize,
    /// Sequences in the running batch.
    pub running: AtomicUsize,
    /// The largest batch a decode step ran.
    pub max_running: AtomicUsize,
    /// Tokens generated in all.
    pub generated_tokens: AtomicU64,
    /// Prompt tokens processed in all.
    pub prompt_tokens: AtomicU64,
    /// Decode steps run.
    pub decode_steps: AtomicU64,
    /// Sequences that reached `max_tokens` or the context.
    pub finished_length: AtomicU64,
    /// Sequences ended by an end-of-sequence token.
    pub finished_stop: AtomicU64,
    /// Cancelled by the client leaving.
    pub cancelled: AtomicU64,
    /// Times to first token (seconds), for the histogram.
    pub ttft: crate::Histogram,
    /// Seconds spent in model steps (prefill and decode), for tokens/s.
    pub busy_micros: AtomicU64,
}

impl EngineStats {
    pub(crate) fn new() -> EngineStats {
        EngineStats {
            queued: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            generated_tokens: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            decode_steps: AtomicU64::new(0),
            finished_length: AtomicU64::new(0),
            finished_stop: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            ttft: crate::Histogram::new(&crate::LATENCY_BUCKETS),
            busy_micros: AtomicU64::new(0),
        }
    }
}

/// One sequence of the running batch.
struct Seq {
    sampling: Sampling,
    rng: ChaCha8Rng,
    events: UnboundedSender<Event>,
    prompt_tokens: usize,
    generated: usize,
    /// The token sampled last, not yet in the cache.
    last: u32,
    /// Real (not padding) positions this row has in the cache.
    real: usize,
}

/// The batch: its sequences, their cache rows and masks.
struct Batch {
    seqs: Vec<Seq>,
    cache: KvCache,
    /// Per row, 1 for a real cached position and 0 for padding (all the cache's length).
    mask: Vec<Vec<i64>>,
}

/// The engine's settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Sequences in the running batch at most.
    pub max_batch: usize,
    /// Positions the model takes (prompt and answer together).
    pub context: usize,
    /// Tokens that end a sequence.
    pub eos: Vec<u32>,
}

/// Starts the engine's thread; requests go in through the returned sender.
pub fn spawn(
    model: AutoModelForCausalLM,
    config: EngineConfig,
    stats: Arc<EngineStats>,
) -> std::io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("ferrograd-llm-engine".into())
        .spawn(move || run(model, config, rx, stats))?;
    Ok(tx)
}

fn run(
    model: AutoModelForCausalLM,
    config: EngineConfig,
    rx: mpsc::Receiver<Job>,
    stats: Arc<EngineStats>,
) {
    let mut cache = model.new_cache();
    // One position more than the context: a step writes its token before its sequence
    // is found finished.
    cache.reserve(config.max_batch.max(1), config.context + 1);
    let mut batch = Batch {
        seqs: Vec::new(),
        cache,
        mask: Vec::new(),
    };
    loop {
        // Idle: wait for a request (the senders all gone: shut down).
        if batch.seqs.is_empty() {
            match rx.recv() {
                Ok(job) => admit(&model, &config, &mut batch, job, &stats),
                Err(_) => return,
            }
        }
        // New requests join between steps, up to the batch limit.
        while batch.seqs.len() < config.max_batch.max(1) {
            match rx.try_recv() {
                Ok(job) => admit(&model, &config, &mut batch, job, &stats),
                Err(_) => break,
            }
        }
        stats.running.store(batch.seqs.len(), Ordering::Relaxed);
        if !batch.seqs.is_empty() {
            decode_step(&model, &config, &mut batch, &stats);
        }
        stats.running.store(batch.seqs.len(), Ordering::Relaxed);
    }
}

/// Greedy or sampled next token from one row's logits.
fn sample(logits: &[f32], s: &Sampling, rng: &mut ChaCha8Rng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv { (i, v) } else { (bi, bv) }
            })
            .0 as u32
    };
    if s.temperature <= 0.0 {
        return argmax();
    }
    let scaled: Vec<f64> = logits.iter().map(|&l| l as f64 / s.temperature).collect();
    let max = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return argmax();
    }
    let mut probs: Vec<(usize, f64)> = scaled
        .iter()
        .enumerate()
        .map(|(i, &l)| (i, (l - max).exp()))
        .collect();
    let total: f64 = probs.iter().map(|p| p.1).sum();
    probs.iter_mut().for_each(|p| p.1 /= total);
    if s.top_p < 1.0 {
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut cum = 0.0;
        let mut keep = probs.len();
        for (i, p) in probs.iter().enumerate() {
            cum += p.1;
            if cum >= s.top_p {
                keep = i + 1;
                break;
            }
        }
        probs.truncate(keep.max(1));
        let kept: f64 = probs.iter().map(|p| p.1).sum();
        probs.iter_mut().for_each(|p| p.1 /= kept);
    }
    let mut u: f64 = rng.random::<f64>();
    for (i, p) in &probs {
        u -= p;
        if u <= 0.0 {
            return *i as u32;
        }
    }
    probs.last().map_or(0, |p| p.0 as u32)
}

/// Sends `event`; false when the client has gone.
fn send(seq: &Seq, event: Event) -> bool {
    seq.events.send(event).is_ok()
}

/// Why a sequence ends after its latest token, if it does.
fn finished(seq: &Seq, config: &EngineConfig) -> Option<&'static str> {
    if config.eos.contains(&seq.last) {
        Some("stop")
    } else if seq.generated >= seq.sampling.max_tokens
        || seq.prompt_tokens + seq.generated >= config.context
    {
        Some("length")
    } else {
        None
    }
}

fn done(seq: &Seq, reason: &'static str, stats: &EngineStats) {
    match reason {
        "stop" => stats.finished_stop.fetch_add(1, Ordering::Relaxed),
        _ => stats.finished_length.fetch_add(1, Ordering::Relaxed),
    };
    send(
        seq,
        Event::Done {
            finish_reason: reason,
            prompt_tokens: seq.prompt_tokens,
            completion_tokens: seq.generated,
        },
    );
}

/// Runs a new request's prompt alone and adds it to the batch (or answers it at once:
/// an error, or an answer that ends with its first token).
fn admit(
    model: &AutoModelForCausalLM,
    config: &EngineConfig,
    batch: &mut Batch,
    job: Job,
    stats: &EngineStats,
) {
    stats.queued.fetch_sub(1, Ordering::Relaxed);
    if job.events.is_closed() {
        stats.cancelled.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let p = job.prompt.len();
    let started = Instant::now();
    let device = model.device();
    // Inference: nothing is recorded for gradients.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ferrograd::prelude::no_grad(|| {
            let ids: Vec<i64> = job.prompt.iter().map(|&t| t as i64).collect();
            let ids = Tensor::from_vec(ids, &[1, p]).to_device(&device)?;
            let pos = Tensor::arange(0.0, p as f64, 1.0, DType::I64, &device).reshape(&[1, p]);
            let mask = Tensor::ones(&[1, p], DType::I64, &device);
            let mut cache = model.new_cache();
            let logits = model.forward_cached(&ids, &pos, &mask, &mut cache, true);
            let logits = logits.to_dtype(DType::F32).to_vec::<f32>();
            Ok::<_, ferrograd::Error>((logits, cache))
        })
    }));
    stats
        .busy_micros
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    let (logits, cache) = match run {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            let _ = job
                .events
                .send(Event::Error(format!("the model run failed: {e}")));
            return;
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let _ = job
                .events
                .send(Event::Error(format!("the model run failed: {msg}")));
            return;
        }
    };
    stats.prompt_tokens.fetch_add(p as u64, Ordering::Relaxed);
    let mut seq = Seq {
        rng: ChaCha8Rng::seed_from_u64(job.sampling.seed),
        sampling: job.sampling,
        events: job.events,
        prompt_tokens: p,
        generated: 0,
        last: 0,
        real: p,
    };
    if seq.sampling.max_tokens == 0 {
        done(&seq, "length", stats);
        return;
    }
    seq.last = sample(&logits, &seq.sampling, &mut seq.rng);
    seq.generated = 1;
    stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
    stats.ttft.observe(job.arrived.elapsed().as_secs_f64());
    if !send(&seq, Event::Token(seq.last)) {
        stats.cancelled.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if let Some(reason) = finished(&seq, config) {
        done(&seq, reason, stats);
        return;
    }
    // Join the batch: the shorter side is padded on the left.
    let have = batch.cache.len();
    let mut cache = cache;
    let mut row = vec![1i64; p];
    if batch.seqs.is_empty() {
        batch.cache.clear();
        batch.cache.append_rows(cache);
        batch.mask = vec![row];
    } else {
        if p < have {
            cache.pad_left(have - p);
            row = [vec![0; have - p], row].concat();
        } else if p > have {
            batch.cache.pad_left(p - have);
            for m in &mut batch.mask {
                m.splice(0..0, std::iter::repeat_n(0, p - have));
            }
        }
        batch.cache.append_rows(cache);
        batch.mask.push(row);
    }
    batch.seqs.push(seq);
}

/// One token for every sequence of the batch; finished and cancelled ones leave.
fn decode_step(
    model: &AutoModelForCausalLM,
    config: &EngineConfig,
    batch: &mut Batch,
    stats: &EngineStats,
) {
    let b = batch.seqs.len();
    stats.max_running.fetch_max(b, Ordering::Relaxed);
    let device = model.device();
    let started = Instant::now();
    let ids: Vec<i64> = batch.seqs.iter().map(|s| s.last as i64).collect();
    let pos: Vec<i64> = batch.seqs.iter().map(|s| s.real as i64).collect();
    let t = batch.cache.len();
    let mask: Vec<i64> = batch
        .mask
        .iter()
        .flat_map(|m| m.iter().copied().chain(std::iter::once(1)))
        .collect();
    // Inference: nothing is recorded for gradients.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ferrograd::prelude::no_grad(|| {
            let ids = Tensor::from_vec(ids, &[b, 1]).to_device(&device)?;
            let pos = Tensor::from_vec(pos, &[b, 1]).to_device(&device)?;
            let mask = Tensor::from_vec(mask, &[b, t + 1]).to_device(&device)?;
            let logits = model.forward_cached(&ids, &pos, &mask, &mut batch.cache, true);
            Ok::<_, ferrograd::Error>(logits.to_dtype(DType::F32).to_vec::<f32>())
        })
    }));
    stats
        .busy_micros
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    stats.decode_steps.fetch_add(1, Ordering::Relaxed);
    let logits = match run {
        Ok(Ok(l)) => l,
        failed => {
            let msg = match failed {
                Ok(Err(e)) => e.to_string(),
                Err(p) => crate::panic_message(p.as_ref()),
                Ok(Ok(_)) => unreachable!(),
            };
            for s in &batch.seqs {
                send(s, Event::Error(format!("the model run failed: {msg}")));
            }
            batch.seqs.clear();
            batch.mask.clear();
            batch.cache.clear();
            return;
        }
    };
    let vocab = logits.len() / b;
    let mut keep = Vec::with_capacity(b);
    for (i, seq) in batch.seqs.iter_mut().enumerate() {
        batch.mask[i].push(1);
        seq.real += 1;
        seq.last = sample(
            &logits[i * vocab..(i + 1) * vocab],
            &seq.sampling,
            &mut seq.rng,
        );
        seq.generated += 1;
        stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
        if !send(seq, Event::Token(seq.last)) {
            stats.cancelled.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match finished(seq, config) {
            Some(reason) => done(seq, reason, stats),
            None => keep.push(i),
        }
    }
    if keep.len() < b {
        batch.cache.select_rows(&keep);
        let mut seqs: Vec<Option<Seq>> = std::mem::take(&mut batch.seqs)
            .into_iter()
            .map(Some)
            .collect();
        batch.seqs = keep.iter().filter_map(|&i| seqs[i].take()).collect();
        batch.mask = keep
            .iter()
            .map(|&i| std::mem::take(&mut batch.mask[i]))
            .collect();
        // Positions no remaining row needs (padding in every row) are dropped.
        let lead = batch
            .mask
            .iter()
            .map(|m| m.iter().take_while(|&&v| v == 0).count())
            .min()
            .unwrap_or(0);
        if lead > 0 {
            batch.cache.trim_left(lead);
            for m in &mut batch.mask {
                m.drain(..lead);
            }
        }
        if batch.seqs.is_empty() {
            batch.cache.clear();
            batch.mask.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest_and_sampling_repeats_with_its_seed() {
        let s = Sampling {
            max_tokens: 1,
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(sample(&[0.1, 0.7, 0.7, 0.2], &s, &mut rng), 1);
        let hot = Sampling {
            temperature: 1.0,
            ..s.clone()
        };
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..20)
                .map(|_| sample(&[0.0, 1.0, 2.0, 0.5], &hot, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        // top_p small enough keeps only the likeliest token.
        let nucleus = Sampling {
            top_p: 0.1,
            ..hot.clone()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for _ in 0..20 {
            assert_eq!(sample(&[0.0, 1.0, 3.0, 0.5], &nucleus, &mut rng), 2);
        }
    }
}
