//! Where the time goes, as `torch.profiler` shows it: every tensor op run on a thread
//! while it profiles, with its wall time, its time less the ops it called ("self"), its
//! input shapes and the host memory it left allocated (counted process-wide: other
//! threads' allocations in the meantime count too), plus ranges a user names
//! ([`record_function`]; the [`Trainer`](crate::train::Trainer) names its forward,
//! backward and optimizer steps). A [`Profile`] prints as a table sorted by total time
//! ([`Profile::table`]) and saves as a Chrome trace that `chrome://tracing` or
//! Perfetto opens ([`Profile::export_chrome_trace`]), with the other threads' work
//! meanwhile (the thread team's helpers, the data loader's workers) on rows of their own
//! ([`Profile::thread_spans`]). A long loop profiles some of its steps with a
//! [`ScheduledProfiler`] (`torch.profiler.schedule` and `on_trace_ready`).
//!
//! Off, it costs each op one relaxed atomic load (the hook the ONNX tracer shares).
//! Ops on a GPU are timed twice: on the host (their launch, unless
//! [`ProfilerOptions::synchronize`] waits for the device after each) and on the device,
//! by CUDA events recorded on its stream before and after ([`Event::cuda`]; the
//! table's `Self CUDA` and `CUDA total` columns, a `cuda:N` row in the Chrome trace).
//! Device times are read when the profile stops (waiting for the device once).
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! use ferrograd_runtime::profiler::{self, ProfilerOptions, SortBy};
//! let a = Tensor::randn(&[64, 64], DType::F32, &Device::Cpu);
//! let (_, profile) = profiler::profile(ProfilerOptions::default(), || {
//!     profiler::record_function("my_block", || a.matmul(&a).relu().sum_all())
//! });
//! let table = profile.table(SortBy::Total, 10);
//! assert!(table.contains("matmul") && table.contains("my_block"));
//! let stats = profile.key_averages(false);
//! assert_eq!(stats.iter().find(|s| s.name == "relu").unwrap().calls, 1);
//! ```

mod schedule;
pub use schedule::{ProfilerAction, Schedule, ScheduledProfiler, TraceHandler, trace_handler};

use crate::dispatch::{Interceptor, OpView};
use crate::storage::cuda::StreamMarks;
use ferrograd_kernels::cpu::spans::{Collector, Span};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// What a profile records.
#[derive(Clone, Copy, Debug)]
pub struct ProfilerOptions {
    /// Keep each op's input shapes (`record_shapes`).
    pub record_shapes: bool,
    /// Measure the host memory each op leaves allocated (`profile_memory`).
    pub profile_memory: bool,
    /// Wait for the GPU after each op on one, so its time is the kernels' too.
    pub synchronize: bool,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        ProfilerOptions {
            record_shapes: true,
            profile_memory: true,
            synchronize: false,
        }
    }
}

/// One op or named range.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The op (`matmul`, `conv2d`, ...) or range name.
    pub name: String,
    /// Microseconds from the profile's start.
    pub start_us: f64,
    /// Wall time.
    pub duration_us: f64,
    /// Wall time less that of the ops and ranges it contains.
    pub self_us: f64,
    /// Nesting level (0: called by user code).
    pub depth: u32,
    /// The inputs' shapes (with `record_shapes`).
    pub input_shapes: Vec<Vec<usize>>,
    /// Host bytes allocated after it less before it, less its children's.
    pub self_memory_bytes: i64,
    /// Its time on a GPU: for an op with an input there, and a range run while a
    /// device was in use, that queued work on the device; `None` on the CPU and for
    /// ops that queue none (views such as `reshape` or `expand`).
    pub cuda: Option<DeviceTime>,
}

/// An op's or range's time on a GPU, between CUDA events recorded on the device's
/// stream before and after it: the kernels it queued, and the device's idle gaps
/// between them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceTime {
    /// The device.
    pub ordinal: usize,
    /// Microseconds of device time from the profile's start.
    pub start_us: f64,
    /// Microseconds between the events.
    pub duration_us: f64,
    /// Less its children's device time.
    pub self_us: f64,
}

struct Frame {
    start: Instant,
    memory: usize,
    child_us: f64,
    child_memory: i64,
    /// The devices' streams at its start, when a device is in use.
    marks: Option<StreamMarks>,
    /// Its direct children's indices in `events`.
    children: Vec<usize>,
}

/// An event whose device time is read when the profile stops.
struct Pending {
    event: usize,
    start: StreamMarks,
    end: StreamMarks,
    children: Vec<usize>,
}

