//! The LLM endpoint: `ferrograd-serve --llm DIR` serves a Hugging Face `CausalLM` folder
//! (GPT-2, Llama, Mistral, Qwen2 and their `tokenizer.json`) with OpenAI's API, so the
//! official clients work unchanged:
//!
//! - `POST /v1/completions`: `prompt`, `max_tokens` (16), `temperature` (1; 0 is greedy),
//!   `top_p`, `stop`, `seed`, `stream` (server-sent events, `data: [DONE]` at the end;
//!   `stream_options.include_usage` adds a usage chunk), `usage` counts.
//! - `POST /v1/chat/completions`: `messages` rendered with the folder's chat template
//!   (`tokenizer_config.json`'s `chat_template`, or `chat_template.jinja`), the same
//!   options, `chat.completion(.chunk)` objects.
//! - `GET /v1/models`, `GET /health`, and `GET /metrics` (tokens generated, tokens/s, the
//!   time to first token, queue length, running batch).
//!
//! Requests are served by continuous batching (the `engine` module): every sequence in flight takes
//! one step of one batched forward; new requests join between steps, finished ones
//! leave; a client that disconnects cancels its sequence.

mod engine;
pub mod fixtures;
mod text;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use engine::{EngineConfig, EngineStats, Event, Job, Sampling};
use ferrograd::models::auto::AutoModelForCausalLM;
use ferrograd::models::tokenizer::Tokenizer;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use text::{ChatTemplate, Detokenizer};
use tokio::sync::mpsc::unbounded_channel;

/// Settings of the LLM endpoint.
#[derive(Clone, Debug)]
pub struct LlmConfig {
    /// Sequences decoded together at most (the running batch).
    pub max_batch: usize,
    /// The model's name in responses and `/v1/models` (default: the folder's name).
    pub name: Option<String>,
    /// Where the Prometheus page is (`/metrics`).
    pub metrics_path: String,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            max_batch: 32,
            name: None,
            metrics_path: "/metrics".into(),
        }
    }
}

