//! The NCCL engine (the `nccl` feature): collectives on CUDA tensors, queued on the
//! device's stream like any kernel, so they are ordered with the work before and after
//! them without a host wait.
//!
//! libnccl is loaded at run time (cudarc's dynamic loading), as the rest of CUDA: PyPI's
//! `nvidia-nccl-cu13` ships it as `nvidia/nccl/lib/libnccl.so.2`.

use super::{DistError, ReduceOp};
use crate::storage::Storage;
use crate::storage::cuda::{GpuDevice, gpu};
use crate::{DType, Tensor};
use cudarc::nccl::sys;
use std::sync::{Arc, Mutex};

fn engine_err(what: &'static str) -> impl Fn(cudarc::nccl::result::NcclError) -> DistError {
    move |e| DistError::Engine(format!("NCCL {what} failed: {e:?}"))
}

fn unavailable(reason: String) -> DistError {
    DistError::BackendUnavailable {
        backend: "nccl",
        reason,
    }
}

/// `Ok` when libnccl can be loaded.
pub(crate) fn available() -> Result<(), DistError> {
    // SAFETY: only tries to open the library by its names.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(unavailable(
            "libnccl could not be loaded: put the folder holding libnccl.so on LD_LIBRARY_PATH \
             (PyPI's nvidia-nccl-cu13 ships nvidia/nccl/lib/libnccl.so.2; link libnccl.so to it)"
                .into(),
        ))
    }
}

/// A new unique id (made on rank 0 and sent to the others before [`Comm::init`]).
pub(crate) fn unique_id() -> Result<[u8; 128], DistError> {
    let id = cudarc::nccl::result::get_uniqueid().map_err(engine_err("ncclGetUniqueId"))?;
    Ok(id.internal.map(|c| c as u8))
}

fn nccl_dtype(dtype: DType) -> Result<sys::ncclDataType_t, DistError> {
    use sys::ncclDataType_t::*;
    Ok(match dtype {
        DType::F32 => ncclFloat32,
        DType::F64 => ncclFloat64,
        DType::F16 => ncclFloat16,
        DType::BF16 => ncclBfloat16,
        DType::I64 => ncclInt64,
        DType::U8 => ncclUint8,
        #[allow(unreachable_patterns)]
        other => return Err(DistError::DType(other)),
    })
}

fn nccl_op(op: ReduceOp) -> sys::ncclRedOp_t {
    use sys::ncclRedOp_t::*;
    match op {
        ReduceOp::Sum => ncclSum,
        ReduceOp::Avg => ncclAvg,
        ReduceOp::Max => ncclMax,
        ReduceOp::Min => ncclMin,
        ReduceOp::Product => ncclProd,
    }
}

/// A communicator on one device.
pub(crate) struct Comm {
    raw: sys::ncclComm_t,
    dev: Arc<GpuDevice>,
    /// NCCL calls on one communicator must not run concurrently.
    lock: Mutex<()>,
}

// SAFETY: the communicator handle is only used under `lock`, one call at a time, from
// whichever thread holds it (NCCL allows that); the device handle is Send + Sync.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the handle came from ncclCommInitRank/ncclCommSplit and is destroyed
        // once; the work queued on it finishes first (NCCL waits for it).
        unsafe {
            let _ = sys::ncclCommDestroy(self.raw);
        }
    }
}

/// The device address of a contiguous CUDA tensor's first element.
fn address(storage: &Storage, t: &Tensor) -> Result<u64, DistError> {
    match storage {
        Storage::Cuda(s) => Ok(s.address_of(t.layout().offset())),
        _ => Err(DistError::Mismatch(format!(
            "NCCL takes CUDA tensors, got one on {}",
            t.device()
        ))),
    }
}

