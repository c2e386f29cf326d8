//! Concurrent requests never see each other's answers or errors.
//!
//! - A GRU tagger (token ids `[N, T]` → tags `[N, T, 5]`) hammered by mixed valid and
//!   invalid requests (out-of-vocabulary ids, wrong dtypes, wrong shapes) at 1, 8 and 32
//!   concurrent clients: every valid answer equals the model run on that request alone,
//!   every invalid request gets its own error, and no batch holds more than `max_batch`
//!   rows.
//! - A sequence-first GRU (`[T, N, 4]` → `[T, N, 8]`, `nn.GRU`'s default layout) is
//!   batched along its declared batch axis (1), not axis 0 (time); exported with only a
//!   `seq` dim it is served one request at a time.
//! - A hostile graph (`ConstantOfShape` of 2⁴⁰ floats, its shape read from the input) fails
//!   that request with 400; the server keeps serving.

use ferrograd::nn::{Embedding, GRU, Linear, Module, RnnConfig};
use ferrograd::onnx::{self, ExportOptions, OnnxModel};
use ferrograd::prelude::*;
use ferrograd_serve::{Batching, ModelSpec, ServeConfig, router, serve};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::output_of;

async fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    common::request(addr, method, path, "application/json", body).await
}

const VOCAB: usize = 50;
const MAX_BATCH: usize = 8;

#[derive(Module)]
struct Tagger {
    emb: Embedding,
    gru: GRU,
    out: Linear,
}

fn tagger() -> OnnxModel {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    let bytes = BYTES.get_or_init(|| {
        manual_seed(5);
        let m = Tagger {
            emb: Embedding::new(VOCAB, 6, &Device::Cpu),
            gru: GRU::gru(RnnConfig::new(6, 7).batch_first(true), &Device::Cpu),
            out: Linear::new(7, 5, &Device::Cpu),
        };
        let ids = Tensor::from_vec((0..8i64).collect::<Vec<_>>(), &[2, 4]);
        let opts = ExportOptions::new()
            .input_names(["ids"])
            .output_names(["tags"])
            .dynamic_axis("ids", 0, "batch")
            .dynamic_axis("ids", 1, "seq")
            .dynamic_axis("tags", 0, "batch")
            .dynamic_axis("tags", 1, "seq");
        onnx::export_with(
            &m,
            &[ids],
            |xs| {
                let h = m.emb.forward(&xs[0]);
                vec![m.out.forward(&m.gru.forward(&h, None).0)]
            },
            &opts,
        )
        .expect("export the tagger")
        .to_bytes()
    });
    OnnxModel::from_bytes(bytes).expect("load the tagger")
}

/// The sequence-first GRU, with `batch` declared on axis 1 (or, `declared == false`, only
/// `seq` on axis 0).
fn seq_first(declared: bool) -> OnnxModel {
    static BYTES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    let (with, without) = BYTES.get_or_init(|| {
        manual_seed(9);
        let gru = GRU::gru(RnnConfig::new(4, 8), &Device::Cpu);
        let x = Tensor::randn(&[5, 2, 4], DType::F32, &Device::Cpu);
        let export = |opts: ExportOptions| {
            onnx::export_with(
                &gru,
                std::slice::from_ref(&x),
                |xs| vec![gru.forward(&xs[0], None).0],
                &opts,
            )
            .expect("export the GRU")
            .to_bytes()
        };
        let names = ExportOptions::new().input_names(["x"]).output_names(["y"]);
        let with = export(
            names
                .clone()
                .dynamic_axis("x", 0, "seq")
                .dynamic_axis("x", 1, "batch")
                .dynamic_axis("y", 0, "seq")
                .dynamic_axis("y", 1, "batch"),
        );
        let without = export(
            names
                .dynamic_axis("x", 0, "seq")
                .dynamic_axis("y", 0, "seq"),
        );
        (with, without)
    });
    OnnxModel::from_bytes(if declared { with } else { without }).expect("load the GRU")
}

struct Server {
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(specs: Vec<ModelSpec>) -> Server {
    let config = ServeConfig {
        max_batch: MAX_BATCH,
        max_delay: Duration::from_millis(20),
        max_run_bytes: Some(1 << 30),
        ..ServeConfig::default()
    };
    let app = router(specs, &config).expect("router");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, app, async {
        let _ = rx.await;
    }));
    Server { addr, _stop: tx }
}

fn body_of(x: &Tensor) -> String {
    let (dtype, data) = match x.dtype() {
        DType::I64 => ("int64", serde_json::json!(x.contiguous().to_vec::<i64>())),
        _ => ("float32", serde_json::json!(x.contiguous().to_vec::<f32>())),
    };
    serde_json::json!({"inputs": [{"shape": x.shape(), "dtype": dtype, "data": data}]}).to_string()
}

