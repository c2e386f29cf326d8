//! The CPU kernels' fork-join: a team of worker threads that the calling thread joins.
//!
//! [`run_tasks`] publishes a job (a task count and a body) to `threads - 1` helper
//! threads and takes tasks itself from the same counter, so the thread that runs a
//! training step is always one of the threads doing its work: `N` threads keep `N` cores
//! busy, never `N + 1` runnable threads on `N` cores. A helper that finishes waits for the
//! next job by spinning (a `pause` loop, no system call) for at most
//! [`spin_time`](set_spin_time) — 100 µs by default, longer than the serial gap between
//! two ops of a step, so a step's next op finds its helpers awake — and then sleeps on a
//! condition variable until a job arrives. The caller never sleeps: a helper that wakes
//! late finds no task left and goes back to waiting.
//!
//! One job runs on the team at a time. A `run_tasks` called while the team is busy — from
//! inside a task, or from another thread (a loader worker, a second test) — runs its tasks
//! on its own thread, as OpenMP runs nested regions.
//!
//! The number of threads is [`set_num_threads`]'s, else `FERROGRAD_NUM_THREADS`, else
//! `RAYON_NUM_THREADS` (read by earlier versions), else one per core.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The thread count set by [`set_num_threads`]; 0 means the default ([`default_threads`]).
static THREAD_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// How long an idle helper spins before it sleeps, in nanoseconds.
static SPIN_NANOS: AtomicU64 = AtomicU64::new(100_000);

