//! `ferrograd-serve`: an inference server with TorchServe's interface.
//!
//! - `POST /predictions/{model}`: JSON tensors in, JSON tensors out; or, for a model
//!   registered with image preprocessing, the raw bytes of a PNG/JPEG/… image.
//! - `GET /ping`: `{"status": "Healthy"}`.
//! - `GET /metrics`: Prometheus text: requests by model and status, a latency histogram,
//!   a batch-size histogram.
//! - `GET /models`: the registered models and their inputs.
//!
//! Models are registered, described, scaled and unregistered at run time through the
//! [`management`] routes (TorchServe's management API, on a port of its own).
//!
//! Each model has a queue and one worker or more (scaled at run time) that take batches
//! from it. With `max_batch > 1` the worker
//! takes every request already queued into one batch along axis 0 (requests whose other
//! dims and dtypes agree), runs it once and splits the outputs (server-side dynamic
//! batching, TorchServe's `batch_size`/`max_batch_delay`). While other requests for
//! the model are still being decoded by their handlers it also waits for them, up to
//! `max_delay`; a lone request, or a burst that is all queued, runs at once.
//!
//! A request body is JSON like `{"inputs": [{"shape": [1, 4], "dtype": "float32",
//! "data": [0.1, 0.2, 0.3, 0.4]}]}` (or `"inputs": {"name": {...}}` by input name); the
//! answer is `{"outputs": [{"name": "output", "shape": [1, 2], "dtype": "float32",
//! "data": [...]}]}`. A body may also be one raw `.npy` array (`application/x-npy`, a
//! model of one input) or safetensors bytes with the inputs by name
//! (`application/x-safetensors`); `Accept: application/x-safetensors` answers the
//! outputs as safetensors. Mistakes get a 4xx with `{"code", "type", "message"}` naming
//! the problem; bodies above `max_body_bytes` get 413.
#![warn(missing_docs)]

mod batching;
mod codec;
pub mod llm;
pub mod management;
mod metrics;
mod worker;
pub use codec::JsonTensor;
use codec::{PredictRequest, PredictResponse, decode_inputs, encode};
use metrics::Metrics;
pub(crate) use metrics::{Histogram, LATENCY_BUCKETS};
use worker::{Arriving, Job, ModelHandle};

use batching::rows_of;
pub use batching::{BatchAxes, Batching, batch_axes};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ferrograd::data::transforms::Transform;
use ferrograd::models::vision::transforms::ImageClassification;
use ferrograd::onnx::OnnxModel;
use ferrograd::{DType, Tensor};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The message of a caught panic (empty when it is not a string).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Server-wide settings.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Largest batch (in rows along the model's batch axis) a worker runs: a hard limit
    /// on how many rows requests may add up to in one run (a single request with more
    /// rows runs alone); 1 turns batching off.
    pub max_batch: usize,
    /// How long a worker waits for more requests after the first of a batch.
    pub max_delay: Duration,
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: usize,
    /// The most bytes one model run may hold
    /// ([`OnnxModel::with_max_run_bytes`]); `None` keeps each model's own limit (by
    /// default half of the machine's memory).
    pub max_run_bytes: Option<u64>,
    /// The folder the [management API](management) registers models from (TorchServe's
    /// `--model-store`); `None` refuses registration.
    pub model_store: Option<std::path::PathBuf>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_batch: 8,
            max_delay: Duration::from_millis(5),
            max_body_bytes: 16 << 20,
            max_run_bytes: None,
            model_store: None,
        }
    }
}

/// A model to serve under `name`.
pub struct ModelSpec {
    /// The URL name: `POST /predictions/{name}`.
    pub name: String,
    /// The graph.
    pub model: OnnxModel,
    /// For image models: how raw image bytes become the input (`weights.transforms()`).
    pub preprocess: Option<ImageClassification>,
    /// How requests may share a run (see [`Batching`]).
    pub batching: Batching,
}