struct ThreadProfile {
    origin: Instant,
    origin_marks: StreamMarks,
    options: ProfilerOptions,
    stack: Vec<Frame>,
    events: Vec<Event>,
    pending: Vec<Pending>,
}

thread_local! {
    static PROFILE: RefCell<Option<ThreadProfile>> = const { RefCell::new(None) };
}

/// An op's frame on this thread's profile stack.
pub(crate) struct Entered {
    depth: u32,
}

fn host_allocated(options: &ProfilerOptions) -> usize {
    if options.profile_memory {
        crate::cpu::memory_allocated()
    } else {
        0
    }
}

/// Opens a frame when this thread profiles.
pub(crate) fn enter() -> Option<Entered> {
    PROFILE.with(|p| {
        p.borrow_mut().as_mut().map(|prof| {
            let memory = host_allocated(&prof.options);
            let marks = StreamMarks::now();
            prof.stack.push(Frame {
                start: Instant::now(),
                memory,
                child_us: 0.0,
                child_memory: 0,
                marks: (!marks.is_empty()).then_some(marks),
                children: Vec::new(),
            });
            Entered {
                depth: prof.stack.len() as u32 - 1,
            }
        })
    })
}

/// Closes the frame `entered` opened; `on_device` says whether its device time counts
/// (an op with an input on a GPU, or a range).
fn close(
    entered: Entered,
    name: impl FnOnce() -> String,
    shapes: impl FnOnce() -> Vec<Vec<usize>>,
    on_device: bool,
) {
    PROFILE.with(|p| {
        let mut p = p.borrow_mut();
        let Some(prof) = p.as_mut() else { return };
        if prof.stack.len() != entered.depth as usize + 1 {
            return;
        }
        if prof.options.synchronize {
            for ordinal in 0..crate::cuda::device_count() {
                let _ = crate::cuda::synchronize(ordinal);
            }
        }
        let frame = prof.stack.pop().expect("checked above");
        let end = Instant::now();
        let duration_us = (end - frame.start).as_secs_f64() * 1e6;
        let memory = host_allocated(&prof.options) as i64 - frame.memory as i64;
        let index = prof.events.len();
        if let Some(parent) = prof.stack.last_mut() {
            parent.child_us += duration_us;
            parent.child_memory += memory;
            parent.children.push(index);
        }
        if let (Some(start), true) = (frame.marks, on_device) {
            let end = StreamMarks::now();
            // An op that queued nothing on a device (a view) has no device time: the
            // events around it would time only the gap between them.
            if start.queued_work_before(&end) {
                prof.pending.push(Pending {
                    event: index,
                    start,
                    end,
                    children: frame.children,
                });
            }
        }
        let input_shapes = if prof.options.record_shapes {
            shapes()
        } else {
            Vec::new()
        };
        prof.events.push(Event {
            name: name(),
            start_us: (frame.start - prof.origin).as_secs_f64() * 1e6,
            duration_us,
            self_us: duration_us - frame.child_us,
            depth: entered.depth,
            input_shapes,
            self_memory_bytes: memory - frame.child_memory,
            cuda: None,
        });
    });
}

/// The profiler at the dispatch seam: a frame for every op, closed with the op's name.
struct ProfileHook {
    /// The frames of the ops open now (`None` where the profile was not running).
    open: Vec<Option<Entered>>,
}

impl Interceptor for ProfileHook {
    fn begin(&mut self, _depth: u32, _exportable: bool) {
        self.open.push(enter());
    }

    fn end(&mut self, _depth: u32, op: &OpView<'_>) {
        if let Some(Some(entered)) = self.open.pop() {
            close(
                entered,
                || op.name().into_owned(),
                || op.input_shapes(),
                op.on_device,
            );
        }
    }

    fn abandon(&mut self, _depth: u32, _exportable: bool) {
        if let Some(Some(entered)) = self.open.pop() {
            abandon(entered);
        }
    }
}

thread_local! {
    /// The profiler's hook at the seam while this thread profiles.
    static HOOK_ID: RefCell<Option<crate::dispatch::HookId>> = const { RefCell::new(None) };
}

/// Attaches the profiler's hook on this thread (once).
fn attach_hook() {
    HOOK_ID.with(|h| {
        let mut h = h.borrow_mut();
        if h.is_none() {
            *h = Some(crate::dispatch::attach(Box::new(ProfileHook {
                open: Vec::new(),
            })));
        }
    });
}

