//! The OpenAI-compatible LLM endpoint on loopback, with a plain HTTP/1.1 client: the tiny
//! GPT-2 fixture with a word-level tokenizer and a chat template made here.
//!
//! - 1, 8 and 32 concurrent clients, half streaming: every answer equals the same
//!   request's greedy `generate` alone, token for token, and the running batch held
//!   several sequences (continuous batching).
//! - Streams are server-sent events ending with `data: [DONE]`, with usage on request.
//! - The chat template renders the messages (Jinja with Python string methods).
//! - `stop` strings end the text before them; a seed repeats a sampled answer.
//! - A client that disconnects cancels its sequence.
//! - Mistakes get OpenAI's error body with 400.

use ferrograd::models::auto::AutoModelForCausalLM;
use ferrograd::models::generation::{GenerationConfig, generate};
use ferrograd::models::tokenizer::Tokenizer;
use ferrograd::prelude::*;
use ferrograd_serve::llm::fixtures::{write_random_gpt2, write_word_tokenizer};
use ferrograd_serve::llm::{self, LlmConfig};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    common::request(addr, "POST", path, "application/json", body.as_bytes()).await
}

async fn get(addr: SocketAddr, path: &str) -> String {
    common::request(addr, "GET", path, "text/plain", b"")
        .await
        .1
}

const EOS: u32 = 255;

/// The tiny GPT-2 fixture (vocabulary 256, 64 positions) with the word-level tokenizer.
fn folder() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ferrograd-llm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fixture = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../models/tests/fixtures/tiny-gpt2"
        ));
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
        }
        write_word_tokenizer(&dir, 256).unwrap();
        dir
    })
    .clone()
}

/// A random GPT-2, 1024 positions (slow enough that a long answer is still running when
/// a client leaves).
fn random_gpt2(n_embd: usize, n_layer: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ferrograd-llm-{n_embd}x{n_layer}-{}",
        std::process::id()
    ));
    write_random_gpt2(&dir, n_embd, n_layer, 4, 1024, 256).unwrap();
    write_word_tokenizer(&dir, 256).unwrap();
    dir
}

async fn start(max_batch: usize) -> SocketAddr {
    start_with(folder(), max_batch).await
}

async fn start_with(dir: PathBuf, max_batch: usize) -> SocketAddr {
    let app = llm::router(
        dir,
        &LlmConfig {
            max_batch,
            name: Some("tiny".into()),
            ..LlmConfig::default()
        },
    )
    .expect("the folder serves");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The `data:` payloads of a server-sent event stream.
fn events(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:").map(|d| d.trim().to_string()))
        .collect()
}

/// What a streamed answer says: its text, finish reason and usage (if sent).
fn streamed(body: &str, chat: bool) -> (String, String, Option<Value>) {
    let ev = events(body);
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "{body}");
    let mut text = String::new();
    let mut reason = String::new();
    let mut usage = None;
    for e in &ev[..ev.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap_or_else(|err| panic!("{err}: {e}"));
        if let Some(u) = v.get("usage") {
            usage = Some(u.clone());
        }
        let Some(c) = v["choices"].get(0) else {
            continue;
        };
        let piece = if chat {
            &c["delta"]["content"]
        } else {
            &c["text"]
        };
        text.push_str(piece.as_str().unwrap_or(""));
        if let Some(r) = c["finish_reason"].as_str() {
            reason = r.to_string();
        }
    }
    (text, reason, usage)
}

/// The reference: greedy `generate` on the prompt alone, as text and token count.
fn reference(prompt: &str, max_tokens: usize) -> (String, usize, &'static str) {
    static MODEL: OnceLock<(AutoModelForCausalLM, Tokenizer)> = OnceLock::new();
    let (model, tok) = MODEL.get_or_init(|| {
        (
            AutoModelForCausalLM::from_pretrained(folder()).unwrap(),
            Tokenizer::from_pretrained(folder()).unwrap(),
        )
    });
    let ids: Vec<i64> = tok
        .encode(prompt, true)
        .unwrap()
        .iter()
        .map(|&t| t as i64)
        .collect();
    let n = ids.len();
    let out = generate(
        model,
        &Tensor::from_vec(ids, &[1, n]),
        None,
        &GenerationConfig {
            max_new_tokens: max_tokens,
            eos_token_ids: vec![EOS],
            pad_token_id: EOS,
            ..Default::default()
        },
        |_| {},
    );
    let new: Vec<u32> = out.to_vec::<i64>()[n..].iter().map(|&t| t as u32).collect();
    let end = new
        .iter()
        .position(|&t| t == EOS)
        .map_or(new.len(), |p| p + 1);
    let reason = if end <= new.len() && new.get(end.wrapping_sub(1)) == Some(&EOS) {
        "stop"
    } else {
        "length"
    };
    (tok.decode(&new[..end], true).unwrap(), end, reason)
}

