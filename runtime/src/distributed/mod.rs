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

impl ProcessGroup {
    /// This process's rank within the group, or `None` outside it.
    pub fn group_rank(&self) -> Option<usize> {
        self.inner
            .ranks
            .iter()
            .position(|&r| r == self.inner.global.rank)
    }

    /// This process's rank in the group (the global rank for the world group). Panics
    /// outside the group; see [`ProcessGroup::group_rank`].
    #[track_caller]
    pub fn rank(&self) -> usize {
        self.group_rank().unwrap_or_else(|| {
            panic!(
                "ProcessGroup::rank: rank {} is not a member of the group {:?}",
                self.inner.global.rank, self.inner.ranks
            )
        })
    }

    /// The number of ranks in the group.
    pub fn size(&self) -> usize {
        self.inner.ranks.len()
    }

    /// The group's members as global ranks, in group-rank order.
    pub fn ranks(&self) -> &[usize] {
        &self.inner.ranks
    }

    /// Whether this process belongs to the group.
    pub fn is_member(&self) -> bool {
        self.inner.comm.is_some() || self.inner.nccl.get().is_some()
    }

    /// The NCCL communicator of a [`Backend::Nccl`] group; `None` for an MPI group.
    fn nccl(&self) -> Result<Option<&nccl::Comm>, DistError> {
        if self.inner.global.backend != Backend::Nccl {
            return Ok(None);
        }
        self.inner
            .nccl
            .get()
            .map(|c| Some(&**c))
            .ok_or_else(|| DistError::NotAMember {
                rank: self.inner.global.rank,
                ranks: self.inner.ranks.clone(),
            })
    }

    /// The NCCL device of this rank (`local_rank` modulo the devices), the unique id from
    /// rank 0 (over MPI when there are several ranks), and the world communicator.
    fn start_nccl(&self) -> Result<(), DistError> {
        let devices = crate::cuda::device_count();
        if devices == 0 {
            return Err(DistError::BackendUnavailable {
                backend: "nccl",
                reason: "no CUDA device is available".into(),
            });
        }
        let ordinal = local_rank() % devices;
        let (rank, size) = (self.inner.global.rank, self.inner.global.size);
        let mut id = if rank == 0 {
            nccl::unique_id()?
        } else {
            [0; 128]
        };
        if size > 1 {
            let buf = Arc::new(Mutex::new(id));
            let (b, inner) = (buf.clone(), self.inner.clone());
            self.submit_job("nccl_bootstrap", &[], move || {
                let mut bytes = b.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: 128 writable bytes, locked until we return.
                unsafe {
                    mpi::broadcast(
                        inner.comm.as_ref().expect("member"),
                        bytes.as_mut_ptr() as *mut c_void,
                        bytes.len(),
                        DType::U8,
                        0,
                    )
                }
            })?
            .wait()?;
            id = *buf.lock().unwrap_or_else(|e| e.into_inner());
        }
        let comm = nccl::Comm::init(id, rank, size, ordinal)?;
        let _ = self.inner.nccl.set(Arc::new(comm));
        Ok(())
    }

    /// NCCL's send (or, with `receive`, receive) with group rank `peer`; `None` for an
    /// MPI group.
    fn nccl_point_to_point(
        &self,
        what: &str,
        tensor: &Tensor,
        peer: usize,
        receive: bool,
    ) -> Result<Option<Work>, DistError> {
        let Some(nc) = self.nccl()? else {
            return Ok(None);
        };
        if Some(peer) == self.group_rank() {
            return Err(DistError::Mismatch(format!(
                "{what}: rank {} is this rank itself (NCCL pairs a send with a receive on \
                 another rank)",
                self.inner.ranks[peer]
            )));
        }
        let (buf, copied) = stage_on(tensor, &Device::Cuda(nc.ordinal()))?;
        nc.point_to_point(&buf, peer, receive)?;
        let finish = if receive {
            write_back(tensor, buf, copied)
        } else {
            None
        };
        Ok(Some(self.queued(what, finish)))
    }

