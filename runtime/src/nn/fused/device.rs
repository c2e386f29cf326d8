//! Tensor-level access to CUDA storage for the fused ops' launches (each in its op's
//! `cuda.rs`): [`dispatch!`] declares an op's CUDA entry points once (the implementation
//! with the `cuda` feature, `None`/`false` without it, so the caller takes its CPU path),
//! and the helpers read-lock device operands and wrap results. A launch that fails
//! panics with the op's name, as PyTorch raises.

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

pub(crate) use dispatch;

#[cfg(feature = "cuda")]
mod imp {
    use crate::Tensor;
    use crate::storage::Storage;
    use crate::storage::cuda::{CudaStorage, launch as k};
    use ferrograd_kernels::Layout;
    use std::sync::RwLockReadGuard;

    /// The CUDA storage behind a tensor, read-locked.
    pub(crate) struct Dev<'a>(RwLockReadGuard<'a, Storage>);

    impl Dev<'_> {
        pub(crate) fn get(&self) -> &CudaStorage {
            match &*self.0 {
                Storage::Cuda(s) => s,
                Storage::Cpu(_) => unreachable!("checked to be on CUDA"),
            }
        }
    }

    pub(crate) fn dev(t: &Tensor) -> Option<Dev<'_>> {
        if !t.device().is_cuda() {
            return None;
        }
        let guard = t.read_storage();
        matches!(&*guard, Storage::Cuda(_)).then(|| Dev(guard))
    }

    /// Panics with a failed launch's error, prefixed by the op (a bad index's message,
    /// under `CUDA_LAUNCH_BLOCKING=1`, names its op already).
    #[track_caller]
    pub(crate) fn fail(op: &str, e: crate::Error) -> ! {
        match e {
            crate::Error::IndexOutOfBounds { .. } => panic!("{e}"),
            e => panic!("{op}: {e}"),
        }
    }

    #[track_caller]
    pub(crate) fn check(op: &str, r: crate::Result<()>) -> bool {
        r.unwrap_or_else(|e| fail(op, e));
        true
    }

    pub(crate) fn contiguous_offset(x: &Tensor) -> usize {
        x.layout()
            .contiguous_range()
            .expect("contiguous input")
            .start
    }

    /// The read-locked CUDA storages of optional operands (all on CUDA, else `None`).
    pub(crate) fn devs<'a, const K: usize>(
        ts: [Option<&'a Tensor>; K],
    ) -> Option<[Option<Dev<'a>>; K]> {
        let mut out: [Option<Dev<'a>>; K] = std::array::from_fn(|_| None);
        for (slot, t) in out.iter_mut().zip(ts) {
            if let Some(t) = t {
                *slot = Some(dev(t)?);
            }
        }
        Some(out)
    }

    pub(crate) fn operand<'a>(
        d: &'a Option<Dev<'_>>,
        t: Option<&Tensor>,
    ) -> Option<k::Operand<'a>> {
        Some((d.as_ref()?.get(), contiguous_offset(t?)))
    }

    pub(crate) fn cuda_tensor(s: CudaStorage, shape: &[usize]) -> Tensor {
        Tensor::from_storage(Storage::Cuda(s), Layout::contiguous(shape))
    }
}

#[cfg(feature = "cuda")]
pub(crate) use imp::*;
