//! The communication thread and the work handles of asynchronous collectives.
//!
//! Every engine call of a process runs on one thread of its own, in the order the
//! collectives were issued. A collective issued while backward is still running (a
//! DistributedDataParallel bucket) then progresses on that thread, inside the engine's
//! blocking call, while the compute thread goes on: OpenMPI only moves a non-blocking
//! collective forward inside MPI calls, so a request left alone would not overlap anything.
//!
//! A blocking collective issued while nothing is queued (`all_reduce`, `barrier`) runs on
//! the calling thread instead ([`CommThread::run_inline`]), where the engine allows calls
//! from any thread one at a time (`MPI_THREAD_SERIALIZED`): handing a 4 KB all-reduce to
//! another thread and waking the caller afterwards cost more than the reduction. An engine
//! lock keeps the calls one at a time, and the communication thread, idle meanwhile,
//! watches the inline call's deadline as [`Work::wait`] watches a queued one's.

use super::DistError;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A unit of work for the communication thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The thread that owns the engine, and the queue into it.
pub(crate) struct CommThread {
    tx: Mutex<Option<Sender<Job>>>,
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Signalled when the thread has finalised the engine.
    finished: Mutex<Option<Receiver<()>>>,
    shared: Arc<Shared>,
}

/// What the communication thread and inline callers share.
#[derive(Default)]
struct Shared {
    /// Held around every engine call (a queued job, or an inline collective).
    engine: Mutex<()>,
    /// Jobs queued and not yet finished: an inline collective must not overtake them.
    pending: AtomicUsize,
    /// Whether collectives may run inline (the engine allows calls from any thread).
    inline: AtomicBool,
    /// The inline collective in progress, whose deadline the thread watches.
    watch: Mutex<Option<Watch>>,
}

/// An inline collective's deadline and what names it when it is missed.
struct Watch {
    deadline: Instant,
    what: &'static str,
    rank: usize,
    timeout: Duration,
}

/// What ends the job when collective `what` of `rank` missed its `timeout`, queued or
/// inline.
fn timeout_message(rank: usize, what: &str, timeout: Duration) -> String {
    format!(
        "rank {rank}: `{what}` did not complete within {timeout:?} (another rank may have died, \
         or stopped calling collectives in the same order)"
    )
}

impl Shared {
    /// Ends the job when an inline collective has run past its deadline.
    fn check_watch(&self) {
        let watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = watch.as_ref()
            && Instant::now() >= w.deadline
        {
            super::abort_job(&timeout_message(w.rank, w.what, w.timeout));
        }
    }

