//! Training on several processes (`torch.distributed`): process groups and collectives on
//! a real engine, and [`DistributedDataParallel`].
//!
//! The engine for CPUs is **MPI** (the `mpi` feature, through the `mpi` crate over the
//! system OpenMPI): start the processes with `mpirun`, one per rank, and call
//! [`init_process_group`] in each. Rank, world size and local rank come from the
//! launcher (`OMPI_COMM_WORLD_*`). Every collective works in place on tensors of f32, f64,
//! f16, bf16, i64 or u8, synchronously or asynchronously (the `*_async` methods return a
//! [`Work`] to [`Work::wait`] on).
//!
//! The engine for GPUs is **NCCL** (the `nccl` feature, with `cuda`; libnccl is loaded at
//! run time): [`Backend::Nccl`], one process per GPU, each on device
//! `local_rank() % device_count`. Its collectives are queued on the device's stream,
//! ordered with the kernels around them; rank 0's NCCL id reaches the others over MPI, so
//! several ranks also need the `mpi` feature and `mpirun` (one rank needs neither).
//!
//! ```no_run
//! use ferrograd_runtime::distributed::{self, Backend, ReduceOp};
//! use ferrograd_runtime::prelude::*;
//! # fn main() -> Result<(), distributed::DistError> {
//! // mpirun -n 2 target/release/examples/my_program
//! let world = distributed::init_process_group(Backend::Mpi)?;
//! let t = Tensor::full(&[3], world.rank() as f64 + 1.0, DType::F32, &Device::Cpu);
//! world.all_reduce(&t, ReduceOp::Sum)?; // 1 + 2 = 3 on both ranks
//! distributed::destroy_process_group();
//! # Ok(()) }
//! ```
//!
//! How the work is done: one communication thread per process makes every engine call, in
//! the order the collectives were issued (which every rank must keep, as with any MPI
//! program); an asynchronous collective runs there while the caller goes on, which is how
//! DistributedDataParallel's bucket all-reduces overlap backward. Faults end the job
//! rather than hang it: a rank that panics aborts every rank with a message naming it,
//! and a collective that does not complete within the timeout does the same.

mod checkpoint;
mod collectives;
mod comm;
mod ddp;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(not(feature = "mpi"))]
#[path = "no_mpi.rs"]
mod mpi;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(not(feature = "nccl"))]
#[path = "no_nccl.rs"]
mod nccl;
mod sync_bn;
mod zero;

pub(crate) use collectives::TwoBuffer;

pub use checkpoint::{load_checkpoint, save_checkpoint};
pub use comm::Work;
pub use ddp::{CommStats, DdpConfig, DistributedDataParallel, ForwardOutputs, NoSync};
pub(crate) use sync_bn::synchronized_batch_norm;
pub use sync_bn::{SyncBatchNorm, all_reduce_sum_differentiable, convert_sync_batchnorm};
pub use zero::ZeroRedundancyOptimizer;

use crate::autograd::no_grad;
use crate::storage::Storage;
use crate::{DType, Device, Tensor};
use comm::{CommThread, WorkState};
use ferrograd_kernels::cpu::CpuStorage;
use std::os::raw::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What went wrong in a distributed call.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DistError {
    /// No process group: call [`init_process_group`] first (or it was destroyed).
    #[error(
        "the default process group is not initialized: call distributed::init_process_group first"
    )]
    NotInitialized,
    /// [`init_process_group`] was called twice.
    #[error("the default process group is already initialized")]
    AlreadyInitialized,
    /// The backend was not compiled in, or cannot run here.
    #[error("distributed backend {backend} is unavailable: {reason}")]
    BackendUnavailable {
        /// The backend asked for.
        backend: &'static str,
        /// Why it cannot be used.
        reason: String,
    },
    /// The engine reported an error.
    #[error("{0}")]
    Engine(String),
    /// The dtype cannot be communicated.
    #[error("dtype {0} cannot be communicated")]
    DType(DType),
    /// Arguments that do not fit together (shapes, ranks, dtypes), or ranks that disagree
    /// on a collective.
    #[error("{0}")]
    Mismatch(String),
    /// A distributed checkpoint could not be written or read.
    #[error("distributed checkpoint: {0}")]
    Checkpoint(String),
    /// This process is not a member of the group it used.
    #[error("this rank ({rank}) is not a member of the group {ranks:?}")]
    NotAMember {
        /// This process's global rank.
        rank: usize,
        /// The group's global ranks.
        ranks: Vec<usize>,
    },
}

