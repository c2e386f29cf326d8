//! CUDA kernel sources, compiled at run time by NVRTC to machine code (CUBIN) for the
//! device's architecture and cached, so building never needs `nvcc`, and loading never
//! needs the driver to JIT PTX (which fails when NVRTC is newer than the driver). Each
//! source is written once as templates over the element types and instantiated as
//! `extern "C"` entry points named `OP_DTYPE` (`add_f32`, `softmax_rows_bf16`, ...).
//!
//! The sources need no CUDA toolkit headers (half types are converted with PTX `cvt`),
//! so they compile on machines that have only the driver and NVRTC.

use cudarc::nvrtc::{result, sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::fmt;
use std::sync::{Arc, Mutex};

const COMMON: &str = include_str!("common.cuh");

/// Compiled images by (module name, architecture).
type ImageCache = HashMap<(&'static str, String), Arc<Vec<u8>>>;

/// Why NVRTC could not compile a kernel module.
#[derive(Debug, Clone)]
pub struct CompileError {
    /// The module that failed.
    pub module: &'static str,
    /// The architecture it was compiled for.
    pub arch: String,
    /// NVRTC's status and program log.
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NVRTC could not compile the `{}` kernels for {}: {}",
            self.module, self.arch, self.message
        )
    }
}

impl std::error::Error for CompileError {}

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

/// Reductions along a dim (sum, prod, max/min with indices), softmax, log-softmax, cumsum.
pub const ROWS: KernelModule = KernelModule {
    name: "rows",
    body: include_str!("rows.cu"),
};

/// index_select, gather, scatter_add (atomics) and the im2col pair behind conv2d.
pub const INDEX: KernelModule = KernelModule {
    name: "index",
    body: include_str!("index.cu"),
};

/// Every module, for tests and ahead-of-use compilation.
pub const MODULES: [KernelModule; 3] = [ELEMENTWISE, ROWS, INDEX];

impl KernelModule {
    /// The full CUDA C++ source: the shared header, then the module.
    pub fn source(&self) -> String {
        format!("{COMMON}\n{}", self.body)
    }

    /// Compiles the module to machine code (a CUBIN) for `arch` (such as `"sm_90"`),
    /// loadable with `CudaContext::load_module(Ptx::from_binary(..))`.
    pub fn compile(&self, arch: &str) -> Result<Vec<u8>, CompileError> {
        let fail = |message: String| CompileError {
            module: self.name,
            arch: arch.to_string(),
            message,
        };
        // Our sources and names hold no NUL bytes.
        let src = CString::new(self.source()).map_err(|e| fail(e.to_string()))?;
        let name = CString::new(format!("{}.cu", self.name)).map_err(|e| fail(e.to_string()))?;
        let prog = result::create_program(&src, Some(&name)).map_err(|e| fail(e.to_string()))?;
        let options = [
            format!("--gpu-architecture={arch}"),
            "--std=c++17".to_string(),
        ];
        // SAFETY: `prog` was just created and is destroyed once, below; `src` and `name`
        // outlive it.
        let compiled = unsafe { result::compile_program(prog, &options) };
        let image = match compiled {
            Ok(()) => cubin(prog).map_err(|e| fail(e.to_string())),
            Err(e) => {
                // SAFETY: as above.
                let log = unsafe { result::get_program_log(prog) }
                    .map(|chars| {
                        let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
                        String::from_utf8_lossy(&bytes)
                            .trim_end_matches('\0')
                            .to_string()
                    })
                    .unwrap_or_default();
                Err(fail(format!("{e}\n{log}")))
            }
        };
        // SAFETY: `prog` is live and not used after this.
        let _ = unsafe { result::destroy_program(prog) };
        image
    }

    /// [`KernelModule::compile`], once per module and architecture for the process.
    pub fn compile_cached(&self, arch: &str) -> Result<Arc<Vec<u8>>, CompileError> {
        static CACHE: Mutex<Option<ImageCache>> = Mutex::new(None);
        let key = (self.name, arch.to_string());
        if let Some(image) = CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .get(&key)
        {
            return Ok(image.clone());
        }
        // Compile outside the lock: NVRTC takes a while and other modules may be wanted.
        let image = Arc::new(self.compile(arch)?);
        CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(key, image.clone());
        Ok(image)
    }
}

/// The CUBIN of a compiled program.
fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, result::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; NVRTC writes `size` bytes into a buffer of
    // exactly that size.
    unsafe {
        sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
        let mut image = vec![0u8; size];
        sys::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast()).result()?;
        Ok(image)
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

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }

    #[test]
    fn every_kernel_module_compiles_under_nvrtc() {
        if !nvrtc_available() {
            println!(
                "skipped: NVRTC not found (put libnvrtc on the library path to compile the CUDA kernels)"
            );
            return;
        }
        for module in MODULES {
            let image = module
                .compile_cached("sm_90")
                .unwrap_or_else(|e| panic!("{e}"));
            let bytes = image.as_slice();
            assert!(
                bytes.starts_with(b"\x7fELF"),
                "{} is not a CUBIN",
                module.name
            );
            let entries: &[&str] = match module.name {
                "elementwise" => &[
                    "add_f32",
                    "add_i64",
                    "add_inplace_bf16",
                    "gelu_f16",
                    "affine_inplace_f64",
                    "lt_bool",
                    "where_u8",
                    "cast_i64_f16",
                    "cast_bf16_bool",
                    "copy_f32",
                    "fill_bool",
                ],
                "rows" => &[
                    "sum_rows_f32",
                    "sum_cols_i64",
                    "prod_cols_bf16",
                    "argmax_rows_bool",
                    "argmin_cols_f16",
                    "softmax_rows_f64",
                    "log_softmax_rows_bf16",
                    "cumsum_cols_i64",
                ],
                _ => &[
                    "index_select_bool",
                    "gather_f32",
                    "scatter_add_f16",
                    "scatter_add_u8",
                    "unfold2d_f32",
                    "fold2d_bf16",
                ],
            };
            for entry in entries {
                assert!(contains(bytes, entry), "{} lacks {entry}", module.name);
            }
        }
        // Cached: the second request returns the same image.
        let (a, b) = (
            ROWS.compile_cached("sm_90").unwrap(),
            ROWS.compile_cached("sm_90").unwrap(),
        );
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_compile_error_carries_the_nvrtc_log() {
        if !nvrtc_available() {
            println!("skipped: NVRTC not found");
            return;
        }
        let broken = KernelModule {
            name: "broken",
            body: "extern \"C\" __global__ void k() { undefined_name(); }",
        };
        let err = broken.compile("sm_90").unwrap_err();
        assert!(err.message.contains("undefined_name"), "{err}");
        assert!(err.to_string().contains("`broken`"), "{err}");
    }
}