/// Why a folder cannot be served as an LLM.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The model or its tokenizer did not load.
    #[error(transparent)]
    Model(#[from] ferrograd::models::ModelError),
    /// A file of the folder is unreadable or malformed.
    #[error("{path}: {reason}")]
    Folder {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The engine's thread could not start.
    #[error("starting the generation thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// What the handlers share.
struct LlmState {
    name: String,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    context: usize,
    jobs: Mutex<mpsc::Sender<Job>>,
    stats: Arc<EngineStats>,
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    ids: AtomicU64,
    started: Instant,
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>, LlmError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| LlmError::Folder {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LlmError::Folder {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

/// `eos_token_id` as one id or a list.
fn ids_of(v: Option<&serde_json::Value>) -> Vec<u32> {
    match v {
        Some(serde_json::Value::Number(n)) => {
            n.as_u64().map(|x| vec![x as u32]).unwrap_or_default()
        }
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => Vec::new(),
    }
}

/// Loads `dir` (model, tokenizer, chat template, end-of-sequence ids), starts its
/// generation engine and returns the OpenAI-compatible routes.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let app = ferrograd_serve::llm::router("models/Qwen2.5-0.5B-Instruct", &Default::default())?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
pub fn router(dir: impl AsRef<Path>, config: &LlmConfig) -> Result<Router, LlmError> {
    let dir = dir.as_ref();
    let model = AutoModelForCausalLM::from_pretrained(dir)?;
    let tokenizer = Tokenizer::from_pretrained(dir)?;
    let cfg = read_json(&dir.join("config.json"))?.unwrap_or_default();
    let context = ["max_position_embeddings", "n_positions", "n_ctx"]
        .iter()
        .find_map(|k| cfg.get(*k).and_then(|v| v.as_u64()))
        .unwrap_or(2048) as usize;
    let mut eos = ids_of(cfg.get("eos_token_id"));
    if let Some(gen_cfg) = read_json(&dir.join("generation_config.json"))? {
        eos.extend(ids_of(gen_cfg.get("eos_token_id")));
    }
    let tok_cfg = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or_default();
    let template = ChatTemplate::from_folder(dir, &tok_cfg).map_err(|reason| LlmError::Folder {
        path: dir.join("tokenizer_config.json"),
        reason,
    })?;
    if let Some(t) = &template {
        eos.extend(
            t.eos_token
                .as_deref()
                .and_then(|e| tokenizer.token_to_id(e)),
        );
    }
    eos.sort_unstable();
    eos.dedup();
    let stats = Arc::new(EngineStats::new());
    let jobs = engine::spawn(
        model,
        EngineConfig {
            max_batch: config.max_batch.max(1),
            context,
            eos,
        },
        stats.clone(),
    )?;
    let name = config.name.clone().unwrap_or_else(|| {
        dir.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into())
    });
    let state = Arc::new(LlmState {
        name,
        tokenizer,
        template,
        context,
        jobs: Mutex::new(jobs),
        stats,
        requests: Mutex::new(BTreeMap::new()),
        ids: AtomicU64::new(0),
        started: Instant::now(),
    });
    Ok(Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route(&config.metrics_path, get(metrics))
        .with_state(state))
}

/// An OpenAI error: `{"error": {"message", "type", "param", "code"}}`.
struct OpenAiError {
    status: StatusCode,
    message: String,
}

impl OpenAiError {
    fn invalid(message: impl Into<String>) -> Self {
        OpenAiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let kind = if self.status.is_client_error() {
            "invalid_request_error"
        } else {
            "server_error"
        };
        let body = serde_json::json!({"error": {
            "message": self.message, "type": kind, "param": null, "code": null,
        }});
        (self.status, Json(body)).into_response()
    }
}

/// A string or a list of strings (`stop`, `prompt`).
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The options both endpoints take.
#[derive(Deserialize)]
struct Options {
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    max_completion_tokens: Option<usize>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop: Option<OneOrMany>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<usize>,
}

#[derive(Deserialize)]
struct CompletionRequest {
    prompt: OneOrMany,
    #[serde(flatten)]
    options: Options,
}

#[derive(Deserialize)]
struct ChatMessage {
    role: String,
    content: serde_json::Value,
}

#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<ChatMessage>,
    #[serde(flatten)]
    options: Options,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

async fn completions(
    State(state): State<Arc<LlmState>>,
    body: Result<Json<CompletionRequest>, JsonRejection>,
) -> Response {
    let response = match body {
        Err(e) => OpenAiError::invalid(e.body_text()).into_response(),
        Ok(Json(req)) => {
            let prompt = match req.prompt {
                OneOrMany::One(p) => Ok(p),
                OneOrMany::Many(mut v) if v.len() == 1 => Ok(v.remove(0)),
                OneOrMany::Many(v) => Err(OpenAiError::invalid(format!(
                    "one prompt per request is supported, got {}",
                    v.len()
                ))),
            };
            match prompt {
                Ok(p) => generate(&state, Kind::Completion, &p, true, req.options, 16).await,
                Err(e) => e.into_response(),
            }
        }
    };
    state.count("completions", response.status());
    response
}

async fn chat_completions(
    State(state): State<Arc<LlmState>>,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Response {
    let response = match body {
        Err(e) => OpenAiError::invalid(e.body_text()).into_response(),
        Ok(Json(req)) => match &state.template {
            None => OpenAiError::invalid(
                "the model folder has no chat template (tokenizer_config.json's chat_template or chat_template.jinja): use /v1/completions",
            )
            .into_response(),
            Some(template) => {
                let messages: Result<Vec<(String, String)>, OpenAiError> = req
                    .messages
                    .iter()
                    .map(|m| Ok((m.role.clone(), text::content_text(&m.content).map_err(OpenAiError::invalid)?)))
                    .collect();
                match messages.and_then(|m| template.render(&m).map_err(OpenAiError::invalid)) {
                    Ok(prompt) => {
                        let default_max = usize::MAX;
                        generate(&state, Kind::Chat, &prompt, false, req.options, default_max).await
                    }
                    Err(e) => e.into_response(),
                }
            }
        },
    };
    state.count("chat_completions", response.status());
    response
}

impl LlmState {
    fn count(&self, endpoint: &'static str, status: StatusCode) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((endpoint, status.as_u16()))
            .or_insert(0) += 1;
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Validates, queues the request and answers it whole or as a stream.
async fn generate(
    state: &Arc<LlmState>,
    kind: Kind,
    prompt: &str,
    add_special_tokens: bool,
    options: Options,
    default_max_tokens: usize,
) -> Response {
    if options.n.is_some_and(|n| n != 1) {
        return OpenAiError::invalid("n must be 1").into_response();
    }
    let temperature = options.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return OpenAiError::invalid(format!("temperature must be in [0, 2], got {temperature}"))
            .into_response();
    }
    let top_p = options.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return OpenAiError::invalid(format!("top_p must be in (0, 1], got {top_p}"))
            .into_response();
    }
    let ids = match state.tokenizer.encode(prompt, add_special_tokens) {
        Ok(ids) => ids,
        Err(e) => {
            return OpenAiError::invalid(format!("tokenizing the prompt: {e}")).into_response();
        }
    };
    if ids.is_empty() {
        return OpenAiError::invalid("the prompt is empty").into_response();
    }
    let room = state.context.saturating_sub(ids.len());
    let max_tokens = options
        .max_completion_tokens
        .or(options.max_tokens)
        .unwrap_or(default_max_tokens.min(room));
    if room == 0 || max_tokens > room {
        return OpenAiError::invalid(format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the prompt, {} for the completion).",
            state.context,
            ids.len().saturating_add(max_tokens),
            ids.len(),
            max_tokens
        ))
        .into_response();
    }
    let stop: Vec<String> = match options.stop {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    }
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect();
    let prompt_tokens = ids.len();
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: ids,
        sampling: Sampling {
            max_tokens,
            temperature,
            top_p,
            seed: options.seed.unwrap_or_else(rand::random),
        },
        events: tx,
        arrived: Instant::now(),
    };
    state.stats.queued.fetch_add(1, Ordering::Relaxed);
    let sent = state
        .jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(job);
    if sent.is_err() {
        state.stats.queued.fetch_sub(1, Ordering::Relaxed);
        return OpenAiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the generation engine has stopped".into(),
        }
        .into_response();
    }
    let n = state.ids.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Completion => format!("cmpl-{n}"),
        Kind::Chat => format!("chatcmpl-{n}"),
    };
    let answer = Answer {
        rx,
        detok: Detokenizer::new(state.clone(), stop),
        usage: (prompt_tokens, 0),
        pending_finish: None,
    };
    if options.stream {
        let include_usage = options.stream_options.unwrap_or_default().include_usage;
        stream(state.clone(), kind, id, answer, include_usage).into_response()
    } else {
        whole(state, kind, id, answer).await
    }
}

