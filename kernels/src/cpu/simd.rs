//! Runtime CPU-feature dispatch. The crate builds for baseline x86-64 (SSE2), so loops
//! vectorise 4 wide at most; [`with_simd`] runs a kernel compiled again for AVX-512 (16
//! wide) or AVX2+FMA (8 wide) when the CPU has them.
//!
//! The kernel is a [`SimdKernel`] whose `run` is `#[inline(always)]`: that forces its body
//! into each feature-specific copy. (A closure would be compiled once, without the
//! features, because LLVM will not inline a large closure called from two places.)

/// A loop to compile per CPU feature level. Implementations mark `run` `#[inline(always)]`.
pub(crate) trait SimdKernel {
    type Output;
    fn run(self) -> Self::Output;

    /// The body for the AVX2 and AVX-512 levels, which have FMA; `run` unless the kernel
    /// is an [`FmaKernel`].
    #[inline(always)]
    fn run_fma(self) -> Self::Output
    where
        Self: Sized,
    {
        self.run()
    }
}

/// A kernel whose float math gains from fused multiply-adds: `body::<true>()` runs at
/// the AVX2 and AVX-512 levels (which have FMA), `body::<false>()` elsewhere, where
/// `f32::mul_add` would be a library call. Implementations mark `body`
/// `#[inline(always)]`.
pub(crate) trait FmaKernel {
    type Output;
    fn body<const FMA: bool>(self) -> Self::Output;
}

impl<K: FmaKernel> SimdKernel for K {
    type Output = K::Output;
    #[inline(always)]
    fn run(self) -> K::Output {
        self.body::<false>()
    }
    #[inline(always)]
    fn run_fma(self) -> K::Output {
        self.body::<true>()
    }
}

/// Whether `with_simd` runs kernels compiled with FMA on this CPU (AVX-512, or AVX2
/// with FMA), so that code it runs may call `mul_add` as one instruction rather than a
/// library call. Elementwise ops that gain from fused multiply-adds pick their FMA body
/// with it.
///
/// ```
/// // Either answer is valid; it only depends on the CPU.
/// let _ = ferrograd_kernels::cpu::simd_has_fma();
/// ```
pub fn simd_has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            || (std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Runs `kernel` with AVX2+FMA code generation when the CPU supports it, else as is.
#[inline(always)]
pub(crate) fn with_simd<K: SimdKernel>(kernel: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            #[target_feature(enable = "avx512f,avx2,fma")]
            unsafe fn avx512<K: SimdKernel>(kernel: K) -> K::Output {
                kernel.run_fma()
            }
            // SAFETY: `avx512` needs AVX-512F (checked here), which implies AVX2 and FMA.
            return unsafe { avx512(kernel) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<K: SimdKernel>(kernel: K) -> K::Output {
                kernel.run_fma()
            }
            // SAFETY: `avx2` only needs the CPU to support AVX2 and FMA, checked just above.
            return unsafe { avx2(kernel) };
        }
    }
    kernel.run()
}
