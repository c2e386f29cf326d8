//! A live training dashboard in the terminal (feature `dashboard`): the loss and metric
//! curves, the learning rate, the throughput, the time left and the memory in use,
//! redrawn as the batches go by.
//!
//! It takes the terminal over (alternate screen, raw mode) only when standard error is
//! a terminal; anywhere else ([`Dashboard::open`] returns `None`) a caller falls back to
//! the progress bar, as [`Trainer`](super::Trainer) does with
//! [`TrainerConfig::dashboard`](super::TrainerConfig::dashboard). On the screen:
//!
//! - a header: the run, the epoch and step, the time elapsed and the estimated time
//!   left, and gauges of the epoch's and the whole run's batches;
//! - the training loss per step (averaged into at most a few hundred points) with the
//!   validation loss at each epoch's end;
//! - the training accuracy and the validation metrics per epoch;
//! - the learning rate of the first parameter group over the steps; the samples per
//!   second, now and over the recent updates; the host memory held by tensors, its
//!   peak, the process's resident memory, and CUDA memory when a device holds tensors;
//! - the last epoch's metrics, and the keys: `q` (or Esc) stops after the current batch
//!   (the epoch ends as usual: validation, checkpoints, logs), Ctrl-C quits at once.
//!
//! The screen is redrawn at most ten times a second, so a fast loop pays for a redraw
//! only every hundred milliseconds. When the dashboard closes (at the end of `fit`, or
//! when dropped while unwinding), the terminal is restored and each epoch's summary line
//! stays on standard error.
//!
//! ```
//! use ferrograd_runtime::train::dashboard::Dashboard;
//! use std::collections::BTreeMap;
//! // `None` here: a doctest's standard error is not a terminal.
//! if let Some(mut dash) = Dashboard::open("runs/demo", 2, None, None).unwrap() {
//!     for epoch in 0..2 {
//!         dash.epoch_start(epoch, 100);
//!         for step in 0..100u64 {
//!             let stop = dash.batch(epoch as u64 * 100 + step + 1, 32, 0.5, Some(30), 1e-3);
//!             if stop { break; }
//!         }
//!         dash.epoch_end(&BTreeMap::from([("val_loss".to_string(), 0.4)]), (epoch as u64 + 1) * 100);
//!     }
//! }
//! ```

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{event, execute, terminal};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, Gauge, GraphType, Paragraph, Sparkline};
use ratatui::{Frame, Terminal};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Stderr};
use std::time::{Duration, Instant};

mod render;
use render::*;

/// How often the screen is redrawn at most.
const REDRAW: Duration = Duration::from_millis(100);
/// Points a curve keeps at most (older ones are averaged in pairs).
const CURVE_POINTS: usize = 512;
/// Throughput samples the sparkline shows.
const THROUGHPUT_HISTORY: usize = 240;

/// A curve that keeps at most [`CURVE_POINTS`] points: when full, neighbouring points
/// are averaged in pairs and later points are averaged over twice as many inputs.
#[derive(Clone, Debug, Default)]
struct Curve {
    points: Vec<(f64, f64)>,
    /// Inputs averaged into each point.
    stride: usize,
    pending: (f64, f64, usize),
}

impl Curve {
    fn push(&mut self, x: f64, y: f64) {
        if !y.is_finite() {
            return;
        }
        self.stride = self.stride.max(1);
        let (sx, sy, n) = &mut self.pending;
        *sx += x;
        *sy += y;
        *n += 1;
        if *n < self.stride {
            return;
        }
        let n = *n as f64;
        self.points.push((*sx / n, *sy / n));
        self.pending = (0.0, 0.0, 0);
        if self.points.len() >= CURVE_POINTS {
            self.points = self
                .points
                .chunks(2)
                .map(|c| {
                    let k = c.len() as f64;
                    (
                        c.iter().map(|p| p.0).sum::<f64>() / k,
                        c.iter().map(|p| p.1).sum::<f64>() / k,
                    )
                })
                .collect();
            self.stride *= 2;
        }
    }