impl ModelSpec {
    /// A model served as `name`, batched as its dims declare ([`Batching::Auto`]), taking
    /// JSON tensors.
    ///
    /// ```
    /// use ferrograd_serve::{Batching, ModelSpec};
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny-gpt2");
    /// let spec = ModelSpec::new("gpt2", ferrograd_serve::load_pretrained(dir).unwrap())
    ///     .batching(Batching::Off);
    /// assert_eq!(spec.batching, Batching::Off);
    /// ```
    pub fn new(name: impl Into<String>, model: OnnxModel) -> Self {
        ModelSpec {
            name: name.into(),
            model,
            preprocess: None,
            batching: Batching::Auto,
        }
    }

    /// Raw image bytes become the model's input through `preprocess`.
    pub fn preprocess(mut self, preprocess: ImageClassification) -> Self {
        self.preprocess = Some(preprocess);
        self
    }

    /// How requests may share a run.
    pub fn batching(mut self, batching: Batching) -> Self {
        self.batching = batching;
        self
    }
}

/// Why a model folder could not be made servable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PretrainedError {
    /// The folder's config or weights did not load.
    #[error(transparent)]
    Model(#[from] ferrograd::models::ModelError),
    /// The model did not export to ONNX (an op without a mapping, say).
    #[error("exporting the {family} model to ONNX: {source}")]
    Export {
        /// Its `model_type`.
        family: String,
        /// What went wrong.
        source: ferrograd::onnx::OnnxError,
    },
    /// No family of the models crate has this `model_type`.
    #[error(
        "{}: model_type {model_type:?} cannot be served (bert, gpt2, llama, mistral, qwen2)",
        path.display()
    )]
    Unsupported {
        /// The folder's `config.json`.
        path: std::path::PathBuf,
        /// What it says.
        model_type: Option<String>,
    },
}

/// A Hugging Face model folder (`config.json` and safetensors weights) of a family the
/// models crate implements, made servable: loaded by the models crate, exported to
/// ONNX in memory with the batch and sequence axes dynamic (`batch`, `sequence`), and
/// read back as the graph the server runs.
///
/// - `bert` (a sentence-transformers folder too): inputs `input_ids` and
///   `attention_mask` (`[batch, sequence]`, int64), output `last_hidden_state`
///   (`[batch, sequence, hidden]`).
/// - `gpt2`, `llama`, `mistral`, `qwen2`: input `input_ids`, output `logits`
///   (`[batch, sequence, vocab]`).
///
/// ```
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny-gpt2");
/// let model = ferrograd_serve::load_pretrained(dir).unwrap();
/// assert_eq!(model.input_names(), ["input_ids"]);
/// ```
pub fn load_pretrained(dir: impl AsRef<std::path::Path>) -> Result<OnnxModel, PretrainedError> {
    use ferrograd::models::{bert::BertModel, gpt2::Gpt2LMHeadModel, llama::LlamaForCausalLM};
    use ferrograd::onnx::{self, ExportOptions};
    let dir = dir.as_ref();
    let config: serde_json::Value = ferrograd::models::hub::read_config(dir)?;
    let family = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    // Two sequences of four tokens (ids every vocabulary has); the exporter traces again
    // with each dynamic axis doubled, so no size of these is baked in.
    let ids = Tensor::from_vec((1..=8).collect::<Vec<i64>>(), &[2, 4]);
    let dynamic = |opts: ExportOptions, names: &[&str]| {
        names.iter().fold(opts, |o, n| {
            o.dynamic_axis(n, 0, "batch").dynamic_axis(n, 1, "sequence")
        })
    };
    let exported = match family.as_deref() {
        Some("bert") => {
            let mut bert = BertModel::from_pretrained(dir)?;
            ferrograd::nn::Module::eval(&mut bert);
            let mask = Tensor::ones(&[2, 4], DType::I64, &ferrograd::Device::Cpu);
            let names = ["input_ids", "attention_mask", "last_hidden_state"];
            let opts = dynamic(
                ExportOptions::new()
                    .input_names(["input_ids", "attention_mask"])
                    .output_names(["last_hidden_state"]),
                &names,
            );
            onnx::export_with(
                &bert,
                &[ids, mask],
                |xs| vec![bert.forward(&xs[0], Some(&xs[1]), None).last_hidden_state],
                &opts,
            )
        }
        Some("gpt2" | "llama" | "mistral" | "qwen2") => {
            let opts = dynamic(
                ExportOptions::new()
                    .input_names(["input_ids"])
                    .output_names(["logits"]),
                &["input_ids", "logits"],
            );
            if family.as_deref() == Some("gpt2") {
                let mut m = Gpt2LMHeadModel::from_pretrained(dir)?;
                ferrograd::nn::Module::eval(&mut m);
                onnx::export_with(&m, &[ids], |xs| vec![m.forward(&xs[0], None)], &opts)
            } else {
                let mut m = LlamaForCausalLM::from_pretrained(dir)?;
                ferrograd::nn::Module::eval(&mut m);
                onnx::export_with(&m, &[ids], |xs| vec![m.forward(&xs[0], None)], &opts)
            }
        }
        _ => {
            return Err(PretrainedError::Unsupported {
                path: dir.join("config.json"),
                model_type: family,
            });
        }
    };
    let family = family.unwrap_or_default();
    let export_err = |source| PretrainedError::Export {
        family: family.clone(),
        source,
    };
    OnnxModel::from_bytes(&exported.map_err(export_err)?.to_bytes()).map_err(export_err)
}

