//! The management API, TorchServe's: models registered, described, scaled and
//! unregistered while the server runs, on a port of its own (`--management-port`, 8081
//! by default, as TorchServe's).
//!
//! - `GET /models`: the models served.
//! - `POST /models?url=…&model_name=…`: registers the ONNX file or Hugging Face folder
//!   `url`, a path inside the model store (`--model-store`; anything outside it, or no
//!   store, is refused). Optional: `batch_size` (rows a run takes at most; the server's
//!   `--max-batch` by default), `max_batch_delay` (milliseconds), `initial_workers` (1),
//!   `batch_dim` (a symbolic dim, or `off`), `image_preset` (`crop,resize`). A model
//!   that does not load is a 400 and the server goes on; a name in use is a 409.
//! - `GET /models/{name}`: its settings, inputs and workers.
//! - `PUT /models/{name}?min_worker=N`: runs `N` workers (1 to 64) on its queue; a
//!   worker removed finishes its batch first.
//! - `DELETE /models/{name}`: new requests get 404 at once; those already taken are
//!   answered, then its workers end.
//!
//! Errors are the inference API's `{"code", "type", "message"}`.

use crate::worker::{ModelHandle, start_model};
use crate::{ApiError, AppState, Batching, ModelSpec, model_json};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ferrograd::models::vision::transforms::ImageClassification;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Workers a model may have at most.
const MAX_WORKERS: usize = 64;

/// The management routes over `state`.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/models", get(list).post(register))
        .route(
            "/models/{name}",
            get(describe).put(scale).delete(unregister),
        )
        .with_state(state)
}

fn status(message: String) -> Response {
    Json(serde_json::json!({ "status": message })).into_response()
}

fn not_found(name: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("Model not found: {name}"),
    }
}

/// A positive integer parameter, or its default.
fn param(q: &HashMap<String, String>, key: &str, default: usize) -> Result<usize, ApiError> {
    match q.get(key) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| ApiError::bad(format!("`{key}` must be a whole number, got `{v}`"))),
    }
}

async fn list(State(state): State<Arc<AppState>>) -> Response {
    let models = state
        .models
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut list: Vec<serde_json::Value> = models
        .values()
        .map(|h| serde_json::json!({ "modelName": h.name, "modelUrl": h.url }))
        .collect();
    list.sort_by_key(|v| v["modelName"].as_str().unwrap_or("").to_string());
    Json(serde_json::json!({ "models": list })).into_response()
}

/// The model file or folder `url` names, if it is inside the model store.
fn resolve(state: &AppState, url: &str) -> Result<PathBuf, ApiError> {
    let store = state.config.model_store.as_ref().ok_or_else(|| ApiError {
        status: StatusCode::FORBIDDEN,
        message: "registration needs a model store (--model-store)".into(),
    })?;
    if url.contains("://") {
        return Err(ApiError::bad(format!(
            "`{url}`: only models in the model store can be registered"
        )));
    }
    let store = store.canonicalize().map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("the model store {}: {e}", store.display()),
    })?;
    let path = store
        .join(url)
        .canonicalize()
        .map_err(|e| ApiError::bad(format!("`{url}` in the model store: {e}")))?;
    if !path.starts_with(&store) {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!("`{url}` is outside the model store"),
        });
    }
    Ok(path)
}

async fn register(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match register_inner(&state, &q).await {
        Ok(message) => status(message),
        Err(e) => e.into_response(),
    }
}