fn prompt_of(i: usize) -> String {
    (0..3 + i % 17)
        .map(|k| format!("w{}", (i * 31 + k * 7) % 250))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_answers_equal_each_requests_generation_alone() {
    let addr = start(32).await;
    for clients in [1usize, 8, 32] {
        let mut tasks = Vec::new();
        for i in 0..clients {
            let prompt = prompt_of(i + clients);
            let max_tokens = 5 + (i * 7) % 30;
            let stream = i % 2 == 1;
            tasks.push(tokio::spawn(async move {
                let (want, want_tokens, want_reason) = reference(&prompt, max_tokens);
                let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                    "temperature": 0, "stream": stream,
                    "stream_options": {"include_usage": true}});
                let (status, body) = post(addr, "/v1/completions", &body.to_string()).await;
                assert_eq!(status, 200, "{body}");
                let (text, reason, usage) = if stream {
                    streamed(&body, false)
                } else {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(v["object"], "text_completion");
                    (
                        v["choices"][0]["text"].as_str().unwrap().to_string(),
                        v["choices"][0]["finish_reason"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                        Some(v["usage"].clone()),
                    )
                };
                assert_eq!(text, want, "client {i} of {clients}: {prompt}");
                assert_eq!(reason, want_reason);
                let usage = usage.expect("usage");
                assert_eq!(usage["completion_tokens"], want_tokens, "{usage}");
                assert_eq!(
                    usage["total_tokens"].as_u64().unwrap(),
                    usage["prompt_tokens"].as_u64().unwrap() + want_tokens as u64
                );
            }));
        }
        for t in tasks {
            t.await.expect("client");
        }
    }
    let metrics = get(addr, "/metrics").await;
    let running = metrics
        .lines()
        .find(|l| l.starts_with("ferrograd_llm_max_running_sequences "))
        .and_then(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
        .expect("max running");
    assert!(running > 1, "no step ran more than one sequence: {metrics}");
    assert!(
        metrics.contains("ferrograd_llm_time_to_first_token_seconds_count"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stop_seed_and_errors() {
    let addr = start(8).await;
    // The template: bos and a space, `w1 ` for a system message, each content stripped and a space,
    // then the assistant's cue `w2`.
    let messages = json!([
        {"role": "system", "content": "  w7  "},
        {"role": "user", "content": [{"type": "text", "text": "w8 w9"}]},
    ]);
    let (status, body) = post(
        addr,
        "/v1/chat/completions",
        &json!({"model": "tiny", "messages": messages, "max_tokens": 6, "temperature": 0})
            .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    let (want, _, _) = reference("w3 w1 w7 w8 w9 w2", 6);
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    // Streamed chat: role first, then the same content.
    let (status, body) = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 6, "temperature": 0, "stream": true})
            .to_string(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        events(&body)[0].contains("\"role\":\"assistant\""),
        "{body}"
    );
    assert_eq!(streamed(&body, true).0, want);

    // A stop string: the text ends before it.
    let (full, _, _) = reference("w4 w5 w6", 12);
    let words: Vec<&str> = full.split(' ').collect();
    assert!(words.len() >= 3, "{full}");
    let stop = words[2];
    let cut = &full[..full.find(stop).unwrap()];
    for stream in [false, true] {
        let req = json!({"prompt": "w4 w5 w6", "max_tokens": 12, "temperature": 0,
            "stop": [stop], "stream": stream});
        let (_, body) = post(addr, "/v1/completions", &req.to_string()).await;
        let (text, reason) = if stream {
            let (t, r, _) = streamed(&body, false);
            (t, r)
        } else {
            let v: Value = serde_json::from_str(&body).unwrap();
            (
                v["choices"][0]["text"].as_str().unwrap().to_string(),
                v["choices"][0]["finish_reason"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        };
        assert_eq!(
            (text.as_str(), reason.as_str()),
            (cut, "stop"),
            "stream {stream}"
        );
    }

    // A seed repeats a sampled answer.
    let sampled = |seed: u64| {
        let req = json!({"prompt": "w10 w11", "max_tokens": 10, "temperature": 1.0, "seed": seed});
        async move {
            let (_, body) = post(addr, "/v1/completions", &req.to_string()).await;
            let v: Value = serde_json::from_str(&body).unwrap();
            v["choices"][0]["text"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(sampled(5).await, sampled(5).await);

    // Mistakes: OpenAI's error body.
    let long = (0..70)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    for (req, needle) in [
        (json!({"prompt": "w1", "n": 2}).to_string(), "n must be 1"),
        (
            json!({"prompt": long, "max_tokens": 4}).to_string(),
            "maximum context length",
        ),
        (
            json!({"prompt": "w1", "max_tokens": 100}).to_string(),
            "maximum context length",
        ),
        (
            json!({"prompt": "w1", "temperature": 3}).to_string(),
            "temperature",
        ),
        ("{not json".to_string(), ""),
    ] {
        let (status, body) = post(addr, "/v1/completions", &req).await;
        assert_eq!(status, 400, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{body}"
        );
    }
    let models: Value = serde_json::from_str(&get(addr, "/v1/models").await).unwrap();
    assert_eq!(models["data"][0]["id"], "tiny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_cancels_its_sequence() {
    let addr = start_with(random_gpt2(128, 4), 8).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = json!({"prompt": "w1 w2", "max_tokens": 1000, "temperature": 1.0, "seed": 1,
        "stream": true})
    .to_string();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("data:") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended before its first event");
        seen.extend_from_slice(&buf[..n]);
    }
    drop(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = get(addr, "/metrics").await;
        let value = |name: &str| {
            m.lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(-1.0)
        };
        if value("ferrograd_llm_cancelled_total") >= 1.0
            && value("ferrograd_llm_running_sequences") == 0.0
        {
            let generated = value("ferrograd_llm_generated_tokens_total");
            assert!(generated < 1000.0, "the sequence ran to the end: {m}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not cancelled: {m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