/// An engine (`torch.distributed.Backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// MPI over the system OpenMPI (the `mpi` feature): CPU tensors, launched by `mpirun`.
    Mpi,
    /// NCCL on CUDA devices (the `nccl` feature), bootstrapped over MPI when there are
    /// several ranks: CUDA tensors are reduced in place on the device, others go
    /// through a copy on this rank's device.
    Nccl,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
        }
    }
}

/// How [`ProcessGroup::all_reduce`] combines values (`torch.distributed.ReduceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum over ranks.
    Sum,
    /// Mean over ranks (floating-point dtypes only).
    Avg,
    /// Largest value.
    Max,
    /// Smallest value.
    Min,
    /// Product over ranks.
    Product,
}

impl ReduceOp {
    /// The engine's reduction (`Avg` is a `Sum`, divided afterwards).
    fn engine(self) -> EngineOp {
        match self {
            ReduceOp::Sum | ReduceOp::Avg => EngineOp::Sum,
            ReduceOp::Product => EngineOp::Product,
            ReduceOp::Max => EngineOp::Max,
            ReduceOp::Min => EngineOp::Min,
        }
    }
}

/// The reductions the engine itself performs (`Avg` is a `Sum` then a division).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EngineOp {
    Sum,
    Product,
    Max,
    Min,
}

/// Settings of [`init_process_group_with`].
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// How long a collective may take before the job is ended (PyTorch's `timeout`,
    /// default 30 minutes; `FERROGRAD_DISTRIBUTED_TIMEOUT` in seconds overrides it).
    pub timeout: Duration,
    /// Check before every collective that all ranks issue the same one (op, dtype, shape):
    /// costs one small exchange per collective (`TORCH_DISTRIBUTED_DEBUG=DETAIL`; also on
    /// with `FERROGRAD_DISTRIBUTED_DEBUG=DETAIL`).
    pub debug: bool,
    /// Abort the whole job when any thread of this rank panics, naming the rank (default).
    pub abort_on_panic: bool,
}

impl Default for InitOptions {
    fn default() -> Self {
        let timeout = std::env::var("FERROGRAD_DISTRIBUTED_TIMEOUT")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .map_or(Duration::from_secs(30 * 60), Duration::from_secs_f64);
        let debug = std::env::var("FERROGRAD_DISTRIBUTED_DEBUG")
            .is_ok_and(|v| v.eq_ignore_ascii_case("detail"));
        InitOptions {
            timeout,
            debug,
            abort_on_panic: true,
        }
    }
}

/// What every group of this process shares: the communication thread and the settings.
struct Global {
    backend: Backend,
    thread: CommThread,
    rank: usize,
    size: usize,
    timeout: Duration,
    debug: bool,
}

struct GroupInner {
    global: Arc<Global>,
    /// `None` on the ranks outside the group, and for NCCL without MPI (one rank).
    comm: Option<mpi::Comm>,
    /// The NCCL communicator of a [`Backend::Nccl`] group (unset outside the group).
    nccl: OnceLock<Arc<nccl::Comm>>,
    /// The members' global ranks, in group-rank order.
    ranks: Vec<usize>,
}

/// A set of ranks that run collectives together (`torch.distributed.ProcessGroup`): the
/// world from [`init_process_group`], or a sub-group from [`new_group`]. Cheap to clone.
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<GroupInner>,
}

static WORLD: Mutex<Option<ProcessGroup>> = Mutex::new(None);

/// Starts the default process group (`torch.distributed.init_process_group`) with
/// default [`InitOptions`]; returns it (also reachable through [`world`]).
///
/// With [`Backend::Mpi`], the process must have been started by `mpirun` (or alone, as a
/// world of one). Without the `mpi` feature it is an `Err` saying how to enable it.
pub fn init_process_group(backend: Backend) -> Result<ProcessGroup, DistError> {
    init_process_group_with(backend, InitOptions::default())
}

