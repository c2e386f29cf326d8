//! The server's Prometheus metrics: requests by model and status, a latency histogram
//! and a batch-size histogram per model.

use axum::http::StatusCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Latency buckets (seconds) of the histogram.
pub(crate) const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Batch-size buckets of the histogram.
pub(crate) const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// A Prometheus histogram.
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micro: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micro: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if v <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micro
            .fetch_add((v * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            out.push_str(&format!(
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}\n",
                c.load(Ordering::Relaxed)
            ));
        }
        let n = self.count.load(Ordering::Relaxed);
        out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {n}\n"));
        out.push_str(&format!(
            "{name}_sum{{{labels}}} {}\n",
            self.sum_micro.load(Ordering::Relaxed) as f64 / 1e6
        ));
        out.push_str(&format!("{name}_count{{{labels}}} {n}\n"));
    }
}

/// Request counts, latencies and batch sizes.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub(crate) latency: RwLock<HashMap<String, Arc<Histogram>>>,
    pub(crate) batch: RwLock<HashMap<String, Arc<Histogram>>>,
}

impl Metrics {
    /// A model's histograms (new, or its earlier ones if the name served before); the
    /// batch sizes' for its workers.
    pub(crate) fn add_model(&self, name: &str) -> Arc<Histogram> {
        self.latency
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Histogram::new(&LATENCY_BUCKETS)));
        self.batch
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Histogram::new(&BATCH_BUCKETS)))
            .clone()
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP ferrograd_requests_total Prediction requests by model and HTTP status.\n",
        );
        out.push_str("# TYPE ferrograd_requests_total counter\n");
        for ((model, code), n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            out.push_str(&format!(
                "ferrograd_requests_total{{model=\"{model}\",code=\"{code}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP ferrograd_request_duration_seconds Prediction latency, request in to response out.\n");
        out.push_str("# TYPE ferrograd_request_duration_seconds histogram\n");
        for (model, h) in sorted(&self.latency.read().unwrap_or_else(|e| e.into_inner())) {
            h.render(
                &mut out,
                "ferrograd_request_duration_seconds",
                &format!("model=\"{model}\""),
            );
        }
        out.push_str("# HELP ferrograd_batch_size Rows per batch the worker ran.\n");
        out.push_str("# TYPE ferrograd_batch_size histogram\n");
        for (model, h) in sorted(&self.batch.read().unwrap_or_else(|e| e.into_inner())) {
            h.render(
                &mut out,
                "ferrograd_batch_size",
                &format!("model=\"{model}\""),
            );
        }
        out
    }

    pub(crate) fn count(&self, model: &str, status: StatusCode) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((model.to_string(), status.as_u16()))
            .or_insert(0) += 1;
    }
}

fn sorted<V: Clone>(m: &HashMap<String, V>) -> Vec<(String, V)> {
    let mut v: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}
