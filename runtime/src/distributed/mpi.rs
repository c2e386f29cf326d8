//! The MPI engine: thin calls into the system MPI (OpenMPI) through rsmpi's bindings,
//! on raw buffers, one call at a time (`MPI_THREAD_SERIALIZED`): from the communication
//! thread, or from a caller running a blocking collective inline while that thread is
//! idle (see `comm::CommThread::run_inline`, which serialises them).

use super::{DistError, EngineOp};
use ferrograd_kernels::DType;
use half::{bf16, f16};
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

unsafe extern "C" {
    /// `MPI_IN_PLACE` of the MPI implementation we were built against (`mpi_shim.c`).
    fn ferrograd_mpi_in_place() -> *mut c_void;
}

/// Whether MPI provides `MPI_THREAD_SERIALIZED` (calls from any thread, one at a time):
/// else every call stays on the communication thread (`MPI_THREAD_FUNNELED`).
static SERIALIZED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether engine calls may come from threads other than the one that initialised MPI,
/// one at a time (known after [`init`]).
pub(crate) fn serialized() -> bool {
    SERIALIZED.load(std::sync::atomic::Ordering::Relaxed)
}

/// An MPI communicator handle.
pub(crate) struct Comm(ffi::MPI_Comm);

// SAFETY: a communicator handle is an opaque pointer that this module only passes to MPI,
// one call at a time (the communication thread's engine lock serialises them).
unsafe impl Send for Comm {}
// SAFETY: as above; shared references only read the handle value.
unsafe impl Sync for Comm {}

/// Our reduction ops for the 16-bit float types, which MPI has no datatype for: they
/// travel as `MPI_UINT16_T` and are combined by these functions.
struct HalfOps {
    f16: [ffi::MPI_Op; 4],
    bf16: [ffi::MPI_Op; 4],
}
// SAFETY: op handles are opaque values created once and only passed to MPI.
unsafe impl Send for HalfOps {}
// SAFETY: as above.
unsafe impl Sync for HalfOps {}

static HALF_OPS: OnceLock<HalfOps> = OnceLock::new();

macro_rules! half_op {
    ($name:ident, $ty:ty, |$a:ident, $b:ident| $e:expr) => {
        unsafe extern "C" fn $name(
            invec: *mut c_void,
            inoutvec: *mut c_void,
            len: *mut c_int,
            _datatype: *mut ffi::MPI_Datatype,
        ) {
            // SAFETY: MPI hands us two buffers of `*len` elements of the datatype this op
            // was used with, which is always `$ty` stored as MPI_UINT16_T.
            let (src, dst) = unsafe {
                let n = *len as usize;
                (
                    std::slice::from_raw_parts(invec as *const $ty, n),
                    std::slice::from_raw_parts_mut(inoutvec as *mut $ty, n),
                )
            };
            for (d, s) in dst.iter_mut().zip(src) {
                let ($a, $b) = (s.to_f32(), d.to_f32());
                *d = <$ty>::from_f32($e);
            }
        }
    };
}
half_op!(f16_sum, f16, |a, b| a + b);
half_op!(f16_prod, f16, |a, b| a * b);
half_op!(f16_max, f16, |a, b| a.max(b));
half_op!(f16_min, f16, |a, b| a.min(b));
half_op!(bf16_sum, bf16, |a, b| a + b);
half_op!(bf16_prod, bf16, |a, b| a * b);
half_op!(bf16_max, bf16, |a, b| a.max(b));
half_op!(bf16_min, bf16, |a, b| a.min(b));

fn check(code: c_int, what: &str) -> Result<(), DistError> {
    if code == 0 {
        return Ok(());
    }
    let mut buf = vec![0u8; 512];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING (256 in OpenMPI) bytes and more.
    unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr() as *mut _, &mut len) };
    buf.truncate(len.max(0) as usize);
    Err(DistError::Engine(format!(
        "{what}: MPI error {code}: {}",
        String::from_utf8_lossy(&buf)
    )))
}

