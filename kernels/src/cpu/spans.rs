//! Spans of work on threads other than the one that profiles — the thread team's
//! helpers, the data loader's workers — so that a profile can show them on rows of their
//! own. Off (no profile running anywhere), recording costs one relaxed atomic load.
//!
//! ```
//! use ferrograd_kernels::cpu::spans;
//! let collector = spans::Collector::start();
//! std::thread::Builder::new()
//!     .name("worker".into())
//!     .spawn(|| spans::record(|| "load".into(), std::time::Instant::now()))
//!     .unwrap()
//!     .join()
//!     .unwrap();
//! let got = collector.finish();
//! assert!(got.iter().any(|s| s.name == "load" && s.thread == "worker"));
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Collectors running: spans are recorded while there is one.
static COLLECTORS: AtomicUsize = AtomicUsize::new(0);
/// The spans recorded while a collector runs.
static SPANS: Mutex<Vec<Span>> = Mutex::new(Vec::new());
/// Spans kept at most (a profile left running for hours stops growing).
const MAX_SPANS: usize = 1 << 20;

/// A stretch of work on a named thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// What it did (`DataLoader batch 3`; for a team helper, how many tasks it ran,
    /// until a profile names it after the op it helped).
    pub name: String,
    /// A thread-team helper's share of a job (named by the profile after the op).
    pub team: bool,
    /// The thread's name (`ferrograd-cpu-1`, `ferrograd-data-0`), else its id.
    pub thread: String,
    /// When it began.
    pub start: Instant,
    /// When it ended.
    pub end: Instant,
}

/// Whether spans are being collected (one relaxed load).
#[inline]
pub fn collecting() -> bool {
    COLLECTORS.load(Ordering::Relaxed) > 0
}

/// Records a span on this thread from `start` to now, if collecting; `name` is made
/// only then.
pub fn record(name: impl FnOnce() -> String, start: Instant) {
    push(name, false, start);
}

/// Records a thread-team helper's share of a job (`tasks` tasks from `start` to now).
pub(crate) fn record_team(tasks: usize, start: Instant) {
    push(|| format!("{tasks} tasks"), true, start);
}

fn push(name: impl FnOnce() -> String, team: bool, start: Instant) {
    if !collecting() {
        return;
    }
    let end = Instant::now();
    let current = std::thread::current();
    let thread = current
        .name()
        .map_or_else(|| format!("{:?}", current.id()), str::to_string);
    let name = name();
    let mut spans = SPANS.lock().unwrap_or_else(|e| e.into_inner());
    if spans.len() < MAX_SPANS {
        spans.push(Span {
            name,
            team,
            thread,
            start,
            end,
        });
    }
}

/// Collects spans from [`start`](Self::start) to [`finish`](Self::finish).
#[derive(Debug)]
pub struct Collector {
    since: Instant,
    done: bool,
}

impl Collector {
    /// Starts collecting.
    pub fn start() -> Collector {
        COLLECTORS.fetch_add(1, Ordering::Relaxed);
        Collector {
            since: Instant::now(),
            done: false,
        }
    }

    /// Stops, returning the spans that began since the start (in order of start).
    pub fn finish(mut self) -> Vec<Span> {
        self.done = true;
        let mut spans = SPANS.lock().unwrap_or_else(|e| e.into_inner());
        let mut mine: Vec<Span> = spans
            .iter()
            .filter(|s| s.start >= self.since)
            .cloned()
            .collect();
        if COLLECTORS.fetch_sub(1, Ordering::Relaxed) == 1 {
            spans.clear();
        }
        mine.sort_by_key(|s| s.start);
        mine
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if !self.done && COLLECTORS.fetch_sub(1, Ordering::Relaxed) == 1 {
            SPANS.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}
