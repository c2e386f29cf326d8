//! `DistributedDataParallel`: gradients averaged across ranks in buckets whose all-reduce
//! starts while backward is still running.

use super::{DistError, ProcessGroup, ReduceOp, Work};
use crate::autograd::{HookHandle, is_grad_enabled, leaf_key, no_grad, reachable_leaves};
use crate::nn::{Forward, Module, TensorKind};
use crate::{DType, Device, Tensor};
use std::sync::{Arc, Mutex, MutexGuard};

/// Settings of [`DistributedDataParallel`], with PyTorch's defaults.
#[derive(Debug, Clone)]
pub struct DdpConfig {
    /// Largest bucket, in MiB (`bucket_cap_mb`, default 25).
    pub bucket_cap_mb: f64,
    /// Size of the first bucket (the last layers' gradients, ready first), in MiB
    /// (default 1), so that communication starts early.
    pub first_bucket_cap_mb: f64,
    /// Find, after each forward, the parameters the output does not depend on and count
    /// them as reduced with a zero gradient (`find_unused_parameters`). Without it, a
    /// parameter that gets no gradient stops the reduction from finishing, which the next
    /// forward reports.
    pub find_unused_parameters: bool,
    /// Copy rank 0's buffers (BatchNorm running statistics) to every rank before each
    /// forward (`broadcast_buffers`, default true).
    pub broadcast_buffers: bool,
    /// Leave each parameter's `.grad` as a view into its bucket after the reduction
    /// instead of copying the averaged values back (`gradient_as_bucket_view`): no second
    /// copy of the gradients is kept.
    pub gradient_as_bucket_view: bool,
}

impl Default for DdpConfig {
    fn default() -> Self {
        DdpConfig {
            bucket_cap_mb: 25.0,
            first_bucket_cap_mb: 1.0,
            find_unused_parameters: false,
            broadcast_buffers: true,
            gradient_as_bucket_view: false,
        }
    }
}

impl DdpConfig {
    setters! {
        /// Sets [`DdpConfig::bucket_cap_mb`].
        bucket_cap_mb: f64;
        /// Sets [`DdpConfig::first_bucket_cap_mb`].
        first_bucket_cap_mb: f64;
        /// Sets [`DdpConfig::find_unused_parameters`].
        find_unused_parameters: bool;
        /// Sets [`DdpConfig::broadcast_buffers`].
        broadcast_buffers: bool;
        /// Sets [`DdpConfig::gradient_as_bucket_view`].
        gradient_as_bucket_view: bool;
    }
}

/// The tensors a forward pass returned, for [`DistributedDataParallel`] to find the
/// parameters they do not depend on (`find_unused_parameters`).
pub trait ForwardOutputs {
    /// Every tensor of the output.
    fn output_tensors(&self) -> Vec<&Tensor>;
}

impl ForwardOutputs for Tensor {
    fn output_tensors(&self) -> Vec<&Tensor> {
        vec![self]
    }
}

impl ForwardOutputs for Vec<Tensor> {
    fn output_tensors(&self) -> Vec<&Tensor> {
        self.iter().collect()
    }
}

impl ForwardOutputs for (Tensor, Tensor) {
    fn output_tensors(&self) -> Vec<&Tensor> {
        vec![&self.0, &self.1]
    }
}

impl ForwardOutputs for (Tensor, Tensor, Tensor) {
    fn output_tensors(&self) -> Vec<&Tensor> {
        vec![&self.0, &self.1, &self.2]
    }
}

struct Bucket {
    /// Indices into `Reducer::params`.
    params: Vec<usize>,
    /// Element offset of each of those parameters in `buffer`.
    offsets: Vec<usize>,
    /// The flat gradients, reduced in place.
    buffer: Tensor,
    /// Parameters whose gradient has not arrived in this pass.
    pending: usize,
    work: Option<Work>,
}

struct State {
    buckets: Vec<Bucket>,
    /// For each parameter: its bucket and position in it.
    place: Vec<(usize, usize)>,
    /// Whether this backward pass reduces (set by forward).
    armed: bool,
    /// Buckets launched so far in this pass (they go in index order on every rank).
    launched: usize,
    /// Whether each parameter got a gradient locally in this pass.
    used: Vec<bool>,
    /// Whether the next forward arms the reduction (`no_sync` clears it).
    sync: bool,
    error: Option<DistError>,
    stats: CommStats,
}