    /// The points, with the partial one at the end.
    fn data(&self) -> Vec<(f64, f64)> {
        let mut d = self.points.clone();
        let (sx, sy, n) = self.pending;
        if n > 0 {
            d.push((sx / n as f64, sy / n as f64));
        }
        d
    }
}

/// Everything the screen shows, apart from the terminal (drawn by [`render`]).
#[derive(Clone, Debug)]
struct View {
    title: String,
    max_epochs: usize,
    max_steps: Option<u64>,
    max_time: Option<Duration>,
    started: Instant,
    /// Epoch being trained (0-based) and its batch count.
    epoch: usize,
    epoch_batches: usize,
    batch: usize,
    /// Batches trained by this run (not counting those before a resume), and the epoch
    /// the run started at.
    run_batches: u64,
    first_epoch: Option<usize>,
    global_step: u64,
    epoch_started: Instant,
    epoch_samples: usize,
    epoch_loss: (f64, usize),
    epoch_correct: Option<(usize, usize)>,
    loss: Curve,
    val_loss: Vec<(f64, f64)>,
    metrics: BTreeMap<String, Vec<(f64, f64)>>,
    lr: Curve,
    lr_now: f64,
    throughput: Vec<u64>,
    last_epoch: BTreeMap<String, f64>,
    summaries: Vec<String>,
    stopping: bool,
}

impl View {
    fn new(
        title: &str,
        max_epochs: usize,
        max_steps: Option<u64>,
        max_time: Option<Duration>,
    ) -> View {
        let now = Instant::now();
        View {
            title: title.to_string(),
            max_epochs,
            max_steps,
            max_time,
            started: now,
            epoch: 0,
            epoch_batches: 0,
            batch: 0,
            run_batches: 0,
            first_epoch: None,
            global_step: 0,
            epoch_started: now,
            epoch_samples: 0,
            epoch_loss: (0.0, 0),
            epoch_correct: None,
            loss: Curve::default(),
            val_loss: Vec::new(),
            metrics: BTreeMap::new(),
            lr: Curve::default(),
            lr_now: f64::NAN,
            throughput: Vec::new(),
            last_epoch: BTreeMap::new(),
            summaries: Vec::new(),
            stopping: false,
        }
    }

    /// The epoch's samples per second so far (the last epoch's at its start).
    fn samples_per_sec(&self) -> f64 {
        match self.last_epoch.get("samples_per_sec") {
            Some(last) if self.epoch_samples == 0 => *last,
            _ => self.epoch_samples as f64 / self.epoch_started.elapsed().as_secs_f64().max(1e-9),
        }
    }

    /// Batches the run will train in all, as far as the epochs' length tells.
    fn run_total(&self) -> u64 {
        let first = self.first_epoch.unwrap_or(self.epoch);
        let mut total = (self.max_epochs.saturating_sub(first) * self.epoch_batches) as u64;
        if let Some(m) = self.max_steps {
            // Steps left when the run started, as batches (at least one per step).
            let done_before = self.global_step.saturating_sub(self.run_batches);
            total = total.min(m.saturating_sub(done_before).max(self.run_batches));
        }
        total.max(self.run_batches)
    }

    /// The time left: the run's pace so far over the batches to go, capped by `max_time`.
    fn eta(&self) -> Option<Duration> {
        let elapsed = self.started.elapsed();
        let by_time = self.max_time.map(|t| t.saturating_sub(elapsed));
        if self.run_batches == 0 {
            return by_time;
        }
        let left = self.run_total().saturating_sub(self.run_batches);
        let pace = elapsed.as_secs_f64() / self.run_batches as f64;
        let by_batches = Duration::from_secs_f64(pace * left as f64);
        Some(by_time.map_or(by_batches, |t| t.min(by_batches)))
    }
}