/// The thread count when none is set: `FERROGRAD_NUM_THREADS`, `RAYON_NUM_THREADS`, or
/// the number of cores (read once).
fn default_threads() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        ["FERROGRAD_NUM_THREADS", "RAYON_NUM_THREADS"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// Sets the number of threads the CPU kernels use (`torch.set_num_threads`): the calling
/// thread and `n - 1` helpers. `0` restores the default (`FERROGRAD_NUM_THREADS`, else
/// `RAYON_NUM_THREADS`, else one per core).
///
/// ```
/// use ferrograd_kernels::cpu::{num_threads, set_num_threads};
/// let before = num_threads();
/// set_num_threads(1);
/// assert_eq!(num_threads(), 1);
/// set_num_threads(3);
/// assert_eq!(num_threads(), 3);
/// set_num_threads(0);
/// assert_eq!(num_threads(), before);
/// ```
pub fn set_num_threads(n: usize) {
    THREAD_LIMIT.store(n, Ordering::Relaxed);
}

/// The number of threads the CPU kernels use (`torch.get_num_threads`).
///
/// ```
/// assert!(ferrograd_kernels::cpu::num_threads() >= 1);
/// ```
pub fn num_threads() -> usize {
    match THREAD_LIMIT.load(Ordering::Relaxed) {
        0 => default_threads(),
        n => n,
    }
}

/// Sets how long an idle helper thread spins, waiting for the next job, before it
/// sleeps (`GOMP_SPINCOUNT`, `KMP_BLOCKTIME`): longer keeps helpers awake across longer
/// serial stretches of a step; shorter gives the cores back sooner. `Duration::ZERO`
/// makes helpers sleep at once (every job then wakes them through the kernel).
///
/// ```
/// use ferrograd_kernels::cpu::{set_spin_time, spin_time};
/// use std::time::Duration;
/// let before = spin_time();
/// set_spin_time(Duration::from_micros(20));
/// assert_eq!(spin_time(), Duration::from_micros(20));
/// set_spin_time(before);
/// ```
pub fn set_spin_time(time: Duration) {
    SPIN_NANOS.store(
        time.as_nanos().min(u64::MAX as u128) as u64,
        Ordering::Relaxed,
    );
}

/// How long an idle helper spins before it sleeps (see [`set_spin_time`]).
///
/// ```
/// assert!(ferrograd_kernels::cpu::spin_time() > std::time::Duration::ZERO);
/// ```
pub fn spin_time() -> Duration {
    Duration::from_nanos(SPIN_NANOS.load(Ordering::Relaxed))
}

/// Held by the unit tests that change the thread count, so that one test's count is not
/// another's: paths such as the wide weight gradient are chosen by it.
#[cfg(test)]
pub(crate) fn thread_count_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The task body with its borrow erased, so that the helpers (which outlive any one
/// [`run_tasks`]) can hold it. Only dereferenced after claiming a task index below `n`,
/// which can only happen while [`run_tasks`] is still waiting for that task, so while the
/// borrow lives.
struct ErasedTask(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync` (so `&F` may cross threads) and is only dereferenced while
// the owning `run_tasks` frame is alive (see `ErasedTask`).
unsafe impl Send for ErasedTask {}
// SAFETY: as above; the pointer itself is never written after construction.
unsafe impl Sync for ErasedTask {}

struct Shared {
    /// Next unclaimed task index; values `>= n` mean "nothing left".
    next: AtomicUsize,
    /// Tasks finished (or panicked); the caller returns once it reaches `n`.
    done: AtomicUsize,
    n: usize,
    /// Helpers `0..helpers` take part (the thread count may be below the team's size).
    helpers: usize,
    task: ErasedTask,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Shared {
    /// Claims and runs tasks until none is left. Returns without touching `task` when
    /// every index is already claimed.
    fn work(&self) {
        // A helper's share of the job, as a span on its own row of a profile.
        let start = (super::spans::collecting() && HELPER.with(|h| h.get())).then(Instant::now);
        let mut ran = 0usize;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                if let Some(start) = start
                    && ran > 0
                {
                    super::spans::record_team(ran, start);
                }
                return;
            }
            ran += 1;
            // SAFETY: `i < n` was claimed by this thread, so `done` cannot reach `n` (and
            // `run_tasks` cannot return and end the borrow) before this task finishes.
            let task = unsafe { &*self.task.0 };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task(i))) {
                let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                slot.get_or_insert(payload);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// The helper threads and the job they share.
struct Team {
    /// The job of the latest [`run_tasks`] (helpers take a reference to it).
    job: Mutex<Option<Arc<Shared>>>,
    /// Bumped once per job: what idle helpers watch.
    epoch: AtomicU64,
    /// A caller owns the team (one job at a time).
    busy: AtomicBool,
    /// Helper threads started so far.
    started: Mutex<usize>,
    /// Helpers asleep (or about to be), and what wakes them.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

static TEAM: Team = Team {
    job: Mutex::new(None),
    epoch: AtomicU64::new(0),
    busy: AtomicBool::new(false),
    started: Mutex::new(0),
    sleepers: AtomicUsize::new(0),
    sleep: Mutex::new(()),
    wake: Condvar::new(),
};

thread_local! {
    /// Whether this thread is one of the team's helpers.
    static HELPER: Cell<bool> = const { Cell::new(false) };
}

impl Team {
    /// Starts helpers until there are `want` (fewer if the OS refuses threads); returns
    /// how many there are.
    fn ensure_helpers(&'static self, want: usize) -> usize {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        while *started < want {
            let id = *started;
            // The epoch before the job that needs this helper is published, so that the
            // helper sees that job as new however late it starts.
            let seen = self.epoch.load(Ordering::Acquire);
            let spawned = std::thread::Builder::new()
                .name(format!("ferrograd-cpu-{}", id + 1))
                .spawn(move || self.helper(id, seen));
            if spawned.is_err() {
                break;
            }
            *started += 1;
        }
        *started
    }

    /// A helper's life: wait for a job after epoch `seen`, work on it if it counts this
    /// helper in.
    fn helper(&self, id: usize, mut seen: u64) {
        HELPER.with(|h| h.set(true));
        loop {
            // A helper past the thread count (`set_num_threads` lowered it) takes no part
            // until it is raised: it sleeps at once instead of spinning beside the others.
            let spin = id + 1 < num_threads();
            self.wait_for_job(&mut seen, spin);
            let job = self.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(job) = job
                && id < job.helpers
            {
                job.work();
            }
        }
    }

    /// Returns once the epoch differs from `seen` (and records it): spinning for the spin
    /// time (when `spin`), then asleep until [`run_tasks`] wakes the team.
    fn wait_for_job(&self, seen: &mut u64, spin: bool) {
        let limit = if spin {
            Duration::from_nanos(SPIN_NANOS.load(Ordering::Relaxed))
        } else {
            Duration::ZERO
        };
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let e = self.epoch.load(Ordering::Acquire);
            if e != *seen {
                *seen = e;
                return;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && start.elapsed() >= limit {
                break;
            }
            std::hint::spin_loop();
        }
        let mut guard = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        // Counted before the epoch is read again, under the lock the waker takes: either
        // the waker sees this sleeper, or this load sees its new epoch.
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            let e = self.epoch.load(Ordering::SeqCst);
            if e != *seen {
                *seen = e;
                break;
            }
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Hands `job` to the helpers, waking the sleeping ones.
    fn publish(&self, job: &Arc<Shared>) {
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(job));
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }
}

/// Gives the team back when the job is over (also when a task's panic unwinds).
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        TEAM.job.lock().unwrap_or_else(|e| e.into_inner()).take();
        TEAM.busy.store(false, Ordering::Release);
    }
}

/// Runs `task(i)` once for every `i` in `0..n_tasks`, spread over the calling thread and
/// [`num_threads`]` - 1` helper threads, and returns when all have finished. A panic in a
/// task is re-raised on the caller after every task has stopped. While the team is busy
/// with another call (nested, or from another thread) the tasks run on the caller alone.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let sum = AtomicUsize::new(0);
/// ferrograd_kernels::cpu::run_tasks(100, |i| { sum.fetch_add(i, Ordering::Relaxed); });
/// assert_eq!(sum.into_inner(), 4950);
/// ```
pub fn run_tasks(n_tasks: usize, task: impl Fn(usize) + Sync) {
    if !on_team(n_tasks, &task) {
        run_alone(n_tasks, &task);
    }
}

/// Every task on the calling thread, in order; a panic is re-raised after the last.
fn run_alone(n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
    let mut first = None;
    for i in 0..n_tasks {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task(i))) {
            first.get_or_insert(payload);
        }
    }
    if let Some(payload) = first {
        resume_unwind(payload);
    }
}

/// [`run_tasks`] on the team; `false`, having run nothing, when there is no helper to
/// ask (one thread, one task) or the team is busy (a nested call, another caller).
fn on_team(n_tasks: usize, task: &(dyn Fn(usize) + Sync)) -> bool {
    let want = num_threads()
        .saturating_sub(1)
        .min(n_tasks.saturating_sub(1));
    if want == 0
        || HELPER.with(|h| h.get())
        || TEAM
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return false;
    }
    let _release = Release;
    let helpers = TEAM.ensure_helpers(want).min(want);
    // SAFETY: only the lifetime is erased; `Shared::work` dereferences the pointer only
    // while this frame waits below (see `ErasedTask`).
    let task: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(task) };
    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        n: n_tasks,
        helpers,
        task: ErasedTask(task),
        panic: Mutex::new(None),
    });
    if helpers > 0 {
        TEAM.publish(&shared);
    }
    shared.work();
    // Every index is claimed; wait for the ones other threads are still running. They are
    // running (a claim happens on a live thread), so this is short: spin, then yield.
    let mut spins = 0u32;
    while shared.done.load(Ordering::Acquire) < n_tasks {
        if spins < 1 << 14 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
    let payload = shared
        .panic
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(payload) = payload {
        resume_unwind(payload);
    }
    true
}