/// Where the gradient reduction's time went, summed over the backward passes since
/// construction or [`DistributedDataParallel::reset_comm_stats`].
///
/// `exposed` is the time backward waited after its last gradient; `allreduce` the time
/// the communication thread spent in the engine. When that thread shares a core with
/// backward (mpirun binds each rank to one core by default), the time it ran *instead*
/// of backward counts as hidden here though it was not: the cost of the reduction to a
/// step is best measured as the step time minus that of a step under `no_sync`, as
/// `benches/ddp.rs` does.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommStats {
    /// Backward passes that reduced gradients.
    pub reductions: u64,
    /// Time the engine spent all-reducing buckets (on the communication thread).
    pub allreduce: std::time::Duration,
    /// Time backward waited for the reduction after its last gradient (not hidden).
    pub exposed: std::time::Duration,
}

impl CommStats {
    /// The share of the all-reduce time that overlapped backward: `1 - exposed /
    /// allreduce` (1 when there was nothing to reduce).
    pub fn hidden_share(&self) -> f64 {
        let total = self.allreduce.as_secs_f64();
        if total <= 0.0 {
            1.0
        } else {
            (1.0 - self.exposed.as_secs_f64() / total).clamp(0.0, 1.0)
        }
    }
}

struct Reducer {
    group: ProcessGroup,
    params: Vec<Tensor>,
    keys: Vec<usize>,
    config: DdpConfig,
    state: Mutex<State>,
}

/// Data-parallel training (`torch.nn.parallel.DistributedDataParallel`): each rank runs
/// the same model on its own part of the batch, and backward leaves every rank with the
/// gradients averaged over all ranks, so one optimizer step keeps the replicas identical.
///
/// Construction copies rank 0's parameters and buffers to every rank. Gradients are
/// gathered into buckets in reverse parameter order (25 MiB each, the first 1 MiB, as
/// PyTorch); a parameter's post-accumulate-grad hook copies its gradient into its bucket,
/// and a full bucket's all-reduce starts at once on the communication thread while
/// backward goes on. When the last bucket has been reduced, still inside `backward()`,
/// the averaged gradients are in `.grad`.
///
/// State-dict keys carry PyTorch's `module.` prefix; [`DistributedDataParallel::module`]
/// gives the wrapped model (save that for a checkpoint a plain model loads).
///
/// ```no_run
/// use ferrograd_runtime::distributed::{self, Backend, DdpConfig, DistributedDataParallel};
/// use ferrograd_runtime::nn::{Forward, Linear, Module};
/// use ferrograd_runtime::prelude::*;
/// # fn main() -> Result<(), distributed::DistError> {
/// let world = distributed::init_process_group(Backend::Mpi)?;
/// let model = DistributedDataParallel::new(Linear::new(4, 2, &Device::Cpu), &world, DdpConfig::default())?;
/// let x = Tensor::randn(&[8, 4], DType::F32, &Device::Cpu);
/// model.forward(&x).sum_all().backward(); // gradients are averaged over the ranks here
/// # Ok(()) }
/// ```
pub struct DistributedDataParallel<M> {
    module: M,
    reducer: Arc<Reducer>,
    _hooks: Vec<HookHandle>,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module` for training over `group`: checks that every rank has the same
    /// parameters (names, shapes, dtypes), copies rank 0's parameters and buffers to all,
    /// and registers the gradient hooks.
    pub fn new(module: M, group: &ProcessGroup, config: DdpConfig) -> Result<Self, DistError> {
        let named: Vec<(String, Tensor)> = module
            .named_parameters()
            .into_iter()
            .filter(|(_, p)| p.requires_grad_flag())
            .collect();
        // Same parameters on every rank, or a clear error instead of garbage.
        let summary: Vec<String> = named
            .iter()
            .map(|(n, p)| format!("{n}:{:?}:{}", p.shape(), p.dtype()))
            .collect();
        let fp = Tensor::from_vec(vec![super::fingerprint("ddp", &[&summary])], &[1]);
        let all = group.all_gather(&fp)?;
        let me = fp.to_vec::<i64>()[0];
        let differ: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, t)| t.to_vec::<i64>()[0] != me)
            .map(|(i, _)| group.ranks()[i])
            .collect();
        if !differ.is_empty() {
            return Err(DistError::Mismatch(format!(
                "DistributedDataParallel: ranks {differ:?} have different parameters (names, shapes \
                 or dtypes) than rank {} ({} parameters): every rank must build the same model",
                group.rank(),
                named.len()
            )));
        }
        let src = group.ranks()[0];
        for (_, p) in &named {
            group.broadcast(p, src)?;
        }
        for (_, b) in module.named_buffers() {
            group.broadcast(&b, src)?;
        }

        let params: Vec<Tensor> = named.into_iter().map(|(_, p)| p).collect();
        let keys = params
            .iter()
            .map(|p| leaf_key(p).expect("parameters are leaves"))
            .collect();
        let (buckets, place) = assign_buckets(&params, &config);
        let reducer = Arc::new(Reducer {
            group: group.clone(),
            params,
            keys,
            config,
            state: Mutex::new(State {
                buckets,
                place,
                armed: false,
                launched: 0,
                used: Vec::new(),
                sync: true,
                error: None,
                stats: CommStats::default(),
            }),
        });
        let hooks = reducer
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let weak = Arc::downgrade(&reducer);
                p.register_post_accumulate_grad_hook(move |leaf| {
                    if let Some(r) = weak.upgrade() {
                        r.grad_ready(i, leaf);
                    }
                })
            })
            .collect();
        Ok(DistributedDataParallel {
            module,
            reducer,
            _hooks: hooks,
        })
    }

    /// The wrapped model (`ddp.module`).
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped model, mutably.
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// Gives the wrapped model back; its gradients are no longer reduced.
    pub fn into_inner(self) -> M {
        self.module
    }

    /// The number of gradient buckets, and the parameters (indices into
    /// `parameters()`) of each, in the order they are reduced.
    pub fn buckets(&self) -> Vec<Vec<usize>> {
        self.reducer
            .lock()
            .buckets
            .iter()
            .map(|b| b.params.clone())
            .collect()
    }

    /// Where the reduction's time went so far (see [`CommStats`]).
    pub fn comm_stats(&self) -> CommStats {
        self.reducer.lock().stats
    }

    /// Starts [`DistributedDataParallel::comm_stats`] again from zero.
    pub fn reset_comm_stats(&self) {
        self.reducer.lock().stats = CommStats::default();
    }

    /// Skips the gradient reduction of the forward/backward passes made while the guard
    /// lives (`ddp.no_sync()`): gradients accumulate locally, and the first pass after it
    /// reduces the accumulated sum.
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::nn::{Forward, Linear};
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// # let ddp = DistributedDataParallel::new(Linear::new(4, 2, &Device::Cpu), &world, DdpConfig::default()).unwrap();
    /// # let micro: Vec<Tensor> = vec![];
    /// {
    ///     let _no_sync = ddp.no_sync();
    ///     for x in &micro[..micro.len() - 1] {
    ///         ddp.forward(x).sum_all().backward();
    ///     }
    /// }
    /// ddp.forward(&micro[micro.len() - 1]).sum_all().backward(); // reduces the sum
    /// ```
    pub fn no_sync(&self) -> NoSync {
        self.reducer.lock().sync = false;
        NoSync {
            reducer: self.reducer.clone(),
        }
    }