/// The live dashboard: see the [module](self) for what it shows.
pub struct Dashboard {
    terminal: Terminal<CrosstermBackend<Stderr>>,
    view: View,
    drawn: Option<Instant>,
    closed: bool,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("title", &self.view.title)
            .field("epoch", &self.view.epoch)
            .field("global_step", &self.view.global_step)
            .finish_non_exhaustive()
    }
}

impl Dashboard {
    /// Takes the terminal over for a run titled `title` (the run's directory, say) of
    /// `max_epochs` epochs (bounded by `max_steps` optimizer steps and `max_time`, when
    /// given, for the estimate of the time left). `Ok(None)` when standard error is not
    /// a terminal (a pipe, a file, CI): draw a progress bar instead. An error when the
    /// terminal cannot be set up (it is then left as it was).
    pub fn open(
        title: &str,
        max_epochs: usize,
        max_steps: Option<u64>,
        max_time: Option<Duration>,
    ) -> std::io::Result<Option<Dashboard>> {
        let mut err = std::io::stderr();
        if !err.is_terminal() {
            return Ok(None);
        }
        terminal::enable_raw_mode()?;
        if let Err(e) = execute!(err, terminal::EnterAlternateScreen) {
            let _ = terminal::disable_raw_mode();
            return Err(e);
        }
        let mut dash = Dashboard {
            terminal: match Terminal::new(CrosstermBackend::new(std::io::stderr())) {
                Ok(t) => t,
                Err(e) => {
                    restore();
                    return Err(e);
                }
            },
            view: View::new(title, max_epochs, max_steps, max_time),
            drawn: None,
            closed: false,
        };
        dash.terminal.hide_cursor()?;
        dash.terminal.clear()?;
        dash.redraw(true);
        Ok(Some(dash))
    }

    /// Epoch `epoch` (0-based) starts, `batches` long.
    pub fn epoch_start(&mut self, epoch: usize, batches: usize) {
        let v = &mut self.view;
        v.first_epoch.get_or_insert(epoch);
        v.epoch = epoch;
        v.epoch_batches = batches;
        v.batch = 0;
        v.epoch_started = Instant::now();
        v.epoch_samples = 0;
        v.epoch_loss = (0.0, 0);
        v.epoch_correct = None;
        self.redraw(true);
    }

    /// A training batch of `batch_size` samples with loss `loss` (and `correct` right
    /// predictions, when counted) is done; the optimizer has taken `global_step` steps
    /// and its first group's learning rate is `lr`. Returns whether the user asked to
    /// stop (`q` or Esc): the caller ends the epoch after this batch.
    pub fn batch(
        &mut self,
        global_step: u64,
        batch_size: usize,
        loss: f64,
        correct: Option<usize>,
        lr: f64,
    ) -> bool {
        let v = &mut self.view;
        v.batch += 1;
        v.run_batches += 1;
        v.global_step = global_step;
        v.epoch_samples += batch_size;
        if loss.is_finite() {
            v.epoch_loss.0 += loss;
            v.epoch_loss.1 += 1;
        }
        if let Some(c) = correct {
            let (right, seen) = v.epoch_correct.get_or_insert((0, 0));
            *right += c;
            *seen += batch_size;
        }
        v.loss.push(global_step as f64, loss);
        v.lr.push(global_step as f64, lr);
        v.lr_now = lr;
        if self.drawn.is_none_or(|t| t.elapsed() >= REDRAW) {
            let rate = self.view.samples_per_sec();
            let history = &mut self.view.throughput;
            history.push(rate.round().max(0.0) as u64);
            if history.len() > THROUGHPUT_HISTORY {
                history.remove(0);
            }
            self.poll_keys();
            self.redraw(false);
        }
        self.view.stopping
    }