/// A request's events, turned into text.
struct Answer {
    rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    detok: Detokenizer,
    /// Prompt and completion tokens.
    usage: (usize, usize),
    /// The finish reason to give after the text just returned.
    pending_finish: Option<&'static str>,
}

/// What the next piece of an answer is.
enum Piece {
    Text(String),
    Finish(&'static str),
    Error(String),
}

impl Answer {
    async fn next(&mut self) -> Piece {
        if let Some(reason) = self.pending_finish.take() {
            return Piece::Finish(reason);
        }
        loop {
            match self.rx.recv().await {
                Some(Event::Token(t)) => {
                    self.usage.1 += 1;
                    let (delta, stopped) = self.detok.push(t);
                    if stopped {
                        // A stop string: the text ends before it, and closing the channel
                        // cancels the sequence in the engine.
                        self.rx.close();
                        if delta.is_empty() {
                            return Piece::Finish("stop");
                        }
                        self.pending_finish = Some("stop");
                        return Piece::Text(delta);
                    }
                    if !delta.is_empty() {
                        return Piece::Text(delta);
                    }
                }
                Some(Event::Done {
                    finish_reason,
                    prompt_tokens,
                    completion_tokens,
                }) => {
                    self.usage = (prompt_tokens, completion_tokens);
                    let rest = self.detok.flush();
                    if rest.is_empty() {
                        return Piece::Finish(finish_reason);
                    }
                    self.pending_finish = Some(finish_reason);
                    return Piece::Text(rest);
                }
                Some(Event::Error(e)) => return Piece::Error(e),
                None => return Piece::Error("the generation engine dropped the request".into()),
            }
        }
    }
}

fn usage_json(usage: (usize, usize)) -> serde_json::Value {
    serde_json::json!({
        "prompt_tokens": usage.0,
        "completion_tokens": usage.1,
        "total_tokens": usage.0 + usage.1,
    })
}

async fn whole(state: &Arc<LlmState>, kind: Kind, id: String, mut answer: Answer) -> Response {
    let mut text = String::new();
    let reason = loop {
        match answer.next().await {
            Piece::Text(t) => text.push_str(&t),
            Piece::Finish(r) => break r,
            Piece::Error(e) => {
                return OpenAiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message: e,
                }
                .into_response();
            }
        }
    };
    let created = now_secs();
    let body = match kind {
        Kind::Completion => serde_json::json!({
            "id": id, "object": "text_completion", "created": created, "model": state.name,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": reason}],
            "usage": usage_json(answer.usage),
        }),
        Kind::Chat => serde_json::json!({
            "id": id, "object": "chat.completion", "created": created, "model": state.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": null, "finish_reason": reason}],
            "usage": usage_json(answer.usage),
        }),
    };
    (StatusCode::OK, Json(body)).into_response()
}

