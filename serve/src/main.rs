//! `ferrograd-serve --model mnist=mnist.onnx --model minilm=all-minilm-l6-v2/ --port 8080`:
//! serves ONNX models, and Hugging Face checkpoints of the models crate, with
//! TorchServe's interface (see the `ferrograd_serve` library docs).

use clap::Parser;
use ferrograd::models::vision::transforms::ImageClassification;
use ferrograd_serve::{Batching, ModelSpec, ServeConfig, routers, serve};
use std::time::Duration;

/// An inference server for ONNX models: `POST /predictions/{model}`, `GET /ping`,
/// `GET /metrics`, `GET /models`; and on the management port, TorchServe's management
/// API (register, describe, scale, unregister models at run time).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// `name=path.onnx`, or `name=folder` for a Hugging Face checkpoint of the models
    /// crate (bert, gpt2, llama, mistral, qwen2); repeat for several models.
    #[arg(long = "model", required_unless_present_any = ["llm", "model_store"])]
    models: Vec<String>,
    /// A Hugging Face `CausalLM` folder (gpt2, llama, mistral, qwen2 with its
    /// `tokenizer.json`) served with OpenAI's API: `/v1/completions`,
    /// `/v1/chat/completions` (streaming, continuous batching), `/v1/models`.
    #[arg(long)]
    llm: Option<std::path::PathBuf>,
    /// Sequences the LLM decodes together at most.
    #[arg(long, default_value_t = 32)]
    llm_max_batch: usize,
    /// `name=crop,resize`: the model takes raw image bytes, preprocessed as
    /// torchvision's `ImageClassification(crop_size, resize_size)` (ImageNet statistics).
    #[arg(long = "image-preset")]
    image_presets: Vec<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Port of the management API (0 picks a free one).
    #[arg(long, default_value_t = 8081)]
    management_port: u16,
    /// The folder models are registered from through the management API
    /// (`POST /models?url=file.onnx`); without it, registration is refused.
    #[arg(long)]
    model_store: Option<std::path::PathBuf>,
    /// `name=dim`: batch the model's requests along its symbolic dim `dim` (`name=off`:
    /// one request per run). Without it, a model is batched along the symbolic dim named
    /// as a batch (`batch`, `batch_size`, `N`, …) that every input and output has, and
    /// served unbatched when it has none.
    #[arg(long = "batch-dim")]
    batch_dims: Vec<String>,
    /// The most bytes one model run may hold (default: half of the machine's memory);
    /// a request whose run would need more fails with 400.
    #[arg(long)]
    max_run_bytes: Option<u64>,
    /// Largest batch in rows (a hard limit); 1 turns dynamic batching off.
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// Milliseconds a worker waits to fill a batch.
    #[arg(long, default_value_t = 5)]
    max_delay_ms: u64,
    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = 16 << 20)]
    max_body_bytes: usize,
}

fn split_pair(s: &str, what: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| format!("{what} must look like name=value, got `{s}`"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut specs = Vec::new();
    for m in &args.models {
        let (name, path) = split_pair(m, "--model")?;
        // A folder is a Hugging Face checkpoint of the models crate; a file, ONNX.
        let model = if std::path::Path::new(&path).is_dir() {
            ferrograd_serve::load_pretrained(&path).map_err(|e| e.to_string())
        } else {
            ferrograd::onnx::load(&path).map_err(|e| e.to_string())
        }
        .map_err(|e| format!("loading `{name}` from {path}: {e}"))?;
        let preprocess = args
            .image_presets
            .iter()
            .filter_map(|p| split_pair(p, "--image-preset").ok())
            .find(|(n, _)| *n == name)
            .map(|(_, sizes)| -> Result<ImageClassification, String> {
                let (crop, resize) = sizes.split_once(',').ok_or_else(|| {
                    format!("--image-preset {name}= needs crop,resize, got `{sizes}`")
                })?;
                let parse = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("`{v}`: {e}"));
                Ok(ImageClassification::new(parse(crop)?, parse(resize)?))
            })
            .transpose()?;
        let batching = match args
            .batch_dims
            .iter()
            .filter_map(|p| split_pair(p, "--batch-dim").ok())
            .find(|(n, _)| *n == name)
        {
            Some((_, dim)) if dim == "off" => Batching::Off,
            Some((_, dim)) => Batching::Dim(dim),
            None => Batching::Auto,
        };
        println!("model `{name}`: {path}, inputs {:?}", model.input_names());
        let mut spec = ModelSpec::new(name, model).batching(batching);
        if let Some(p) = preprocess {
            spec = spec.preprocess(p);
        }
        specs.push(spec);
    }
    let config = ServeConfig {
        max_batch: args.max_batch.max(1),
        max_delay: Duration::from_millis(args.max_delay_ms),
        max_body_bytes: args.max_body_bytes,
        max_run_bytes: args.max_run_bytes,
        model_store: args.model_store.clone(),
    };
    let onnx_served = !specs.is_empty() || args.model_store.is_some();
    let (mut app, management) = if onnx_served {
        let r = routers(specs, &config)?;
        (r.inference, Some(r.management))
    } else {
        (axum::Router::new(), None)
    };
    if let Some(dir) = &args.llm {
        // Beside ONNX models (which own `/metrics`), the LLM's metrics are `/llm/metrics`.
        let llm_config = ferrograd_serve::llm::LlmConfig {
            max_batch: args.llm_max_batch.max(1),
            metrics_path: if !onnx_served {
                "/metrics"
            } else {
                "/llm/metrics"
            }
            .into(),
            ..Default::default()
        };
        println!("LLM: {} (OpenAI API under /v1)", dir.display());
        app = app.merge(ferrograd_serve::llm::router(dir, &llm_config)?);
    }
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let (stop_management, management_stopped) = tokio::sync::oneshot::channel::<()>();
    let management = match management {
        Some(m) => {
            let l =
                tokio::net::TcpListener::bind((args.host.as_str(), args.management_port)).await?;
            println!("management API on http://{}", l.local_addr()?);
            Some(tokio::spawn(serve(l, m, async {
                let _ = management_stopped.await;
            })))
        }
        None => None,
    };
    serve(listener, app, async {
        shutdown_signal().await;
        println!("shutting down: finishing requests in flight");
    })
    .await?;
    let _ = stop_management.send(());
    if let Some(m) = management {
        m.await??;
    }
    Ok(())
}

/// Ctrl-C, or SIGTERM (what `docker stop` and Kubernetes send).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
