//! The communication thread and the work handles of asynchronous collectives.
//!
//! Every engine call of a process runs on one thread of its own, in the order the
//! collectives were issued. A collective issued while backward is still running (a
//! DistributedDataParallel bucket) then progresses on that thread, inside the engine's
//! blocking call, while the compute thread goes on: OpenMPI only moves a non-blocking
//! collective forward inside MPI calls, so a request left alone would not overlap anything.
//! It also makes `MPI_THREAD_FUNNELED` enough: only the thread that initialised MPI calls it.

use super::DistError;
use std::sync::mpsc::{Receiver, Sender, channel};
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
}

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
                while let Ok(job) = rx.recv() {
                    job();
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
            },
            value,
        ))
    }

    /// Queues `job`; `Err` once the group was destroyed.
    pub(crate) fn submit(&self, job: Job) -> Result<(), DistError> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        match tx.as_ref() {
            Some(tx) => tx.send(job).map_err(|_| DistError::NotInitialized),
            None => Err(DistError::NotInitialized),
        }
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
                super::abort_job(&format!(
                    "rank {}: `{}` did not complete within {:?} (another rank may have died, or \
                     stopped calling collectives in the same order)",
                    self.rank, self.what, self.timeout
                ));
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