/// The answer as server-sent events; dropping it (the client left) cancels the sequence.
fn stream(
    state: Arc<LlmState>,
    kind: Kind,
    id: String,
    answer: Answer,
    include_usage: bool,
) -> impl IntoResponse {
    let created = now_secs();
    let chunk = move |state: &LlmState, text: Option<&str>, first: bool, reason: Option<&str>| {
        let (object, choice) = match kind {
            Kind::Completion => (
                "text_completion",
                serde_json::json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": reason}),
            ),
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                (
                    "chat.completion.chunk",
                    serde_json::json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": reason}),
                )
            }
        };
        serde_json::json!({"id": id, "object": object, "created": created, "model": state.name, "choices": [choice]})
    };
    enum Phase {
        Start,
        Running,
        Usage,
        Done,
        Over,
    }
    let events = futures_util::stream::unfold(
        (answer, Phase::Start),
        move |(mut answer, phase)| {
            let state = state.clone();
            let chunk = chunk.clone();
            async move {
                let json = |v: serde_json::Value| SseEvent::default().data(v.to_string());
                match phase {
                    Phase::Over => None,
                    Phase::Done => Some((
                        Ok::<_, std::convert::Infallible>(SseEvent::default().data("[DONE]")),
                        (answer, Phase::Over),
                    )),
                    Phase::Usage => {
                        let v = serde_json::json!({"id": "usage", "object": match kind { Kind::Completion => "text_completion", Kind::Chat => "chat.completion.chunk" },
                            "created": created, "model": state.name, "choices": [], "usage": usage_json(answer.usage)});
                        Some((Ok(json(v)), (answer, Phase::Done)))
                    }
                    Phase::Start if kind == Kind::Chat => {
                        let v = chunk(&state, Some(""), true, None);
                        Some((Ok(json(v)), (answer, Phase::Running)))
                    }
                    Phase::Start | Phase::Running => {
                        let piece = answer.next().await;
                        let after = |_: &Answer| {
                            if include_usage {
                                Phase::Usage
                            } else {
                                Phase::Done
                            }
                        };
                        match piece {
                            Piece::Text(t) => {
                                let v = chunk(&state, Some(&t), false, None);
                                Some((Ok(json(v)), (answer, Phase::Running)))
                            }
                            Piece::Finish(r) => {
                                let v = chunk(&state, None, false, Some(r));
                                let next = after(&answer);
                                Some((Ok(json(v)), (answer, next)))
                            }
                            Piece::Error(e) => {
                                let v = serde_json::json!({"error": {"message": e, "type": "server_error", "param": null, "code": null}});
                                Some((Ok(json(v)), (answer, Phase::Done)))
                            }
                        }
                    }
                }
            }
        },
    );
    ([(header::CACHE_CONTROL, "no-cache")], Sse::new(events))
}