/// Detaches it.
fn detach_hook() {
    if let Some(id) = HOOK_ID.with(|h| h.borrow_mut().take()) {
        crate::dispatch::detach(id);
    }
}

/// Drops a frame an op left by an early return or a panic.
pub(crate) fn abandon(entered: Entered) {
    PROFILE.with(|p| {
        if let Some(prof) = p.borrow_mut().as_mut() {
            prof.stack.truncate(entered.depth as usize);
        }
    });
}

/// Profiling on this thread until [`stop`](Self::stop) (or until dropped), with the
/// other threads' spans (the thread team's helpers, the data loader's workers) meanwhile.
#[derive(Debug)]
pub struct Profiler {
    done: bool,
    spans: Option<Collector>,
}

impl Profiler {
    /// Starts recording this thread's ops (a profile already running on this thread is
    /// replaced).
    pub fn start(options: ProfilerOptions) -> Profiler {
        let was = PROFILE.with(|p| {
            p.borrow_mut()
                .replace(ThreadProfile {
                    origin_marks: StreamMarks::now(),
                    origin: Instant::now(),
                    options,
                    stack: Vec::new(),
                    events: Vec::new(),
                    pending: Vec::new(),
                })
                .is_some()
        });
        if !was {
            attach_hook();
        }
        Profiler {
            done: false,
            spans: Some(Collector::start()),
        }
    }

    /// Stops and returns what was recorded.
    pub fn stop(mut self) -> Profile {
        self.done = true;
        let prof = PROFILE.with(|p| p.borrow_mut().take());
        if prof.is_some() {
            detach_hook();
        }
        let origin = prof.as_ref().map(|p| p.origin);
        let mut events = match prof {
            Some(p) => device_times(p),
            None => Vec::new(),
        };
        events.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        let spans = self.spans.take().map(Collector::finish).unwrap_or_default();
        let thread_spans = match origin {
            Some(origin) => thread_spans(&events, spans, origin),
            None => Vec::new(),
        };
        Profile {
            events,
            thread_spans,
        }
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if !self.done && PROFILE.with(|p| p.borrow_mut().take()).is_some() {
            detach_hook();
        }
    }
}

/// Other threads' spans relative to `origin`; a team helper's share of a job is named
/// after the op on the profiling thread it helped (the innermost one running when it
/// began).
fn thread_spans(events: &[Event], spans: Vec<Span>, origin: Instant) -> Vec<ThreadSpan> {
    spans
        .into_iter()
        .filter(|s| s.start >= origin)
        .map(|s| {
            let start_us = (s.start - origin).as_secs_f64() * 1e6;
            let duration_us = (s.end - s.start).as_secs_f64() * 1e6;
            let helped = s
                .team
                .then(|| {
                    events
                        .iter()
                        .filter(|e| e.start_us <= start_us && start_us < e.start_us + e.duration_us)
                        .max_by_key(|e| e.depth)
                })
                .flatten();
            ThreadSpan {
                name: helped.map_or(s.name.clone(), |e| e.name.clone()),
                thread: s.thread,
                start_us,
                duration_us,
            }
        })
        .collect()
}

/// The events with their device times read from the CUDA events (waiting for each
/// device to reach the last).
fn device_times(p: ThreadProfile) -> Vec<Event> {
    let mut events = p.events;
    for q in &p.pending {
        // The device that worked longest between the marks (one, unless several are
        // used at once).
        let Some((ordinal, duration_us)) = q
            .start
            .elapsed_us(&q.end)
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        let start_us = p
            .origin_marks
            .elapsed_us(&q.start)
            .into_iter()
            .find(|(o, _)| *o == ordinal)
            .map_or(0.0, |(_, us)| us);
        events[q.event].cuda = Some(DeviceTime {
            ordinal,
            start_us,
            duration_us,
            self_us: duration_us,
        });
    }
    for q in &p.pending {
        let children: f64 = q
            .children
            .iter()
            .filter_map(|&c| events[c].cuda.map(|t| t.duration_us))
            .sum();
        if let Some(t) = events[q.event].cuda.as_mut() {
            t.self_us = (t.duration_us - children).max(0.0);
        }
    }
    events
}

/// Runs `f` while profiling this thread.
pub fn profile<R>(options: ProfilerOptions, f: impl FnOnce() -> R) -> (R, Profile) {
    let profiler = Profiler::start(options);
    let out = f();
    (out, profiler.stop())
}

