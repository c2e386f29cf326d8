//! The CUDA side of the optimizer steps: one multi-tensor launch of `optim.cu` (kernels crate, `fused/optim/`) per dtype for all parameters.

use crate::Tensor;
use crate::nn::fused::device::dispatch;
use ferrograd_kernels::fused::optim::{
    AdadeltaStep, AdagradStep, AdamStep, AdamaxStep, NadamStep, RadamStep, RmspropStep, SgdStep,
};
/// One parameter of a fused optimizer step: its tensors (parameter, gradient, then up to
/// three state buffers of the optimizer; all contiguous, distinct buffers) and its
/// per-parameter step scalars.
pub(crate) struct StepSlot<'a> {
    pub(crate) tensors: [Option<&'a Tensor>; 5],
    /// Bit 0: max_exp_avg_sq present; bit 1: first SGD step.
    pub(crate) flags: u64,
    /// The optimizer's per-parameter, per-step scalars (`OptSlot::sc` in optim.cu): Adam
    /// `[step_size, sqrt(bc2)]`, Adagrad/Adamax `[clr]`, NAdam `[bc2, grad_coef,
    /// avg_coef]`, RAdam `[bc1, sqrt(bc2), rect, rectified]`.
    pub(crate) sc: [f64; 4],
}

dispatch! {
    /// One Adam/AdamW step of every slot (param, grad, exp_avg, exp_avg_sq, optional
    /// max_exp_avg_sq), all CUDA tensors of one dtype on one device, in one launch.
    fn adam_multi(slots: &[StepSlot<'_>], hyper: &AdamStep) -> bool;
    /// One SGD step of every slot (param, grad, optional momentum buffer) in one launch.
    fn sgd_multi(slots: &[StepSlot<'_>], hyper: &SgdStep) -> bool;
    /// One RMSprop step (square_avg, optional momentum buffer and grad_avg).
    fn rmsprop_multi(slots: &[StepSlot<'_>], hyper: &RmspropStep) -> bool;
    /// One Adagrad step (sum).
    fn adagrad_multi(slots: &[StepSlot<'_>], hyper: &AdagradStep) -> bool;
    /// One Adadelta step (square_avg, acc_delta).
    fn adadelta_multi(slots: &[StepSlot<'_>], hyper: &AdadeltaStep) -> bool;
    /// One Adamax step (exp_avg, exp_inf).
    fn adamax_multi(slots: &[StepSlot<'_>], hyper: &AdamaxStep) -> bool;
    /// One NAdam step (exp_avg, exp_avg_sq).
    fn nadam_multi(slots: &[StepSlot<'_>], hyper: &NadamStep) -> bool;
    /// One RAdam step (exp_avg, exp_avg_sq).
    fn radam_multi(slots: &[StepSlot<'_>], hyper: &RadamStep) -> bool;
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::nn::fused::device::*;
    use crate::storage::Storage;
    use crate::storage::cuda::{self as backend, CudaStorage};
    use ferrograd_kernels::DType;
    use ferrograd_kernels::cuda::{self as kernels, CudaKernel};
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
                n: s.tensors[0].map_or(0, |t| t.numel()),
                flags: s.flags,
                sc: s.sc,
            });
        }
        let dev = table[0].buffers[0].expect("a parameter").0.device().clone();
        check(op, f(&dev, dtype, &table))
    }

    /// One multi-tensor launch of `kernel` with hyper-parameters `hyper` over `slots`.
    #[track_caller]
    fn launch_multi<H: cudarc::driver::DeviceRepr + Copy>(
        slots: &[StepSlot<'_>],
        op: &str,
        kernel: &'static CudaKernel,
        hyper: H,
    ) -> bool {
        with_slots(slots, op, |dev, dtype, table| {
            k::multi_tensor(dev, kernel, dtype, table, hyper)
        })
    }

    macro_rules! multi {
        ($($name:ident($hyper:ty) = $kernel:ident, $op:literal;)*) => {
            $(
                #[track_caller]
                pub(super) fn $name(slots: &[StepSlot<'_>], h: &$hyper) -> bool {
                    launch_multi(slots, $op, &kernels::$kernel, *h)
                }
            )*
        };
    }

    multi! {
        adam_multi(AdamStep) = ADAM_MULTI, "Adam.step";
        sgd_multi(SgdStep) = SGD_MULTI, "SGD.step";
        rmsprop_multi(RmspropStep) = RMSPROP_MULTI, "RMSprop.step";
        adagrad_multi(AdagradStep) = ADAGRAD_MULTI, "Adagrad.step";
        adadelta_multi(AdadeltaStep) = ADADELTA_MULTI, "Adadelta.step";
        adamax_multi(AdamaxStep) = ADAMAX_MULTI, "Adamax.step";
        nadam_multi(NadamStep) = NADAM_MULTI, "NAdam.step";
        radam_multi(RadamStep) = RADAM_MULTI, "RAdam.step";
    }

    /// The launches, on CUDA storage.
    mod k {
        use crate::Result;
        use crate::storage::cuda::launch::*;
        use crate::storage::cuda::{CudaStorage, GpuDevice};
        use cudarc::driver::{DeviceRepr, LaunchConfig};
        use ferrograd_kernels::DType;
        use ferrograd_kernels::cuda::CudaKernel;
        use std::sync::Arc;

        /// Elements per block of the multi-tensor kernels (`OPT_CHUNK` in optim.cu).
        pub(super) const OPT_CHUNK: usize = 4096;

        /// One parameter of a multi-tensor step: its buffers (parameter, gradient, up to three
        /// state buffers, all contiguous from `offsets`), and the `OptSlot` scalars.
        pub(crate) struct OptSlot<'a> {
            pub(crate) buffers: [Option<(&'a CudaStorage, usize)>; 5],
            pub(crate) n: usize,
            pub(crate) flags: u64,
            pub(crate) sc: [f64; 4],
        }

        /// Words per `OptSlot` of optim.cu: five addresses, n, first_chunk, flags, sc[4].
        pub(super) const SLOT_WORDS: usize = 12;

        /// The slot table as the kernels read it and the number of chunks (blocks) it spans.
        pub(super) fn slot_table(slots: &[&OptSlot<'_>]) -> (Vec<i64>, usize) {
            let mut words = Vec::with_capacity(slots.len() * SLOT_WORDS);
            let mut chunks = 0usize;
            for s in slots {
                for b in &s.buffers {
                    words.push(b.map_or(0, |(buf, offset)| buf.address_of(offset)) as i64);
                }
                words.push(s.n as i64);
                words.push(chunks as i64);
                words.push(s.flags as i64);
                words.extend(s.sc.iter().map(|v| v.to_bits() as i64));
                chunks += s.n.div_ceil(OPT_CHUNK);
            }
            (words, chunks)
        }

        /// Launches `kernel` of `dtype` over every slot at once.
        pub(super) fn multi_tensor<H: DeviceRepr + Copy>(
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
    }

    #[cfg(test)]
    mod tests {
        use super::k::{OPT_CHUNK, SLOT_WORDS};
        use ferrograd_kernels::fused::optim::{AdamStep, SgdStep};

        #[test]
        fn optimizer_structs_match_the_kernel_layout() {
            // Passed by value: seven doubles and three bools (padded to 8), four and three.
            assert_eq!(std::mem::size_of::<AdamStep>(), 64);
            assert_eq!(std::mem::size_of::<SgdStep>(), 40);
            assert!(AdamStep::CUDA_DECLARATION.ends_with("bool amsgrad; bool maximize; };\n"));
            // OPT_CHUNK and the OptSlot layout of optim.cu.
            assert_eq!(OPT_CHUNK, 4096);
            assert_eq!(SLOT_WORDS, 5 + 3 + 4);
        }
    }
}