    /// Before the wrapped forward: the previous reduction must be complete; buffers come
    /// from rank 0.
    #[track_caller]
    fn pre_forward(&self) {
        let r = &self.reducer;
        {
            let st = r.lock();
            if st.armed {
                let missing: Vec<String> = names_pending(&self.module, r, &st);
                panic!(
                    "DistributedDataParallel: expected to have finished reduction in the prior \
                     iteration before starting a new one: parameters {missing:?} received no \
                     gradient. Make sure every forward output takes part in the loss, or pass \
                     DdpConfig::find_unused_parameters(true)"
                );
            }
        }
        if r.config.broadcast_buffers && r.group.size() > 1 {
            let src = r.group.ranks()[0];
            for (name, b) in self.module.named_buffers() {
                r.group.broadcast(&b, src).unwrap_or_else(|e| {
                    panic!("DistributedDataParallel: broadcasting buffer {name}: {e}")
                });
            }
        }
    }
}

fn names_pending<M: Module>(module: &M, r: &Reducer, st: &State) -> Vec<String> {
    let names: Vec<String> = module
        .named_parameters()
        .into_iter()
        .filter(|(_, p)| p.requires_grad_flag())
        .map(|(n, _)| n)
        .collect();
    (0..r.params.len())
        .filter(|&i| !st.used.get(i).copied().unwrap_or(false))
        .filter_map(|i| names.get(i).cloned())
        .collect()
}

/// While alive, passes through DistributedDataParallel skip the gradient reduction; see
/// [`DistributedDataParallel::no_sync`].
pub struct NoSync {
    reducer: Arc<Reducer>,
}

