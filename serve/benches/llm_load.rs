//! Load test of the LLM endpoint on loopback, bounded in count and time:
//! `cargo bench -p ferrograd-serve --bench llm_load`.
//!
//! Two GPT-2 folders made here with random weights and a word-level tokenizer
//! ([`fixtures`](ferrograd_serve::llm::fixtures)): the tiny test model's shape (32 wide, 3
//! layers, 256 tokens) and GPT-2 small's (768 wide, 12 layers, 12 heads, 1024 positions,
//! 50,257 tokens). For 1, 8 and 32 concurrent chat clients, each streaming
//! `FERROGRAD_LLM_REQUESTS` (2) greedy requests of `FERROGRAD_LLM_TOKENS` (32) tokens, the
//! server runs with continuous batching (`max_batch` 32) and one sequence at a time
//! (`max_batch` 1): generated tokens per second, p50/p99 time to first token, and the
//! answers compared (each request's streamed text must be the same both ways: one at a
//! time, a request is its generation alone). `FERROGRAD_LLM_MODELS=tiny` skips the small
//! model.

use ferrograd_serve::llm::fixtures::{write_random_gpt2, write_word_tokenizer};
use ferrograd_serve::llm::{self, LlmConfig};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Outcome {
    text: String,
    tokens: usize,
    ttft: Duration,
}

/// One streamed chat request: its text, tokens and time to the first token.
async fn chat(addr: SocketAddr, prompt: &str, max_tokens: usize) -> Outcome {
    let body = json!({"messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true}})
    .to_string();
    let start = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.expect("write");
    s.write_all(body.as_bytes()).await.expect("write");
    let mut seen = String::new();
    let mut ttft = None;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        if ttft.is_none() && seen.contains("\"content\":\"w") {
            ttft = Some(start.elapsed());
        }
    }
    let mut text = String::new();
    let mut tokens = 0;
    for line in seen.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            tokens = n as usize;
        }
    }
    Outcome {
        text,
        tokens,
        ttft: ttft.unwrap_or_else(|| start.elapsed()),
    }
}

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

fn prompt(client: usize, request: usize) -> String {
    (0..8)
        .map(|k| format!("w{}", (client * 131 + request * 17 + k * 7) % 250))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every client's requests, back to back, on a server with `max_batch`.
async fn round(
    dir: &PathBuf,
    max_batch: usize,
    clients: usize,
    requests: usize,
    tokens: usize,
) -> (f64, Vec<Duration>, Vec<Vec<String>>) {
    let app = llm::router(
        dir,
        &LlmConfig {
            max_batch,
            ..LlmConfig::default()
        },
    )
    .expect("the folder serves");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    // Warm up (first-touch allocations).
    chat(addr, "w1 w2", 2).await;
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            tokio::spawn(async move {
                let mut out = Vec::new();
                for r in 0..requests {
                    out.push(chat(addr, &prompt(c, r), tokens).await);
                }
                out
            })
        })
        .collect();
    let mut generated = 0;
    let mut ttfts = Vec::new();
    let mut texts = Vec::new();
    for t in tasks {
        let outs = t.await.expect("client");
        generated += outs.iter().map(|o| o.tokens).sum::<usize>();
        ttfts.extend(outs.iter().map(|o| o.ttft));
        texts.push(outs.into_iter().map(|o| o.text).collect());
    }
    let rate = generated as f64 / start.elapsed().as_secs_f64();
    server.abort();
    (rate, ttfts, texts)
}

fn main() {
    let requests: usize = std::env::var("FERROGRAD_LLM_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let tokens: usize = std::env::var("FERROGRAD_LLM_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let only_tiny = std::env::var("FERROGRAD_LLM_MODELS").is_ok_and(|v| v == "tiny");
    let base = std::env::temp_dir().join(format!("ferrograd-llm-bench-{}", std::process::id()));
    let mut models = vec![("tiny (32x3)", (32, 3, 4, 64, 256))];
    if !only_tiny {
        models.push(("GPT-2 small shape (768x12)", (768, 12, 12, 1024, 50257)));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "| model | clients | tokens/s, one at a time | tokens/s, continuous | gain | TTFT p50 / p99 ms, continuous | answers equal |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (name, (e, l, h, p, v)) in models {
        let dir = base.join(format!("{e}x{l}"));
        write_random_gpt2(&dir, e, l, h, p, v).expect("write the model");
        write_word_tokenizer(&dir, v).expect("write the tokenizer");
        for clients in [1usize, 8, 32] {
            let (single, _, a) = rt.block_on(round(&dir, 1, clients, requests, tokens));
            let (batched, mut ttft, b) = rt.block_on(round(&dir, 32, clients, requests, tokens));
            println!(
                "| {name} | {clients} | {single:.0} | {batched:.0} | {:.2}x | {:.1} / {:.1} | {} |",
                batched / single,
                percentile(&mut ttft, 0.5),
                percentile(&mut ttft, 0.99),
                if a == b { "yes" } else { "NO" }
            );
            assert_eq!(
                a, b,
                "{name}, {clients} clients: answers differ with batching"
            );
        }
    }
    std::fs::remove_dir_all(&base).ok();
}