fn metric(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
}

/// What a client sends and what it must get back.
enum Expect {
    /// 200 and exactly this tensor (the model on the request alone).
    Answer(Tensor),
    /// 400 whose message contains this.
    Error(&'static str),
}

/// The `i`-th request of the mixed load: mostly valid id sequences of 1..=3 rows (two
/// sequence lengths, so requests fall into several batch groups), and every fifth an
/// invalid one of three kinds.
fn tagger_case(model: &OnnxModel, i: usize) -> (String, Expect) {
    let rows = 1 + i % 3;
    let seq = if i.is_multiple_of(4) { 6 } else { 4 };
    let ids: Vec<i64> = (0..rows * seq)
        .map(|k| ((i * 7 + k * 3) % VOCAB) as i64)
        .collect();
    match i % 5 {
        4 => match (i / 5) % 3 {
            0 => {
                let mut bad = ids.clone();
                bad[rows * seq / 2] = 1000;
                let x = Tensor::from_vec(bad, &[rows, seq]);
                (body_of(&x), Expect::Error("1000"))
            }
            1 => {
                let x = Tensor::from_vec(ids.iter().map(|&v| v as f32).collect(), &[rows, seq]);
                (body_of(&x), Expect::Error("must be I64"))
            }
            _ => {
                let x = Tensor::from_vec(ids, &[rows, seq, 1]);
                (body_of(&x), Expect::Error("must have shape"))
            }
        },
        _ => {
            let x = Tensor::from_vec(ids, &[rows, seq]);
            let want = model.run(std::slice::from_ref(&x)).expect("alone")[0].clone();
            (body_of(&x), Expect::Answer(want))
        }
    }
}

async fn hammer(
    addr: SocketAddr,
    path: &'static str,
    cases: Vec<(String, Expect)>,
    clients: usize,
) -> f32 {
    let cases = std::sync::Arc::new(cases);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (cases, next) = (cases.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut worst = 0f32;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((body, expect)) = cases.get(i) else {
                    return worst;
                };
                let (status, answer) = request(addr, "POST", path, body.as_bytes()).await;
                match expect {
                    Expect::Answer(want) => {
                        assert_eq!(status, 200, "request {i} got another's error? {answer}");
                        let (shape, got) = output_of(&answer);
                        assert_eq!(shape, want.shape(), "request {i}");
                        let want = want.contiguous().to_vec::<f32>();
                        let diff = got
                            .iter()
                            .zip(&want)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0f32, f32::max);
                        assert!(diff <= 1e-6, "request {i}: answer off by {diff}");
                        worst = worst.max(diff);
                    }
                    Expect::Error(needle) => {
                        assert_eq!(status, 400, "request {i}: {answer}");
                        assert!(
                            answer.contains(needle),
                            "request {i} got {answer}, not its own error ({needle})"
                        );
                    }
                }
            }
        }));
    }
    let mut worst = 0f32;
    for t in tasks {
        worst = worst.max(t.await.expect("client"));
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_valid_and_invalid_requests_each_get_their_own_answer() {
    let model = tagger();
    let server = start(vec![ModelSpec::new("tagger", tagger())]).await;
    let (_, models) = request(server.addr, "GET", "/models", b"").await;
    assert!(models.contains("\"batchDim\":\"batch\""), "{models}");
    let mut total = 0;
    for clients in [1, 8, 32] {
        let cases: Vec<_> = (0..64).map(|i| tagger_case(&model, i)).collect();
        total += cases.len() as u64;
        let worst = hammer(server.addr, "/predictions/tagger", cases, clients).await;
        eprintln!("{clients} clients: worst difference from the lone run {worst:e}");
    }
    let (_, metrics) = request(server.addr, "GET", "/metrics", b"").await;
    let batches = metric(&metrics, "ferrograd_batch_size_count{model=\"tagger\"}");
    let within = metric(
        &metrics,
        &format!("ferrograd_batch_size_bucket{{model=\"tagger\",le=\"{MAX_BATCH}\"}}"),
    );
    assert_eq!(batches, within, "a batch exceeded max_batch: {metrics}");
    assert!(batches < total, "nothing was batched: {metrics}");
    let ok = metric(
        &metrics,
        "ferrograd_requests_total{model=\"tagger\",code=\"200\"}",
    );
    let bad = metric(
        &metrics,
        "ferrograd_requests_total{model=\"tagger\",code=\"400\"}",
    );
    assert_eq!(ok + bad, total);
    assert!(ok > 0 && bad > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sequence_first_model_is_batched_along_its_batch_axis() {
    let with = seq_first(true);
    let without = seq_first(false);
    assert_eq!(
        ferrograd_serve::batch_axes(&with, &Batching::Auto)
            .unwrap()
            .map(|a| (a.inputs, a.outputs)),
        Some((vec![1], vec![1]))
    );
    assert_eq!(
        ferrograd_serve::batch_axes(&without, &Batching::Auto).unwrap(),
        None
    );
    let server = start(vec![
        ModelSpec::new("gru", seq_first(true)),
        ModelSpec::new("gru_unbatched", seq_first(false)),
    ])
    .await;
    for (path, model) in [
        ("/predictions/gru", &with),
        ("/predictions/gru_unbatched", &without),
    ] {
        manual_seed(3);
        let batched = std::ptr::eq(model, &with);
        let cases: Vec<_> = (0..48)
            .map(|i| {
                // Batched: 1..=6 rows (two of six would make 12 > max_batch). Unbatched
                // (its batch dim is fixed at 2): sequences of 3..=6 steps.
                let shape = if batched {
                    [5, 1 + i % 6, 4]
                } else {
                    [3 + i % 4, 2, 4]
                };
                let x = Tensor::randn(&shape, DType::F32, &Device::Cpu);
                let want = model.run(std::slice::from_ref(&x)).expect("alone")[0].clone();
                (body_of(&x), Expect::Answer(want))
            })
            .collect();
        hammer(server.addr, path, cases, 24).await;
    }
    let (_, metrics) = request(server.addr, "GET", "/metrics", b"").await;
    let batches = metric(&metrics, "ferrograd_batch_size_count{model=\"gru\"}");
    let within = metric(
        &metrics,
        &format!("ferrograd_batch_size_bucket{{model=\"gru\",le=\"{MAX_BATCH}\"}}"),
    );
    assert_eq!(batches, within, "a batch exceeded max_batch: {metrics}");
    assert!(batches < 48, "nothing was batched: {metrics}");
    // Unbatched: one run per request.
    assert_eq!(
        metric(
            &metrics,
            "ferrograd_batch_size_count{model=\"gru_unbatched\"}"
        ),
        48
    );
}

#[tokio::test]
async fn an_explicit_batch_dim_must_fit_the_model() {
    let err = router(
        vec![ModelSpec::new("gru", seq_first(true)).batching(Batching::Dim("time".into()))],
        &ServeConfig::default(),
    )
    .expect_err("an unknown batch dim is refused");
    assert!(err.to_string().contains("`time`"), "{err}");
}

/// A graph whose `ConstantOfShape` reads its shape from the input: `[n, n]` floats.
fn constant_of_input_shape() -> OnnxModel {
    use ferrograd::onnx::proto as pb;
    let node = |op: &str, inputs: &[&str], outputs: &[&str]| pb::NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let value_info =
        |name: &str, elem: i32, dims: Vec<pb::tensor_shape_proto::Dimension>| pb::ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(pb::TypeProto {
                value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                    elem_type: Some(elem),
                    shape: Some(pb::TensorShapeProto { dim: dims }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
    let fixed = |n: i64| pb::tensor_shape_proto::Dimension {
        value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(n)),
        ..Default::default()
    };
    let graph = pb::GraphProto {
        node: vec![
            node("Concat", &["n", "n"], &["shape"]),
            node("ConstantOfShape", &["shape"], &["y"]),
        ],
        input: vec![value_info(
            "n",
            pb::tensor_proto::DataType::Int64 as i32,
            vec![fixed(1)],
        )],
        output: vec![value_info(
            "y",
            pb::tensor_proto::DataType::Float as i32,
            vec![],
        )],
        ..Default::default()
    };
    let mut graph = graph;
    graph.node[0].attribute.push(pb::AttributeProto {
        name: Some("axis".into()),
        i: Some(0),
        r#type: Some(pb::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    });
    let model = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    OnnxModel::from_bytes(&prost::Message::encode_to_vec(&model)).expect("a valid graph")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_model_fails_the_request_not_the_server() {
    let server = start(vec![ModelSpec::new("hostile", constant_of_input_shape())]).await;
    let body = |n: i64| {
        serde_json::json!({"inputs": [{"shape": [1], "dtype": "int64", "data": [n]}]}).to_string()
    };
    let (s, b) = request(
        server.addr,
        "POST",
        "/predictions/hostile",
        body(3).as_bytes(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(output_of(&b), (vec![3, 3], vec![0.0; 9]));
    // 2^20 x 2^20 floats: 4 TiB.
    let (s, b) = request(
        server.addr,
        "POST",
        "/predictions/hostile",
        body(1 << 20).as_bytes(),
    )
    .await;
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("ConstantOfShape") && b.contains("limit"), "{b}");
    let (s, b) = request(server.addr, "GET", "/ping", b"").await;
    assert!(s == 200 && b.contains("Healthy"));
}
