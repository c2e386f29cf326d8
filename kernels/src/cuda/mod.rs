//! CUDA kernel sources, compiled at run time by NVRTC for the device's architecture and
//! cached, so building never needs `nvcc`. Each source is written once as templates over
//! f32, f64, f16 and bf16 and instantiated as `extern "C"` entry points named
//! `OP_DTYPE` (`add_f32`, `softmax_rows_bf16`, ...).
//!
//! The sources need no CUDA toolkit headers (half types are converted with PTX `cvt`),
//! so they compile on machines that have only the driver and NVRTC.

use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const COMMON: &str = include_str!("common.cuh");

/// Compiled PTX by (module name, architecture).
type PtxCache = HashMap<(&'static str, &'static str), Arc<Ptx>>;

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

/// Row-wise reductions: sum, softmax, log-softmax.
pub const ROWS: KernelModule = KernelModule {
    name: "rows",
    body: include_str!("rows.cu"),
};

/// Every module, for tests and ahead-of-use compilation.
pub const MODULES: [KernelModule; 2] = [ELEMENTWISE, ROWS];

impl KernelModule {
    /// The full CUDA C++ source: the shared header, then the module.
    pub fn source(&self) -> String {
        format!("{COMMON}\n{}", self.body)
    }

    /// Compiles the module to PTX for `arch` (such as `"sm_90"`).
    pub fn compile(&self, arch: &'static str) -> Result<Ptx, CompileError> {
        let options = CompileOptions {
            arch: Some(arch),
            name: Some(format!("{}.cu", self.name)),
            ..Default::default()
        };
        compile_ptx_with_opts(self.source(), options)
    }

    /// [`KernelModule::compile`], once per module and architecture for the process.
    pub fn compile_cached(&self, arch: &'static str) -> Result<Arc<Ptx>, CompileError> {
        static CACHE: Mutex<Option<PtxCache>> = Mutex::new(None);
        let key = (self.name, arch);
        if let Some(ptx) = CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .get(&key)
        {
            return Ok(ptx.clone());
        }
        // Compile outside the lock: NVRTC takes a while and other modules may be wanted.
        let ptx = Arc::new(self.compile(arch)?);
        CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(key, ptx.clone());
        Ok(ptx)
    }
}

/// Whether the NVRTC library can be loaded (it is looked up at run time).
pub fn nvrtc_available() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the library; it calls nothing in it.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_module_compiles_under_nvrtc() {
        if !nvrtc_available() {
            println!(
                "skipped: NVRTC not found (put libnvrtc on the library path to compile the CUDA kernels)"
            );
            return;
        }
        for module in MODULES {
            let ptx = module
                .compile_cached("sm_90")
                .unwrap_or_else(|e| panic!("{} failed to compile: {e:?}", module.name));
            let text = ptx.to_src();
            for dtype in ["f32", "f64", "f16", "bf16"] {
                let entry = match module.name {
                    "elementwise" => format!(".entry add_{dtype}("),
                    _ => format!(".entry softmax_rows_{dtype}("),
                };
                assert!(text.contains(&entry), "{} lacks {entry}", module.name);
            }
        }
        // Cached: the second request returns the same PTX.
        let (a, b) = (
            ROWS.compile_cached("sm_90").unwrap(),
            ROWS.compile_cached("sm_90").unwrap(),
        );
        assert!(Arc::ptr_eq(&a, &b));
    }
}