/// Initialises MPI (if the program has not already), makes errors return codes instead of
/// aborting, and creates the 16-bit reduction ops. Returns the rank and size in
/// COMM_WORLD, and COMM_WORLD.
pub(crate) fn init() -> Result<(usize, usize, Comm), DistError> {
    // SAFETY: plain MPI calls, before any other thread makes one.
    unsafe {
        let mut initialized: c_int = 0;
        check(ffi::MPI_Initialized(&mut initialized), "MPI_Initialized")?;
        let mut provided: c_int = 0;
        if initialized == 0 {
            check(
                ffi::MPI_Init_thread(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    ffi::RSMPI_THREAD_SERIALIZED,
                    &mut provided,
                ),
                "MPI_Init_thread",
            )?;
        } else {
            check(ffi::MPI_Query_thread(&mut provided), "MPI_Query_thread")?;
        }
        SERIALIZED.store(
            provided >= ffi::RSMPI_THREAD_SERIALIZED,
            std::sync::atomic::Ordering::Relaxed,
        );
        check(
            ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN),
            "MPI_Comm_set_errhandler",
        )?;
        let (mut rank, mut size) = (0, 0);
        check(
            ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank),
            "MPI_Comm_rank",
        )?;
        check(
            ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut size),
            "MPI_Comm_size",
        )?;
        if HALF_OPS.get().is_none() {
            type Fun =
                unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut ffi::MPI_Datatype);
            let create = |f: Fun| -> Result<ffi::MPI_Op, DistError> {
                let mut op = std::mem::MaybeUninit::<ffi::MPI_Op>::uninit();
                check(
                    ffi::MPI_Op_create(Some(f), 1, op.as_mut_ptr()),
                    "MPI_Op_create",
                )?;
                Ok(op.assume_init())
            };
            let ops = HalfOps {
                f16: [
                    create(f16_sum)?,
                    create(f16_prod)?,
                    create(f16_max)?,
                    create(f16_min)?,
                ],
                bf16: [
                    create(bf16_sum)?,
                    create(bf16_prod)?,
                    create(bf16_max)?,
                    create(bf16_min)?,
                ],
            };
            let _ = HALF_OPS.set(ops);
        }
        Ok((rank as usize, size as usize, Comm(ffi::RSMPI_COMM_WORLD)))
    }
}

/// Finalises MPI, once, if it is still running.
pub(crate) fn finalize() {
    // SAFETY: called on the communication thread after its last job.
    unsafe {
        let mut finalized: c_int = 0;
        ffi::MPI_Finalized(&mut finalized);
        if finalized == 0 {
            ffi::MPI_Finalize();
        }
    }
}

/// Ends every process of the job (`MPI_Abort`) with exit status `code`.
pub(crate) fn abort(code: i32) {
    // SAFETY: MPI_Abort may be called at any time after initialisation; OpenMPI's works
    // from any thread (it asks the launcher to kill the job).
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code);
    }
}

/// A communicator of the ranks with the same `color` (`MPI_Comm_split`); `None` for the
/// ranks that pass no color.
pub(crate) fn split(
    parent: &Comm,
    color: Option<usize>,
    key: usize,
) -> Result<Option<Comm>, DistError> {
    // SAFETY: collective call on a valid communicator; `out` is written by MPI.
    unsafe {
        let color = color.map_or(ffi::RSMPI_UNDEFINED, |c| c as c_int);
        let mut out = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
        check(
            ffi::MPI_Comm_split(parent.0, color, key as c_int, out.as_mut_ptr()),
            "MPI_Comm_split",
        )?;
        let out = out.assume_init();
        if out == ffi::RSMPI_COMM_NULL {
            Ok(None)
        } else {
            Ok(Some(Comm(out)))
        }
    }
}

fn datatype(dtype: DType) -> Result<ffi::MPI_Datatype, DistError> {
    // SAFETY: reads MPI constants.
    unsafe {
        Ok(match dtype {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::F16 | DType::BF16 => ffi::RSMPI_UINT16_T,
            DType::I64 => ffi::RSMPI_INT64_T,
            DType::U8 => ffi::RSMPI_UINT8_T,
            #[allow(unreachable_patterns)]
            other => return Err(DistError::DType(other)),
        })
    }
}

fn reduce_op(op: EngineOp, dtype: DType) -> Result<ffi::MPI_Op, DistError> {
    let i = match op {
        EngineOp::Sum => 0,
        EngineOp::Product => 1,
        EngineOp::Max => 2,
        EngineOp::Min => 3,
    };
    let half = HALF_OPS.get().ok_or(DistError::NotInitialized);
    // SAFETY: reads MPI constants.
    unsafe {
        Ok(match dtype {
            DType::F16 => half?.f16[i],
            DType::BF16 => half?.bf16[i],
            _ => [
                ffi::RSMPI_SUM,
                ffi::RSMPI_PROD,
                ffi::RSMPI_MAX,
                ffi::RSMPI_MIN,
            ][i],
        })
    }
}

