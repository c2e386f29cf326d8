//! Settings and counters of the CUDA backend, kept at the lowest layer that reads them
//! (the launches and the host fallback) and re-exported by `crate::cuda`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);
static FALLBACKS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

/// Lets f32 matrix products on CUDA use TF32 tensor cores (10-bit mantissa inputs, f32
/// accumulation): several times faster, about 1e-3 relative error. Off by default, as
/// PyTorch's `torch.backends.cuda.matmul.allow_tf32`; f16/bf16 products always use tensor
/// cores and f64 never does.
///
/// ```
/// use ferrograd_runtime::cuda;
/// cuda::set_allow_tf32(true);
/// assert!(cuda::allow_tf32());
/// cuda::set_allow_tf32(false);
/// ```
pub fn set_allow_tf32(allow: bool) {
    ALLOW_TF32.store(allow, Ordering::Relaxed);
}

/// Whether f32 matrix products may use TF32 (see [`set_allow_tf32`]).
///
/// ```
/// assert!(!ferrograd_runtime::cuda::allow_tf32());
/// ```
pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// Notes that `op` ran on the host for a device tensor.
pub(crate) fn note_host_fallback(op: &str) {
    let mut map = FALLBACKS.lock().unwrap_or_else(|e| e.into_inner());
    match map.get_mut(op) {
        Some(count) => *count += 1,
        None => {
            map.insert(op.to_string(), 1);
        }
    }
}

/// The ops that ran through the host for CUDA tensors since start or
/// [`clear_host_fallbacks`], with how many times each: ops without a device kernel for
/// the dtype at hand download the whole buffer, run the CPU kernel and upload the
/// result, with the same results but waiting for the device. Empty on a CPU-only run.
///
/// ```
/// # #[cfg(not(feature = "cuda"))]
/// assert!(ferrograd_runtime::cuda::host_fallbacks().is_empty());
/// ```
pub fn host_fallbacks() -> Vec<(String, usize)> {
    let map = FALLBACKS.lock().unwrap_or_else(|e| e.into_inner());
    map.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

/// Forgets the ops counted by [`host_fallbacks`].
///
/// ```
/// ferrograd_runtime::cuda::clear_host_fallbacks();
/// ```
pub fn clear_host_fallbacks() {
    FALLBACKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