/// A slice shared between tasks that each take a disjoint chunk of it.
struct ChunkedSlice<T> {
    ptr: *mut T,
    len: usize,
    chunk: usize,
}

// SAFETY: tasks only form `&mut` to disjoint chunks (see `chunk_mut`), so sharing the base
// pointer is like handing out `par_chunks_mut`'s pieces; `T: Send` lets them cross threads.
unsafe impl<T: Send> Sync for ChunkedSlice<T> {}

impl<T> ChunkedSlice<T> {
    /// # Safety
    /// Each `i` must be passed at most once while the borrow this was made from lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn chunk_mut(&self, i: usize) -> &mut [T] {
        let start = i * self.chunk;
        let len = self.chunk.min(self.len - start);
        // SAFETY: `start + len <= self.len`, and chunks of distinct `i` do not overlap,
        // so this is the only live reference to these elements (caller's contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// `data.par_chunks_mut(chunk).enumerate().for_each(f)` on [`run_tasks`]: `f(i, piece)` for
/// each piece of `chunk` elements (the last may be shorter).
///
/// ```
/// let mut v = vec![0usize; 10];
/// ferrograd_kernels::cpu::for_each_chunk_mut(&mut v, 4, |i, c| c.fill(i));
/// assert_eq!(v, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
/// ```
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk = chunk.max(1);
    let shared = ChunkedSlice {
        ptr: data.as_mut_ptr(),
        len: data.len(),
        chunk,
    };
    // SAFETY: `run_tasks` calls each index exactly once, and `data` stays mutably
    // borrowed (unused otherwise) until it returns.
    run_tasks(data.len().div_ceil(chunk), |i| {
        f(i, unsafe { shared.chunk_mut(i) })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        for n in [0, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            run_tasks(n, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "n = {n}"
            );
        }
    }

    #[test]
    fn chunks_tile_the_slice() {
        let mut v = vec![usize::MAX; 1003];
        for_each_chunk_mut(&mut v, 100, |i, c| {
            assert!(c.len() == 100 || (i == 10 && c.len() == 3));
            c.iter_mut().enumerate().for_each(|(j, x)| *x = i * 100 + j);
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i));
    }

    #[test]
    fn a_panicking_task_panics_the_caller_after_the_others_finish() {
        let finished = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_tasks(64, |i| {
                if i == 5 {
                    panic!("task five");
                }
                finished.fetch_add(1, Ordering::Relaxed);
            })
        }));
        let payload = result.expect_err("the panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"task five"));
        assert_eq!(finished.load(Ordering::Relaxed), 63);
    }

    /// Runs `n` tasks on the team that each wait (up to ten seconds) until all `n` have
    /// started: they can only all finish in time if `n` threads run them at once.
    fn all_at_once(n: usize) -> bool {
        let started = AtomicUsize::new(0);
        let together = AtomicUsize::new(0);
        let task = |_| {
            started.fetch_add(1, Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(10);
            while started.load(Ordering::SeqCst) < n && Instant::now() < deadline {
                std::thread::yield_now();
            }
            if started.load(Ordering::SeqCst) == n {
                together.fetch_add(1, Ordering::SeqCst);
            }
        };
        // Other tests of this binary use the team too: wait for a turn.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !on_team(n, &task) {
            assert!(Instant::now() < deadline, "the team stayed busy");
            std::thread::sleep(Duration::from_millis(1));
        }
        together.into_inner() == n
    }

    #[test]
    fn the_caller_and_its_helpers_run_tasks_at_once() {
        let _lock = thread_count_lock();
        for threads in [2, 3] {
            set_num_threads(threads);
            assert!(all_at_once(threads), "{threads} threads");
        }
        // Asleep after a zero spin, helpers are woken by the next job.
        let spin = spin_time();
        set_spin_time(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        let ok = all_at_once(2);
        set_spin_time(spin);
        set_num_threads(0);
        assert!(ok, "woken helpers");
    }

    #[test]
    fn one_thread_runs_every_task_itself() {
        let _lock = thread_count_lock();
        set_num_threads(1);
        let me = std::thread::current().id();
        let elsewhere = AtomicUsize::new(0);
        run_tasks(64, |_| {
            if std::thread::current().id() != me {
                elsewhere.fetch_add(1, Ordering::Relaxed);
            }
        });
        set_num_threads(0);
        assert_eq!(elsewhere.into_inner(), 0);
    }

    #[test]
    fn nested_calls_run_on_their_own_thread() {
        let total = AtomicUsize::new(0);
        run_tasks(8, |k| {
            let inner = std::thread::current().id();
            run_tasks(50, |i| {
                assert_eq!(std::thread::current().id(), inner);
                total.fetch_add(i + k, Ordering::Relaxed);
            });
        });
        assert_eq!(
            total.into_inner(),
            (0..8).map(|k| 1225 + 50 * k).sum::<usize>()
        );
    }

    #[test]
    fn callers_on_many_threads_at_once() {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..6usize)
                .map(|t| {
                    s.spawn(move || {
                        for round in 0..200usize {
                            let sum = AtomicUsize::new(0);
                            run_tasks(1 + (t + round) % 9, |i| {
                                sum.fetch_add(i + 1, Ordering::Relaxed);
                            });
                            let n = 1 + (t + round) % 9;
                            assert_eq!(sum.into_inner(), n * (n + 1) / 2);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("no caller panics");
            }
        });
    }
}
