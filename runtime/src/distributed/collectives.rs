//! The collectives of a `ProcessGroup`: all-reduce, broadcast, gathers and scatters,
//! point-to-point sends, and their checks that every rank calls the same one.

use super::*;

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
    pub(super) fn nccl(&self) -> Result<Option<&nccl::Comm>, DistError> {
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
    pub(super) fn start_nccl(&self) -> Result<(), DistError> {
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
    pub(super) fn nccl_point_to_point(
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
    pub(super) fn queued(&self, what: &str, finish: Option<Box<dyn FnOnce() + Send>>) -> Work {
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

    pub(super) fn member(&self, _op: &str) -> Result<&mpi::Comm, DistError> {
        self.inner
            .comm
            .as_ref()
            .ok_or_else(|| DistError::NotAMember {
                rank: self.inner.global.rank,
                ranks: self.inner.ranks.clone(),
            })
    }

    /// The group rank of global rank `r`.
    pub(super) fn to_group_rank(&self, op: &str, r: usize) -> Result<usize, DistError> {
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
    pub(super) fn checked(
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
    pub(super) fn submit_job(
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
    pub(super) fn queue(
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
    pub(super) fn run_blocking(
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
    pub(super) fn all_reduce_job(
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
    pub(super) fn two_buffer(
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
    pub(super) fn name(self) -> &'static str {
        match self {
            TwoBuffer::AllGather => "all_gather_into_tensor",
            TwoBuffer::ReduceScatter(_) => "reduce_scatter_tensor",
            TwoBuffer::AllToAll => "all_to_all_single",
        }
    }
}

/// When `staged` is a copy of `target`, the step that copies the result back.
pub(super) fn write_back(
    target: &Tensor,
    staged: Tensor,
    copied: bool,
) -> Option<Box<dyn FnOnce() + Send>> {
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
pub(super) fn consistent(inner: &GroupInner, fp: i64, what: &str) -> Result<(), DistError> {
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
