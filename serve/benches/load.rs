//! Load test of `ferrograd-serve` on loopback, bounded in count and time:
//! `cargo bench -p ferrograd-serve --bench load`.
//!
//! Two models, exported to ONNX here: the LeNet-5 MNIST CNN (`[N, 1, 28, 28]`) and a
//! MiniLM-sized BERT encoder (6 layers, width 384, 12 heads; the real all-MiniLM-L6-v2
//! weights when `$FERROGRAD_DATA/all-minilm-l6-v2` or `../shared/data/all-minilm-l6-v2`
//! exists) on 16-token inputs. For 1, 16 and 32 concurrent clients, each sending requests
//! of one row back to back over a kept-alive connection, with dynamic batching on
//! (`max_batch` 32, 2 ms) and off: the error count (must be 0), p50/p99 latency and
//! throughput. From 16 clients on, off and on alternate three times and the medians of
//! their throughputs are compared.

use ferrograd::models::bert::BertModel;
use ferrograd::nn::Module;
use ferrograd::onnx::{self, ExportOptions, OnnxModel};
use ferrograd::prelude::*;
use ferrograd_serve::{ModelSpec, ServeConfig, router, serve};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

ferrograd::network! {
    /// LeNet-5 for 28x28 digits.
    pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2), relu, max_pool2d(2),
        conv2: Conv2d(6 -> 16, kernel = 5), relu, max_pool2d(2) => [N, 16, 5, 5],
        flatten,
        fc1: Linear(400 -> 120), relu,
        fc2: Linear(120 -> 84), relu,
        fc3: Linear(84 -> 10),
    }
}

const TOKENS: usize = 16;

fn lenet() -> OnnxModel {
    manual_seed(0);
    let net = LeNet::new(&Device::Cpu);
    let x = Tensor::randn(&[2, 1, 28, 28], DType::F32, &Device::Cpu);
    let opts = ExportOptions::new()
        .dynamic_axis("input", 0, "batch")
        .dynamic_axis("output", 0, "batch");
    let e = onnx::export_module(&net, &x, &opts).expect("export lenet");
    OnnxModel::from_bytes(&e.to_bytes()).expect("load lenet")
}

fn minilm() -> (OnnxModel, &'static str) {
    let dir = std::env::var_os("FERROGRAD_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"))
        })
        .join("all-minilm-l6-v2");
    let (mut bert, which) = match BertModel::from_pretrained(&dir) {
        Ok(b) => (b, "all-MiniLM-L6-v2 weights"),
        Err(_) => {
            let config: ferrograd::models::bert::BertConfig =
                serde_json::from_value(serde_json::json!({
                    "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
                    "num_attention_heads": 12, "intermediate_size": 1536,
                    "max_position_embeddings": 512
                }))
                .expect("config");
            (
                BertModel::new(&config, false, &Device::Cpu),
                "random MiniLM-sized weights",
            )
        }
    };
    bert.eval();
    let ids = Tensor::from_vec(
        (0..2 * TOKENS).map(|i| 100 + i as i64).collect(),
        &[2, TOKENS],
    );
    let opts = ExportOptions::new()
        .input_names(["input_ids"])
        .dynamic_axis("input_ids", 0, "batch")
        .dynamic_axis("input_ids", 1, "seq");
    let e = onnx::export_with(
        &bert,
        &[ids],
        |xs| vec![bert.forward(&xs[0], None, None).last_hidden_state],
        &opts,
    )
    .expect("export MiniLM");
    (
        OnnxModel::from_bytes(&e.to_bytes()).expect("load MiniLM"),
        which,
    )
}

/// One client's connection, kept alive between requests as load generators (`wrk`,
/// `ab -k`, locust) keep theirs; reconnects after a failed or timed-out request.
struct Client {
    addr: SocketAddr,
    stream: Option<tokio::io::BufReader<tokio::net::TcpStream>>,
}

impl Client {
    fn new(addr: SocketAddr) -> Self {
        Client { addr, stream: None }
    }

    /// Posts `body` and reads the whole answer; returns the status (`None` when the
    /// connection failed: the caller then drops it).
    async fn post(&mut self, path: &str, body: &[u8]) -> Option<u16> {
        if self.stream.is_none() {
            let s = tokio::net::TcpStream::connect(self.addr).await.ok()?;
            s.set_nodelay(true).ok()?;
            self.stream = Some(tokio::io::BufReader::new(s));
        }
        let s = self.stream.as_mut()?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.get_mut().write_all(head.as_bytes()).await.ok()?;
        s.get_mut().write_all(body).await.ok()?;
        let mut line = String::new();
        s.read_line(&mut line).await.ok()?;
        let status = line.split_whitespace().nth(1)?.parse().ok()?;
        let mut length = 0usize;
        loop {
            line.clear();
            if s.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().ok()?;
            }
        }
        let mut answer = vec![0u8; length];
        s.read_exact(&mut answer).await.ok()?;
        Some(status)
    }
}

