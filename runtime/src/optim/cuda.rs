//! The CUDA side of the optimizer steps: one multi-tensor launch of `optim.cu` (kernels crate, `fused/optim/`) per dtype for all parameters.

use crate::Tensor;
use crate::nn::fused::device::dispatch;
use ferrograd_kernels::fused::optim::{AdamStep, SgdStep};
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

dispatch! {
    /// One Adam/AdamW step of every slot (param, grad, exp_avg, exp_avg_sq, optional
    /// max_exp_avg_sq), all CUDA tensors of one dtype on one device, in one launch.
    fn adam_multi(slots: &[StepSlot<'_>], hyper: &AdamStep) -> bool;
    /// One SGD step of every slot (param, grad, optional momentum buffer) in one launch.
    fn sgd_multi(slots: &[StepSlot<'_>], hyper: &SgdStep) -> bool;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::nn::fused::device::*;
    use crate::storage::Storage;
    use crate::storage::cuda::{self as backend, CudaStorage};
    use ferrograd_kernels::DType;
    use std::sync::{Arc, RwLockReadGuard};

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
        let hyper = *h;
        with_slots(slots, "Adam.step", |dev, dtype, table| {
            k::adam_multi(dev, dtype, table, hyper)
        })
    }

    #[track_caller]
    pub(super) fn sgd_multi(slots: &[StepSlot<'_>], h: &SgdStep) -> bool {
        let hyper = *h;
        with_slots(slots, "SGD.step", |dev, dtype, table| {
            k::sgd_multi(dev, dtype, table, hyper)
        })
    }

    /// The launches, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::launch::*;
        use crate::storage::cuda::{CudaStorage, GpuDevice};
        use cudarc::driver::{DeviceRepr, LaunchConfig};
        use ferrograd_kernels::DType;
        use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
        use ferrograd_kernels::fused::optim::{AdamStep, SgdStep};
        use std::sync::Arc;

        // ---- multi-tensor optimizer steps ----------------------------------------------------------

        /// Elements per block of the multi-tensor kernels (`OPT_CHUNK` in optim.cu).
        pub(super) const OPT_CHUNK: usize = 4096;

        /// One parameter of a multi-tensor step: its buffers (parameter, gradient, up to three
        /// state buffers, all contiguous from `offsets`), and the `OptSlot` scalars.
        pub(crate) struct OptSlot<'a> {
            pub(crate) buffers: [Option<(&'a CudaStorage, usize)>; 5],
            pub(crate) n: usize,
            pub(crate) flags: u64,
            pub(crate) step_size: f64,
            pub(crate) bc2_sqrt: f64,
        }

        /// The slot table as the kernels read it (`OptSlot`: ten 8-byte words per parameter) and
        /// the number of chunks (blocks) it spans.
        fn slot_table(slots: &[&OptSlot<'_>]) -> (Vec<i64>, usize) {
            let mut words = Vec::with_capacity(slots.len() * 10);
            let mut chunks = 0usize;
            for s in slots {
                for b in &s.buffers {
                    words.push(b.map_or(0, |(buf, offset)| buf.address_of(offset)) as i64);
                }
                words.push(s.n as i64);
                words.push(chunks as i64);
                words.push(s.flags as i64);
                words.push(s.step_size.to_bits() as i64);
                words.push(s.bc2_sqrt.to_bits() as i64);
                chunks += s.n.div_ceil(OPT_CHUNK);
            }
            (words, chunks)
        }

        /// Launches `kernel` (`ADAM_MULTI` or `SGD_MULTI`) of `dtype` over every slot at once.
        fn multi_tensor<H: DeviceRepr + Copy>(
            dev: &Arc<GpuDevice>,
            kernel: &CudaKernel,
            dtype: DType,
            slots: &[OptSlot<'_>],
            hyper: H,
        ) -> Result<()> {
            let slots: Vec<&OptSlot<'_>> = slots.iter().filter(|s| s.n > 0).collect();
            if slots.is_empty() {
                return Ok(());
            }
            let (words, chunks) = slot_table(&slots);
            let (t, count, h) = (dev.table(&words)?, slots.len() as u32, hyper);
            let cfg = LaunchConfig {
                grid_dim: (chunks as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            launch!(dev, kernel, dtype, cfg; t, count, h)
        }

        /// One Adam/AdamW step of every parameter in `slots` (buffers: param, grad, exp_avg,
        /// exp_avg_sq, max_exp_avg_sq), all of `dtype` on `dev`, in one launch.
        pub(crate) fn adam_multi(
            dev: &Arc<GpuDevice>,
            dtype: DType,
            slots: &[OptSlot<'_>],
            hyper: AdamStep,
        ) -> Result<()> {
            multi_tensor(dev, &kernels::ADAM_MULTI, dtype, slots, hyper)
        }

        /// One SGD step of every parameter in `slots` (buffers: param, grad, momentum buffer).
        pub(crate) fn sgd_multi(
            dev: &Arc<GpuDevice>,
            dtype: DType,
            slots: &[OptSlot<'_>],
            hyper: SgdStep,
        ) -> Result<()> {
            multi_tensor(dev, &kernels::SGD_MULTI, dtype, slots, hyper)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::k::OPT_CHUNK;
        use ferrograd_kernels::fused::optim::{AdamStep, SgdStep};

        #[test]
        fn optimizer_structs_match_the_kernel_layout() {
            // Passed by value: seven doubles and three bools (padded to 8), four and three.
            assert_eq!(std::mem::size_of::<AdamStep>(), 64);
            assert_eq!(std::mem::size_of::<SgdStep>(), 40);
            assert!(AdamStep::CUDA_DECLARATION.ends_with("bool amsgrad; bool maximize; };\n"));
            // OPT_CHUNK of optim.cu.
            assert_eq!(OPT_CHUNK, 4096);
        }
    }
}
