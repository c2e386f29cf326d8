//! The server end to end on loopback: an MLP and a small CNN exported to ONNX in the
//! test, served, and asked over plain HTTP/1.1: answers equal the model's own outputs,
//! with batching on and off; every kind of bad request gets a 4xx naming the problem and
//! the server keeps serving; the metrics count it all; shutdown finishes a request in
//! flight.

use ferrograd::models::vision::transforms::ImageClassification;
use ferrograd::nn::{Conv2d, ConvOptions, Forward, Linear, Module};
use ferrograd::onnx::{self, ExportOptions, OnnxModel};
use ferrograd::prelude::*;
use ferrograd_serve::{ModelSpec, ServeConfig, router, serve};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::output_of;
use common::request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Module)]
struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl<'a> Forward<&'a Tensor> for Mlp {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        self.fc2.forward(&self.fc1.forward(x).relu())
    }
}

#[derive(Module)]
struct Cnn {
    conv: Conv2d,
    fc: Linear,
}

impl<'a> Forward<&'a Tensor> for Cnn {
    type Output = Tensor;
    fn forward(&self, x: &'a Tensor) -> Tensor {
        let y = F::adaptive_avg_pool2d(&self.conv.forward(x).relu(), [1, 1]).flatten(1, -1);
        self.fc.forward(&y)
    }
}

fn batch_opts() -> ExportOptions {
    ExportOptions::new()
        .dynamic_axis("input", 0, "batch")
        .dynamic_axis("output", 0, "batch")
}

/// The MLP `[N, 4] -> [N, 3]` and the CNN `[N, 3, 16, 16] -> [N, 5]` as ONNX models.
/// The two test models, exported once: the tests run in parallel and the RNG that
/// `manual_seed` seeds is process-wide, so building them in each test would race.
fn models() -> (OnnxModel, OnnxModel) {
    static BYTES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    let (mlp, cnn) = BYTES.get_or_init(|| {
        manual_seed(11);
        let mlp = Mlp {
            fc1: Linear::new(4, 8, &Device::Cpu),
            fc2: Linear::new(8, 3, &Device::Cpu),
        };
        let x = Tensor::randn(&[2, 4], DType::F32, &Device::Cpu);
        let mlp = onnx::export_module(&mlp, &x, &batch_opts()).expect("export mlp");
        let cnn = Cnn {
            conv: Conv2d::new(3, 4, [3, 3], ConvOptions::default(), &Device::Cpu),
            fc: Linear::new(4, 5, &Device::Cpu),
        };
        let x = Tensor::randn(&[2, 3, 16, 16], DType::F32, &Device::Cpu);
        let cnn = onnx::export_module(&cnn, &x, &batch_opts()).expect("export cnn");
        (mlp.to_bytes(), cnn.to_bytes())
    });
    (
        OnnxModel::from_bytes(mlp).expect("load mlp"),
        OnnxModel::from_bytes(cnn).expect("load cnn"),
    )
}

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(config: ServeConfig) -> Server {
    let (mlp, cnn) = models();
    start_serving(
        vec![
            ModelSpec::new("mlp", mlp),
            ModelSpec::new("cnn", cnn).preprocess(ImageClassification::new(16, 20)),
        ],
        config,
    )
    .await
}

async fn start_serving(specs: Vec<ModelSpec>, config: ServeConfig) -> Server {
    let app = router(specs, &config).expect("router");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(serve(listener, app, async {
        let _ = rx.await;
    }));
    Server {
        addr,
        stop: Some(tx),
        done,
    }
}

