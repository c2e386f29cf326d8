//! Compiling the kernel modules with NVRTC (loaded at run time) and caching the images.

use super::KernelModule;
use cudarc::nvrtc::{result, sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Compiled images by (module name, architecture); a slot is empty until its first compile
/// succeeds, and is locked while that compile runs.
type ImageCache = HashMap<(&'static str, String), Arc<Mutex<Option<Arc<Vec<u8>>>>>>;

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

impl KernelModule {
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

    /// [`KernelModule::compile`], once per module and architecture for the process, and
    /// kept on disk between runs (see [`kernel_cache_dir`]), so only the first run on a
    /// machine waits for NVRTC. Threads asking for a module another thread is compiling
    /// wait for that compile instead of running NVRTC on it again; different modules
    /// compile concurrently.
    pub fn compile_cached(&self, arch: &str) -> Result<Arc<Vec<u8>>, CompileError> {
        static CACHE: Mutex<Option<ImageCache>> = Mutex::new(None);
        let slot = CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .entry((self.name, arch.to_string()))
            .or_default()
            .clone();
        // The global lock is released: only this module's slot is held while NVRTC runs.
        let mut image = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(image) = image.as_ref() {
            return Ok(image.clone());
        }
        let compiled = Arc::new(self.compile_or_load(arch, kernel_cache_dir().as_deref())?);
        *image = Some(compiled.clone());
        Ok(compiled)
    }
}

impl KernelModule {
    /// The cached image's file name: the module, the architecture and a hash of the
    /// source, so an edited kernel or another GPU never picks up a stale image.
    fn cache_file(&self, arch: &str) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.source(), arch).hash(&mut h);
        format!("{}-{arch}-{:016x}.cubin", self.name, h.finish())
    }

    /// The image from `dir` when cached there, else compiled and stored there (written to
    /// a temporary file and renamed, so a reader never sees half a file). A cache that
    /// cannot be read or written is skipped.
    fn compile_or_load(&self, arch: &str, dir: Option<&Path>) -> Result<Vec<u8>, CompileError> {
        let path = dir.map(|d| d.join(self.cache_file(arch)));
        if let Some(image) = path.as_ref().and_then(|p| std::fs::read(p).ok())
            && image.starts_with(b"\x7fELF")
        {
            return Ok(image);
        }
        let image = self.compile(arch)?;
        if let (Some(dir), Some(path)) = (dir, path) {
            let tmp = dir.join(format!(".{}.{}", self.cache_file(arch), std::process::id()));
            let stored = std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(&tmp, &image))
                .and_then(|()| std::fs::rename(&tmp, &path));
            if stored.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        Ok(image)
    }
}

/// Where compiled kernels are kept between runs: `$FERROGRAD_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/ferrograd/kernels`, else `~/.cache/ferrograd/kernels`; `None` (no disk
/// cache) when `FERROGRAD_KERNEL_CACHE` is empty or no home is known.
///
/// ```
/// let dir = ferrograd_kernels::cuda::kernel_cache_dir();
/// assert!(dir.is_none() || dir.unwrap().is_absolute() || std::env::var_os("FERROGRAD_KERNEL_CACHE").is_some());
/// ```
pub fn kernel_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FERROGRAD_KERNEL_CACHE") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("ferrograd").join("kernels"))
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