/// A request that went wrong: its status and message, as TorchServe's error body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = match self.status {
            StatusCode::NOT_FOUND => "ModelNotFoundException",
            StatusCode::BAD_REQUEST => "BadRequestException",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLargeException",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaTypeException",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableException",
            _ => "InternalServerException",
        };
        let body = serde_json::json!({
            "code": self.status.as_u16(),
            "type": kind,
            "message": self.message,
        });
        (self.status, Json(body)).into_response()
    }
}

/// Content types of a raw `.npy` array body.
const NPY_TYPES: [&str; 2] = ["application/x-npy", "application/npy"];
/// Content types of a safetensors body (and answer, through `Accept`).
const SAFETENSORS_TYPES: [&str; 2] = ["application/x-safetensors", "application/safetensors"];

/// The shared state behind the routes: the models served (registered and unregistered
/// at run time through the [management API](management)), the metrics and the
/// settings new models get.
pub struct AppState {
    models: RwLock<HashMap<String, Arc<ModelHandle>>>,
    metrics: Arc<Metrics>,
    config: ServeConfig,
}

impl AppState {
    /// The model served as `name`, if any.
    pub(crate) fn model(&self, name: &str) -> Option<Arc<ModelHandle>> {
        self.models
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// A model the server cannot serve as configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Two models share a name.
    #[error("two models are named `{0}`")]
    DuplicateName(String),
    /// [`Batching::Dim`] names a dim the model's inputs and outputs do not all have.
    #[error("model `{model}`: {reason}")]
    Batching {
        /// The model's name.
        model: String,
        /// What does not fit.
        reason: String,
    },
}

/// The inference routes and the management routes of one server: TorchServe serves them
/// on two ports (8080 and 8081), and so does `ferrograd-serve`.
pub struct Routers {
    /// `/ping`, `/predictions/{model}`, `/models`, `/metrics`.
    pub inference: Router,
    /// `/models` to list and register, `/models/{name}` to describe, scale and
    /// unregister ([`management`]).
    pub management: Router,
}

/// Builds the inference and management routes and starts each model's worker (on the
/// current tokio runtime). Each model's batch axis is resolved here ([`batch_axes`]): an
/// explicit [`Batching::Dim`] that does not fit the model is an error.
pub fn routers(models: Vec<ModelSpec>, config: &ServeConfig) -> Result<Routers, ConfigError> {
    let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(ConfigError::DuplicateName(n.clone()));
        }
    }
    let metrics = Arc::new(Metrics::default());
    let mut handles = HashMap::new();
    for spec in models {
        let name = spec.name.clone();
        let handle = worker::start_model(spec, String::new(), config.clone(), 1, &metrics)?;
        handles.insert(name, handle);
    }
    let state = Arc::new(AppState {
        models: RwLock::new(handles),
        metrics,
        config: config.clone(),
    });
    let inference = Router::new()
        .route(
            "/ping",
            get(|| async { Json(serde_json::json!({"status": "Healthy"})) }),
        )
        .route("/metrics", get(metrics_route))
        .route("/models", get(models_route))
        .route("/predictions/{model}", post(predict))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state.clone());
    Ok(Routers {
        inference,
        management: management::router(state),
    })
}