    /// The engine lock, for a queued job: while an inline collective holds it, its
    /// deadline is watched.
    fn engine_for_job(&self) -> std::sync::MutexGuard<'_, ()> {
        loop {
            match self.engine.try_lock() {
                Ok(guard) => return guard,
                Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    self.check_watch();
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
}

/// How often the idle communication thread looks at an inline collective's deadline.
const WATCH_PERIOD: Duration = Duration::from_millis(50);

impl CommThread {
    /// Starts the thread: `init` runs first on it (initialising the engine) and its result
    /// comes back; then the thread serves jobs until [`CommThread::shutdown`], when it
    /// runs `fini`.
    pub(crate) fn start<T: Send + 'static>(
        init: impl FnOnce() -> Result<T, DistError> + Send + 'static,
        fini: impl FnOnce() + Send + 'static,
    ) -> Result<(CommThread, T), DistError> {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = channel();
        let (ready_tx, ready_rx) = channel();
        let (done_tx, done_rx) = channel();
        let shared = Arc::new(Shared::default());
        let on_thread = shared.clone();
        let handle = std::thread::Builder::new()
            .name("ferrograd-comm".into())
            .spawn(move || {
                match init() {
                    Ok(v) => {
                        let _ = ready_tx.send(Ok(v));
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                loop {
                    match rx.recv_timeout(WATCH_PERIOD) {
                        Ok(job) => {
                            let engine = on_thread.engine_for_job();
                            job();
                            drop(engine);
                            on_thread.pending.fetch_sub(1, Ordering::AcqRel);
                        }
                        Err(RecvTimeoutError::Timeout) => on_thread.check_watch(),
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                fini();
                let _ = done_tx.send(());
            })
            .map_err(|e| {
                DistError::Engine(format!("could not start the communication thread: {e}"))
            })?;
        let value = ready_rx.recv().map_err(|_| {
            DistError::Engine("the communication thread died while starting".into())
        })??;
        Ok((
            CommThread {
                tx: Mutex::new(Some(tx)),
                handle: Mutex::new(Some(handle)),
                finished: Mutex::new(Some(done_rx)),
                shared,
            },
            value,
        ))
    }

    /// Lets blocking collectives run on their callers' threads from now on (the engine
    /// allows calls from any thread, one at a time).
    pub(crate) fn allow_inline(&self) {
        self.shared.inline.store(true, Ordering::Release);
    }

    /// Queues `job`; `Err` once the group was destroyed.
    pub(crate) fn submit(&self, job: Job) -> Result<(), DistError> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        match tx.as_ref() {
            Some(tx) => {
                self.shared.pending.fetch_add(1, Ordering::AcqRel);
                tx.send(job).map_err(|_| {
                    self.shared.pending.fetch_sub(1, Ordering::AcqRel);
                    DistError::NotInitialized
                })
            }
            None => Err(DistError::NotInitialized),
        }
    }

    /// Runs `f` (a blocking collective) on this thread when inline calls are allowed, the
    /// group is alive and nothing is queued (which it must not overtake); else gives `f`
    /// back for the queue. Past `timeout` the communication thread ends the job naming
    /// `what` and `rank`, as [`Work::wait`] would.
    pub(crate) fn run_inline<R, F: FnOnce() -> R>(
        &self,
        f: F,
        what: &'static str,
        rank: usize,
        timeout: Duration,
    ) -> Result<R, F> {
        if !self.shared.inline.load(Ordering::Acquire)
            || self.shared.pending.load(Ordering::Acquire) != 0
        {
            return Err(f);
        }
        let engine = self.shared.engine.lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock no queued job runs; one queued since the check above must run
        // first, and a destroyed group has no engine left.
        let alive = self.tx.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        if !alive || self.shared.pending.load(Ordering::Acquire) != 0 {
            return Err(f);
        }
        *self.shared.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(Watch {
            deadline: Instant::now() + timeout,
            what,
            rank,
            timeout,
        });
        let result = f();
        *self.shared.watch.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(engine);
        Ok(result)
    }

    /// Lets queued jobs finish, then stops the thread (which finalises the engine). A
    /// collective still unanswered after `timeout` (a peer that never joins it) ends the
    /// job instead of hanging the exit.
    pub(crate) fn shutdown(&self, rank: usize, timeout: Duration) {
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(done) = finished
            && done.recv_timeout(timeout).is_err()
        {
            super::abort_job(&format!(
                "rank {rank}: collectives were still pending after {timeout:?} when the process \
                 group was destroyed (a peer never joined them)"
            ));
        }
        if let Some(h) = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }
}

/// What completes a [`Work`]: the result, and whoever waits for it.
#[derive(Default)]
pub(crate) struct WorkState {
    result: Mutex<Option<Result<(), DistError>>>,
    done: Condvar,
    /// How long the engine worked on it (on the communication thread).
    pub(crate) busy: Mutex<Duration>,
}

impl WorkState {
    pub(crate) fn complete(&self, result: Result<(), DistError>, busy: Duration) {
        *self.busy.lock().unwrap_or_else(|e| e.into_inner()) = busy;
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.done.notify_all();
    }
}

/// A collective in flight (`torch.distributed.Work`): returned by the `*_async` methods.
/// [`Work::wait`] blocks until it completed; the tensors it writes hold the result only
/// after that.
///
/// Waiting is bounded by the group's timeout (see [`InitOptions::timeout`]): a collective
/// that does not complete in time (another rank died or stopped calling collectives) ends
/// the whole job with a message naming this rank and the collective, never a silent hang.
///
/// [`InitOptions::timeout`]: super::InitOptions::timeout
#[must_use = "a collective's result is there only after `wait`"]
pub struct Work {
    pub(crate) state: Arc<WorkState>,
    pub(crate) what: String,
    pub(crate) rank: usize,
    pub(crate) timeout: Duration,
    /// Runs after completion on the waiting thread: copies a staged result back into a
    /// non-contiguous or device tensor.
    pub(crate) finish: Option<Box<dyn FnOnce() + Send>>,
}

impl Work {
    /// Whether the collective has completed (`Work.is_completed()`); never blocks.
    pub fn is_completed(&self) -> bool {
        self.state
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Blocks until the collective completed, then returns its result. Past the group's
    /// timeout, ends the job (see the type's docs).
    pub fn wait(mut self) -> Result<(), DistError> {
        let deadline = Instant::now() + self.timeout;
        let mut guard = self.state.result.lock().unwrap_or_else(|e| e.into_inner());
        let result = loop {
            if let Some(r) = guard.take() {
                break r;
            }
            let now = Instant::now();
            if now >= deadline {
                drop(guard);
                super::abort_job(&timeout_message(self.rank, &self.what, self.timeout));
            }
            guard = self
                .state
                .done
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(guard);
        if result.is_ok()
            && let Some(finish) = self.finish.take()
        {
            finish();
        }
        result
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("what", &self.what)
            .field("completed", &self.is_completed())
            .finish()
    }
}
