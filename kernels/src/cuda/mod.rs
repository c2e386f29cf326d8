//! CUDA kernel sources, compiled at run time by NVRTC to machine code (CUBIN) for the
//! device's architecture and cached, so building never needs `nvcc`, and loading never
//! needs the driver to JIT PTX (which fails when NVRTC is newer than the driver). Each
//! source is written once as templates over the element types and instantiated as
//! `extern "C"` entry points named `OP_DTYPE` (`add_f32`, `softmax_rows_bf16`, ...);
//! [`symbols`](CudaKernel) declares each family the runtime launches as a constant.
//!
//! The sources need no CUDA toolkit headers (half types are converted with PTX `cvt`),
//! so they compile on machines that have only the driver and NVRTC. The module list and
//! the symbol constants exist without the `cuda` feature too (they are plain data);
//! compiling needs it.

#[cfg(feature = "cuda")]
mod nvrtc;
mod symbols;

#[cfg(feature = "cuda")]
pub use nvrtc::{CompileError, kernel_cache_dir, nvrtc_available, nvrtc_required};
pub use symbols::*;

const COMMON: &str = include_str!("common.cuh");

/// A kernel module: a name and its source (without the shared header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelModule {
    /// The module's name, also its cache key.
    pub name: &'static str,
    /// Declarations generated from Rust (hyper-parameter structs), before the body.
    prelude: &'static [&'static str],
    body: &'static str,
}

/// Strided binary and unary elementwise kernels.
pub const ELEMENTWISE: KernelModule =
    KernelModule::new("elementwise", include_str!("elementwise.cu"));

/// Reductions along a dim (sum, prod, max/min with indices), softmax, log-softmax, cumsum.
pub const ROWS: KernelModule = KernelModule::new("rows", include_str!("rows.cu"));

/// index_select, gather, scatter_add (atomics) and the im2col pair behind conv2d.
pub const INDEX: KernelModule = KernelModule::new("index", include_str!("index.cu"));

/// Every module, for tests and ahead-of-use compilation: the shared ones above and each
/// fused op's (`crate::fused::*::CUDA_MODULE`).
pub const MODULES: [KernelModule; 9] = [
    ELEMENTWISE,
    ROWS,
    INDEX,
    crate::fused::layer_norm::CUDA_MODULE,
    crate::fused::cross_entropy::CUDA_MODULE,
    crate::fused::dropout::CUDA_MODULE,
    crate::fused::pool::CUDA_MODULE,
    crate::fused::optim::CUDA_MODULE,
    crate::fused::attention::CUDA_MODULE,
];

impl KernelModule {
    /// A module named `name` (also its cache key) with the source `body`; the shared
    /// header is prepended when it is compiled.
    pub const fn new(name: &'static str, body: &'static str) -> Self {
        KernelModule::with_prelude(name, &[], body)
    }

    /// A module whose source is `prelude` (declarations generated from Rust, such as
    /// `AdamStep::CUDA_DECLARATION`), then `body`.
    pub const fn with_prelude(
        name: &'static str,
        prelude: &'static [&'static str],
        body: &'static str,
    ) -> Self {
        KernelModule {
            name,
            prelude,
            body,
        }
    }

    /// The full CUDA C++ source: the shared header, then the module.
    pub fn source(&self) -> String {
        format!("{COMMON}\n{}\n{}", self.prelude.concat(), self.body)
    }
}