/// The inference routes alone ([`routers`]`(..).inference`): models fixed at start.
pub fn router(models: Vec<ModelSpec>, config: &ServeConfig) -> Result<Router, ConfigError> {
    Ok(routers(models, config)?.inference)
}

/// Serves `app` on `listener` until `shutdown` resolves, then finishes the requests in
/// flight (graceful shutdown).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics_route(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

async fn models_route(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let models = state
        .models
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut list: Vec<serde_json::Value> = models.values().map(|h| model_json(h)).collect();
    list.sort_by_key(|v| v["modelName"].as_str().unwrap_or("").to_string());
    Json(serde_json::json!({ "models": list }))
}

/// A model as `/models` lists it: its name, inputs (name, dtype, shape with symbolic
/// dims by name), whether it takes images, and its batch dim.
pub(crate) fn model_json(h: &ModelHandle) -> serde_json::Value {
    let dim = |x: &Result<usize, String>| match x {
        Ok(n) => serde_json::json!(n),
        Err(p) => serde_json::json!(p),
    };
    let inputs: Vec<serde_json::Value> = h
        .model
        .input_specs()
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "dtype": s.dtype.map(DType::name),
                "shape": s.dims.as_ref().map(|d| d.iter().map(dim).collect::<Vec<_>>()),
            })
        })
        .collect();
    serde_json::json!({
        "modelName": h.name,
        "inputs": inputs,
        "imagePreprocessing": h.preprocess.is_some(),
        "batchDim": h.axes.as_ref().map(|a| a.dim.clone()),
    })
}

/// A prediction's outputs by name, answered as JSON or (on `Accept`) safetensors: only
/// the form asked for is built.
struct Predicted(Vec<(String, Tensor)>);

impl Predicted {
    fn to_json(&self) -> PredictResponse {
        PredictResponse {
            outputs: self.0.iter().map(|(n, t)| encode(n, t)).collect(),
        }
    }

    fn to_safetensors(&self) -> Result<Vec<u8>, ApiError> {
        let state: ferrograd::nn::StateDict = self.0.iter().cloned().collect();
        ferrograd::checkpoint::state_dict_to_bytes(&state, None).map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("writing the outputs as safetensors: {e}"),
        })
    }
}

async fn predict(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let result = match body {
        // A body over `max_body_bytes` (413), or one that could not be read: the same
        // JSON error body as every other refusal, and counted like them.
        Err(rejection) => Err(ApiError {
            status: rejection.status(),
            message: rejection.body_text(),
        }),
        Ok(body) => predict_inner(&state, &name, &headers, body).await,
    };
    let wants_safetensors = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| SAFETENSORS_TYPES.iter().any(|t| a.contains(t)));
    let response = match result {
        Ok(outputs) if wants_safetensors => match outputs.to_safetensors() {
            Ok(bytes) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, SAFETENSORS_TYPES[0])],
                bytes,
            )
                .into_response(),
            Err(e) => e.into_response(),
        },
        Ok(outputs) => (StatusCode::OK, Json(outputs.to_json())).into_response(),
        Err(e) => e.into_response(),
    };
    if state.model(&name).is_some() {
        state.metrics.count(&name, response.status());
        let latency = state
            .metrics
            .latency
            .read()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(h) = latency.get(&name) {
            h.observe(start.elapsed().as_secs_f64());
        }
    }
    response
}

