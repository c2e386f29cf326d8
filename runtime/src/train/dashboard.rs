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

fn format_bytes(b: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[unit])
    }
}

fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A metric's value as the summary shows it (accuracies in percent).
fn format_value(name: &str, x: f64) -> String {
    if name == "samples_per_sec" {
        format!("{x:.0}")
    } else if name.contains("accuracy") {
        format!("{:.2}%", x * 100.0)
    } else if x != 0.0 && (x.abs() >= 1e5 || x.abs() < 1e-3) {
        format!("{x:.3e}")
    } else {
        format!("{x:.4}")
    }
}

/// Axis bounds around `values`, padded by a twentieth of their range.
fn bounds(values: impl Iterator<Item = f64>) -> [f64; 2] {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return [0.0, 1.0];
    }
    let pad = ((hi - lo) * 0.05).max(hi.abs().max(1e-12) * 1e-3);
    [lo - pad, hi + pad]
}

fn axis_labels(b: [f64; 2], fmt: fn(f64) -> String) -> Vec<Span<'static>> {
    vec![
        Span::raw(fmt(b[0])),
        Span::raw(fmt((b[0] + b[1]) / 2.0)),
        Span::raw(fmt(b[1])),
    ]
}

const SERIES_COLORS: [Color; 6] = [
    Color::Green,
    Color::Magenta,
    Color::Yellow,
    Color::Blue,
    Color::Red,
    Color::White,
];

fn render(f: &mut Frame, v: &View, memory: &Memory) {
    let area = f.area();
    if area.width < 60 || area.height < 20 {
        let text = format!(
            "epoch {}/{} batch {}/{} loss {:.4} — enlarge the terminal for the dashboard (60x20)",
            v.epoch + 1,
            v.max_epochs,
            v.batch,
            v.epoch_batches,
            v.epoch_loss.0 / v.epoch_loss.1.max(1) as f64
        );
        f.render_widget(Paragraph::new(text), area);
        return;
    }
    let [header, charts, panels, last] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Min(8),
        Constraint::Length(7),
        Constraint::Length(4),
    ])
    .areas(area);
    render_header(f, v, header);
    let [loss, metrics] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(charts);
    render_loss(f, v, loss);
    render_metrics(f, v, metrics);
    let [lr, speed, mem] = Layout::horizontal([
        Constraint::Percentage(34),
        Constraint::Percentage(33),
        Constraint::Percentage(33),
    ])
    .areas(panels);
    render_lr(f, v, lr);
    render_throughput(f, v, speed);
    render_memory(f, memory, mem);
    render_last(f, v, last);
}

fn render_header(f: &mut Frame, v: &View, area: Rect) {
    let keys = if v.stopping {
        " stopping after this batch ".to_string()
    } else {
        " q: stop · Ctrl-C: quit ".to_string()
    };
    let block = Block::bordered()
        .title(Line::from(format!(" ferrograd · {} ", v.title)).bold())
        .title_bottom(Line::from(keys).right_aligned());
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [info, epoch_gauge, run_gauge] = Layout::vertical([Constraint::Length(1); 3]).areas(inner);
    let eta = v
        .eta()
        .map_or_else(|| "--:--:--".to_string(), format_duration);
    let steps = match v.max_steps {
        Some(m) => format!("{}/{m}", v.global_step),
        None => v.global_step.to_string(),
    };
    let info_line = Line::from(vec![
        Span::raw("epoch "),
        Span::raw(format!("{}/{}", v.epoch + 1, v.max_epochs)).bold(),
        Span::raw("  step "),
        Span::raw(steps).bold(),
        Span::raw("  elapsed "),
        Span::raw(format_duration(v.started.elapsed())).bold(),
        Span::raw("  ETA "),
        Span::raw(eta).bold().fg(Color::Cyan),
    ]);
    f.render_widget(Paragraph::new(info_line), info);
    let ratio = |done: u64, total: u64| (done as f64 / total.max(1) as f64).clamp(0.0, 1.0);
    f.render_widget(
        Gauge::default()
            .gauge_style(Style::default().fg(Color::Green).bg(Color::DarkGray))
            .ratio(ratio(v.batch as u64, v.epoch_batches as u64))
            .label(format!("epoch  {}/{} batches", v.batch, v.epoch_batches)),
        epoch_gauge,
    );
    let total = v.run_total();
    f.render_widget(
        Gauge::default()
            .gauge_style(Style::default().fg(Color::Blue).bg(Color::DarkGray))
            .ratio(ratio(v.run_batches, total))
            .label(format!("run  {}/{} batches", v.run_batches, total)),
        run_gauge,
    );
}

