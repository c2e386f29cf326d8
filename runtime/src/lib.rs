//! The ferrograd runtime: [`Tensor`], dtypes, devices, define-by-run autograd and the
//! neural-network functionals. Users normally depend on the `ferrograd` facade crate,
//! which re-exports everything here.
//!
//! ```
//! use ferrograd_runtime::prelude::*;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).requires_grad(true);
//! let y = (&x * &x).sum_all();
//! y.backward();
//! assert_eq!(x.grad().unwrap().to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
//! ```
#![warn(missing_docs)]

/// Builder methods that set one field each.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
    };
}

pub mod amp;
mod autocast_state;
pub mod autograd;
pub mod checkpoint;
pub mod cpu;
pub mod cuda;
pub mod data;
mod device;
pub mod dispatch;
pub mod distributed;
mod error;
pub mod memory;
pub mod nn;
pub mod onnx;
mod ops;
pub mod optim;
pub mod profiler;
mod random;
mod storage;
mod tensor;
pub mod testing;
pub mod train;

pub use device::Device;
pub use error::{Error, Result};
pub use ferrograd_kernels::{DType, Element, FloatElement, NumElement};
pub use ferrograd_macros::{declared_shapes, network};
pub use random::{BadGeneratorState, Generator, get_rng_state, manual_seed, set_rng_state};

/// Sets the number of threads the CPU kernels use (`torch.set_num_threads`): the thread
/// that calls an op and `n - 1` helper threads; `0` restores the default
/// (`FERROGRAD_NUM_THREADS`, else `RAYON_NUM_THREADS`, else one per core).
///
/// ```
/// ferrograd_runtime::set_num_threads(1);
/// assert_eq!(ferrograd_runtime::get_num_threads(), 1);
/// ferrograd_runtime::set_num_threads(0);
/// ```
pub fn set_num_threads(n: usize) {
    ferrograd_kernels::cpu::set_num_threads(n);
}

/// The number of threads the CPU kernels use (`torch.get_num_threads`).
///
/// ```
/// assert!(ferrograd_runtime::get_num_threads() >= 1);
/// ```
pub fn get_num_threads() -> usize {
    ferrograd_kernels::cpu::num_threads()
}

/// Sets how long the CPU kernels' idle helper threads spin, waiting for the next op,
/// before they sleep (`GOMP_SPINCOUNT`, `KMP_BLOCKTIME`; 100 µs by default): longer keeps
/// them awake across longer serial stretches; shorter gives the cores back sooner.
///
/// ```
/// use std::time::Duration;
/// ferrograd_runtime::set_thread_spin_time(Duration::from_micros(50));
/// assert_eq!(ferrograd_runtime::thread_spin_time(), Duration::from_micros(50));
/// ferrograd_runtime::set_thread_spin_time(Duration::from_micros(100));
/// ```
pub fn set_thread_spin_time(time: std::time::Duration) {
    ferrograd_kernels::cpu::set_spin_time(time);
}

/// How long idle helper threads spin before they sleep (see [`set_thread_spin_time`]).
///
/// ```
/// assert!(ferrograd_runtime::thread_spin_time() > std::time::Duration::ZERO);
/// ```
pub fn thread_spin_time() -> std::time::Duration {
    ferrograd_kernels::cpu::spin_time()
}

static DETERMINISTIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every op give the same bits from run to run for the same inputs and thread
/// count (`torch.use_deterministic_algorithms`): ops whose GPU kernel accumulates with
/// atomics in a racing order (`scatter_add`, hence `index_add`, the backward of
/// `index_select`, `gather` and `Embedding`, in floating point) run their sequential
/// CPU kernel on a host copy instead (counted in `cuda::host_fallbacks`). The CPU
/// kernels are deterministic already: their parallel reductions split work in fixed
/// chunks and combine them in order. With [`manual_seed`] (and the `Trainer`'s
/// `deterministic` option), a training run repeats bit for bit.
///
/// ```
/// ferrograd_runtime::use_deterministic_algorithms(true);
/// assert!(ferrograd_runtime::are_deterministic_algorithms_enabled());
/// ferrograd_runtime::use_deterministic_algorithms(false);
/// ```
pub fn use_deterministic_algorithms(on: bool) {
    DETERMINISTIC.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`use_deterministic_algorithms`] is on.
///
/// ```
/// assert!(!ferrograd_runtime::are_deterministic_algorithms_enabled());
/// ```
pub fn are_deterministic_algorithms_enabled() -> bool {
    DETERMINISTIC.load(std::sync::atomic::Ordering::Relaxed)
}
pub use tensor::Tensor;

/// Everything a model file usually needs: `use ferrograd::prelude::*;`.
pub mod prelude {
    pub use crate::autograd::{NoGradGuard, checkpoint, enable_grad, is_grad_enabled, no_grad};
    pub use crate::network;
    pub use crate::nn::Module;
    pub use crate::nn::functional as F;
    pub use crate::{DType, Device, Generator, Tensor, manual_seed};
}