async fn register_inner(state: &AppState, q: &HashMap<String, String>) -> Result<String, ApiError> {
    let url = q
        .get("url")
        .ok_or_else(|| ApiError::bad("`url` is required"))?;
    let path = resolve(state, url)?;
    let name = match q.get("model_name") {
        Some(n) => n.clone(),
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if name.is_empty()
        || name.len() > 128
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err(ApiError::bad(format!(
            "model name `{name}`: 1 to 128 letters, digits, `_`, `-` or `.`"
        )));
    }
    let workers = param(q, "initial_workers", 1)?;
    if !(1..=MAX_WORKERS).contains(&workers) {
        return Err(ApiError::bad(format!(
            "`initial_workers` must be 1 to {MAX_WORKERS}, got {workers}"
        )));
    }
    let mut settings = state.config.clone();
    settings.max_batch = param(q, "batch_size", settings.max_batch)?.max(1);
    if let Some(ms) = q.get("max_batch_delay") {
        let ms = ms.trim().parse::<u64>().map_err(|_| {
            ApiError::bad(format!(
                "`max_batch_delay` must be milliseconds, got `{ms}`"
            ))
        })?;
        settings.max_delay = Duration::from_millis(ms);
    }
    let batching = match q.get("batch_dim").map(String::as_str) {
        None => Batching::Auto,
        Some("off") => Batching::Off,
        Some(dim) => Batching::Dim(dim.to_string()),
    };
    let preprocess = q
        .get("image_preset")
        .map(|p| -> Result<ImageClassification, ApiError> {
            let bad = || ApiError::bad(format!("`image_preset` must be crop,resize, got `{p}`"));
            let (crop, resize) = p.split_once(',').ok_or_else(bad)?;
            let crop = crop.trim().parse().map_err(|_| bad())?;
            let resize = resize.trim().parse().map_err(|_| bad())?;
            Ok(ImageClassification::new(crop, resize))
        })
        .transpose()?;
    if state.model(&name).is_some() {
        return Err(conflict(&name));
    }
    // Loading reads and checks the whole file: off the async threads.
    let load_path = path.clone();
    let model = tokio::task::spawn_blocking(move || {
        if load_path.is_dir() {
            crate::load_pretrained(&load_path).map_err(|e| e.to_string())
        } else {
            ferrograd::onnx::load(&load_path).map_err(|e| e.to_string())
        }
    })
    .await
    .map_err(|e| ApiError::bad(format!("loading `{url}` failed: {e}")))?
    .map_err(|e| ApiError::bad(format!("`{url}` is not a model this server can load: {e}")))?;
    let mut spec = ModelSpec::new(name.clone(), model).batching(batching);
    if let Some(p) = preprocess {
        spec = spec.preprocess(p);
    }
    let mut models = state.models.write().unwrap_or_else(|e| e.into_inner());
    if models.contains_key(&name) {
        return Err(conflict(&name));
    }
    let handle = start_model(spec, url.clone(), settings, workers, &state.metrics)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    models.insert(name.clone(), handle);
    Ok(format!(
        "Model \"{name}\" registered with {workers} initial workers"
    ))
}

fn conflict(name: &str) -> ApiError {
    ApiError {
        status: StatusCode::CONFLICT,
        message: format!("Model \"{name}\" is already registered"),
    }
}

fn describe_json(h: &ModelHandle) -> serde_json::Value {
    let mut v = model_json(h);
    let workers: Vec<serde_json::Value> = h
        .workers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|w| {
            let started = w
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            serde_json::json!({ "id": w.id.to_string(), "startTime": started, "status": "READY" })
        })
        .collect();
    v["modelUrl"] = serde_json::json!(h.url);
    v["batchSize"] = serde_json::json!(h.settings.max_batch);
    v["maxBatchDelay"] = serde_json::json!(h.settings.max_delay.as_millis() as u64);
    v["minWorkers"] = serde_json::json!(workers.len());
    v["maxWorkers"] = serde_json::json!(workers.len());
    v["workers"] = serde_json::json!(workers);
    v
}

async fn describe(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    match state.model(&name) {
        Some(h) => Json(serde_json::json!([describe_json(&h)])).into_response(),
        None => not_found(&name).into_response(),
    }
}

async fn scale(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(h) = state.model(&name) else {
        return not_found(&name).into_response();
    };
    let n = match param(&q, "min_worker", 0) {
        Ok(n) if (1..=MAX_WORKERS).contains(&n) => n,
        Ok(n) => {
            return ApiError::bad(format!("`min_worker` must be 1 to {MAX_WORKERS}, got {n}"))
                .into_response();
        }
        Err(e) => return e.into_response(),
    };
    h.scale(n);
    status(format!("Model \"{name}\" now has {n} workers"))
}

async fn unregister(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    let removed = state
        .models
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&name);
    match removed {
        Some(h) => {
            h.retire();
            status(format!("Model \"{name}\" unregistered"))
        }
        None => not_found(&name).into_response(),
    }
}
