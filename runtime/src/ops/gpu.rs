//! Device dispatch: each function runs an op on CUDA tensors with a native kernel and
//! returns its result, or `None`/`false` when the tensors are not all on a CUDA device or
//! no kernel covers the dtype — the caller then takes its CPU path, which for CUDA tensors
//! is the host fallback (download, CPU kernel, upload; counted in [`host_fallbacks`]).
//! Without the `cuda` feature every function is `None`/`false` and compiles to nothing.
//!
//! A kernel launch that fails panics with the op's name, as PyTorch raises: tensor ops
//! return tensors, not `Result`s.

use crate::Tensor;
use ferrograd_kernels::IndexBounds;
use ferrograd_kernels::cpu::{AdamStep, Conv2dGeometry, SgdStep};

/// Declares each dispatch function once: the CUDA implementation in `imp` with the
/// feature, `Default` (None / false) without it.
macro_rules! dispatch {
    ($( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )*) => {
        $(
            $(#[$m])*
            #[cfg(feature = "cuda")]
            #[inline]
            #[track_caller]
            #[allow(clippy::too_many_arguments)]
            pub(crate) fn $name($($arg: $ty),*) -> $ret {
                imp::$name($($arg),*)
            }

            $(#[$m])*
            #[cfg(not(feature = "cuda"))]
            #[inline(always)]
            #[allow(unused_variables, clippy::too_many_arguments)]
            pub(crate) fn $name($($arg: $ty),*) -> $ret {
                Default::default()
            }
        )*
    };
}

dispatch! {
    /// Max (`max`: values and i64 in-plane indices) or average pooling of contiguous float
    /// `x` `[n, c, h, w]`.
    fn pool2d(x: &Tensor, max: bool, g: &Conv2dGeometry) -> Option<(Tensor, Option<Tensor>)>;
    /// The input gradient of [`pool2d`] from contiguous `grad` (and max pooling's indices).
    fn pool2d_backward(grad: &Tensor, indices: Option<&Tensor>, g: &Conv2dGeometry) -> Option<Tensor>;
    /// Dropout of contiguous float `x` with the Philox stream of `seed`: `(y, mask)`.
    fn dropout(x: &Tensor, seed: u64, p: f64, scale: f64) -> Option<(Tensor, Tensor)>;
    /// Fused layer norm of contiguous `x` as `[rows, len]` (weight/bias contiguous `[len]`
    /// of x's dtype): output, per-row mean and reciprocal std.
    fn layer_norm(x: &Tensor, weight: Option<&Tensor>, bias: Option<&Tensor>, rows: usize, len: usize, eps: f64) -> Option<(Tensor, Tensor, Tensor)>;
    /// Gradients of [`layer_norm`]: dx, and (dweight, dbias) when `params`.
    fn layer_norm_backward(dy: &Tensor, x: &Tensor, mean: &Tensor, rstd: &Tensor, weight: Option<&Tensor>, rows: usize, len: usize, params: bool) -> Option<(Tensor, Option<(Tensor, Tensor)>)>;
    /// Fused cross-entropy of contiguous logits `[rows, classes]` at int64 `target`: per-row
    /// losses, per-row target weights and log-sum-exps; targets checked against `bounds`.
    fn cross_entropy(x: &Tensor, target: &Tensor, bounds: &IndexBounds, weight: Option<&Tensor>, ignore_index: i64, smoothing: f64) -> Option<(Tensor, Tensor, Tensor)>;
    /// The logits' gradient of [`cross_entropy`] for per-row upstream `grad` (`[rows]`, or
    /// one element for every row).
    fn cross_entropy_backward(x: &Tensor, target: &Tensor, weight: Option<&Tensor>, ignore_index: i64, smoothing: f64, lse: &Tensor, grad: &Tensor) -> Option<Tensor>;
    /// One Adam/AdamW step of every slot (param, grad, exp_avg, exp_avg_sq, optional
    /// max_exp_avg_sq), all CUDA tensors of one dtype on one device, in one launch.
    fn adam_multi(slots: &[StepSlot<'_>], hyper: &AdamStep) -> bool;
    /// One SGD step of every slot (param, grad, optional momentum buffer) in one launch.
    fn sgd_multi(slots: &[StepSlot<'_>], hyper: &SgdStep) -> bool;
}

/// One parameter of a fused optimizer step: its tensors (parameter, gradient, then the
/// optimizer's state buffers; all contiguous, distinct buffers) and per-parameter scalars.
pub(crate) struct StepSlot<'a> {
    pub(crate) tensors: [Option<&'a Tensor>; 5],
    /// Bit 0: max_exp_avg_sq present; bit 1: first SGD step.
    pub(crate) flags: u64,
    /// Adam: `lr / (1 - beta1^step)`.
    pub(crate) step_size: f64,
    /// Adam: `sqrt(1 - beta2^step)`.
    pub(crate) bc2_sqrt: f64,
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::storage::Storage;
    use crate::storage::cuda::{self as backend, CudaStorage, ops as k};
    use ferrograd_kernels::{DType, Layout};
    use std::sync::{Arc, RwLockReadGuard};

    /// The CUDA storage behind a tensor, read-locked.
    struct Dev<'a>(RwLockReadGuard<'a, Storage>);

    impl Dev<'_> {
        fn get(&self) -> &CudaStorage {
            match &*self.0 {
                Storage::Cuda(s) => s,
                Storage::Cpu(_) => unreachable!("checked to be on CUDA"),
            }
        }
    }

    fn dev(t: &Tensor) -> Option<Dev<'_>> {
        if !t.device().is_cuda() {
            return None;
        }
        let guard = t.read_storage();
        matches!(&*guard, Storage::Cuda(_)).then(|| Dev(guard))
    }

    /// Panics with a failed launch's error, prefixed by the op (a bad index's message,
    /// under `CUDA_LAUNCH_BLOCKING=1`, names its op already).
    #[track_caller]
    fn fail(op: &str, e: crate::Error) -> ! {
        match e {
            crate::Error::IndexOutOfBounds { .. } => panic!("{e}"),
            e => panic!("{op}: {e}"),
        }
    }

    #[track_caller]
    fn check(op: &str, r: crate::Result<()>) -> bool {
        r.unwrap_or_else(|e| fail(op, e));
        true
    }

    fn contiguous_offset(x: &Tensor) -> usize {
        x.layout()
            .contiguous_range()
            .expect("contiguous input")
            .start
    }

    #[track_caller]
    pub(super) fn pool2d(
        x: &Tensor,
        max: bool,
        g: &Conv2dGeometry,
    ) -> Option<(Tensor, Option<Tensor>)> {
        if !x.dtype().is_float() {
            return None;
        }
        let d = devs([Some(x)])?;
        let op = if max { "max_pool2d" } else { "avg_pool2d" };
        let (out, indices) =
            k::pool2d(max, operand(&d[0], Some(x))?, g).unwrap_or_else(|e| fail(op, e));
        let shape = [g.n, g.c, g.output()?[0], g.output()?[1]];
        Some((
            cuda_tensor(out, &shape),
            indices.map(|i| cuda_tensor(i, &shape)),
        ))
    }

    #[track_caller]
    pub(super) fn pool2d_backward(
        grad: &Tensor,
        indices: Option<&Tensor>,
        g: &Conv2dGeometry,
    ) -> Option<Tensor> {
        if !grad.dtype().is_float() {
            return None;
        }
        let d = devs([Some(grad), indices])?;
        let op = if indices.is_some() {
            "max_pool2d backward"
        } else {
            "avg_pool2d backward"
        };
        let dx = k::pool2d_backward(operand(&d[0], Some(grad))?, operand(&d[1], indices), g)
            .unwrap_or_else(|e| fail(op, e));
        Some(cuda_tensor(dx, &[g.n, g.c, g.input[0], g.input[1]]))
    }

    /// A storage lock held for a multi-tensor launch.
    enum Guard<'a> {
        Read(RwLockReadGuard<'a, Storage>),
        Write(std::sync::RwLockWriteGuard<'a, Storage>),
    }

    impl Guard<'_> {
        fn cuda(&self) -> Option<&CudaStorage> {
            let s: &Storage = match self {
                Guard::Read(r) => r,
                Guard::Write(w) => w,
            };
            match s {
                Storage::Cuda(c) => Some(c),
                Storage::Cpu(_) => None,
            }
        }
    }

    /// Locks every tensor of `slots` (gradients for reading, the rest for writing, which
    /// bumps their versions) when all are CUDA tensors of one dtype on one device, and
    /// runs `f` on their storages.
    fn with_slots(
        slots: &[StepSlot<'_>],
        op: &str,
        f: impl FnOnce(&Arc<backend::GpuDevice>, DType, &[k::OptSlot<'_>]) -> crate::Result<()>,
    ) -> bool {
        let Some(first) = slots.first().and_then(|s| s.tensors[0]) else {
            return true;
        };
        let (device, dtype) = (first.device(), first.dtype());
        let all_there = slots
            .iter()
            .flat_map(|s| s.tensors.iter().flatten())
            .all(|t| {
                t.device() == device
                    && t.dtype() == dtype
                    && t.layout().contiguous_range().is_some()
            });
        if !device.is_cuda() || !all_there {
            return false;
        }
        // One storage locked twice would deadlock: views of one buffer take the host path.
        let mut seen = std::collections::HashSet::new();
        let distinct = slots
            .iter()
            .flat_map(|s| s.tensors.iter().flatten())
            .all(|t| seen.insert(Arc::as_ptr(t.storage_cell())));
        if !distinct {
            return false;
        }
        let mut guards = Vec::with_capacity(slots.len() * 5);
        for s in slots {
            for (i, t) in s.tensors.iter().enumerate() {
                guards.push(t.map(|t| {
                    if i == 1 {
                        Guard::Read(t.read_storage())
                    } else {
                        Guard::Write(t.storage_cell().write())
                    }
                }));
            }
        }
        let mut table = Vec::with_capacity(slots.len());
        for (s, g) in slots.iter().zip(guards.chunks(5)) {
            let mut buffers = [None; 5];
            for i in 0..5 {
                if let Some(t) = s.tensors[i] {
                    let Some(c) = g[i].as_ref().and_then(Guard::cuda) else {
                        return false;
                    };
                    buffers[i] = Some((c, contiguous_offset(t)));
                }
            }
            table.push(k::OptSlot {
                buffers,
                n: first_numel(s),
                flags: s.flags,
                step_size: s.step_size,
                bc2_sqrt: s.bc2_sqrt,
            });
        }
        let dev = table[0].buffers[0].expect("a parameter").0.device().clone();
        check(op, f(&dev, dtype, &table))
    }

    fn first_numel(s: &StepSlot<'_>) -> usize {
        s.tensors[0].map_or(0, |t| t.numel())
    }

    #[track_caller]
    pub(super) fn adam_multi(slots: &[StepSlot<'_>], h: &AdamStep) -> bool {
        let hyper = k::AdamHyper {
            lr: h.lr,
            beta1: h.betas.0,
            beta2: h.betas.1,
            eps: h.eps,
            weight_decay: h.weight_decay,
            decoupled: h.decoupled as u32,
            maximize: h.maximize as u32,
        };
        with_slots(slots, "Adam.step", |dev, dtype, table| {
            k::adam_multi(dev, dtype, table, hyper)
        })
    }

    #[track_caller]
    pub(super) fn sgd_multi(slots: &[StepSlot<'_>], h: &SgdStep) -> bool {
        let hyper = k::SgdHyper {
            lr: h.lr,
            momentum: h.momentum,
            dampening: h.dampening,
            weight_decay: h.weight_decay,
            nesterov: h.nesterov as u32,
            maximize: h.maximize as u32,
        };
        with_slots(slots, "SGD.step", |dev, dtype, table| {
            k::sgd_multi(dev, dtype, table, hyper)
        })
    }

    /// The read-locked CUDA storages of optional operands (all on CUDA, else `None`).
    fn devs<'a, const K: usize>(ts: [Option<&'a Tensor>; K]) -> Option<[Option<Dev<'a>>; K]> {
        let mut out: [Option<Dev<'a>>; K] = std::array::from_fn(|_| None);
        for (slot, t) in out.iter_mut().zip(ts) {
            if let Some(t) = t {
                *slot = Some(dev(t)?);
            }
        }
        Some(out)
    }

    fn operand<'a>(d: &'a Option<Dev<'_>>, t: Option<&Tensor>) -> Option<k::Operand<'a>> {
        Some((d.as_ref()?.get(), contiguous_offset(t?)))
    }

    fn cuda_tensor(s: CudaStorage, shape: &[usize]) -> Tensor {
        Tensor::from_storage(Storage::Cuda(s), Layout::contiguous(shape))
    }

    #[track_caller]
    pub(super) fn layer_norm(
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        rows: usize,
        len: usize,
        eps: f64,
    ) -> Option<(Tensor, Tensor, Tensor)> {
        if !x.dtype().is_float() {
            return None;
        }
        let d = devs([Some(x), weight, bias])?;
        let (y, mean, rstd) = k::layer_norm(
            operand(&d[0], Some(x))?,
            operand(&d[1], weight),
            operand(&d[2], bias),
            rows,
            len,
            eps,
        )
        .unwrap_or_else(|e| panic!("layer_norm: {e}"));
        Some((
            cuda_tensor(y, x.shape()),
            cuda_tensor(mean, &[rows]),
            cuda_tensor(rstd, &[rows]),
        ))
    }

    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer_norm_backward(
        dy: &Tensor,
        x: &Tensor,
        mean: &Tensor,
        rstd: &Tensor,
        weight: Option<&Tensor>,
        rows: usize,
        len: usize,
        params: bool,
    ) -> Option<(Tensor, Option<(Tensor, Tensor)>)> {
        let d = devs([Some(dy), Some(x), Some(mean), Some(rstd), weight])?;
        let (dx, grads) = k::layer_norm_backward(
            operand(&d[0], Some(dy))?,
            operand(&d[1], Some(x))?,
            d[2].as_ref()?.get(),
            d[3].as_ref()?.get(),
            operand(&d[4], weight),
            rows,
            len,
            params,
        )
        .unwrap_or_else(|e| panic!("layer_norm backward: {e}"));
        Some((
            cuda_tensor(dx, x.shape()),
            grads.map(|(w, b)| (cuda_tensor(w, &[len]), cuda_tensor(b, &[len]))),
        ))
    }

    /// The kernel options of a cross-entropy launch over logits `x` `[rows, classes]`.
    fn ce_opts<'a>(
        x: &Tensor,
        td: &'a Option<Dev<'_>>,
        target: &Tensor,
        wd: &'a Option<Dev<'_>>,
        weight: Option<&Tensor>,
        ignore_index: i64,
        smoothing: f64,
    ) -> Option<k::CrossEntropy<'a>> {
        Some(k::CrossEntropy {
            target: operand(td, Some(target))?,
            weight: operand(wd, weight),
            rows: x.shape()[0],
            classes: x.shape()[1],
            ignore_index,
            smoothing,
        })
    }

    #[track_caller]
    pub(super) fn cross_entropy(
        x: &Tensor,
        target: &Tensor,
        bounds: &IndexBounds,
        weight: Option<&Tensor>,
        ignore_index: i64,
        smoothing: f64,
    ) -> Option<(Tensor, Tensor, Tensor)> {
        if !x.dtype().is_float() {
            return None;
        }
        let d = devs([Some(x), Some(target), weight])?;
        let rows = x.shape()[0];
        let opts = ce_opts(x, &d[1], target, &d[2], weight, ignore_index, smoothing)?;
        let (loss, row_weight, lse) = k::cross_entropy(operand(&d[0], Some(x))?, &opts, bounds)
            .unwrap_or_else(|e| fail("cross_entropy", e));
        Some((
            cuda_tensor(loss, &[rows]),
            cuda_tensor(row_weight, &[rows]),
            cuda_tensor(lse, &[rows]),
        ))
    }

    #[track_caller]
    pub(super) fn cross_entropy_backward(
        x: &Tensor,
        target: &Tensor,
        weight: Option<&Tensor>,
        ignore_index: i64,
        smoothing: f64,
        lse: &Tensor,
        grad: &Tensor,
    ) -> Option<Tensor> {
        let d = devs([Some(x), Some(target), weight, Some(lse), Some(grad)])?;
        let opts = ce_opts(x, &d[1], target, &d[2], weight, ignore_index, smoothing)?;
        let stride = if grad.numel() == 1 { 0 } else { 1 };
        let dx = k::cross_entropy_backward(
            operand(&d[0], Some(x))?,
            &opts,
            d[3].as_ref()?.get(),
            operand(&d[4], Some(grad))?,
            stride,
        )
        .unwrap_or_else(|e| panic!("cross_entropy backward: {e}"));
        Some(cuda_tensor(dx, x.shape()))
    }

    #[track_caller]
    pub(super) fn dropout(x: &Tensor, seed: u64, p: f64, scale: f64) -> Option<(Tensor, Tensor)> {
        if !x.dtype().is_float() {
            return None;
        }
        let s = dev(x)?;
        let (y, mask) = k::dropout(s.get(), contiguous_offset(x), x.numel(), seed, p, scale)
            .unwrap_or_else(|e| panic!("dropout: {e}"));
        Some((cuda_tensor(y, x.shape()), cuda_tensor(mask, x.shape())))
    }
}
