//! The management API end to end on loopback, as a TorchServe user drives it: a model
//! registered from the model store at run time answers on the inference port exactly as
//! the model run alone; it is described, scaled up and down (answers stay exact while
//! workers come and go) and unregistered while requests are in flight (each answered or
//! refused with 404, none lost or hanging); names in use, paths outside the store,
//! files that are not models and bad parameters are refused with the API's JSON errors
//! while the server goes on.

use ferrograd::nn::{Forward, Linear, Module};
use ferrograd::onnx::{self, ExportOptions, OnnxModel};
use ferrograd::prelude::*;
use ferrograd_serve::{Routers, ServeConfig, routers, serve};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;
use common::{output_of, request};

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

/// A model store holding `mlp.onnx` (`[batch, 4] -> [batch, 3]`) and `broken.onnx`
/// (not a model); and a model outside it.
fn store(tag: &str) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("ferrograd-mgmt-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    let store = root.join("store");
    std::fs::create_dir_all(&store).unwrap();
    manual_seed(5);
    let mlp = Mlp {
        fc1: Linear::new(4, 8, &Device::Cpu),
        fc2: Linear::new(8, 3, &Device::Cpu),
    };
    let x = Tensor::randn(&[2, 4], DType::F32, &Device::Cpu);
    let opts = ExportOptions::new()
        .dynamic_axis("input", 0, "batch")
        .dynamic_axis("output", 0, "batch");
    let exported = onnx::export_module(&mlp, &x, &opts).unwrap();
    exported.save(store.join("mlp.onnx")).unwrap();
    exported.save(root.join("outside.onnx")).unwrap();
    std::fs::write(store.join("broken.onnx"), b"\x08\x07not a model at all").unwrap();
    (root, store)
}

struct Running {
    inference: SocketAddr,
    management: SocketAddr,
}

async fn start(config: ServeConfig) -> Running {
    let Routers {
        inference,
        management,
    } = routers(Vec::new(), &config).unwrap();
    let mut addrs = Vec::new();
    for app in [inference, management] {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(l.local_addr().unwrap());
        tokio::spawn(serve(l, app, std::future::pending()));
    }
    Running {
        inference: addrs[0],
        management: addrs[1],
    }
}

fn body_of(x: &Tensor) -> String {
    serde_json::json!({
        "inputs": [{"shape": x.shape(), "dtype": "float32", "data": x.to_vec::<f32>()}]
    })
    .to_string()
}

async fn call(addr: SocketAddr, method: &str, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = request(addr, method, path, "application/json", b"").await;
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, v)
}