/// Whether NVRTC is there for a test that compiles kernels: `false` (and a line saying the
/// test skipped) without it, except under CI (`CI=true`), where every submission must
/// compile every kernel and a missing NVRTC is a failure.
///
/// ```
/// # if std::env::var("CI").as_deref() != Ok("true") {
/// let _ = ferrograd_kernels::cuda::nvrtc_required("doc example");
/// # }
/// ```
pub fn nvrtc_required(test: &str) -> bool {
    if nvrtc_available() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: NVRTC not found under CI=true; .ci/nvrtc.sh fetches it (put its lib/ on LD_LIBRARY_PATH)"
    );
    println!(
        "{test}: skipped, NVRTC not found (put libnvrtc on the library path to compile the CUDA kernels)"
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the CUBIN's symbol table holds exactly `symbol` (names are NUL-terminated
    /// in the ELF string table, so `add_f32` does not match `add_f32x`).
    fn exports(image: &[u8], symbol: &str) -> bool {
        let needle = [b"\0", symbol.as_bytes(), b"\0"].concat();
        image.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn every_launched_kernel_is_exported_by_its_compiled_module() {
        if !nvrtc_required("every_launched_kernel_is_exported_by_its_compiled_module") {
            return;
        }
        // The modules compile on every core (NVRTC is thread-safe), then are checked in
        // order.
        let modules = super::super::MODULES;
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::thread::scope(|s| {
            for _ in 0..threads.min(modules.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(module) = modules.get(i) else { break };
                        // Errors are reported below, in order, by the same call.
                        let _ = module.compile_cached("sm_90");
                    }
                });
            }
        });
        let mut checked = 0;
        for module in modules {
            let image = module
                .compile_cached("sm_90")
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                image.starts_with(b"\x7fELF"),
                "{} is not a CUBIN",
                module.name
            );
            for symbol in super::super::launched_symbols(&module) {
                assert!(
                    exports(&image, symbol),
                    "module {} does not export {symbol}",
                    module.name
                );
                checked += 1;
            }
        }
        // Every family of the registry lives in one of the modules above.
        for kernel in super::super::KERNELS {
            assert!(
                super::super::MODULES.contains(kernel.module()),
                "{} has no module",
                kernel.base()
            );
        }
        println!("{checked} kernel symbols exported");
        assert!(checked > 400, "only {checked} symbols checked");
        // Cached: the second request returns the same image.
        let (a, b) = (
            super::super::ROWS.compile_cached("sm_90").unwrap(),
            super::super::ROWS.compile_cached("sm_90").unwrap(),
        );
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_misspelt_symbol_is_not_reported_as_exported() {
        if !nvrtc_required("a_misspelt_symbol_is_not_reported_as_exported") {
            return;
        }
        let image = super::super::ELEMENTWISE.compile_cached("sm_90").unwrap();
        assert!(exports(&image, "add_f32"));
        assert!(!exports(&image, "add_f3"));
        assert!(!exports(&image, "ad_f32"));
        assert!(!exports(&image, "exp_i64"));
    }

    #[test]
    fn compiled_images_are_kept_on_disk_and_reused() {
        if !nvrtc_required("compiled_images_are_kept_on_disk_and_reused") {
            return;
        }
        let dir =
            std::env::temp_dir().join(format!("ferrograd-kernel-cache-{}", std::process::id()));
        let tiny = KernelModule::new(
            "tiny",
            "extern \"C\" __global__ void one(float* x) { x[0] = 1.0f; }",
        );
        let first = tiny.compile_or_load("sm_90", Some(&dir)).unwrap();
        let file = dir.join(tiny.cache_file("sm_90"));
        assert_eq!(std::fs::read(&file).unwrap(), first);
        // A planted image under the same name is what the next run loads.
        let mut planted = first.clone();
        planted.extend_from_slice(b"marker");
        std::fs::write(&file, &planted).unwrap();
        assert_eq!(tiny.compile_or_load("sm_90", Some(&dir)).unwrap(), planted);
        // Another architecture or source is another file; garbage is recompiled over.
        assert_ne!(tiny.cache_file("sm_80"), tiny.cache_file("sm_90"));
        std::fs::write(&file, b"not a cubin").unwrap();
        assert_eq!(tiny.compile_or_load("sm_90", Some(&dir)).unwrap(), first);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_compile_error_carries_the_nvrtc_log() {
        if !nvrtc_required("a_compile_error_carries_the_nvrtc_log") {
            return;
        }
        let broken = KernelModule::new(
            "broken",
            "extern \"C\" __global__ void k() { undefined_name(); }",
        );
        let err = broken.compile("sm_90").unwrap_err();
        assert!(err.message.contains("undefined_name"), "{err}");
        assert!(err.to_string().contains("`broken`"), "{err}");
    }
}