fn json_request(x: &Tensor) -> String {
    serde_json::json!({
        "inputs": [{"shape": x.shape(), "dtype": "float32", "data": x.to_vec::<f32>()}]
    })
    .to_string()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

async fn concurrent_requests_match(config: ServeConfig) -> String {
    let server = start(config).await;
    let (mlp, _) = models();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let rows = 1 + i % 3;
        let x = Tensor::randn(&[rows, 4], DType::F32, &Device::Cpu);
        let want = mlp.run(std::slice::from_ref(&x)).expect("direct run")[0].to_vec::<f32>();
        let body = json_request(&x);
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let (status, body) = request(
                addr,
                "POST",
                "/predictions/mlp",
                "application/json",
                body.as_bytes(),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            let (shape, got) = output_of(&body);
            assert_eq!(shape, vec![rows, 3]);
            assert!(max_diff(&got, &want) < 1e-5, "{got:?} vs {want:?}");
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let (status, metrics) = request(server.addr, "GET", "/metrics", "text/plain", b"").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("ferrograd_requests_total{model=\"mlp\",code=\"200\"} 24"),
        "{metrics}"
    );
    metrics
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_equal_the_model_with_batching_on_and_off() {
    let batched = concurrent_requests_match(ServeConfig {
        max_batch: 16,
        max_delay: Duration::from_millis(20),
        ..ServeConfig::default()
    })
    .await;
    // 24 requests arriving together: some batches held more than one request.
    let singles = batched
        .lines()
        .find(|l| l.starts_with("ferrograd_batch_size_bucket{model=\"mlp\",le=\"1\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("batch histogram");
    let batches = batched
        .lines()
        .find(|l| l.starts_with("ferrograd_batch_size_count{model=\"mlp\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("batch count");
    assert!(
        batches < 24,
        "24 requests ran as {batches} batches ({singles} of one row)"
    );
    let unbatched = concurrent_requests_match(ServeConfig {
        max_batch: 1,
        ..ServeConfig::default()
    })
    .await;
    assert!(
        unbatched.contains("ferrograd_batch_size_count{model=\"mlp\"} 24"),
        "{unbatched}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_naming_the_problem() {
    let server = start(ServeConfig {
        max_body_bytes: 64 << 10,
        ..ServeConfig::default()
    })
    .await;
    let a = server.addr;
    let post = |path: &'static str, ct: &'static str, body: Vec<u8>| async move {
        request(a, "POST", path, ct, &body).await
    };
    let (s, b) = post("/predictions/nope", "application/json", b"{}".to_vec()).await;
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("nope"));
    let (s, b) = post(
        "/predictions/mlp",
        "application/json",
        b"{not json".to_vec(),
    )
    .await;
    assert!(s == 400 && b.contains("invalid JSON"), "{s} {b}");
    let wrong_shape = json_request(&Tensor::ones(&[2, 5], DType::F32, &Device::Cpu));
    let (s, b) = post(
        "/predictions/mlp",
        "application/json",
        wrong_shape.into_bytes(),
    )
    .await;
    assert!(
        s == 400 && b.contains("[batch, 4]") && b.contains("[2, 5]"),
        "{s} {b}"
    );
    let count_mismatch = r#"{"inputs": [{"shape": [1, 4], "data": [1, 2, 3]}]}"#;
    let (s, b) = post(
        "/predictions/mlp",
        "application/json",
        count_mismatch.into(),
    )
    .await;
    assert!(s == 400 && b.contains("needs 4 values, got 3"), "{s} {b}");
    let wrong_dtype = r#"{"inputs": [{"shape": [1, 4], "dtype": "int64", "data": [1, 2, 3, 4]}]}"#;
    let (s, b) = post("/predictions/mlp", "application/json", wrong_dtype.into()).await;
    assert!(s == 400 && b.contains("must be F32"), "{s} {b}");
    let not_numbers = r#"{"inputs": [{"shape": [1, 4], "data": ["a", 2, 3, 4]}]}"#;
    let (s, b) = post("/predictions/mlp", "application/json", not_numbers.into()).await;
    assert!(s == 400 && b.contains("is not a float32 value"), "{s} {b}");
    let (s, b) = post("/predictions/mlp", "image/png", b"\x89PNG".to_vec()).await;
    assert!(s == 400 && b.contains("image bytes"), "{s} {b}");
    let (s, b) = post("/predictions/cnn", "image/png", b"garbage".to_vec()).await;
    assert!(s == 400 && b.contains("not a readable image"), "{s} {b}");
    let (s, b) = post(
        "/predictions/mlp",
        "application/json",
        vec![b' '; 100 << 10],
    )
    .await;
    // The documented error body, as for every other refusal.
    let v: serde_json::Value = serde_json::from_str(&b).unwrap_or_else(|e| panic!("{e}: {b}"));
    assert_eq!(s, 413);
    assert_eq!(v["code"], 413, "{b}");
    assert_eq!(v["type"], "RequestEntityTooLargeException", "{b}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{b}");
    // An empty batch is an empty answer, as in PyTorch and onnxruntime.
    let empty = r#"{"inputs": [{"shape": [0, 4], "data": []}]}"#;
    let (s, b) = post("/predictions/mlp", "application/json", empty.into()).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(output_of(&b), (vec![0, 3], vec![]));
    // Still serving, and the refusals were counted.
    let ok = json_request(&Tensor::ones(&[1, 4], DType::F32, &Device::Cpu));
    let (s, _) = post("/predictions/mlp", "application/json", ok.into_bytes()).await;
    assert_eq!(s, 200);
    let (_, metrics) = request(a, "GET", "/metrics", "text/plain", b"").await;
    assert!(
        metrics.contains("ferrograd_requests_total{model=\"mlp\",code=\"400\"} 6"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferrograd_requests_total{model=\"mlp\",code=\"413\"} 1"),
        "{metrics}"
    );
    let (s, b) = request(a, "GET", "/ping", "text/plain", b"").await;
    assert!(s == 200 && b.contains("Healthy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_bytes_go_through_the_preprocessing() {
    let server = start(ServeConfig::default()).await;
    let mut png = Vec::new();
    let img = image::RgbImage::from_fn(24, 20, |x, y| {
        image::Rgb([(x * 10) as u8, (y * 12) as u8, 128])
    });
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .expect("png");
    let (s, b) = request(server.addr, "POST", "/predictions/cnn", "image/png", &png).await;
    assert_eq!(s, 200, "{b}");
    let (shape, got) = output_of(&b);
    assert_eq!(shape, vec![1, 5]);
    // The same preprocessing by hand, then the model directly.
    use ferrograd::data::transforms::Transform;
    let x = ImageClassification::new(16, 20)
        .apply(ferrograd::data::datasets::decode_image(&png).expect("decode"))
        .unsqueeze(0);
    let (_, cnn) = models();
    let want = cnn.run(&[x]).expect("run")[0].to_vec::<f32>();
    assert!(max_diff(&got, &want) < 1e-5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_requests_in_flight() {
    let mut server = start(ServeConfig::default()).await;
    let addr = server.addr;
    let body = json_request(&Tensor::ones(&[1, 4], DType::F32, &Device::Cpu));
    // The client sends its headers, then the body only after shutdown has begun: the
    // request is in flight when the signal comes.
    let in_flight = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST /predictions/mlp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.expect("head");
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.write_all(body.as_bytes()).await.expect("body");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.take().expect("stop").send(()).expect("signal");
    let response = in_flight.await.expect("client");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    server.done.await.expect("server task").expect("clean exit");
    // And nothing listens any more.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// Token ids as a request's JSON tensor.
fn ids_json(ids: &Tensor) -> serde_json::Value {
    serde_json::json!({"shape": ids.shape(), "dtype": "int64", "data": ids.to_vec::<i64>()})
}

/// Posts `body` to model `name` and checks its first output against `want` (1e-4).
async fn answer_matches(addr: SocketAddr, name: &str, body: serde_json::Value, want: &Tensor) {
    let path = format!("/predictions/{name}");
    let body = body.to_string();
    let (status, body) = request(addr, "POST", &path, "application/json", body.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    let (shape, got) = output_of(&body);
    assert_eq!(shape, want.shape());
    let diff = max_diff(&got, &want.to_vec::<f32>());
    assert!(diff < 1e-4, "{name}: the served output differs by {diff}");
}

/// A Hugging Face folder served through the models crate (`load_pretrained`, what
/// `--model name=folder` does): the tiny GPT-2 fixture's logits and all-MiniLM-L6-v2's
/// token states over HTTP equal the models' own forward, at other batch sizes and
/// lengths than the export traced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hugging_face_checkpoints_are_served_as_the_models_crate_runs_them() {
    use ferrograd::models::{bert::BertModel, gpt2::Gpt2LMHeadModel};
    use ferrograd_serve::load_pretrained;
    let gpt2_dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/tests/fixtures/tiny-gpt2"
    );
    let data = std::env::var_os("FERROGRAD_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"))
        });
    let minilm_dir = data.join("all-minilm-l6-v2");
    let mut specs = vec![ModelSpec::new(
        "gpt2",
        load_pretrained(gpt2_dir).expect("the tiny GPT-2 loads"),
    )];
    let minilm = minilm_dir.join("config.json").exists();
    if minilm {
        specs.push(ModelSpec::new(
            "minilm",
            load_pretrained(&minilm_dir).expect("MiniLM loads"),
        ));
    } else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is missing under CI",
            minilm_dir.display()
        );
        eprintln!("skipped MiniLM: no {}", minilm_dir.display());
    }
    let server = start_serving(specs, ServeConfig::default()).await;

    let gpt2 = Gpt2LMHeadModel::from_pretrained(gpt2_dir).expect("the tiny GPT-2 loads");
    let ids = Tensor::from_vec((0..21).map(|i| (i * 7) % 50).collect::<Vec<i64>>(), &[3, 7]);
    let want = gpt2.forward(&ids, None);
    let body = serde_json::json!({"inputs": [ids_json(&ids)]});
    answer_matches(server.addr, "gpt2", body, &want).await;

    if minilm {
        let bert = BertModel::from_pretrained(&minilm_dir).expect("MiniLM loads");
        // A padded batch: the second sequence has two padding tokens.
        let ids = Tensor::from_vec(
            vec![
                101i64, 7592, 2088, 2003, 2307, 102, 101, 2307, 2088, 102, 0, 0,
            ],
            &[2, 6],
        );
        let mask = Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0], &[2, 6]);
        let want = bert.forward(&ids, Some(&mask), None).last_hidden_state;
        let body = serde_json::json!({
            "inputs": {"input_ids": ids_json(&ids), "attention_mask": ids_json(&mask)}
        });
        answer_matches(server.addr, "minilm", body, &want).await;
    }
    // The Llama family (RoPE, RMSNorm, SwiGLU, grouped-query attention) exports too.
    use ferrograd::models::llama::LlamaForCausalLM;
    for family in ["tiny-llama", "tiny-qwen2"] {
        let dir = format!(
            "{}/../models/tests/fixtures/{family}",
            env!("CARGO_MANIFEST_DIR")
        );
        let served = load_pretrained(&dir).unwrap_or_else(|e| panic!("{family}: {e}"));
        let model = LlamaForCausalLM::from_pretrained(&dir).expect("loads");
        let ids = Tensor::from_vec((0..10).map(|i| (i * 5) % 60).collect::<Vec<i64>>(), &[2, 5]);
        let want = model.forward(&ids, None).to_vec::<f32>();
        let got = served.run(&[ids]).expect("runs")[0].to_vec::<f32>();
        let diff = max_diff(&got, &want);
        assert!(diff < 1e-4, "{family} logits differ by {diff}");
    }
    // A folder of no family the models crate knows is an error naming it.
    let dir = std::env::temp_dir().join(format!("ferrograd-serve-t5-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "t5"}"#).unwrap();
    let err = match load_pretrained(&dir) {
        Ok(_) => panic!("t5 is refused"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("\"t5\"") && err.contains("cannot be served"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The process's resident memory in bytes (Linux).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// Every kind of bad request, once each: (path, content type, body).
fn bad_requests() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let wrong_shape = json_request(&Tensor::ones(&[2, 5], DType::F32, &Device::Cpu));
    vec![
        ("/predictions/nope", "application/json", b"{}".to_vec()),
        (
            "/predictions/mlp",
            "application/json",
            b"{not json".to_vec(),
        ),
        (
            "/predictions/mlp",
            "application/json",
            wrong_shape.into_bytes(),
        ),
        (
            "/predictions/mlp",
            "application/json",
            br#"{"inputs": [{"shape": [1, 4], "data": [1, 2, 3]}]}"#.to_vec(),
        ),
        (
            "/predictions/mlp",
            "application/json",
            br#"{"inputs": [{"shape": [1, 4], "dtype": "int64", "data": [1, 2, 3, 4]}]}"#.to_vec(),
        ),
        (
            "/predictions/mlp",
            "application/json",
            br#"{"inputs": [{"shape": [1, 4], "data": ["a", 2, 3, 4]}]}"#.to_vec(),
        ),
        // A shape whose element count overflows, and a huge claimed shape.
        (
            "/predictions/mlp",
            "application/json",
            br#"{"inputs": [{"shape": [4294967296, 4294967296, 4], "data": [1]}]}"#.to_vec(),
        ),
        ("/predictions/cnn", "image/png", b"garbage".to_vec()),
        (
            "/predictions/mlp",
            "application/json",
            vec![b' '; 100 << 10],
        ),
    ]
}

/// Run in a process of its own by `bad_requests_leak_no_memory`: after a warm-up round,
/// 300 rounds of every bad request; prints the resident memory and the tensors' host
/// memory before and after.
#[test]
#[ignore = "run in a process of its own by bad_requests_leak_no_memory"]
fn bad_requests_memory_child() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = start(ServeConfig {
            max_body_bytes: 64 << 10,
            ..ServeConfig::default()
        })
        .await;
        let round = |n: usize| async move {
            for _ in 0..n {
                for (path, ct, body) in bad_requests() {
                    let (status, body) = request(server.addr, "POST", path, ct, &body).await;
                    assert!((400..500).contains(&status), "{path}: {status} {body}");
                }
            }
        };
        round(20).await;
        let (rss0, tensors0) = (resident_bytes(), ferrograd::cpu::memory_allocated());
        round(300).await;
        let (rss1, tensors1) = (resident_bytes(), ferrograd::cpu::memory_allocated());
        // Still serving.
        let ok = json_request(&Tensor::ones(&[1, 4], DType::F32, &Device::Cpu));
        let (s, _) = request(server.addr, "POST", "/predictions/mlp", "application/json", ok.as_bytes()).await;
        assert_eq!(s, 200);
        println!("MEMORY rss_before={rss0} rss_after={rss1} tensors_before={tensors0} tensors_after={tensors1}");
    });
}

/// 2,700 bad requests (300 of each kind, a 100 KB body over the limit among them) leave
/// the server's memory where it was: no tensor memory held, resident memory within
/// 4 MiB (the allocator's noise), measured in a process of its own.
#[test]
fn bad_requests_leak_no_memory() {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "bad_requests_memory_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("MEMORY ").map(|(_, m)| m))
        .unwrap_or_else(|| panic!("no measurement in {stdout}"));
    println!("{line}");
    let value = |key: &str| -> i64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {line}"))
    };
    assert_eq!(
        value("tensors_after"),
        value("tensors_before"),
        "tensor memory held: {line}"
    );
    let growth = value("rss_after") - value("rss_before");
    assert!(
        growth < 4 << 20,
        "resident memory grew by {growth} bytes: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_request_does_not_wait_for_a_batch() {
    // The worker waits for requests that handlers are still decoding, never for ones
    // nobody sent: with a 5 s `max_delay`, lone requests in a row each answer at once.
    let server = start(ServeConfig {
        max_batch: 32,
        max_delay: Duration::from_secs(5),
        ..ServeConfig::default()
    })
    .await;
    let x = Tensor::randn(&[1, 4], DType::F32, &Device::Cpu);
    let body = json_request(&x);
    let start = std::time::Instant::now();
    for _ in 0..5 {
        let (status, body) = request(
            server.addr,
            "POST",
            "/predictions/mlp",
            "application/json",
            body.as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "5 lone requests took {took:?}: the worker waited for a batch"
    );
}

/// `np.save`'s bytes of a float32 array.
fn npy_f32(x: &Tensor) -> Vec<u8> {
    let dims: Vec<String> = x.shape().iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in x.contiguous().to_vec::<f32>() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Inputs as a raw `.npy` array or safetensors by name, the answer as safetensors when
/// asked for: the same outputs as the JSON path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npy_and_safetensors_bodies_give_the_json_answers() {
    let server = start(ServeConfig::default()).await;
    let (mlp, _) = models();
    let x = Tensor::from_vec((0..8).map(|v| v as f32 / 8.0).collect::<Vec<_>>(), &[2, 4]);
    let want = mlp.run(std::slice::from_ref(&x)).expect("run")[0].to_vec::<f32>();
    let (s, b) = request(
        server.addr,
        "POST",
        "/predictions/mlp",
        "application/x-npy",
        &npy_f32(&x),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (shape, got) = output_of(&b);
    assert_eq!(shape, vec![2, 3]);
    assert!(max_diff(&got, &want) < 1e-6);
    // safetensors in and out.
    let mut inputs = ferrograd::nn::StateDict::new();
    inputs.insert("input".into(), x.clone());
    let body = ferrograd::checkpoint::state_dict_to_bytes(&inputs, None).unwrap();
    let (s, b) = common::send(
        server.addr,
        "POST",
        "/predictions/mlp",
        &[
            ("Content-Type", "application/x-safetensors"),
            ("Accept", "application/x-safetensors"),
        ],
        &body,
    )
    .await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let out = ferrograd::checkpoint::state_dict_from_bytes(&b).expect("a safetensors answer");
    assert_eq!(out["output"].shape(), &[2, 3]);
    assert!(max_diff(&out["output"].to_vec::<f32>(), &want) < 1e-6);
    // Mistakes: unreadable bytes, a misnamed input.
    let (s, b) = request(
        server.addr,
        "POST",
        "/predictions/mlp",
        "application/x-npy",
        b"nope",
    )
    .await;
    assert!(s == 400 && b.contains("not a readable .npy"), "{s} {b}");
    let mut misnamed = ferrograd::nn::StateDict::new();
    misnamed.insert("x".into(), x);
    let body = ferrograd::checkpoint::state_dict_to_bytes(&misnamed, None).unwrap();
    let (s, b) = request(
        server.addr,
        "POST",
        "/predictions/mlp",
        "application/x-safetensors",
        &body,
    )
    .await;
    assert!(s == 400 && b.contains("missing input `input`"), "{s} {b}");
}