impl Comm {
    /// Joins the communicator `id` as `rank` of `size`, on CUDA device `ordinal`.
    pub(crate) fn init(
        id: [u8; 128],
        rank: usize,
        size: usize,
        ordinal: usize,
    ) -> Result<Comm, DistError> {
        let dev = gpu(ordinal).map_err(|e| unavailable(format!("cuda:{ordinal}: {e}")))?;
        dev.bind_to_thread()
            .map_err(|e| unavailable(format!("cuda:{ordinal}: {e}")))?;
        let id = sys::ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `raw` is written by NCCL; the id is the one every rank received.
        unsafe { sys::ncclCommInitRank(&mut raw, size as i32, id, rank as i32) }
            .result()
            .map_err(engine_err("ncclCommInitRank"))?;
        Ok(Comm {
            raw,
            dev,
            lock: Mutex::new(()),
        })
    }

    /// The CUDA device the communicator works on.
    pub(crate) fn ordinal(&self) -> usize {
        self.dev.ordinal()
    }

    /// A communicator of the ranks that pass the same `Some(color)`, ordered by `key`
    /// (`ncclCommSplit`, a collective over this communicator); `None` for `None`.
    pub(crate) fn split(
        &self,
        color: Option<usize>,
        key: usize,
    ) -> Result<Option<Comm>, DistError> {
        const NO_COLOR: i32 = -1; // NCCL_SPLIT_NOCOLOR
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.dev
            .bind_to_thread()
            .map_err(|e| DistError::Engine(e.to_string()))?;
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        let color = color.map_or(NO_COLOR, |c| c as i32);
        // SAFETY: `self.raw` is live; `raw` is written by NCCL (null for no colour); a
        // null config asks for the parent's.
        unsafe { sys::ncclCommSplit(self.raw, color, key as i32, &mut raw, std::ptr::null_mut()) }
            .result()
            .map_err(engine_err("ncclCommSplit"))?;
        Ok((!raw.is_null()).then(|| Comm {
            raw,
            dev: self.dev.clone(),
            lock: Mutex::new(()),
        }))
    }

