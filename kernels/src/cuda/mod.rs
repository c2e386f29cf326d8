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
    body: &'static str,
}

/// Strided binary and unary elementwise kernels.
pub const ELEMENTWISE: KernelModule = KernelModule {
    name: "elementwise",
    body: include_str!("elementwise.cu"),
};

/// Reductions along a dim (sum, prod, max/min with indices), softmax, log-softmax, cumsum,
/// and the fused row ops: layer norm forward/backward and cross-entropy forward/backward.
pub const ROWS: KernelModule = KernelModule {
    name: "rows",
    body: include_str!("rows.cu"),
};

/// index_select, gather, scatter_add (atomics) and the im2col pair behind conv2d.
pub const INDEX: KernelModule = KernelModule {
    name: "index",
    body: include_str!("index.cu"),
};

/// Multi-tensor optimizer steps (Adam/AdamW, SGD): every parameter of a dtype in one launch.
pub const OPTIM: KernelModule = KernelModule {
    name: "optim",
    body: include_str!("optim.cu"),
};

/// Every module, for tests and ahead-of-use compilation.
pub const MODULES: [KernelModule; 4] = [ELEMENTWISE, ROWS, INDEX, OPTIM];

impl KernelModule {
    /// The full CUDA C++ source: the shared header, then the module.
    pub fn source(&self) -> String {
        format!("{COMMON}\n{}", self.body)
    }
}