fn count(n: usize, what: &str) -> Result<c_int, DistError> {
    c_int::try_from(n).map_err(|_| {
        DistError::Engine(format!(
            "{what}: {n} elements exceed MPI's count limit ({})",
            c_int::MAX
        ))
    })
}

/// Drives a non-blocking request to completion, yielding the core between tests: the
/// `polite` all-reduce that DistributedDataParallel uses for the buckets it starts while
/// backward still runs.
///
/// OpenMPI's blocking collectives busy-poll while they wait for a slower peer; with the
/// communication thread sharing a core with backward (mpirun binds a rank to one core),
/// that spinning takes the core from backward: a ResNet-18 step paid 17% for its
/// reduction. Testing and yielding lets backward run while the peer catches up, and still
/// progresses the collective. (The blocking call moves large messages faster, so it is
/// kept where nothing else waits for the core.)
///
/// # Safety
/// `req` is an active request on buffers that stay valid until this returns.
unsafe fn complete(mut req: ffi::MPI_Request, what: &str) -> Result<(), DistError> {
    loop {
        let mut flag: c_int = 0;
        // SAFETY: an active request; the status is ignored.
        check(
            unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            what,
        )?;
        if flag != 0 {
            return Ok(());
        }
        std::thread::yield_now();
    }
}

/// The largest count one call takes: MPI counts are C ints.
const MAX_COUNT: usize = 1 << 30;

/// The bytes one all-reduce call moves: larger buffers go in pieces of this size, one
/// after another in the same order on every rank. OpenMPI 4.1's shared-memory all-reduce
/// slows down past a few tens of MiB (2 ranks on the Zen 5: 64 MiB in 31–34 ms, 2 GB/s,
/// against 10–19 GB/s up to 16 MiB; mpi4py's calls the same); in 4 MiB pieces 64 MiB took
/// 6.3–6.6 ms and 16 MiB 1.4 against 1.7 ms (8 and 16 MiB pieces: 7.2 and 8.4 ms for 64
/// MiB).
const CHUNK_BYTES: usize = 4 << 20;

/// Reduces `n` elements at `buf` in place across the communicator; `polite` yields the
/// core while it waits (see [`complete`]).
///
/// # Safety
/// `buf` points to `n` writable elements of `dtype`, untouched by others until this returns.
pub(crate) unsafe fn all_reduce(
    c: &Comm,
    buf: *mut c_void,
    n: usize,
    dtype: DType,
    op: EngineOp,
    polite: bool,
) -> Result<(), DistError> {
    let (dt, mop) = (datatype(dtype)?, reduce_op(op, dtype)?);
    let size = dtype.size_in_bytes();
    let chunk = (CHUNK_BYTES / size).clamp(1, MAX_COUNT);
    let mut done = 0;
    while done < n {
        let k = (n - done).min(chunk);
        // SAFETY: the caller's buffer; MPI_IN_PLACE reads and writes `buf`; a request is
        // completed before the buffer is released.
        unsafe {
            let p = (buf as *mut u8).add(done * size) as *mut c_void;
            let in_place = ferrograd_mpi_in_place();
            if polite {
                let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
                check(
                    ffi::MPI_Iallreduce(in_place, p, k as c_int, dt, mop, c.0, req.as_mut_ptr()),
                    "MPI_Iallreduce",
                )?;
                complete(req.assume_init(), "MPI_Iallreduce")?;
            } else {
                check(
                    ffi::MPI_Allreduce(in_place, p, k as c_int, dt, mop, c.0),
                    "MPI_Allreduce",
                )?;
            }
        }
        done += k;
    }
    Ok(())
}