fn render_loss(f: &mut Frame, v: &View, area: Rect) {
    let mut train = v.loss.data();
    let mut val = v.val_loss.clone();
    // Losses span decades (the first steps' dwarf the rest): a log scale when all are
    // positive, labelled with the losses themselves.
    let log = train.iter().chain(&val).all(|p| p.1 > 0.0);
    if log {
        for p in train.iter_mut().chain(val.iter_mut()) {
            p.1 = p.1.log10();
        }
    }
    let mut datasets = vec![
        Dataset::default()
            .name("train")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::default().fg(Color::Cyan))
            .data(&train),
    ];
    if !val.is_empty() {
        datasets.push(
            Dataset::default()
                .name("val")
                .marker(Marker::Dot)
                .graph_type(GraphType::Line)
                .style(Style::default().fg(Color::Yellow))
                .data(&val),
        );
    }
    let xb = bounds(train.iter().chain(&val).map(|p| p.0).chain([0.0, 1.0]));
    let xb = [xb[0].max(0.0), xb[1]];
    let yb = bounds(train.iter().chain(&val).map(|p| p.1));
    let y_labels = if log {
        axis_labels(yb, |y| short(10f64.powf(y)))
    } else {
        axis_labels(yb, short)
    };
    let now = if v.epoch_loss.1 > 0 {
        format!(" loss {:.4} ", v.epoch_loss.0 / v.epoch_loss.1 as f64)
    } else {
        " loss ".to_string()
    };
    let scale = if log { " step · log scale " } else { " step " };
    let chart = Chart::new(datasets)
        .block(Block::bordered().title(now).title_bottom(scale))
        .x_axis(
            Axis::default()
                .bounds(xb)
                .labels(axis_labels(xb, |x| format!("{x:.0}"))),
        )
        .y_axis(Axis::default().bounds(yb).labels(y_labels));
    f.render_widget(chart, area);
}

/// An axis label: three decimals, or three significant digits for small values.
fn short(x: f64) -> String {
    if x == 0.0 || x.abs() >= 0.01 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

fn render_metrics(f: &mut Frame, v: &View, area: Rect) {
    let block = Block::bordered().title(" metrics ").title_bottom(" epoch ");
    let mut running: Vec<(f64, f64)> = Vec::new();
    let mut series: Vec<(&str, &[(f64, f64)])> = v
        .metrics
        .iter()
        .map(|(k, p)| (k.as_str(), p.as_slice()))
        .collect();
    // The epoch in progress: its running training accuracy, at a fractional epoch.
    if let Some((right, seen)) = v.epoch_correct.filter(|c| c.1 > 0) {
        let x = v.epoch as f64 + v.batch as f64 / v.epoch_batches.max(1) as f64;
        running.push((x, right as f64 / seen as f64));
        series.push(("train_accuracy (now)", running.as_slice()));
    }
    if series.is_empty() {
        f.render_widget(
            Paragraph::new("after the first epoch: accuracy and validation metrics")
                .block(block)
                .dark_gray(),
            area,
        );
        return;
    }
    let datasets: Vec<Dataset> = series
        .iter()
        .enumerate()
        .map(|(i, (name, points))| {
            Dataset::default()
                .name(*name)
                .marker(if points.len() > 1 {
                    Marker::Braille
                } else {
                    Marker::Dot
                })
                .graph_type(if points.len() > 1 {
                    GraphType::Line
                } else {
                    GraphType::Scatter
                })
                .style(Style::default().fg(SERIES_COLORS[i % SERIES_COLORS.len()]))
                .data(points)
        })
        .collect();
    let (first, last) = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold((f64::INFINITY, 1.0f64), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    let pad = ((last - first) * 0.05).max(0.25);
    let xb = [(first - pad).max(0.0), last + pad];
    let yb = bounds(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)));
    f.render_widget(
        Chart::new(datasets)
            .block(block)
            .hidden_legend_constraints((Constraint::Ratio(2, 3), Constraint::Ratio(1, 2)))
            // Metrics rise to the top right: the legend goes below them.
            .legend_position(Some(ratatui::widgets::LegendPosition::BottomRight))
            .x_axis(
                Axis::default()
                    .bounds(xb)
                    .labels(axis_labels(xb, |x| format!("{x:.1}"))),
            )
            .y_axis(Axis::default().bounds(yb).labels(axis_labels(yb, short))),
        area,
    );
}