    /// A finished [`Work`]: NCCL's work is queued on the device's stream, ordered before
    /// whatever uses the tensors next, so the host has nothing to wait for.
    fn queued(&self, what: &str, finish: Option<Box<dyn FnOnce() + Send>>) -> Work {
        let state = Arc::new(WorkState::default());
        state.complete(Ok(()), Duration::ZERO);
        Work {
            state,
            what: what.to_string(),
            rank: self.inner.global.rank,
            timeout: self.inner.global.timeout,
            finish,
        }
    }

    /// A sub-group of these global ranks; see [`new_group`]. Every rank of `self` calls it.
    pub fn new_group(&self, ranks: &[usize]) -> Result<ProcessGroup, DistError> {
        let mut sorted = ranks.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != ranks.len() || ranks.iter().any(|r| !self.inner.ranks.contains(r)) {
            return Err(DistError::Mismatch(format!(
                "new_group: ranks {ranks:?} must be distinct members of {:?}",
                self.inner.ranks
            )));
        }
        let me = self.inner.global.rank;
        let color = ranks.iter().position(|&r| r == me).map(|_| 0usize);
        let key = ranks.iter().position(|&r| r == me).unwrap_or(0);
        // An NCCL group's collectives all go through its NCCL communicator: it needs no
        // MPI one.
        let nccl_parent = self.nccl()?;
        let comm = if nccl_parent.is_none() {
            let out: Arc<Mutex<Option<mpi::Comm>>> = Arc::default();
            let o = out.clone();
            let parent_inner = self.inner.clone();
            self.submit_job("new_group", &[&ranks], move || {
                let comm = parent_inner.comm.as_ref().expect("member checked");
                *o.lock().unwrap_or_else(|e| e.into_inner()) = mpi::split(comm, color, key)?;
                Ok(())
            })?
            .wait()?;
            out.lock().unwrap_or_else(|e| e.into_inner()).take()
        } else {
            None
        };
        let nccl = OnceLock::new();
        if let Some(parent) = nccl_parent
            && let Some(sub) = parent.split(color, key)?
        {
            let _ = nccl.set(Arc::new(sub));
        }
        Ok(ProcessGroup {
            inner: Arc::new(GroupInner {
                global: self.inner.global.clone(),
                comm,
                nccl,
                ranks: ranks.to_vec(),
            }),
        })
    }

    fn member(&self, _op: &str) -> Result<&mpi::Comm, DistError> {
        self.inner
            .comm
            .as_ref()
            .ok_or_else(|| DistError::NotAMember {
                rank: self.inner.global.rank,
                ranks: self.inner.ranks.clone(),
            })
    }

    /// The group rank of global rank `r`.
    fn to_group_rank(&self, op: &str, r: usize) -> Result<usize, DistError> {
        self.inner
            .ranks
            .iter()
            .position(|&x| x == r)
            .ok_or_else(|| {
                DistError::Mismatch(format!(
                    "{op}: rank {r} is not in the group {:?}",
                    self.inner.ranks
                ))
            })
    }