    /// Runs `f` with the communicator, its device's context bound and its stream.
    fn call<R>(
        &self,
        f: impl FnOnce(sys::ncclComm_t, sys::cudaStream_t) -> Result<R, DistError>,
    ) -> Result<R, DistError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.dev
            .bind_to_thread()
            .map_err(|e| DistError::Engine(e.to_string()))?;
        let stream = self.dev.stream().cu_stream() as sys::cudaStream_t;
        let out = f(self.raw, stream)?;
        crate::storage::cuda::note_queued();
        Ok(out)
    }

    /// Queues `f(address, count, dtype, comm, stream)` over a contiguous tensor on this
    /// device, whose storage stays locked (for writing when `writes`) while it is queued;
    /// the stream orders every later use of the tensor after it.
    fn one_buffer(
        &self,
        what: &'static str,
        t: &Tensor,
        writes: bool,
        f: impl FnOnce(
            *mut std::ffi::c_void,
            usize,
            sys::ncclDataType_t,
            sys::ncclComm_t,
            sys::cudaStream_t,
        ) -> sys::ncclResult_t,
    ) -> Result<(), DistError> {
        let dtype = nccl_dtype(t.dtype())?;
        let cell = t.storage_cell().clone();
        let (read, write);
        let storage: &Storage = if writes {
            write = cell.write();
            &write
        } else {
            read = cell.read();
            &read
        };
        let p = address(storage, t)? as *mut std::ffi::c_void;
        self.call(|comm, stream| {
            f(p, t.numel(), dtype, comm, stream)
                .result()
                .map(|_| ())
                .map_err(engine_err(what))
        })
    }

    /// In place over a contiguous tensor on this device.
    pub(crate) fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<(), DistError> {
        self.one_buffer("ncclAllReduce", t, true, |p, n, dtype, comm, stream| {
            // SAFETY: `p` addresses the tensor's `n` elements, write-locked while queued.
            unsafe { sys::ncclAllReduce(p, p, n, dtype, nccl_op(op), comm, stream) }
        })
    }

    /// In place from group rank `root`.
    pub(crate) fn broadcast(&self, t: &Tensor, root: usize) -> Result<(), DistError> {
        self.one_buffer("ncclBroadcast", t, true, |p, n, dtype, comm, stream| {
            // SAFETY: as in all_reduce.
            unsafe { sys::ncclBroadcast(p, p, n, dtype, root as i32, comm, stream) }
        })
    }

    /// `all_gather` (`input` per rank into `output`), `reduce_scatter` or `all_to_all`
    /// (equal blocks), over contiguous tensors on this device in distinct storages.
    pub(crate) fn two_buffer(
        &self,
        kind: super::TwoBuffer,
        output: &Tensor,
        input: &Tensor,
        size: usize,
    ) -> Result<(), DistError> {
        let dtype = nccl_dtype(input.dtype())?;
        let (ocell, icell) = (output.storage_cell().clone(), input.storage_cell().clone());
        let og = ocell.write();
        let ig = icell.read();
        let po = address(&og, output)?;
        let pi = address(&ig, input)?;
        let elem = input.dtype().size_in_bytes() as u64;
        let (n_in, n_out) = (input.numel(), output.numel());
        self.call(|comm, stream| {
            let (out, inp) = (po as *mut std::ffi::c_void, pi as *const std::ffi::c_void);
            // SAFETY: both addresses hold the element counts checked by the caller; the
            // output is write-locked and the input read-locked while the work is queued.
            unsafe {
                match kind {
                    super::TwoBuffer::AllGather => {
                        sys::ncclAllGather(inp, out, n_in, dtype, comm, stream)
                            .result()
                            .map_err(engine_err("ncclAllGather"))?;
                    }
                    super::TwoBuffer::ReduceScatter(op) => {
                        sys::ncclReduceScatter(inp, out, n_out, dtype, nccl_op(op), comm, stream)
                            .result()
                            .map_err(engine_err("ncclReduceScatter"))?;
                    }
                    super::TwoBuffer::AllToAll => {
                        // NCCL has no all-to-all: one send and one receive per peer in a
                        // group, as PyTorch does.
                        let block = n_in / size;
                        let bytes = block as u64 * elem;
                        sys::ncclGroupStart()
                            .result()
                            .map_err(engine_err("ncclGroupStart"))?;
                        for peer in 0..size {
                            let off = peer as u64 * bytes;
                            let sent = sys::ncclSend(
                                (pi + off) as *const std::ffi::c_void,
                                block,
                                dtype,
                                peer as i32,
                                comm,
                                stream,
                            )
                            .result();
                            let received = sys::ncclRecv(
                                (po + off) as *mut std::ffi::c_void,
                                block,
                                dtype,
                                peer as i32,
                                comm,
                                stream,
                            )
                            .result();
                            if let Err(e) = sent.and(received) {
                                let _ = sys::ncclGroupEnd();
                                return Err(engine_err("ncclSend/ncclRecv")(e));
                            }
                        }
                        sys::ncclGroupEnd()
                            .result()
                            .map_err(engine_err("ncclGroupEnd"))?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Sends a contiguous tensor on this device to group rank `peer`, or with `receive`
    /// receives into it from there.
    pub(crate) fn point_to_point(
        &self,
        t: &Tensor,
        peer: usize,
        receive: bool,
    ) -> Result<(), DistError> {
        let peer = peer as i32;
        if receive {
            self.one_buffer("ncclRecv", t, true, |p, n, dtype, comm, stream| {
                // SAFETY: `p` addresses `n` writable elements, write-locked while queued.
                unsafe { sys::ncclRecv(p, n, dtype, peer, comm, stream) }
            })
        } else {
            self.one_buffer("ncclSend", t, false, |p, n, dtype, comm, stream| {
                // SAFETY: `p` addresses `n` elements, read-locked while queued, only read.
                unsafe { sys::ncclSend(p, n, dtype, peer, comm, stream) }
            })
        }
    }
}