/// [`init_process_group`] with explicit options.
pub fn init_process_group_with(
    backend: Backend,
    options: InitOptions,
) -> Result<ProcessGroup, DistError> {
    let mut world = WORLD.lock().unwrap_or_else(|e| e.into_inner());
    if world.is_some() {
        return Err(DistError::AlreadyInitialized);
    }
    let use_nccl = backend == Backend::Nccl;
    if use_nccl {
        nccl::available()?;
    }
    let started = CommThread::start(
        || mpi::init().map(|(rank, size, comm)| (rank, size, Some(comm))),
        mpi::finalize,
    );
    let (thread, (rank, size, world_comm)) = match started {
        Ok(started) => started,
        // NCCL without MPI: a world of one rank needs no bootstrap.
        Err(DistError::BackendUnavailable { reason, .. }) if use_nccl => {
            let size = launcher_world_size();
            if size > 1 {
                return Err(DistError::BackendUnavailable {
                    backend: backend.name(),
                    reason: format!(
                        "the launcher started {size} ranks, and NCCL's unique id reaches them over \
                         MPI, which this build lacks: {reason}"
                    ),
                });
            }
            CommThread::start(|| Ok((0, 1, None)), || {})?
        }
        Err(e) => return Err(e),
    };
    if world_comm.is_some() && mpi::serialized() {
        thread.allow_inline();
    }
    let global = Arc::new(Global {
        backend,
        thread,
        rank,
        size,
        timeout: options.timeout,
        debug: options.debug,
    });
    let group = ProcessGroup {
        inner: Arc::new(GroupInner {
            global,
            comm: world_comm,
            nccl: OnceLock::new(),
            ranks: (0..size).collect(),
        }),
    };
    if use_nccl && let Err(e) = group.start_nccl() {
        let global = &group.inner.global;
        global.thread.shutdown(global.rank, global.timeout);
        return Err(e);
    }
    if options.abort_on_panic {
        install_panic_hook(rank, size);
    }
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        extern "C" fn at_exit() {
            destroy_process_group();
        }
        // SAFETY: registers a plain function with the C runtime's exit handlers.
        unsafe { libc::atexit(at_exit) };
    });
    *world = Some(group.clone());
    Ok(group)
}

/// The world size the launcher announces (`OMPI_COMM_WORLD_SIZE`, `WORLD_SIZE`), or 1.
fn launcher_world_size() -> usize {
    ["OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
        .unwrap_or(1)
}

/// Whether the default group is running (`torch.distributed.is_initialized`).
pub fn is_initialized() -> bool {
    WORLD.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

/// The default group (all ranks).
pub fn world() -> Result<ProcessGroup, DistError> {
    WORLD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or(DistError::NotInitialized)
}

/// This process's rank in the default group (`torch.distributed.get_rank`); 0 when no
/// group is running, so single-process code can call it unconditionally.
pub fn rank() -> usize {
    world().map_or(0, |g| g.inner.global.rank)
}

/// The number of processes in the default group (`get_world_size`); 1 when none runs.
pub fn world_size() -> usize {
    world().map_or(1, |g| g.inner.global.size)
}

/// This process's index among the ranks on its machine (torchrun's `LOCAL_RANK`): from
/// `OMPI_COMM_WORLD_LOCAL_RANK`, else `LOCAL_RANK`, else 0. Pick the GPU with it.
pub fn local_rank() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "LOCAL_RANK",
        "MPI_LOCALRANKID",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok()?.parse().ok())
    .unwrap_or(0)
}

/// Waits for every rank of the default group.
pub fn barrier() -> Result<(), DistError> {
    world()?.barrier()
}

/// Stops the default group: lets queued collectives finish, then shuts the engine down
/// (`destroy_process_group`). Also runs at process exit; calling it twice is harmless.
pub fn destroy_process_group() {
    let group = WORLD.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(g) = group {
        let global = &g.inner.global;
        global.thread.shutdown(global.rank, global.timeout);
    }
}

/// A sub-group of the given global ranks (`torch.distributed.new_group`). Every rank of
/// the default group must call it with the same list, in the same order as other groups;
/// on the ranks outside the list the group exists but its collectives are errors.
pub fn new_group(ranks: &[usize]) -> Result<ProcessGroup, DistError> {
    world()?.new_group(ranks)
}

fn install_panic_hook(rank: usize, size: usize) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        abort_job(&format!("rank {rank} of {size} panicked (see above)"));
    }));
}

/// Prints `why` and ends every process of the job with a non-zero status.
pub(crate) fn abort_job(why: &str) -> ! {
    eprintln!("ferrograd.distributed: {why}; ending the job");
    mpi::abort(1);
    std::process::exit(1)
}