fn render_lr(f: &mut Frame, v: &View, area: Rect) {
    let points = v.lr.data();
    let title = format!(" learning rate {:.3e} ", v.lr_now);
    let xb = bounds(points.iter().map(|p| p.0).chain([0.0]));
    let yb = bounds(points.iter().map(|p| p.1));
    let chart = Chart::new(vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::default().fg(Color::Magenta))
            .data(&points),
    ])
    .block(Block::bordered().title(title))
    .x_axis(Axis::default().bounds(xb))
    .y_axis(
        Axis::default()
            .bounds(yb)
            .labels(axis_labels(yb, |y| format!("{y:.1e}"))),
    );
    f.render_widget(chart, area);
}

fn render_throughput(f: &mut Frame, v: &View, area: Rect) {
    let title = format!(" throughput {:.0} samples/s ", v.samples_per_sec());
    let block = Block::bordered().title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let width = inner.width as usize;
    let recent = &v.throughput[v.throughput.len().saturating_sub(width)..];
    f.render_widget(
        Sparkline::default()
            .data(recent)
            .style(Style::default().fg(Color::Green)),
        inner,
    );
}

fn render_memory(f: &mut Frame, m: &Memory, area: Rect) {
    let mut lines = vec![
        Line::from(vec![
            Span::raw("tensors   "),
            Span::raw(format_bytes(m.tensors)).bold(),
        ]),
        Line::from(vec![
            Span::raw("peak      "),
            Span::raw(format_bytes(m.peak)),
        ]),
    ];
    if let Some(r) = m.resident {
        lines.push(Line::from(vec![
            Span::raw("process   "),
            Span::raw(format_bytes(r)),
        ]));
    }
    if let Some((now, peak)) = m.cuda {
        lines.push(Line::from(vec![
            Span::raw("cuda:0    "),
            Span::raw(format!(
                "{} (peak {})",
                format_bytes(now),
                format_bytes(peak)
            ))
            .bold(),
        ]));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" memory ")),
        area,
    );
}

fn render_last(f: &mut Frame, v: &View, area: Rect) {
    let block = Block::bordered().title(" last epoch ");
    if v.last_epoch.is_empty() {
        f.render_widget(
            Paragraph::new("no epoch finished yet")
                .block(block)
                .dark_gray(),
            area,
        );
        return;
    }
    let mut spans = Vec::new();
    for (k, x) in &v.last_epoch {
        spans.push(Span::raw(format!("{k} ")).add_modifier(Modifier::DIM));
        spans.push(Span::raw(format!("{}   ", format_value(k, *x))).bold());
    }
    f.render_widget(
        Paragraph::new(Line::from(spans))
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(block),
        area,
    );
}

#[cfg(test)]
mod tests;