/// Broadcasts `n` elements at `buf` from communicator rank `root`.
///
/// # Safety
/// As [`all_reduce`].
pub(crate) unsafe fn broadcast(
    c: &Comm,
    buf: *mut c_void,
    n: usize,
    dtype: DType,
    root: usize,
) -> Result<(), DistError> {
    let dt = datatype(dtype)?;
    let size = dtype.size_in_bytes();
    let mut done = 0;
    while done < n {
        let k = (n - done).min(MAX_COUNT);
        // SAFETY: the caller's buffer.
        unsafe {
            let p = (buf as *mut u8).add(done * size) as *mut c_void;
            check(
                ffi::MPI_Bcast(p, k as c_int, dt, root as c_int, c.0),
                "MPI_Bcast",
            )?;
        }
        done += k;
    }
    Ok(())
}

/// Gathers `n` elements from every rank into `recv` (`n * size` elements, rank order).
///
/// # Safety
/// `send` is readable for `n` elements, `recv` writable for `n * size`, and they do not
/// overlap.
pub(crate) unsafe fn all_gather(
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    n: usize,
    dtype: DType,
) -> Result<(), DistError> {
    let (dt, k) = (datatype(dtype)?, count(n, "all_gather")?);
    // SAFETY: per the contract.
    unsafe {
        check(
            ffi::MPI_Allgather(send, k, dt, recv, k, dt, c.0),
            "MPI_Allgather",
        )
    }
}

/// Reduces `n * size` elements at `send` and scatters block `rank` (`n` elements) to `recv`.
///
/// # Safety
/// `send` is readable for `n * size` elements, `recv` writable for `n`; no overlap.
pub(crate) unsafe fn reduce_scatter(
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    n: usize,
    dtype: DType,
    op: EngineOp,
) -> Result<(), DistError> {
    let (dt, mop, k) = (
        datatype(dtype)?,
        reduce_op(op, dtype)?,
        count(n, "reduce_scatter")?,
    );
    // SAFETY: per the contract.
    unsafe {
        check(
            ffi::MPI_Reduce_scatter_block(send, recv, k, dt, mop, c.0),
            "MPI_Reduce_scatter_block",
        )
    }
}

/// Sends block `j` (`n` elements) of `send` to rank `j`, receiving rank `j`'s block `rank`
/// into block `j` of `recv`.
///
/// # Safety
/// Both buffers hold `n * size` elements; no overlap.
pub(crate) unsafe fn all_to_all(
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    n: usize,
    dtype: DType,
) -> Result<(), DistError> {
    let (dt, k) = (datatype(dtype)?, count(n, "all_to_all")?);
    // SAFETY: per the contract.
    unsafe {
        check(
            ffi::MPI_Alltoall(send, k, dt, recv, k, dt, c.0),
            "MPI_Alltoall",
        )
    }
}

/// Sends `n` elements to communicator rank `dst`.
///
/// # Safety
/// `buf` is readable for `n` elements.
pub(crate) unsafe fn send(
    c: &Comm,
    buf: *const c_void,
    n: usize,
    dtype: DType,
    dst: usize,
    tag: i32,
) -> Result<(), DistError> {
    let (dt, k) = (datatype(dtype)?, count(n, "send")?);
    // SAFETY: per the contract.
    unsafe {
        check(
            ffi::MPI_Send(buf, k, dt, dst as c_int, tag, c.0),
            "MPI_Send",
        )
    }
}

/// Receives `n` elements from communicator rank `src`; a message of another length is an
/// error.
///
/// # Safety
/// `buf` is writable for `n` elements.
pub(crate) unsafe fn recv(
    c: &Comm,
    buf: *mut c_void,
    n: usize,
    dtype: DType,
    src: usize,
    tag: i32,
) -> Result<(), DistError> {
    let (dt, k) = (datatype(dtype)?, count(n, "recv")?);
    // SAFETY: per the contract; the status is written by MPI.
    unsafe {
        let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        check(
            ffi::MPI_Recv(buf, k, dt, src as c_int, tag, c.0, status.as_mut_ptr()),
            "MPI_Recv",
        )?;
        let mut got: c_int = 0;
        check(
            ffi::MPI_Get_count(status.as_ptr(), dt, &mut got),
            "MPI_Get_count",
        )?;
        if got != k {
            return Err(DistError::Mismatch(format!(
                "recv: expected {k} elements of {dtype} from rank {src}, the message had {got}"
            )));
        }
    }
    Ok(())
}

/// Waits for every rank of the communicator.
pub(crate) fn barrier(c: &Comm) -> Result<(), DistError> {
    // SAFETY: collective call on a valid communicator.
    unsafe { check(ffi::MPI_Barrier(c.0), "MPI_Barrier") }
}