/// A contiguous CPU tensor holding `t`'s values, and whether it is a copy (then a result
/// written into it must be copied back into `t`): MPI's staging.
fn stage(t: &Tensor) -> (Tensor, bool) {
    stage_on(t, &Device::Cpu).unwrap_or_else(|e| panic!("distributed: {e}"))
}

/// A contiguous tensor on `dev` holding `t`'s values, and whether it is a copy (then a
/// result written into it must be copied back into `t`). The move to another device or
/// the contiguous copy is the only copy made.
fn stage_on(t: &Tensor, dev: &Device) -> Result<(Tensor, bool), DistError> {
    if t.device() == *dev && t.is_contiguous() {
        return Ok((t.detach(), false));
    }
    let moved = t
        .detach()
        .to_device(dev)
        .map_err(|e| {
            DistError::Engine(format!(
                "copying a {} tensor to {dev} failed: {e}",
                t.device()
            ))
        })?
        .contiguous();
    let staged = if moved.shares_storage(t) {
        moved.deep_copy()
    } else {
        moved
    };
    Ok((staged, true))
}

/// The address of a staged (contiguous CPU) tensor's first element. The caller holds the
/// storage's read guard (to read through it) or its write guard (to write).
fn host_ptr(storage: &Storage, t: &Tensor) -> *mut c_void {
    let Storage::Cpu(s) = storage else {
        unreachable!("distributed: staged tensors live on the host")
    };
    // A host buffer's pointer is its allocation's own (not derived from this borrow), so
    // writing through it under the write guard is sound.
    let base = match s {
        CpuStorage::F32(b) => b.as_ptr() as *mut u8,
        CpuStorage::F64(b) => b.as_ptr() as *mut u8,
        CpuStorage::F16(b) => b.as_ptr() as *mut u8,
        CpuStorage::BF16(b) => b.as_ptr() as *mut u8,
        CpuStorage::I64(b) => b.as_ptr() as *mut u8,
        CpuStorage::U8(b) => b.as_ptr() as *mut u8,
        #[allow(unreachable_patterns)]
        _ => unreachable!("distributed: dtype checked before staging"),
    };
    // SAFETY: the layout's offset lies inside the storage.
    unsafe { base.add(t.layout().offset() * t.dtype().size_in_bytes()) as *mut c_void }
}

/// `ReduceOp::Avg` divides: it needs a floating-point tensor.
fn avg_needs_float(t: &Tensor, op: ReduceOp) -> Result<(), DistError> {
    let dtype = t.dtype();
    if op == ReduceOp::Avg && !dtype.is_float() {
        return Err(DistError::Mismatch(format!(
            "all_reduce: ReduceOp::Avg needs a floating-point tensor, got {dtype}"
        )));
    }
    Ok(())
}

fn communicable(op: &str, t: &Tensor) -> Result<(), DistError> {
    match t.dtype() {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::I64 | DType::U8 => Ok(()),
        #[allow(unreachable_patterns)]
        other => Err(DistError::Mismatch(format!(
            "{op}: dtype {other} cannot be communicated"
        ))),
    }
}

/// Divides `n` elements at `p` by `by` (the `Avg` of an all-reduce).
///
/// # Safety
/// `p` points to `n` writable elements of `dtype`.
unsafe fn divide(p: *mut c_void, n: usize, dtype: DType, by: usize) {
    macro_rules! go {
        ($t:ty, |$x:ident| $e:expr) => {{
            // SAFETY: per the contract.
            let s = unsafe { std::slice::from_raw_parts_mut(p as *mut $t, n) };
            for $x in s {
                *$x = $e;
            }
        }};
    }
    let k = by as f64;
    match dtype {
        DType::F32 => go!(f32, |x| *x / k as f32),
        DType::F64 => go!(f64, |x| *x / k),
        DType::F16 => go!(half::f16, |x| half::f16::from_f32(x.to_f32() / k as f32)),
        DType::BF16 => go!(half::bf16, |x| half::bf16::from_f32(x.to_f32() / k as f32)),
        _ => unreachable!("Avg is rejected for integer dtypes"),
    }
}

/// A fingerprint of a collective (op, dtype, shape, root), equal on ranks that agree.
fn fingerprint(what: &str, parts: &[&dyn std::fmt::Debug]) -> i64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    what.hash(&mut h);
    for p in parts {
        format!("{p:?}").hash(&mut h);
    }
    h.finish() as i64
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("ranks", &self.inner.ranks)
            .field("rank", &self.group_rank())
            .finish()
    }
}
