//! The trainer's TensorBoard log: the writer, its flush policy, the values logged at the
//! current step (so a checkpoint can carry them and a resume re-log them after purging
//! that step), and the per-step/per-epoch series of values a step logs.

use super::tensorboard::Result as TbResult;
use super::tensorboard::SummaryWriter;
use super::trainer::LogOptions;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// A [`SummaryWriter`] that flushes every `flush_secs` or `max_queue` values
/// (`torch.utils.tensorboard`'s policy) and remembers what it logged at the current step.
pub(crate) struct RunLog {
    writer: SummaryWriter,
    flush_every: Duration,
    max_queue: usize,
    queued: usize,
    last_flush: Instant,
    step: u64,
    at_step: Vec<(String, f64)>,
}

impl RunLog {
    /// A new run in `dir`, or (`resume_at`) one that goes on from a checkpoint taken at
    /// that step: TensorBoard drops the earlier files' events from that step on, and
    /// `relog` (what the checkpoint says was logged at its step before it was taken) is
    /// written again, so the step holds each value once.
    pub(crate) fn open(
        dir: &Path,
        resume_at: Option<u64>,
        relog: &[(String, f64)],
        flush_secs: u64,
        max_queue: usize,
    ) -> TbResult<RunLog> {
        let writer = match resume_at {
            None => SummaryWriter::new(dir)?,
            Some(step) => SummaryWriter::resume(dir, step)?,
        };
        let mut log = RunLog {
            writer,
            flush_every: Duration::from_secs(flush_secs),
            max_queue: max_queue.max(1),
            queued: 0,
            last_flush: Instant::now(),
            step: resume_at.unwrap_or(0),
            at_step: Vec::new(),
        };
        for (tag, value) in relog {
            log.scalar(tag, *value, log.step)?;
        }
        log.flush()?;
        Ok(log)
    }

    /// Logs `value` under `tag` at `step`.
    pub(crate) fn scalar(&mut self, tag: &str, value: f64, step: u64) -> TbResult<()> {
        if step != self.step {
            self.step = step;
            self.at_step.clear();
        }
        self.at_step.push((tag.to_string(), value));
        self.writer.add_scalar(tag, value, step)?;
        self.queued += 1;
        if self.queued >= self.max_queue || self.last_flush.elapsed() >= self.flush_every {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is buffered to the file.
    pub(crate) fn flush(&mut self) -> TbResult<()> {
        self.writer.flush()?;
        self.queued = 0;
        self.last_flush = Instant::now();
        Ok(())
    }

    /// The values logged at `step` so far (empty if the log has moved past it).
    pub(crate) fn logged_at(&self, step: u64) -> &[(String, f64)] {
        if step == self.step {
            &self.at_step
        } else {
            &[]
        }
    }
}

/// The values a step logs ([`StepOutput::log`](super::StepOutput::log)) over an epoch:
/// their weighted means, and which ones are per step.
#[derive(Default)]
pub(crate) struct StepLogs {
    sums: BTreeMap<String, (f64, f64, LogOptions)>,
}

impl StepLogs {
    /// Adds a batch's values (weighted by its size).
    pub(crate) fn add(&mut self, logs: &[(String, f64, LogOptions)], weight: f64) {
        for (name, value, options) in logs {
            let e = self
                .sums
                .entry(name.clone())
                .or_insert((0.0, 0.0, *options));
            e.0 += value * weight;
            e.1 += weight;
            e.2 = *options;
        }
    }

    /// Every rank's sums, added up (the ranks log the same names).
    pub(crate) fn all_reduce(
        &mut self,
        g: &crate::distributed::ProcessGroup,
    ) -> Result<(), crate::distributed::DistError> {
        if self.sums.is_empty() {
            return Ok(());
        }
        let flat: Vec<f64> = self.sums.values().flat_map(|(s, w, _)| [*s, *w]).collect();
        let n = flat.len();
        let t = crate::Tensor::from_vec(flat, &[n]);
        g.all_reduce(&t, crate::distributed::ReduceOp::Sum)?;
        let v = t.to_vec::<f64>();
        for (i, e) in self.sums.values_mut().enumerate() {
            (e.0, e.1) = (v[2 * i], v[2 * i + 1]);
        }
        Ok(())
    }

    /// The epoch's values: `(tag, mean)` for those logged per epoch (`{name}_epoch` when
    /// also per step), and `(name, mean)` for `state.metrics`.
    pub(crate) fn epoch_values(&self, validation: bool) -> Vec<(String, String, f64)> {
        self.sums
            .iter()
            .filter(|(_, (_, _, o))| validation || o.on_epoch)
            .map(|(name, (sum, weight, o))| {
                let mean = if *weight > 0.0 {
                    sum / weight
                } else {
                    f64::NAN
                };
                let tag = if !validation && o.on_step {
                    format!("{name}_epoch")
                } else {
                    name.clone()
                };
                (tag, name.clone(), mean)
            })
            .collect()
    }
}

impl StepLogs {
    /// The sums as JSON (kept in a checkpoint of an unfinished epoch).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        self.sums
            .iter()
            .map(|(k, (s, w, o))| (k.clone(), serde_json::json!([s, w, o.on_step, o.on_epoch])))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// Reads [`StepLogs::to_json`]'s output (`null`: none).
    pub(crate) fn from_json(v: &serde_json::Value) -> Result<StepLogs, String> {
        let mut logs = StepLogs::default();
        let Some(map) = v.as_object() else {
            return Ok(logs);
        };
        for (k, e) in map {
            let bad = || format!("logged value {k:?}: {e}");
            let a = e.as_array().ok_or_else(bad)?;
            let f = |i: usize| a.get(i).and_then(serde_json::Value::as_f64).ok_or_else(bad);
            let b = |i: usize| {
                a.get(i)
                    .and_then(serde_json::Value::as_bool)
                    .ok_or_else(bad)
            };
            logs.sums.insert(
                k.clone(),
                (
                    f(0)?,
                    f(1)?,
                    LogOptions {
                        on_step: b(2)?,
                        on_epoch: b(3)?,
                    },
                ),
            );
        }
        Ok(logs)
    }
}

/// The tag of a step-logged value: `{name}_step` when it is also logged per epoch.
pub(crate) fn step_tag(name: &str, options: LogOptions) -> String {
    if options.on_epoch {
        format!("{name}_step")
    } else {
        name.to_string()
    }
}