/// `n` requests at once (row counts 1-3), each checked against the model run alone:
/// the statuses, in order.
async fn hammer(s: &Running, model: &OnnxModel, n: usize) -> Vec<u16> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let x = Tensor::randn(&[1 + i % 3, 4], DType::F32, &Device::Cpu);
        let want = model.run(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>();
        let addr = s.inference;
        tasks.push(tokio::spawn(async move {
            let (status, body) = request(
                addr,
                "POST",
                "/predictions/mlp",
                "application/json",
                body_of(&x).as_bytes(),
            )
            .await;
            if status == 200 {
                let (_, got) = output_of(&body);
                assert_eq!(got, want, "an answer that is not the model's own");
            }
            status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("a request hung")
                .unwrap(),
        );
    }
    statuses
}

fn workers(v: &serde_json::Value) -> usize {
    v[0]["workers"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn models_are_registered_scaled_and_unregistered_at_run_time() {
    let (root, store) = store("lifecycle");
    let model = std::sync::Arc::new(onnx::load(store.join("mlp.onnx")).unwrap());
    let s = start(ServeConfig {
        model_store: Some(store.clone()),
        ..ServeConfig::default()
    })
    .await;
    let (status, v) = call(s.management, "GET", "/models").await;
    assert_eq!((status, v["models"].as_array().unwrap().len()), (200, 0));
    let (status, _) = call(s.inference, "POST", "/predictions/mlp").await;
    assert_eq!(status, 404);

    // Register with two workers and a batch limit of 4 rows.
    let (status, v) = call(
        s.management,
        "POST",
        "/models?url=mlp.onnx&model_name=mlp&batch_size=4&max_batch_delay=2&initial_workers=2",
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["status"].as_str().unwrap().contains("registered"));
    let (status, v) = call(s.management, "GET", "/models/mlp").await;
    assert_eq!(status, 200);
    assert_eq!(workers(&v), 2);
    assert_eq!(v[0]["batchSize"], 4);
    assert_eq!(v[0]["maxBatchDelay"], 2);
    assert_eq!(v[0]["modelUrl"], "mlp.onnx");
    assert_eq!(v[0]["batchDim"], "batch");
    assert!(hammer(&s, &model, 24).await.iter().all(|&c| c == 200));

    // Scale up and down; the answers stay the model's own throughout.
    let (status, _) = call(s.management, "PUT", "/models/mlp?min_worker=4").await;
    assert_eq!(status, 200);
    assert_eq!(
        workers(&call(s.management, "GET", "/models/mlp").await.1),
        4
    );
    let busy = tokio::spawn({
        let model = model.clone();
        let s = Running { ..s };
        async move { hammer(&s, &model, 48).await }
    });
    let (status, _) = call(s.management, "PUT", "/models/mlp?min_worker=1").await;
    assert_eq!(status, 200);
    assert!(busy.await.unwrap().iter().all(|&c| c == 200));
    assert_eq!(
        workers(&call(s.management, "GET", "/models/mlp").await.1),
        1
    );
    assert!(hammer(&s, &model, 8).await.iter().all(|&c| c == 200));

    // Refusals, each with the API's JSON error; the model keeps serving.
    for (method, path, want) in [
        ("POST", "/models?url=mlp.onnx&model_name=mlp", 409),
        ("POST", "/models?url=../outside.onnx&model_name=other", 403),
        ("POST", "/models?url=broken.onnx&model_name=broken", 400),
        ("POST", "/models?url=missing.onnx", 400),
        ("POST", "/models?model_name=nourl", 400),
        ("POST", "/models?url=https://example.com/m.onnx", 400),
        ("POST", "/models?url=mlp.onnx&model_name=a%2Fb", 400),
        (
            "POST",
            "/models?url=mlp.onnx&model_name=w&initial_workers=0",
            400,
        ),
        (
            "POST",
            "/models?url=mlp.onnx&model_name=w&batch_size=x",
            400,
        ),
        (
            "POST",
            "/models?url=mlp.onnx&model_name=d&batch_dim=seq",
            400,
        ),
        ("PUT", "/models/mlp?min_worker=0", 400),
        ("PUT", "/models/mlp?min_worker=65", 400),
        ("PUT", "/models/nothing?min_worker=2", 404),
        ("GET", "/models/nothing", 404),
        ("DELETE", "/models/nothing", 404),
    ] {
        let (status, v) = call(s.management, method, path).await;
        assert_eq!(status, want, "{method} {path}: {v}");
        assert_eq!(v["code"], want, "{method} {path}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let (_, v) = call(s.management, "GET", "/models").await;
    let names: Vec<&str> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["modelName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mlp"]);
    assert!(hammer(&s, &model, 4).await.iter().all(|&c| c == 200));

    // Unregister while requests are in flight: each is answered exactly or refused
    // with 404; then the model is gone from both APIs.
    let busy = tokio::spawn({
        let model = model.clone();
        let s = Running { ..s };
        async move { hammer(&s, &model, 64).await }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, _) = call(s.management, "DELETE", "/models/mlp").await;
    assert_eq!(status, 200);
    let statuses = busy.await.unwrap();
    assert!(
        statuses.iter().all(|&c| c == 200 || c == 404),
        "{statuses:?}"
    );
    let (status, _) = call(s.inference, "POST", "/predictions/mlp").await;
    assert_eq!(status, 404);
    assert_eq!(call(s.management, "GET", "/models/mlp").await.0, 404);
    // The name is free again; the file's stem names it by default.
    let (status, v) = call(s.management, "POST", "/models?url=mlp.onnx").await;
    assert_eq!(status, 200, "{v}");
    assert!(hammer(&s, &model, 8).await.iter().all(|&c| c == 200));
    let (_, metrics) = request(s.inference, "GET", "/metrics", "text/plain", b"").await;
    assert!(
        metrics.contains("ferrograd_requests_total{model=\"mlp\",code=\"200\"}"),
        "{metrics}"
    );
    std::fs::remove_dir_all(&root).ok();
}

#[tokio::test]
async fn without_a_model_store_registration_is_refused() {
    let (root, store) = store("nostore");
    let s = start(ServeConfig::default()).await;
    let url = format!("/models?url={}", store.join("mlp.onnx").display());
    let (status, v) = call(s.management, "POST", &url).await;
    assert_eq!(status, 403, "{v}");
    assert!(v["message"].as_str().unwrap().contains("model store"));
    std::fs::remove_dir_all(Path::new(&root)).ok();
}