async fn predict_inner(
    state: &AppState,
    name: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Predicted, ApiError> {
    let handle = state.model(name).ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("Model not found: {name}"),
    })?;
    let arriving = Arriving::new(&handle.arriving);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let inputs = if content_type.starts_with("image/") || content_type == "application/octet-stream"
    {
        let preprocess = handle.preprocess.as_ref().ok_or_else(|| {
            ApiError::bad(format!(
                "model `{name}` takes JSON tensors, not image bytes (it has no image preprocessing)"
            ))
        })?;
        let image = ferrograd::data::datasets::decode_image(&body)
            .map_err(|e| ApiError::bad(format!("the body is not a readable image: {e}")))?;
        vec![preprocess.apply(image).unsqueeze(0)]
    } else if NPY_TYPES.contains(&content_type) {
        // One raw `.npy` array (`np.save`'s bytes): a model of one input.
        let names = handle.model.input_names();
        if names.len() != 1 {
            return Err(ApiError::bad(format!(
                "model `{name}` takes {} inputs ({names:?}): send them by name as safetensors ({})",
                names.len(),
                SAFETENSORS_TYPES[0]
            )));
        }
        let x = ferrograd::data::datasets::decode_npy(&body)
            .map_err(|e| ApiError::bad(format!("the body is not a readable .npy array: {e}")))?;
        vec![x]
    } else if SAFETENSORS_TYPES.contains(&content_type) {
        // safetensors bytes (`safetensors.numpy.save`), tensors named as the inputs.
        let mut tensors = ferrograd::checkpoint::state_dict_from_bytes(&body)
            .map_err(|e| ApiError::bad(format!("the body is not readable safetensors: {e}")))?;
        let mut inputs = Vec::new();
        for n in handle.model.input_names() {
            inputs.push(tensors.remove(n).ok_or_else(|| {
                ApiError::bad(format!("missing input `{n}` in the safetensors body"))
            })?);
        }
        if let Some(extra) = tensors.keys().next() {
            return Err(ApiError::bad(format!(
                "unknown input `{extra}`; inputs are {:?}",
                handle.model.input_names()
            )));
        }
        inputs
    } else {
        let request: PredictRequest = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad(format!("invalid JSON request: {e}")))?;
        decode_inputs(&handle.model, request.inputs)?
    };
    let specs = handle.model.input_specs();
    if inputs.len() != specs.len() {
        return Err(ApiError::bad(format!(
            "model `{name}` takes {} inputs ({:?}), got {}",
            specs.len(),
            handle.model.input_names(),
            inputs.len()
        )));
    }
    for (spec, x) in specs.iter().zip(&inputs) {
        spec.check(x).map_err(ApiError::bad)?;
    }
    let rows = match &handle.axes {
        Some(axes) => rows_of(&inputs, axes).map_err(ApiError::bad)?,
        None => 1,
    };
    let (tx, rx) = oneshot::channel();
    handle
        .jobs
        .send(Job {
            inputs,
            rows,
            reply: tx,
        })
        .await
        .map_err(|_| ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the model's worker has stopped".into(),
        })?;
    drop(arriving);
    let outputs = rx
        .await
        .map_err(|_| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "the model's worker dropped the request".into(),
        })?
        .map_err(ApiError::bad)?;
    Ok(Predicted(
        handle
            .model
            .output_names()
            .iter()
            .cloned()
            .zip(outputs)
            .collect(),
    ))
}