/// Runs `f` as a named range of the profile (`torch.profiler.record_function`); without
/// a profile on this thread it just runs `f`.
pub fn record_function<R>(name: &str, f: impl FnOnce() -> R) -> R {
    record_named(|| name.to_string(), f)
}

/// [`record_function`] with the name made only when profiling (a gradient function's
/// `mul_backward`, say).
#[inline]
pub(crate) fn record_named<R>(name: impl FnOnce() -> String, f: impl FnOnce() -> R) -> R {
    if !crate::dispatch::any_attached() {
        return f();
    }
    let Some(entered) = enter() else { return f() };
    let out = f();
    close(entered, name, Vec::new, true);
    out
}

/// Whether this thread is profiling.
pub fn is_profiling() -> bool {
    crate::dispatch::any_attached() && PROFILE.with(|p| p.borrow().is_some())
}

/// The statistics of one op (and, grouped by shape, one input shape).
#[derive(Clone, Debug, PartialEq)]
pub struct OpStats {
    /// The op or range.
    pub name: String,
    /// The input shapes (grouped by shape), else empty.
    pub input_shapes: Vec<Vec<usize>>,
    /// Times called.
    pub calls: usize,
    /// Total wall time, its children included.
    pub total_us: f64,
    /// Total time less its children's.
    pub self_us: f64,
    /// Host bytes it left allocated, less its children's.
    pub self_memory_bytes: i64,
    /// Total device time (0 on the CPU).
    pub cuda_total_us: f64,
    /// Device time less its children's.
    pub self_cuda_us: f64,
}

/// The column a [`Profile::table`] sorts by (largest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Total time.
    Total,
    /// Self time.
    SelfTime,
    /// Calls.
    Calls,
    /// Self memory.
    Memory,
}

/// Work on another thread while the profile ran: a thread-team helper's share of an op
/// (named after the op), or a data-loader worker's batch (`DataLoader batch 3`).
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadSpan {
    /// The op it helped, or what it did.
    pub name: String,
    /// The thread (`ferrograd-cpu-1`, `ferrograd-data-0`).
    pub thread: String,
    /// Microseconds from the profile's start.
    pub start_us: f64,
    /// Wall time.
    pub duration_us: f64,
}

/// A recorded profile.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    events: Vec<Event>,
    thread_spans: Vec<ThreadSpan>,
}

impl Profile {
    /// Every op and range, by start time.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The other threads' work meanwhile (the thread team's helpers, the data loader's
    /// workers), by start time; in the Chrome trace each thread has its own row.
    pub fn thread_spans(&self) -> &[ThreadSpan] {
        &self.thread_spans
    }

    /// Per-op totals (`key_averages()`), optionally per input shape.
    pub fn key_averages(&self, group_by_shape: bool) -> Vec<OpStats> {
        let mut by: BTreeMap<(String, Vec<Vec<usize>>), OpStats> = BTreeMap::new();
        for e in &self.events {
            let shapes = if group_by_shape {
                e.input_shapes.clone()
            } else {
                Vec::new()
            };
            let s = by
                .entry((e.name.clone(), shapes.clone()))
                .or_insert_with(|| OpStats {
                    name: e.name.clone(),
                    input_shapes: shapes,
                    calls: 0,
                    total_us: 0.0,
                    self_us: 0.0,
                    self_memory_bytes: 0,
                    cuda_total_us: 0.0,
                    self_cuda_us: 0.0,
                });
            s.calls += 1;
            s.total_us += e.duration_us;
            s.self_us += e.self_us;
            s.self_memory_bytes += e.self_memory_bytes;
            if let Some(t) = e.cuda {
                s.cuda_total_us += t.duration_us;
                s.self_cuda_us += t.self_us;
            }
        }
        by.into_values().collect()
    }

