//! Low-latency fork-join over rayon's workers for memory-bound kernels.
//!
//! `par_chunks_mut(..).for_each(..)` called from outside the pool injects the job and puts
//! the caller to sleep on a condition variable until the workers finish; waking it again
//! costs a cross-core wake-up per op, which on a 1e6-element add is a tenth of the op.
//! [`run_tasks`] instead lets the caller take tasks itself from a shared counter, hands
//! the same loop to `threads - 1` rayon workers, and spins (then yields) for the few
//! tasks still running elsewhere when the counter runs out. A worker that wakes late finds
//! no task left and returns: the op never waits for a wake-up.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The thread limit set by [`set_num_threads`]; 0 means rayon's pool size.
static THREAD_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// Limits the CPU kernels to `n` threads (`torch.set_num_threads`); at most the size of
/// rayon's pool (`RAYON_NUM_THREADS`, else one per core), which is what `0` restores.
///
/// ```
/// use ferrograd_kernels::cpu::{num_threads, set_num_threads};
/// let before = num_threads();
/// set_num_threads(1);
/// assert_eq!(num_threads(), 1);
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
    let pool = rayon::current_num_threads();
    match THREAD_LIMIT.load(Ordering::Relaxed) {
        0 => pool,
        n => n.min(pool),
    }
}

/// Held by the unit tests that change the thread count, so that one test's count is not
/// another's: paths such as the wide weight gradient are chosen by it.
#[cfg(test)]
pub(crate) fn thread_count_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The task body with its borrow erased, so that helper jobs (which must be `'static`)
/// can hold it. Only dereferenced after claiming a task index below `n`, which can only
/// happen while [`run_tasks`] is still waiting for that task, so while the borrow lives.
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
    task: ErasedTask,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Shared {
    /// Claims and runs tasks until none is left. Returns without touching `task` when
    /// every index is already claimed.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
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

/// Runs `task(i)` once for every `i` in `0..n_tasks`, spread over the calling thread and
/// rayon's workers, and returns when all have finished. A panic in a task is re-raised on
/// the caller after every task has stopped.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let sum = AtomicUsize::new(0);
/// ferrograd_kernels::cpu::run_tasks(100, |i| { sum.fetch_add(i, Ordering::Relaxed); });
/// assert_eq!(sum.into_inner(), 4950);
/// ```
pub fn run_tasks(n_tasks: usize, task: impl Fn(usize) + Sync) {
    let helpers = num_threads()
        .saturating_sub(1)
        .min(n_tasks.saturating_sub(1));
    if helpers == 0 {
        (0..n_tasks).for_each(task);
        return;
    }
    let task: &(dyn Fn(usize) + Sync) = &task;
    // SAFETY: only the lifetime is erased; `Shared::work` dereferences the pointer only
    // while this frame waits below (see `ErasedTask`).
    let task: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(task) };
    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        n: n_tasks,
        task: ErasedTask(task),
        panic: Mutex::new(None),
    });
    for _ in 0..helpers {
        let shared = Arc::clone(&shared);
        rayon::spawn(move || shared.work());
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

    #[test]
    fn nested_inside_a_rayon_worker() {
        use rayon::prelude::*;
        let total: usize = (0..8usize)
            .into_par_iter()
            .map(|k| {
                let sum = AtomicUsize::new(0);
                run_tasks(50, |i| {
                    sum.fetch_add(i + k, Ordering::Relaxed);
                });
                sum.into_inner()
            })
            .sum();
        assert_eq!(total, (0..8).map(|k| 1225 + 50 * k).sum::<usize>());
    }
}