struct Outcome {
    errors: usize,
    p50_ms: f64,
    p99_ms: f64,
    per_second: f64,
}

async fn run_load(
    addr: SocketAddr,
    path: &'static str,
    body: String,
    clients: usize,
    total: usize,
) -> Outcome {
    let per_client = total.div_ceil(clients);
    let body = std::sync::Arc::new(body);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut client = Client::new(addr);
            for _ in 0..per_client {
                let t = Instant::now();
                let status = tokio::time::timeout(
                    Duration::from_secs(30),
                    client.post(path, body.as_bytes()),
                )
                .await
                .ok()
                .flatten()
                .unwrap_or(0);
                if status == 0 {
                    // A failed connection, or a timed-out answer that may still be on its
                    // way: start afresh.
                    client.stream = None;
                }
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                errors += (status != 200) as usize;
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("client");
        lat.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Outcome {
        errors,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        per_second: lat.len() as f64 / elapsed,
    }
}

fn json(x: &Tensor) -> String {
    let (dtype, data): (&str, Vec<serde_json::Value>) = if x.dtype() == DType::I64 {
        (
            "int64",
            x.to_vec::<i64>().into_iter().map(Into::into).collect(),
        )
    } else {
        (
            "float32",
            x.to_vec::<f32>()
                .into_iter()
                .map(|v| (v as f64).into())
                .collect(),
        )
    };
    serde_json::json!({"inputs": [{"shape": x.shape(), "dtype": dtype, "data": data}]}).to_string()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("ferrograd-serve load test on loopback; {cpu}, {threads} threads");
    let (_, which) = minilm();
    println!("MiniLM: {which}, {TOKENS} tokens per request\n");
    println!("| model | clients | batching | requests | errors | p50 ms | p99 ms | requests/s |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let image = json(&Tensor::randn(&[1, 1, 28, 28], DType::F32, &Device::Cpu));
    let ids = json(&Tensor::from_vec(
        (0..TOKENS as i64).map(|i| 1000 + i).collect(),
        &[1, TOKENS],
    ));
    let mut failed = false;
    // `FERROGRAD_LOAD_MODELS=lenet` runs one model; `FERROGRAD_LOAD_MAX_DELAY_US` sets
    // the batching delay (2 ms by default); `FERROGRAD_LOAD_ROUNDS` how many times each
    // configuration runs from 16 clients on (3).
    let only = std::env::var("FERROGRAD_LOAD_MODELS").ok();
    let max_delay = std::env::var("FERROGRAD_LOAD_MAX_DELAY_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_millis(2), Duration::from_micros);
    let rounds = std::env::var("FERROGRAD_LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    for (name, body, total) in [("lenet", image, 12000usize), ("minilm", ids, 192)] {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|m| m == name))
        {
            continue;
        }
        for clients in [1usize, 16, 32] {
            // Off and on alternate, `rounds` times each, so that the machine's drift
            // falls on both; the summary compares their medians.
            let rounds = if clients == 1 { 1 } else { rounds };
            let mut rates = [Vec::new(), Vec::new()];
            for _ in 0..rounds {
                for batching in [false, true] {
                    let config = ServeConfig {
                        max_batch: if batching { 32 } else { 1 },
                        max_delay,
                        ..ServeConfig::default()
                    };
                    let model = if name == "lenet" { lenet() } else { minilm().0 };
                    let app = router(vec![ModelSpec::new(name, model)], &config).expect("router");
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("bind");
                    let addr = listener.local_addr().expect("addr");
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    let server = tokio::spawn(serve(listener, app, async {
                        let _ = rx.await;
                    }));
                    let path: &'static str = if name == "lenet" {
                        "/predictions/lenet"
                    } else {
                        "/predictions/minilm"
                    };
                    let total = if clients == 1 { total / 4 } else { total };
                    let o = run_load(addr, path, body.clone(), clients, total).await;
                    let _ = tx.send(());
                    let _ = server.await;
                    println!(
                        "| {name} | {clients} | {} | {} | {} | {:.2} | {:.2} | {:.0} |",
                        if batching { "on" } else { "off" },
                        total.div_ceil(clients) * clients,
                        o.errors,
                        o.p50_ms,
                        o.p99_ms,
                        o.per_second
                    );
                    failed |= o.errors > 0;
                    rates[batching as usize].push(o.per_second);
                }
            }
            if clients >= 16 {
                let median = |v: &mut Vec<f64>| {
                    v.sort_by(f64::total_cmp);
                    v[v.len() / 2]
                };
                let pairs: Vec<String> = rates[0]
                    .iter()
                    .zip(&rates[1])
                    .map(|(off, on)| format!("{:.2}", on / off))
                    .collect();
                let (off, on) = (median(&mut rates[0]), median(&mut rates[1]));
                println!(
                    "|  | {clients} | on / off, medians of {rounds} | | | | | {:.0} / {:.0} = {:.2}x (rounds: {}) |",
                    on,
                    off,
                    on / off,
                    pairs.join(", ")
                );
            }
        }
    }
    assert!(!failed, "some requests failed");
}