    /// `job` preceded, in debug mode, by the check that every rank issues the same
    /// collective (`fingerprint_parts` describe it).
    fn checked(
        &self,
        what: &str,
        fingerprint_parts: &[&dyn std::fmt::Debug],
        job: impl FnOnce() -> Result<(), DistError> + Send + 'static,
    ) -> impl FnOnce() -> Result<(), DistError> + Send + 'static {
        let check = self.inner.global.debug.then(|| {
            (
                fingerprint(what, fingerprint_parts),
                self.inner.clone(),
                what.to_string(),
            )
        });
        move || match check {
            Some((fp, inner, what)) => consistent(&inner, fp, &what).and_then(|()| job()),
            None => job(),
        }
    }

    /// Queues `job` on the communication thread (after the consistency check in debug
    /// mode) and returns its handle.
    fn submit_job(
        &self,
        what: &str,
        fingerprint_parts: &[&dyn std::fmt::Debug],
        job: impl FnOnce() -> Result<(), DistError> + Send + 'static,
    ) -> Result<Work, DistError> {
        self.member(what)?;
        let run = self.checked(what, fingerprint_parts, job);
        self.queue(what, run)
    }

    /// Queues a prepared job and returns its handle.
    fn queue(
        &self,
        what: &str,
        run: impl FnOnce() -> Result<(), DistError> + Send + 'static,
    ) -> Result<Work, DistError> {
        let state = Arc::new(WorkState::default());
        let s = state.clone();
        self.inner.global.thread.submit(Box::new(move || {
            let start = std::time::Instant::now();
            let result = run();
            s.complete(result, start.elapsed());
        }))?;
        Ok(Work {
            state,
            what: what.to_string(),
            rank: self.inner.global.rank,
            timeout: self.inner.global.timeout,
            finish: None,
        })
    }

    /// Runs a blocking collective: on this thread when the communication thread has
    /// nothing queued (see `CommThread::run_inline`), else queued and waited for; bounded
    /// by the group's timeout either way.
    fn run_blocking(
        &self,
        what: &'static str,
        fingerprint_parts: &[&dyn std::fmt::Debug],
        job: impl FnOnce() -> Result<(), DistError> + Send + 'static,
    ) -> Result<(), DistError> {
        self.member(what)?;
        let run = self.checked(what, fingerprint_parts, job);
        let g = &self.inner.global;
        match g.thread.run_inline(run, what, g.rank, g.timeout) {
            Ok(result) => result,
            Err(run) => self.queue(what, run)?.wait(),
        }
    }

    /// Waits for every rank of the group (`barrier`).
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// world.barrier().unwrap();
    /// ```
    pub fn barrier(&self) -> Result<(), DistError> {
        if let Some(nc) = self.nccl()? {
            // As PyTorch does: a one-element all-reduce, then wait for the device.
            let dev = Device::Cuda(nc.ordinal());
            nc.all_reduce(&Tensor::zeros(&[1], DType::F32, &dev), ReduceOp::Sum)?;
            return crate::cuda::synchronize(nc.ordinal())
                .map_err(|e| DistError::Engine(format!("barrier: {e}")));
        }
        let inner = self.inner.clone();
        self.run_blocking("barrier", &[], move || {
            mpi::barrier(inner.comm.as_ref().expect("member"))
        })
    }

    /// Reduces `tensor` across the group in place (`all_reduce`): afterwards every rank
    /// holds the combination of all ranks' values.
    ///
    /// A non-contiguous tensor (or one on a device) goes through a contiguous host copy
    /// that is written back, so the result is right whatever its layout.
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let t = Tensor::full(&[2], world.rank() as f64, DType::F32, &Device::Cpu);
    /// world.all_reduce(&t, ReduceOp::Max).unwrap(); // world.size() - 1 everywhere
    /// ```
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<(), DistError> {
        if self.nccl()?.is_some() {
            return self.all_reduce_async(tensor, op)?.wait();
        }
        let (job, finish) = self.all_reduce_job(tensor, op, false)?;
        let parts: [&dyn std::fmt::Debug; 3] = [&tensor.dtype(), &tensor.shape(), &op];
        self.run_blocking("all_reduce", &parts, job)?;
        if let Some(finish) = finish {
            finish();
        }
        Ok(())
    }

    /// [`ProcessGroup::all_reduce`] without waiting: the tensor holds the result after
    /// [`Work::wait`].
    pub fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work, DistError> {
        self.all_reduce_async_with(tensor, op, false)
    }

    /// [`ProcessGroup::all_reduce_async`]; `polite` makes the engine yield the core while
    /// it waits for peers (for reductions that overlap computation on the same core).
    pub(crate) fn all_reduce_async_with(
        &self,
        tensor: &Tensor,
        op: ReduceOp,
        polite: bool,
    ) -> Result<Work, DistError> {
        if let Some(nc) = self.nccl()? {
            communicable("all_reduce", tensor)?;
            avg_needs_float(tensor, op)?;
            let (buf, copied) = stage_on(tensor, &Device::Cuda(nc.ordinal()))?;
            nc.all_reduce(&buf, op)?;
            return Ok(self.queued("all_reduce", write_back(tensor, buf, copied)));
        }
        let (job, finish) = self.all_reduce_job(tensor, op, polite)?;
        let parts: [&dyn std::fmt::Debug; 3] = [&tensor.dtype(), &tensor.shape(), &op];
        let mut work = self.submit_job("all_reduce", &parts, job)?;
        work.finish = finish;
        Ok(work)
    }

    /// The engine's part of an MPI all-reduce of `tensor` (through a contiguous host
    /// copy when it is not one), and what copies the result back afterwards.
    #[allow(clippy::type_complexity)]
    fn all_reduce_job(
        &self,
        tensor: &Tensor,
        op: ReduceOp,
        polite: bool,
    ) -> Result<
        (
            impl FnOnce() -> Result<(), DistError> + Send + 'static,
            Option<Box<dyn FnOnce() + Send>>,
        ),
        DistError,
    > {
        communicable("all_reduce", tensor)?;
        avg_needs_float(tensor, op)?;
        let dtype = tensor.dtype();
        let engine_op = op.engine();
        let (buf, copied) = stage(tensor);
        let (n, size) = (buf.numel(), self.size());
        let inner = self.inner.clone();
        let b = buf.clone();
        let job = move || {
            let cell = b.storage_cell().clone();
            let guard = cell.write();
            let p = host_ptr(&guard, &b);
            // SAFETY: `p` addresses the `n` elements of `b`, write-locked until we return.
            unsafe {
                mpi::all_reduce(
                    inner.comm.as_ref().expect("member"),
                    p,
                    n,
                    dtype,
                    engine_op,
                    polite,
                )?;
                if op == ReduceOp::Avg {
                    divide(p, n, dtype, size);
                }
            }
            Ok(())
        };
        Ok((job, write_back(tensor, buf, copied)))
    }

    /// Copies `tensor` from global rank `src` to every rank of the group (`broadcast`).
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let t = Tensor::full(&[2], world.rank() as f64, DType::F32, &Device::Cpu);
    /// world.broadcast(&t, 0).unwrap(); // rank 0's zeros everywhere
    /// ```
    pub fn broadcast(&self, tensor: &Tensor, src: usize) -> Result<(), DistError> {
        self.broadcast_async(tensor, src)?.wait()
    }

    /// [`ProcessGroup::broadcast`] without waiting.
    pub fn broadcast_async(&self, tensor: &Tensor, src: usize) -> Result<Work, DistError> {
        communicable("broadcast", tensor)?;
        let root = self.to_group_rank("broadcast", src)?;
        if let Some(nc) = self.nccl()? {
            let (buf, copied) = stage_on(tensor, &Device::Cuda(nc.ordinal()))?;
            nc.broadcast(&buf, root)?;
            return Ok(self.queued("broadcast", write_back(tensor, buf, copied)));
        }
        let (buf, copied) = stage(tensor);
        let (n, dtype) = (buf.numel(), buf.dtype());
        let inner = self.inner.clone();
        let b = buf.clone();
        let mut work =
            self.submit_job("broadcast", &[&dtype, &tensor.shape(), &src], move || {
                let cell = b.storage_cell().clone();
                let guard = cell.write();
                let p = host_ptr(&guard, &b);
                // SAFETY: as in all_reduce.
                unsafe { mpi::broadcast(inner.comm.as_ref().expect("member"), p, n, dtype, root) }
            })?;
        work.finish = write_back(tensor, buf, copied);
        Ok(work)
    }

    /// Every rank's `tensor`, in group-rank order (`all_gather`).
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let parts = world.all_gather(&Tensor::full(&[1], world.rank() as f64, DType::F32, &Device::Cpu)).unwrap();
    /// assert_eq!(parts.len(), world.size());
    /// ```
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>, DistError> {
        let mut shape = vec![self.size()];
        shape.extend_from_slice(tensor.shape());
        let out = Tensor::zeros(&shape, tensor.dtype(), &tensor.device());
        self.all_gather_into_tensor(&out, tensor)?;
        Ok((0..self.size()).map(|i| out.select(0, i)).collect())
    }

    /// Gathers every rank's `input` into `output`, whose first dimension (or, for a flat
    /// output, its length) is `size` times `input`'s (`all_gather_into_tensor`).
    pub fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor) -> Result<(), DistError> {
        self.all_gather_into_tensor_async(output, input)?.wait()
    }

    /// [`ProcessGroup::all_gather_into_tensor`] without waiting.
    pub fn all_gather_into_tensor_async(
        &self,
        output: &Tensor,
        input: &Tensor,
    ) -> Result<Work, DistError> {
        self.two_buffer(TwoBuffer::AllGather, output, input)
    }

    /// Reduces `input` (`size` blocks along its first dimension) across the group and
    /// leaves block `rank` in `output` (`reduce_scatter_tensor`).
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let input = Tensor::ones(&[world.size(), 3], DType::F32, &Device::Cpu);
    /// let out = Tensor::zeros(&[3], DType::F32, &Device::Cpu);
    /// world.reduce_scatter_tensor(&out, &input, ReduceOp::Sum).unwrap(); // world.size() each
    /// ```
    pub fn reduce_scatter_tensor(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<(), DistError> {
        self.reduce_scatter_tensor_async(output, input, op)?.wait()
    }

    /// [`ProcessGroup::reduce_scatter_tensor`] without waiting.
    pub fn reduce_scatter_tensor_async(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work, DistError> {
        if op == ReduceOp::Avg && !input.dtype().is_float() {
            return Err(DistError::Mismatch(format!(
                "reduce_scatter_tensor: ReduceOp::Avg needs a floating-point tensor, got {}",
                input.dtype()
            )));
        }
        self.two_buffer(TwoBuffer::ReduceScatter(op), output, input)
    }

    /// Splits `input` into `size` equal blocks along its first dimension, sends block `j`
    /// to rank `j` and places the block received from rank `j` at block `j` of `output`
    /// (`all_to_all_single` with equal splits).
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let input = Tensor::full(&[world.size(), 2], world.rank() as f64, DType::F32, &Device::Cpu);
    /// let out = Tensor::zeros(&[world.size(), 2], DType::F32, &Device::Cpu);
    /// world.all_to_all_single(&out, &input).unwrap(); // block j came from rank j
    /// ```
    pub fn all_to_all_single(&self, output: &Tensor, input: &Tensor) -> Result<(), DistError> {
        self.all_to_all_single_async(output, input)?.wait()
    }

    /// [`ProcessGroup::all_to_all_single`] without waiting.
    pub fn all_to_all_single_async(
        &self,
        output: &Tensor,
        input: &Tensor,
    ) -> Result<Work, DistError> {
        if !input.numel().is_multiple_of(self.size()) {
            return Err(DistError::Mismatch(format!(
                "all_to_all_single: input of shape {:?} does not split into {} equal blocks",
                input.shape(),
                self.size()
            )));
        }
        self.two_buffer(TwoBuffer::AllToAll, output, input)
    }

    /// The collectives with a separate input and output.
    fn two_buffer(
        &self,
        kind: TwoBuffer,
        output: &Tensor,
        input: &Tensor,
    ) -> Result<Work, DistError> {
        let what = kind.name();
        communicable(what, input)?;
        if output.dtype() != input.dtype() {
            return Err(DistError::Mismatch(format!(
                "{what}: output dtype {} differs from input dtype {}",
                output.dtype(),
                input.dtype()
            )));
        }
        let size = self.size();
        // output numel / input numel: size for a gather, 1 / size for a reduce-scatter.
        let (out_factor, in_factor) = match kind {
            TwoBuffer::AllGather => (size, 1),
            TwoBuffer::ReduceScatter(_) => (1, size),
            TwoBuffer::AllToAll => (1, 1),
        };
        if input.numel() * out_factor != output.numel() * in_factor {
            return Err(DistError::Mismatch(format!(
                "{what}: output of shape {:?} does not fit input of shape {:?} in a group of {size}",
                output.shape(),
                input.shape(),
            )));
        }
        if let Some(nc) = self.nccl()? {
            let dev = Device::Cuda(nc.ordinal());
            let (out, copied) = stage_on(output, &dev)?;
            let (inp, _) = stage_on(input, &dev)?;
            let inp = if inp.shares_storage(&out) {
                inp.deep_copy()
            } else {
                inp
            };
            nc.two_buffer(kind, &out, &inp, size)?;
            return Ok(self.queued(what, write_back(output, out, copied)));
        }
        let (out, copied) = stage(output);
        // The input is read while the output is written: never the same storage.
        let inp = {
            let (i, _) = stage(input);
            if i.shares_storage(&out) {
                i.deep_copy()
            } else {
                i
            }
        };
        let (n_in, n_out, dtype) = (inp.numel(), out.numel(), inp.dtype());
        let inner = self.inner.clone();
        let (o, i) = (out.clone(), inp);
        let shapes = [input.shape(), output.shape()];
        let mut work = self.submit_job(what, &[&dtype, &shapes, &kind], move || {
            let comm = inner.comm.as_ref().expect("member");
            let (ocell, icell) = (o.storage_cell().clone(), i.storage_cell().clone());
            let og = ocell.write();
            let ig = icell.read();
            let (po, pi) = (host_ptr(&og, &o), host_ptr(&ig, &i) as *const c_void);
            // SAFETY: the output is write-locked, the input read-locked; distinct storages,
            // sized as checked above.
            unsafe {
                match kind {
                    TwoBuffer::AllGather => mpi::all_gather(comm, pi, po, n_in, dtype),
                    TwoBuffer::ReduceScatter(op) => {
                        mpi::reduce_scatter(comm, pi, po, n_out, dtype, op.engine())?;
                        if op == ReduceOp::Avg {
                            divide(po, n_out, dtype, size);
                        }
                        Ok(())
                    }
                    TwoBuffer::AllToAll => mpi::all_to_all(comm, pi, po, n_in / size, dtype),
                }
            }
        })?;
        work.finish = write_back(output, out, copied);
        Ok(work)
    }

    /// Sends `tensor` to global rank `dst` (`send`); `tag` tells messages apart.
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let t = Tensor::zeros(&[4], DType::F32, &Device::Cpu);
    /// if world.rank() == 0 {
    ///     world.send(&t, 1, 0).unwrap();
    /// } else if world.rank() == 1 {
    ///     world.recv(&t, 0, 0).unwrap();
    /// }
    /// ```
    pub fn send(&self, tensor: &Tensor, dst: usize, tag: i32) -> Result<(), DistError> {
        self.isend(tensor, dst, tag)?.wait()
    }

    /// [`ProcessGroup::send`] without waiting (`isend`). The send runs on the
    /// communication thread, in order with the other calls, so a rank that posts a send
    /// and then a collective must see the matching receive posted first on the other side.
    pub fn isend(&self, tensor: &Tensor, dst: usize, tag: i32) -> Result<Work, DistError> {
        communicable("send", tensor)?;
        let peer = self.to_group_rank("send", dst)?;
        if let Some(work) = self.nccl_point_to_point("send", tensor, peer, false)? {
            return Ok(work);
        }
        let (buf, _) = stage(tensor);
        let (n, dtype) = (buf.numel(), buf.dtype());
        let inner = self.inner.clone();
        self.submit_job("send", &[], move || {
            let cell = buf.storage_cell().clone();
            let guard = cell.read();
            let p = host_ptr(&guard, &buf);
            // SAFETY: `p` addresses `n` elements of the read-locked buffer, only read.
            unsafe { mpi::send(inner.comm.as_ref().expect("member"), p, n, dtype, peer, tag) }
        })
    }

    /// Receives into `tensor` from global rank `src` (`recv`); the message must have the
    /// tensor's element count and dtype.
    pub fn recv(&self, tensor: &Tensor, src: usize, tag: i32) -> Result<(), DistError> {
        self.irecv(tensor, src, tag)?.wait()
    }

    /// [`ProcessGroup::recv`] without waiting (`irecv`).
    pub fn irecv(&self, tensor: &Tensor, src: usize, tag: i32) -> Result<Work, DistError> {
        communicable("recv", tensor)?;
        let peer = self.to_group_rank("recv", src)?;
        if let Some(work) = self.nccl_point_to_point("recv", tensor, peer, true)? {
            return Ok(work);
        }
        let (buf, copied) = stage(tensor);
        let (n, dtype) = (buf.numel(), buf.dtype());
        let inner = self.inner.clone();
        let b = buf.clone();
        let mut work = self.submit_job("recv", &[], move || {
            let cell = b.storage_cell().clone();
            let guard = cell.write();
            let p = host_ptr(&guard, &b);
            // SAFETY: `p` addresses `n` writable elements of the locked buffer.
            unsafe { mpi::recv(inner.comm.as_ref().expect("member"), p, n, dtype, peer, tag) }
        })?;
        work.finish = write_back(tensor, buf, copied);
        Ok(work)
    }
}

/// The collectives with a separate input and output buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TwoBuffer {
    AllGather,
    ReduceScatter(ReduceOp),
    AllToAll,
}

