//! A model's queue and its workers: requests wait in one queue per model; each worker
//! takes a batch from it (as many queued requests as fit in `max_batch` rows, waiting
//! up to `max_delay` for those still being decoded), runs it and answers each request
//! with its own result. A model has one worker or more (TorchServe's `min_worker`,
//! changed at run time through the management API); a worker told to stop finishes its
//! batch first.

use crate::batching::{BatchAxes, BatchKey, batch_key, run_group};
use crate::{ConfigError, Histogram, Metrics, ModelSpec, ServeConfig, batch_axes};
use ferrograd::Tensor;
use ferrograd::models::vision::transforms::ImageClassification;
use ferrograd::onnx::OnnxModel;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::{mpsc, oneshot, watch};

/// One request waiting for a worker.
pub(crate) struct Job {
    pub(crate) inputs: Vec<Tensor>,
    /// Rows along the batch axis (1 for an unbatched model).
    pub(crate) rows: usize,
    pub(crate) reply: oneshot::Sender<Result<Vec<Tensor>, String>>,
}

/// A worker's handle: asked to stop through `stop`.
pub(crate) struct WorkerCtl {
    pub(crate) id: usize,
    pub(crate) started: SystemTime,
    stop: watch::Sender<bool>,
}

/// A served model: what requests need, its queue and its workers.
pub(crate) struct ModelHandle {
    pub(crate) name: String,
    pub(crate) model: Arc<OnnxModel>,
    /// The batch axis of each input and output; `None`: one request per run.
    pub(crate) axes: Option<Arc<BatchAxes>>,
    pub(crate) preprocess: Option<ImageClassification>,
    pub(crate) jobs: mpsc::Sender<Job>,
    /// Requests a handler has taken for this model and not yet queued (being decoded):
    /// a worker waits for them to join its batch.
    pub(crate) arriving: Arc<AtomicUsize>,
    /// Where it was loaded from (what the management API was given).
    pub(crate) url: String,
    /// Its batch limits (`max_batch`, `max_delay`).
    pub(crate) settings: ServeConfig,
    queue: Arc<tokio::sync::Mutex<Queue>>,
    batch_sizes: Arc<Histogram>,
    pub(crate) workers: Mutex<Vec<WorkerCtl>>,
    next_worker: AtomicUsize,
}

/// Counts one request as arriving until it is queued (or fails first).
pub(crate) struct Arriving<'a>(&'a AtomicUsize);

impl<'a> Arriving<'a> {
    pub(crate) fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Arriving(count)
    }
}

impl Drop for Arriving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A model's queue: the jobs, a job taken that did not fit the last batch, and how many
/// requests are still on their way to it.
struct Queue {
    rx: mpsc::Receiver<Job>,
    carry: Option<Job>,
    arriving: Arc<AtomicUsize>,
}

/// Starts serving `spec` (its batch axis resolved, `workers` workers started on the
/// current tokio runtime).
pub(crate) fn start_model(
    spec: ModelSpec,
    url: String,
    settings: ServeConfig,
    workers: usize,
    metrics: &Metrics,
) -> Result<Arc<ModelHandle>, ConfigError> {
    let axes = batch_axes(&spec.model, &spec.batching)
        .map_err(|reason| ConfigError::Batching {
            model: spec.name.clone(),
            reason,
        })?
        .map(Arc::new);
    let mut model = spec.model;
    if let Some(limit) = settings.max_run_bytes {
        model = model.with_max_run_bytes(limit);
    }
    let (tx, rx) = mpsc::channel::<Job>(1024);
    let arriving = Arc::new(AtomicUsize::new(0));
    let handle = Arc::new(ModelHandle {
        name: spec.name.clone(),
        model: Arc::new(model),
        axes,
        preprocess: spec.preprocess,
        jobs: tx,
        arriving: arriving.clone(),
        url,
        settings,
        queue: Arc::new(tokio::sync::Mutex::new(Queue {
            rx,
            carry: None,
            arriving,
        })),
        batch_sizes: metrics.add_model(&spec.name),
        workers: Mutex::new(Vec::new()),
        next_worker: AtomicUsize::new(0),
    });
    handle.scale(workers.max(1));
    Ok(handle)
}