async fn models(State(state): State<Arc<LlmState>>) -> impl IntoResponse {
    Json(serde_json::json!({
        "object": "list",
        "data": [{"id": state.name, "object": "model", "created": now_secs(), "owned_by": "ferrograd",
                  "max_model_len": state.context}],
    }))
}

async fn metrics(State(state): State<Arc<LlmState>>) -> impl IntoResponse {
    let s = &state.stats;
    let mut out = String::new();
    let mut line = |name: &str, kind: &str, help: &str, value: String| {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        ));
    };
    let generated = s.generated_tokens.load(Ordering::Relaxed);
    let busy = s.busy_micros.load(Ordering::Relaxed) as f64 / 1e6;
    line(
        "ferrograd_llm_generated_tokens_total",
        "counter",
        "Tokens generated.",
        generated.to_string(),
    );
    line(
        "ferrograd_llm_prompt_tokens_total",
        "counter",
        "Prompt tokens processed.",
        s.prompt_tokens.load(Ordering::Relaxed).to_string(),
    );
    line(
        "ferrograd_llm_tokens_per_second",
        "gauge",
        "Tokens generated per second the model was busy.",
        format!(
            "{}",
            if busy > 0.0 {
                generated as f64 / busy
            } else {
                0.0
            }
        ),
    );
    line(
        "ferrograd_llm_queue_length",
        "gauge",
        "Requests waiting to join the running batch.",
        s.queued.load(Ordering::Relaxed).to_string(),
    );
    line(
        "ferrograd_llm_running_sequences",
        "gauge",
        "Sequences in the running batch.",
        s.running.load(Ordering::Relaxed).to_string(),
    );
    line(
        "ferrograd_llm_max_running_sequences",
        "gauge",
        "The largest batch a decode step ran.",
        s.max_running.load(Ordering::Relaxed).to_string(),
    );
    line(
        "ferrograd_llm_decode_steps_total",
        "counter",
        "Batched decode steps.",
        s.decode_steps.load(Ordering::Relaxed).to_string(),
    );
    line(
        "ferrograd_llm_cancelled_total",
        "counter",
        "Sequences cancelled (the client left, or a stop string ended them).",
        s.cancelled.load(Ordering::Relaxed).to_string(),
    );
    line(
        "ferrograd_llm_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        format!("{}", state.started.elapsed().as_secs_f64()),
    );
    out.push_str("# HELP ferrograd_llm_finished_total Sequences the engine finished, by reason.\n# TYPE ferrograd_llm_finished_total counter\n");
    for (reason, n) in [("length", &s.finished_length), ("stop", &s.finished_stop)] {
        let n = n.load(Ordering::Relaxed);
        out.push_str(&format!(
            "ferrograd_llm_finished_total{{reason=\"{reason}\"}} {n}\n"
        ));
    }
    out.push_str("# HELP ferrograd_llm_requests_total Requests by endpoint and HTTP status.\n# TYPE ferrograd_llm_requests_total counter\n");
    for ((endpoint, code), n) in state
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        out.push_str(&format!(
            "ferrograd_llm_requests_total{{endpoint=\"{endpoint}\",code=\"{code}\"}} {n}\n"
        ));
    }
    out.push_str("# HELP ferrograd_llm_time_to_first_token_seconds From the request's arrival to its first token.\n# TYPE ferrograd_llm_time_to_first_token_seconds histogram\n");
    s.ttft
        .render(&mut out, "ferrograd_llm_time_to_first_token_seconds", "");
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