impl Drop for NoSync {
    fn drop(&mut self) {
        self.reducer.lock().sync = true;
    }
}

impl<I, M> Forward<I> for DistributedDataParallel<M>
where
    M: Module + Forward<I>,
    M::Output: ForwardOutputs,
{
    type Output = M::Output;

    /// Runs the wrapped model and prepares the reduction of the coming backward pass.
    #[track_caller]
    fn forward(&self, input: I) -> M::Output {
        self.forward_with(|m| m.forward(input))
    }
}

impl<M: Module> DistributedDataParallel<M> {
    /// Runs `f` as the forward pass of the wrapped model and prepares the reduction of
    /// the coming backward pass: for models whose forward is not the [`Forward`] trait
    /// (a `network!` struct's inherent `forward`, or a forward with several arguments).
    ///
    /// ```no_run
    /// # use ferrograd_runtime::distributed::*;
    /// # use ferrograd_runtime::nn::Linear;
    /// # use ferrograd_runtime::prelude::*;
    /// # let world = init_process_group(Backend::Mpi).unwrap();
    /// let ddp = DistributedDataParallel::new(Linear::new(4, 2, &Device::Cpu), &world, DdpConfig::default()).unwrap();
    /// let x = Tensor::randn(&[8, 4], DType::F32, &Device::Cpu);
    /// ddp.forward_with(|m| m.forward(&x)).sum_all().backward();
    /// ```
    #[track_caller]
    pub fn forward_with<R: ForwardOutputs>(&self, f: impl FnOnce(&M) -> R) -> R {
        self.pre_forward();
        let out = f(&self.module);
        let r = &self.reducer;
        let mut st = r.lock();
        if is_grad_enabled() && st.sync {
            st.armed = true;
            st.launched = 0;
            st.used.clear();
            st.used.resize(r.params.len(), false);
            st.error = None;
            for b in &mut st.buckets {
                b.pending = b.params.len();
            }
            if r.config.find_unused_parameters {
                let reached = reachable_leaves(&out.output_tensors());
                let unused: Vec<usize> = (0..r.params.len())
                    .filter(|&i| !reached.contains(&r.keys[i]))
                    .collect();
                for i in unused {
                    r.mark_ready(&mut st, i, None);
                }
            }
        }
        out
    }
}

impl Reducer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hook: parameter `i`'s gradient for this pass is complete.
    fn grad_ready(&self, i: usize, leaf: &Tensor) {
        let mut st = self.lock();
        if !st.armed {
            return;
        }
        st.used[i] = true;
        self.mark_ready(&mut st, i, Some(leaf));
    }

    /// Puts parameter `i`'s gradient (zeros when `leaf` is `None`) into its bucket, and
    /// starts every bucket that is now complete and next in order.
    fn mark_ready(&self, st: &mut State, i: usize, leaf: Option<&Tensor>) {
        let (bi, pos) = st.place[i];
        {
            let bucket = &mut st.buckets[bi];
            let p = &self.params[i];
            let view = bucket.buffer.narrow(0, bucket.offsets[pos], p.numel());
            no_grad(|| match leaf.and_then(|l| l.grad()) {
                Some(g) => {
                    view.copy_(&g.reshape(&[g.numel()]));
                    if self.config.gradient_as_bucket_view {
                        leaf.expect("some").set_grad(Some(view.reshape(p.shape())));
                    }
                }
                None => {
                    view.fill_(0.0);
                }
            });
            bucket.pending -= 1;
        }
        while st.launched < st.buckets.len() && st.buckets[st.launched].pending == 0 {
            let b = st.launched;
            // Buckets started while backward still runs wait politely (yielding the core
            // to backward); the last one has nothing to overlap and goes at full speed.
            let polite = b + 1 < st.buckets.len();
            match self
                .group
                .all_reduce_async_with(&st.buckets[b].buffer, ReduceOp::Avg, polite)
            {
                Ok(w) => st.buckets[b].work = Some(w),
                Err(e) => st.error = Some(e),
            }
            st.launched += 1;
        }
        if st.launched == st.buckets.len() {
            self.finish(st);
        }
    }

    /// Every bucket is on its way: wait for them in order and hand the averages to `.grad`.
    fn finish(&self, st: &mut State) {
        st.armed = false;
        let mut error = st.error.take();
        let waiting = std::time::Instant::now();
        let mut busy = std::time::Duration::ZERO;
        for b in &mut st.buckets {
            if let Some(w) = b.work.take() {
                let done = w.state.clone();
                if let Err(e) = w.wait() {
                    error.get_or_insert(e);
                }
                busy += *done.busy.lock().unwrap_or_else(|e| e.into_inner());
            }
        }
        st.stats.reductions += 1;
        st.stats.allreduce += busy;
        st.stats.exposed += waiting.elapsed();
        if let Some(e) = error {
            panic!(
                "DistributedDataParallel: reducing gradients failed on rank {}: {e}",
                self.group.rank()
            );
        }
        // With find_unused_parameters, a parameter no rank used keeps no gradient.
        let globally_used: Option<Vec<bool>> = self.config.find_unused_parameters.then(|| {
            let flags = Tensor::from_vec(
                st.used.iter().map(|&u| u as i64).collect::<Vec<_>>(),
                &[st.used.len()],
            );
            self.group
                .all_reduce(&flags, ReduceOp::Max)
                .unwrap_or_else(|e| {
                    panic!("DistributedDataParallel: exchanging unused parameters: {e}")
                });
            flags.to_vec::<i64>().into_iter().map(|f| f != 0).collect()
        });
        no_grad(|| {
            for (i, p) in self.params.iter().enumerate() {
                if let Some(g) = &globally_used
                    && !g[i]
                {
                    continue;
                }
                let (bi, pos) = st.place[i];
                let b = &st.buckets[bi];
                let view = b
                    .buffer
                    .narrow(0, b.offsets[pos], p.numel())
                    .reshape(p.shape());
                match p.grad() {
                    Some(g) if g.shares_storage(&b.buffer) => {}
                    Some(g) if !self.config.gradient_as_bucket_view => {
                        g.copy_(&view);
                    }
                    _ if self.config.gradient_as_bucket_view => p.set_grad(Some(view)),
                    _ => p.set_grad(Some(view.deep_copy())),
                }
            }
        });
    }
}