impl ModelHandle {
    /// Starts or stops workers until there are `n` (a stopped one finishes its batch).
    pub(crate) fn scale(&self, n: usize) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        while workers.len() > n {
            let w = workers.pop().expect("more than n");
            let _ = w.stop.send(true);
        }
        while workers.len() < n {
            let (stop, stopped) = watch::channel(false);
            let id = self.next_worker.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(worker(
                self.model.clone(),
                self.axes.clone(),
                self.queue.clone(),
                self.settings.clone(),
                self.batch_sizes.clone(),
                stopped,
            ));
            workers.push(WorkerCtl {
                id,
                started: SystemTime::now(),
                stop,
            });
        }
    }

    /// Stops every worker once the queue is drained (the model was unregistered).
    pub(crate) fn retire(&self) {
        // Dropping the stop senders is not a stop signal: workers end when the queue's
        // senders (this handle's, and requests in flight) are gone and it is empty.
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Takes queued jobs into `jobs` while their rows fit in `max_batch`; a job that does not
/// fit is kept in `carry` to start the next batch.
fn take_queued(
    rx: &mut mpsc::Receiver<Job>,
    jobs: &mut Vec<Job>,
    rows: &mut usize,
    carry: &mut Option<Job>,
    max_batch: usize,
) {
    while *rows < max_batch && carry.is_none() {
        match rx.try_recv() {
            Ok(job) if *rows + job.rows <= max_batch => {
                *rows += job.rows;
                jobs.push(job);
            }
            Ok(job) => *carry = Some(job),
            Err(_) => break,
        }
    }
}

/// Resolves when `stop` says stop (never, if its sender is gone without saying so).
async fn stop_asked(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Takes the next batch from the queue: the first job (waiting for one), then every job
/// already queued that fits in `max_batch` rows, then (up to `max_delay`) requests
/// handlers are still decoding — but not requests no handler has begun, so a lone
/// client, or a burst that is all in, runs at once. `None` when the queue is closed and
/// empty, or this worker is asked to stop.
async fn next_batch(
    queue: &tokio::sync::Mutex<Queue>,
    config: &ServeConfig,
    batching: bool,
    stop: &mut watch::Receiver<bool>,
) -> Option<Vec<Job>> {
    let mut q = tokio::select! {
        biased;
        _ = stop_asked(stop) => return None,
        q = queue.lock() => q,
    };
    let Queue {
        rx,
        carry,
        arriving,
    } = &mut *q;
    let first = match carry.take() {
        Some(job) => job,
        None => tokio::select! {
            biased;
            _ = stop_asked(stop) => return None,
            job = rx.recv() => job?,
        },
    };
    let mut rows = first.rows;
    let mut jobs = vec![first];
    if batching {
        take_queued(rx, &mut jobs, &mut rows, carry, config.max_batch);
        let deadline = tokio::time::Instant::now() + config.max_delay;
        while rows < config.max_batch && carry.is_none() && arriving.load(Ordering::Acquire) > 0 {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(job)) if rows + job.rows <= config.max_batch => {
                    rows += job.rows;
                    jobs.push(job);
                    take_queued(rx, &mut jobs, &mut rows, carry, config.max_batch);
                }
                Ok(Some(job)) => *carry = Some(job),
                _ => break,
            }
        }
    }
    Some(jobs)
}

/// A worker: takes batches from the model's queue and runs them, batched along the
/// model's batch axis when it has one, never more than `max_batch` rows at once. Every
/// request gets its own result.
async fn worker(
    model: Arc<OnnxModel>,
    axes: Option<Arc<BatchAxes>>,
    queue: Arc<tokio::sync::Mutex<Queue>>,
    config: ServeConfig,
    batch_sizes: Arc<Histogram>,
    mut stop: watch::Receiver<bool>,
) {
    let batching = axes.is_some() && config.max_batch > 1;
    while let Some(jobs) = next_batch(&queue, &config, batching, &mut stop).await {
        // Group compatible requests; each group is one run.
        let mut groups: Vec<(Option<BatchKey>, Vec<Job>)> = Vec::new();
        for job in jobs {
            let key = axes.as_deref().map(|a| batch_key(&job.inputs, a));
            match groups.iter_mut().find(|(k, _)| key.is_some() && *k == key) {
                Some((_, g)) => g.push(job),
                None => groups.push((key, vec![job])),
            }
        }
        for (_, group) in groups {
            let sizes: Vec<usize> = group.iter().map(|j| j.rows).collect();
            batch_sizes.observe(sizes.iter().sum::<usize>() as f64);
            let inputs: Vec<Vec<Tensor>> = group.iter().map(|j| j.inputs.clone()).collect();
            let (model, axes) = (model.clone(), axes.clone());
            let n = group.len();
            let results = tokio::task::spawn_blocking(move || {
                run_group(&model, axes.as_deref(), &inputs, &sizes)
            })
            .await
            .unwrap_or_else(|e| vec![Err(format!("the model run failed: {e}")); n]);
            for (job, result) in group.into_iter().zip(results) {
                let _ = job.reply.send(result);
            }
        }
    }
}
