//! Profiling some steps of a long loop (`torch.profiler.schedule`): skip the first
//! steps, then cycles of `wait` steps unrecorded, `warmup` steps recorded and thrown
//! away (the first steps pay for caches and allocations), `active` steps recorded and
//! handed to `on_trace_ready`, `repeat` times (0: until the loop ends).

use super::{Entered, Profile, Profiler, ProfilerOptions, close, enter};

/// What the profiler does in a step (`torch.profiler.ProfilerAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfilerAction {
    /// Not recording.
    None,
    /// Recording, to be thrown away.
    Warmup,
    /// Recording.
    Record,
    /// Recording this last step of the cycle, then handing the trace over.
    RecordAndSave,
}

/// Which steps are recorded (`torch.profiler.schedule(wait, warmup, active, repeat,
/// skip_first)`).
///
/// ```
/// use ferrograd_runtime::profiler::{ProfilerAction as A, Schedule};
/// let s = Schedule { wait: 1, warmup: 1, active: 2, repeat: 1, skip_first: 1 };
/// let actions: Vec<A> = (0..7).map(|step| s.action(step)).collect();
/// assert_eq!(actions, [A::None, A::None, A::Warmup, A::Record, A::RecordAndSave, A::None, A::None]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Steps not recorded at the start of each cycle.
    pub wait: usize,
    /// Steps recorded and thrown away before the active ones.
    pub warmup: usize,
    /// Steps recorded and handed over.
    pub active: usize,
    /// Cycles (0: as many as there are steps).
    pub repeat: usize,
    /// Steps not recorded before the first cycle.
    pub skip_first: usize,
}

impl Schedule {
    /// What step `step` (from 0) does: torch's rule, step for step.
    pub fn action(&self, step: usize) -> ProfilerAction {
        if step < self.skip_first {
            return ProfilerAction::None;
        }
        let step = step - self.skip_first;
        let cycle = self.wait + self.warmup + self.active;
        if self.active == 0 || (self.repeat > 0 && step / cycle >= self.repeat) {
            return ProfilerAction::None;
        }
        let at = step % cycle;
        if at < self.wait {
            ProfilerAction::None
        } else if at < self.wait + self.warmup {
            ProfilerAction::Warmup
        } else if at + 1 < cycle {
            ProfilerAction::Record
        } else {
            ProfilerAction::RecordAndSave
        }
    }
}

/// What receives each cycle's trace (`on_trace_ready`).
pub type TraceHandler = Box<dyn FnMut(&Profile) -> std::io::Result<()> + Send>;

/// A profiler driven by a [`Schedule`]: call [`step`](Self::step) at the end of each
/// step of the loop (`prof.step()`); each cycle's active steps go to `on_trace_ready`,
/// each step a range `ProfilerStep#N` around its ops, as torch's.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::profiler::{ProfilerOptions, Schedule, ScheduledProfiler};
/// use std::sync::{Arc, Mutex};
/// let traces = Arc::new(Mutex::new(Vec::new()));
/// let seen = traces.clone();
/// let schedule = Schedule { wait: 1, warmup: 1, active: 2, repeat: 2, skip_first: 0 };
/// let mut prof = ScheduledProfiler::new(ProfilerOptions::default(), schedule, Box::new(move |p| {
///     seen.lock().unwrap().push(p.key_averages(false).iter().find(|s| s.name == "relu").map_or(0, |s| s.calls));
///     Ok(())
/// }));
/// let x = Tensor::randn(&[8, 8], DType::F32, &Device::Cpu);
/// for _ in 0..10 {
///     x.relu();
///     prof.step().unwrap();
/// }
/// prof.stop().unwrap();
/// // Two cycles of four steps, each handing over its two active steps' `relu`s.
/// assert_eq!(*traces.lock().unwrap(), [2, 2]);
/// ```
pub struct ScheduledProfiler {
    options: ProfilerOptions,
    schedule: Schedule,
    on_trace_ready: TraceHandler,
    step: usize,
    running: Option<Profiler>,
    step_range: Option<Entered>,
}

impl std::fmt::Debug for ScheduledProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledProfiler")
            .field("schedule", &self.schedule)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl ScheduledProfiler {
    /// Starts at step 0 (recording at once if the schedule says so).
    pub fn new(
        options: ProfilerOptions,
        schedule: Schedule,
        on_trace_ready: TraceHandler,
    ) -> ScheduledProfiler {
        let mut p = ScheduledProfiler {
            options,
            schedule,
            on_trace_ready,
            step: 0,
            running: None,
            step_range: None,
        };
        p.begin_step();
        p
    }

    /// The step running (from 0).
    pub fn step_num(&self) -> usize {
        self.step
    }

    /// What the current step does.
    pub fn current_action(&self) -> ProfilerAction {
        self.schedule.action(self.step)
    }

    /// Ends the current step and begins the next: a cycle's last active step hands its
    /// trace to `on_trace_ready` (whose error this returns).
    pub fn step(&mut self) -> std::io::Result<()> {
        let was = self.schedule.action(self.step);
        self.end_step();
        self.step += 1;
        let now = self.schedule.action(self.step);
        let result = match (was, now) {
            (ProfilerAction::RecordAndSave, _) => self.hand_over(),
            // The warm-up's records are thrown away when recording proper begins.
            (ProfilerAction::Warmup, ProfilerAction::Record | ProfilerAction::RecordAndSave) => {
                self.running.take();
                Ok(())
            }
            (_, ProfilerAction::None) => {
                self.running.take();
                Ok(())
            }
            _ => Ok(()),
        };
        self.begin_step();
        result
    }

    /// Stops; a cycle cut short hands over what its active steps recorded (as torch
    /// does on leaving the `with` block).
    pub fn stop(mut self) -> std::io::Result<()> {
        let action = self.schedule.action(self.step);
        self.end_step();
        match action {
            ProfilerAction::Record | ProfilerAction::RecordAndSave => self.hand_over(),
            _ => Ok(()),
        }
    }

    fn hand_over(&mut self) -> std::io::Result<()> {
        match self.running.take() {
            Some(p) => (self.on_trace_ready)(&p.stop()),
            None => Ok(()),
        }
    }

    fn begin_step(&mut self) {
        if self.schedule.action(self.step) == ProfilerAction::None {
            return;
        }
        if self.running.is_none() {
            self.running = Some(Profiler::start(self.options));
        }
        self.step_range = enter();
    }

    fn end_step(&mut self) {
        if let Some(entered) = self.step_range.take() {
            let step = self.step;
            close(entered, || format!("ProfilerStep#{step}"), Vec::new, true);
        }
    }
}

/// An `on_trace_ready` that writes each trace to `dir` as a Chrome trace named
/// `{host}_{pid}.{n}.pt.trace.json` (`torch.profiler.tensorboard_trace_handler`'s
/// names, which TensorBoard's profiler plugin and Perfetto open).
///
/// ```
/// use ferrograd_runtime::profiler::{trace_handler, Profile};
/// let dir = std::env::temp_dir().join(format!("ferrograd-doc-traces-{}", std::process::id()));
/// let mut handler = trace_handler(&dir);
/// handler(&Profile::default()).unwrap();
/// assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
pub fn trace_handler(dir: impl Into<std::path::PathBuf>) -> TraceHandler {
    let dir = dir.into();
    let worker = format!(
        "{}_{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into()),
        std::process::id()
    );
    let mut n = 0usize;
    Box::new(move |profile: &Profile| {
        std::fs::create_dir_all(&dir)?;
        n += 1;
        profile.export_chrome_trace(dir.join(format!("{worker}.{n}.pt.trace.json")))
    })
}