/// PyTorch's bucket assignment: parameters in reverse order, one bucket list per dtype
/// and device, a bucket closed once it reaches its cap (the first one smaller).
fn assign_buckets(params: &[Tensor], config: &DdpConfig) -> (Vec<Bucket>, Vec<(usize, usize)>) {
    let mb = |x: f64| (x * 1024.0 * 1024.0) as usize;
    let mut open: Vec<((DType, Device), Vec<usize>, usize)> = Vec::new();
    let mut closed: Vec<Vec<usize>> = Vec::new();
    let mut first = true;
    for i in (0..params.len()).rev() {
        let p = &params[i];
        let key = (p.dtype(), p.device());
        let slot = match open.iter().position(|(k, _, _)| *k == key) {
            Some(s) => s,
            None => {
                open.push((key, Vec::new(), 0));
                open.len() - 1
            }
        };
        open[slot].1.push(i);
        open[slot].2 += p.numel() * p.dtype().size_in_bytes();
        let cap = if first {
            mb(config.first_bucket_cap_mb)
        } else {
            mb(config.bucket_cap_mb)
        };
        if open[slot].2 >= cap {
            let (_, members, _) = open.remove(slot);
            closed.push(members);
            first = false;
        }
    }
    closed.extend(open.into_iter().map(|(_, m, _)| m));
    let mut place = vec![(0, 0); params.len()];
    let buckets = closed
        .into_iter()
        .enumerate()
        .map(|(bi, members)| {
            let mut offsets = Vec::with_capacity(members.len());
            let mut total = 0;
            for (pos, &i) in members.iter().enumerate() {
                place[i] = (bi, pos);
                offsets.push(total);
                total += params[i].numel();
            }
            let p0 = &params[members[0]];
            Bucket {
                pending: members.len(),
                buffer: Tensor::zeros(&[total], p0.dtype(), &p0.device()),
                params: members,
                offsets,
                work: None,
            }
        })
        .collect();
    (buckets, place)
}

impl<M: Module> Module for DistributedDataParallel<M> {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, TensorKind)) {
        self.module
            .visit(&crate::nn::join_path(prefix, "module"), f)
    }

    fn visit_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor, TensorKind)) {
        self.module
            .visit_mut(&crate::nn::join_path(prefix, "module"), f)
    }

    fn set_training(&mut self, training: bool) {
        self.module.set_training(training)
    }

    fn for_each_module_mut(&mut self, f: &mut dyn FnMut(&mut dyn std::any::Any)) {
        self.module.for_each_module_mut(f)
    }
}