impl TwoBuffer {
    fn name(self) -> &'static str {
        match self {
            TwoBuffer::AllGather => "all_gather_into_tensor",
            TwoBuffer::ReduceScatter(_) => "reduce_scatter_tensor",
            TwoBuffer::AllToAll => "all_to_all_single",
        }
    }
}

/// When `staged` is a copy of `target`, the step that copies the result back.
fn write_back(target: &Tensor, staged: Tensor, copied: bool) -> Option<Box<dyn FnOnce() + Send>> {
    copied.then(|| {
        let target = target.detach();
        Box::new(move || {
            no_grad(|| {
                let src = if target.device() == staged.device() {
                    staged
                } else {
                    staged.to_device(&target.device()).unwrap_or_else(|e| {
                        panic!(
                            "distributed: writing a result to {} failed: {e}",
                            target.device()
                        )
                    })
                };
                target.copy_(&src.reshape(target.shape()));
            })
        }) as Box<dyn FnOnce() + Send>
    })
}

/// Debug mode: all ranks exchange the collective's fingerprint and compare.
fn consistent(inner: &GroupInner, fp: i64, what: &str) -> Result<(), DistError> {
    let comm = inner.comm.as_ref().expect("member");
    let n = inner.ranks.len();
    let mut all = vec![0i64; n];
    // SAFETY: one i64 out, `n` in, distinct buffers.
    unsafe {
        mpi::all_gather(
            comm,
            &fp as *const i64 as *const c_void,
            all.as_mut_ptr() as *mut c_void,
            1,
            DType::I64,
        )?;
    }
    let differ: Vec<usize> = (0..n)
        .filter(|&i| all[i] != fp)
        .map(|i| inner.ranks[i])
        .collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(DistError::Mismatch(format!(
            "{what}: ranks {differ:?} issued a different collective than rank {} (op, dtype, shape or \
             root differ): every rank must call the same collectives in the same order",
            inner.global.rank
        )))
    }
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("ranks", &self.inner.ranks)
            .field("rank", &self.group_rank())
            .finish()
    }
}