    /// The epoch is over, validated or not: `metrics` are its values (`train_loss`,
    /// `train_accuracy`, `val_loss`, `val_*`, ...) after `global_step` steps.
    pub fn epoch_end(&mut self, metrics: &BTreeMap<String, f64>, global_step: u64) {
        let v = &mut self.view;
        v.global_step = global_step;
        let x = global_step as f64;
        if let Some(l) = metrics.get("val_loss").filter(|l| l.is_finite()) {
            v.val_loss.push((x, *l));
        }
        for (name, value) in metrics {
            let charted = name == "train_accuracy" || name.starts_with("val_");
            if charted && name != "val_loss" && value.is_finite() {
                v.metrics
                    .entry(name.clone())
                    .or_default()
                    .push(((v.epoch + 1) as f64, *value));
            }
        }
        v.last_epoch = metrics
            .iter()
            .filter(|(k, _)| !k.starts_with("lr_group"))
            .map(|(k, x)| (k.clone(), *x))
            .collect();
        let mut line = format!("epoch {}/{} step {global_step}", v.epoch + 1, v.max_epochs);
        for (k, x) in &v.last_epoch {
            line += &format!(" {k} {}", format_value(k, *x));
        }
        line += &format!(" [{}]", format_duration(v.epoch_started.elapsed()));
        v.summaries.push(line);
        self.redraw(true);
    }

    /// Whether the user asked to stop (`q` or Esc).
    pub fn stop_requested(&self) -> bool {
        self.view.stopping
    }

    /// Restores the terminal and leaves each epoch's summary on standard error (what
    /// dropping it does too).
    pub fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let _ = self.terminal.show_cursor();
        restore();
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        for line in &self.view.summaries {
            let _ = writeln!(err, "{line}");
        }
        if self.view.stopping {
            let _ = writeln!(err, "stopped from the dashboard");
        }
    }

    fn poll_keys(&mut self) {
        while let Ok(true) = event::poll(Duration::ZERO) {
            let Ok(event::Event::Key(key)) = event::read() else {
                continue;
            };
            if key.kind != event::KeyEventKind::Press {
                continue;
            }
            match key.code {
                event::KeyCode::Char('c')
                    if key.modifiers.contains(event::KeyModifiers::CONTROL) =>
                {
                    // Raw mode turned Ctrl-C into a key: quit as the signal would have.
                    self.shut();
                    std::process::exit(130);
                }
                event::KeyCode::Char('q') | event::KeyCode::Esc => self.view.stopping = true,
                _ => {}
            }
        }
    }

    fn redraw(&mut self, force: bool) {
        if !force && self.drawn.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.drawn = Some(Instant::now());
        let memory = Memory::now();
        let view = &self.view;
        // A failed draw (the terminal went away) must not stop training.
        let _ = self.terminal.draw(|f| render(f, view, &memory));
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Leaves the alternate screen and raw mode.
fn restore() {
    let _ = execute!(std::io::stderr(), terminal::LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
}

/// The memory figures of the memory panel.
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    tensors: usize,
    peak: usize,
    resident: Option<usize>,
    cuda: Option<(usize, usize)>,
}

impl Memory {
    fn now() -> Memory {
        Memory {
            tensors: crate::cpu::memory_allocated(),
            peak: crate::cpu::max_memory_allocated(),
            resident: resident_bytes(),
            cuda: cuda_memory(),
        }
    }
}

/// The process's resident set (Linux: `/proc/self/statm`).
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * usize::try_from(page).ok()?)
}

/// Device 0's allocated and peak bytes, when tensors live there.
#[cfg(feature = "cuda")]
fn cuda_memory() -> Option<(usize, usize)> {
    let peak = crate::cuda::max_memory_allocated(0);
    (peak > 0).then(|| (crate::cuda::memory_allocated(0), peak))
}

#[cfg(not(feature = "cuda"))]
fn cuda_memory() -> Option<(usize, usize)> {
    None
}

#[cfg(test)]
mod tests;