    /// The per-op table, `row_limit` rows sorted by `sort_by`.
    pub fn table(&self, sort_by: SortBy, row_limit: usize) -> String {
        let mut stats = self.key_averages(false);
        let key = |s: &OpStats| match sort_by {
            SortBy::Total => s.total_us,
            SortBy::SelfTime => s.self_us,
            SortBy::Calls => s.calls as f64,
            SortBy::Memory => s.self_memory_bytes as f64,
        };
        stats.sort_by(|a, b| key(b).total_cmp(&key(a)));
        let all_self: f64 = self.events.iter().map(|e| e.self_us).sum();
        let fmt_us = |us: f64| {
            if us >= 1e6 {
                format!("{:.3}s", us / 1e6)
            } else if us >= 1e3 {
                format!("{:.3}ms", us / 1e3)
            } else {
                format!("{us:.3}us")
            }
        };
        let fmt_mem = |b: i64| {
            let a = b.unsigned_abs() as f64;
            let (v, u) = if a >= 1048576.0 {
                (a / 1048576.0, "MiB")
            } else if a >= 1024.0 {
                (a / 1024.0, "KiB")
            } else {
                (a, "B")
            };
            format!("{}{v:.1} {u}", if b < 0 { "-" } else { "" })
        };
        // The device columns, when anything ran on one.
        let cuda = self.events.iter().any(|e| e.cuda.is_some());
        let mut out = String::new();
        let rule = "-".repeat(if cuda { 126 } else { 100 });
        let _ = writeln!(out, "{rule}");
        let _ = write!(
            out,
            "{:<28}{:>12}{:>9}{:>13}{:>13}{:>12}{:>13}",
            "Name", "Self CPU %", "Calls", "Self CPU", "CPU total", "CPU avg", "Self mem"
        );
        if cuda {
            let _ = write!(out, "{:>13}{:>13}", "Self CUDA", "CUDA total");
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{rule}");
        for s in stats.iter().take(row_limit) {
            let _ = write!(
                out,
                "{:<28}{:>11.2}%{:>9}{:>13}{:>13}{:>12}{:>13}",
                s.name.chars().take(27).collect::<String>(),
                100.0 * s.self_us / all_self.max(1e-12),
                s.calls,
                fmt_us(s.self_us),
                fmt_us(s.total_us),
                fmt_us(s.total_us / s.calls as f64),
                fmt_mem(s.self_memory_bytes),
            );
            if cuda {
                let _ = write!(
                    out,
                    "{:>13}{:>13}",
                    fmt_us(s.self_cuda_us),
                    fmt_us(s.cuda_total_us)
                );
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, "Self CPU time total: {}", fmt_us(all_self));
        if cuda {
            let all_cuda: f64 = self
                .events
                .iter()
                .filter_map(|e| e.cuda.map(|t| t.self_us))
                .sum();
            let _ = writeln!(out, "Self CUDA time total: {}", fmt_us(all_cuda));
        }
        out
    }

    /// Writes the events as a Chrome trace (JSON "X" events, microseconds), which
    /// `chrome://tracing` and <https://ui.perfetto.dev> open: the profiling thread's ops
    /// on row 0, each other thread's spans on a row of its own named after the thread,
    /// device times on a row per GPU (`cuda:N`).
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let pid = std::process::id();
        // Row numbers: 0 the profiling thread, then the other threads by first span.
        let mut rows: Vec<&str> = Vec::new();
        for s in &self.thread_spans {
            if !rows.contains(&s.thread.as_str()) {
                rows.push(&s.thread);
            }
        }
        let row_of = |t: &str| rows.iter().position(|r| *r == t).map_or(0, |i| i + 1);
        let names = std::iter::once(serde_json::json!({
            "name": "thread_name", "ph": "M", "pid": pid, "tid": 0,
            "args": { "name": "profiled thread" },
        }))
        .chain(rows.iter().enumerate().map(|(i, r)| {
            serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": pid, "tid": i + 1,
                "args": { "name": r },
            })
        }));
        let thread_rows = self.thread_spans.iter().map(|s| {
            serde_json::json!({
                "name": s.name,
                "cat": "thread",
                "ph": "X",
                "ts": s.start_us,
                "dur": s.duration_us,
                "pid": pid,
                "tid": row_of(&s.thread),
            })
        });
        let device_rows = self.events.iter().filter_map(|e| {
            let t = e.cuda?;
            Some(serde_json::json!({
                "name": e.name,
                "cat": "cuda",
                "ph": "X",
                "ts": t.start_us,
                "dur": t.duration_us,
                "pid": std::process::id(),
                "tid": format!("cuda:{}", t.ordinal),
                "args": { "Self CUDA us": t.self_us },
            }))
        });
        let events: Vec<serde_json::Value> = self
            .events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name,
                    "cat": "cpu_op",
                    "ph": "X",
                    "ts": e.start_us,
                    "dur": e.duration_us,
                    "pid": std::process::id(),
                    "tid": 0,
                    "args": {
                        "Input Dims": e.input_shapes,
                        "Self memory bytes": e.self_memory_bytes,
                    },
                })
            })
            .chain(device_rows)
            .chain(thread_rows)
            .chain(names)
            .collect();
        let doc = serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" });
        let path = path.as_ref();
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, doc.to_string())?;
        std::fs::rename(&tmp, path)
    }
}
