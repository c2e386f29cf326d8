//! The SIMD levels the direct convolution kernels are compiled for, and the vector types
//! they are written over: [`Lanes`] (16 floats: output channels, in `direct`) and
//! [`Vector`] (one register of pixels, in `pixels`). Every method is `#[inline(always)]`,
//! so it compiles into the `#[target_feature]` entry point that calls it, where the
//! intrinsics' features are enabled.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The SIMD level the direct kernels run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) enum Level {
    /// AVX-512F: 16-float registers.
    Avx512,
    /// AVX2 with FMA: 8-float registers.
    Avx2,
}

impl Level {
    /// Floats per register.
    pub(super) fn lanes(self) -> usize {
        match self {
            Level::Avx512 => 16,
            Level::Avx2 => 8,
        }
    }
}

/// This CPU's level, if it has one the kernels are written for.
pub(super) fn level() -> Option<Level> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Some(Level::Avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Some(Level::Avx2);
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{Lanes, Vector, Ymm, Ymm2, Zmm, Zmm2};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;

    /// The operations the kernels need on `WIDTH` floats (`direct::OB`, 16, except the
    /// wide kernel's [`Zmm2`]). Every method is `#[inline(always)]`, so it compiles into
    /// the `#[target_feature]` entry point that calls it (where the intrinsics' features
    /// are enabled).
    pub(in crate::fused::conv) trait Lanes: Copy {
        /// Pixels (or reduction rows) per register block: as many accumulators as leave
        /// registers for the weights and a broadcast.
        const PX: usize;
        /// Floats per value: the output channels of a register block.
        const WIDTH: usize = 16;
        /// Whether a block's pixels are stored by turning the block over in registers
        /// (AVX-512's 16 × 16 transpose: one run per channel, where a scatter writes one
        /// float per channel and pixel, each to another cache line).
        const TURNS: bool = false;
        /// # Safety
        /// `p` points to `WIDTH` readable floats; the CPU has the type's features.
        unsafe fn load(p: *const f32) -> Self;
        /// # Safety
        /// The CPU has the type's features.
        unsafe fn splat(v: f32) -> Self;
        /// `a * b + c`.
        /// # Safety
        /// The CPU has the type's features.
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
        /// # Safety
        /// `p` points to `WIDTH` writable floats; the CPU has the type's features.
        unsafe fn store(self, p: *mut f32);
    }

    /// AVX-512F, 32 output channels by twelve pixels (24 accumulators of 32 registers):
    /// each broadcast input feeds two FMAs, so a block issues half a load per FMA where
    /// [`Zmm`]'s sixteen channels need one (the load ports, not the two FMA ports, bound
    /// it).
    #[derive(Clone, Copy)]
    pub(in crate::fused::conv) struct Zmm2(__m512, __m512);

    impl Lanes for Zmm2 {
        const PX: usize = 12;
        const WIDTH: usize = 32;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { Zmm2(_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))) }
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            let v = unsafe { _mm512_set1_ps(v) };
            Zmm2(v, v)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            unsafe {
                Zmm2(
                    _mm512_fmadd_ps(a.0, b.0, c.0),
                    _mm512_fmadd_ps(a.1, b.1, c.1),
                )
            }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe {
                _mm512_storeu_ps(p, self.0);
                _mm512_storeu_ps(p.add(16), self.1);
            }
        }
    }

    /// AVX-512F: eight pixels per block (8 accumulators of 32 registers).
    #[derive(Clone, Copy)]
    pub(in crate::fused::conv) struct Zmm(__m512);

    impl Lanes for Zmm {
        const PX: usize = 8;
        const TURNS: bool = true;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            Zmm(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: the caller's contract.
            Zmm(unsafe { _mm512_set1_ps(v) })
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller's contract.
            Zmm(unsafe { _mm512_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
    }

    /// AVX2 + FMA: two 8-float halves, six pixels per block (12 accumulators, two weight
    /// halves and a broadcast fill the 16 registers).
    #[derive(Clone, Copy)]
    pub(in crate::fused::conv) struct Ymm2(__m256, __m256);

    impl Lanes for Ymm2 {
        const PX: usize = 6;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract (16 floats from `p`).
            unsafe { Ymm2(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) }
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: the caller's contract.
            let v = unsafe { _mm256_set1_ps(v) };
            Ymm2(v, v)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller's contract.
            unsafe {
                Ymm2(
                    _mm256_fmadd_ps(a.0, b.0, c.0),
                    _mm256_fmadd_ps(a.1, b.1, c.1),
                )
            }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract (16 floats from `p`).
            unsafe {
                _mm256_storeu_ps(p, self.0);
                _mm256_storeu_ps(p.add(8), self.1);
            }
        }
    }

    /// One register of pixels for the pixel-vectorised kernels (`pixels`).
    pub(in crate::fused::conv) trait Vector: Copy {
        /// Floats per register.
        const LANES: usize;
        /// # Safety
        /// `p` points to `LANES` readable floats; the CPU has the type's features.
        unsafe fn load(p: *const f32) -> Self;
        /// # Safety
        /// The CPU has the type's features.
        unsafe fn splat(v: f32) -> Self;
        /// `a * b + c`.
        /// # Safety
        /// The CPU has the type's features.
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
        /// # Safety
        /// `p` points to `LANES` writable floats; the CPU has the type's features.
        unsafe fn store(self, p: *mut f32);
        /// The lane sums of four registers.
        /// # Safety
        /// The CPU has the type's features.
        unsafe fn sum4(v: [Self; 4]) -> [f32; 4];
        /// The lane sums of `LANES` registers, as one register: lane `j` holds the sum
        /// of `v[j]`'s lanes (a transposing tree of shuffles and adds).
        /// # Safety
        /// `v` holds `LANES` registers; the CPU has the type's features.
        unsafe fn sum_lanes(v: &[Self]) -> Self;
        /// Writes the first `n` lanes (`n ≤ LANES`) to `p..p + n`, and nothing past them.
        /// # Safety
        /// `p` points to `n` writable floats; the CPU has the type's features.
        unsafe fn store_first(self, p: *mut f32, n: usize);
        /// Writes `even[0], odd[0], even[1], odd[1], …`: `2·LANES` floats from `p`.
        /// # Safety
        /// `p` points to `2·LANES` writable floats; the CPU has the type's features.
        unsafe fn store_interleaved(even: Self, odd: Self, p: *mut f32);
    }

    impl Vector for Zmm {
        const LANES: usize = 16;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            unsafe { <Zmm as Lanes>::load(p) }
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: the caller's contract.
            unsafe { <Zmm as Lanes>::splat(v) }
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller's contract.
            unsafe { <Zmm as Lanes>::fma(a, b, c) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { <Zmm as Lanes>::store(self, p) }
        }
        #[inline(always)]
        unsafe fn store_first(self, p: *mut f32, n: usize) {
            // SAFETY: the caller's contract; masked-off lanes are neither written nor
            // faulted on.
            unsafe { _mm512_mask_storeu_ps(p, ((1u32 << n.min(16)) - 1) as __mmask16, self.0) }
        }
        #[inline(always)]
        unsafe fn store_interleaved(even: Self, odd: Self, p: *mut f32) {
            // SAFETY: the caller's contract. Index `i < 16` picks `even`'s lane `i`, `16 +
            // i` `odd`'s.
            unsafe {
                let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
                let hi =
                    _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
                _mm512_storeu_ps(p, _mm512_permutex2var_ps(even.0, lo, odd.0));
                _mm512_storeu_ps(p.add(16), _mm512_permutex2var_ps(even.0, hi, odd.0));
            }
        }
        #[inline(always)]
        unsafe fn sum_lanes(v: &[Self]) -> Self {
            const EVEN: i32 = 0b10_00_10_00;
            const ODD: i32 = 0b11_01_11_01;
            assert!(v.len() >= 16);
            // SAFETY: the caller's contract. Round 1 leaves, in each 128-bit lane of
            // `t[k]`, position p ∈ {0, 2} partial sums of `v[2k]` and {1, 3} of `v[2k +
            // 1]`; round 2 puts `v[4m + p]`'s 128-bit lane sums at position p of
            // `u[m]`; the two lane-shuffle rounds add the four 128-bit lanes, leaving
            // `v[4j + p]`'s total at lane `4j + p`.
            // (Loops, not `array::from_fn`: a closure does not inherit the function's
            // target features, so the intrinsics in it were calls.)
            unsafe {
                let mut t = [_mm512_setzero_ps(); 8];
                for (k, t) in t.iter_mut().enumerate() {
                    let (a, b) = (v[2 * k].0, v[2 * k + 1].0);
                    *t = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
                }
                let mut u = [_mm512_setzero_ps(); 4];
                for (m, u) in u.iter_mut().enumerate() {
                    let (c, d) = (_mm512_castps_pd(t[2 * m]), _mm512_castps_pd(t[2 * m + 1]));
                    *u = _mm512_add_ps(
                        _mm512_castpd_ps(_mm512_unpacklo_pd(c, d)),
                        _mm512_castpd_ps(_mm512_unpackhi_pd(c, d)),
                    );
                }
                let mut w = [_mm512_setzero_ps(); 2];
                for (q, w) in w.iter_mut().enumerate() {
                    let (e, f) = (u[2 * q], u[2 * q + 1]);
                    *w = _mm512_add_ps(
                        _mm512_shuffle_f32x4::<EVEN>(e, f),
                        _mm512_shuffle_f32x4::<ODD>(e, f),
                    );
                }
                Zmm(_mm512_add_ps(
                    _mm512_shuffle_f32x4::<EVEN>(w[0], w[1]),
                    _mm512_shuffle_f32x4::<ODD>(w[0], w[1]),
                ))
            }
        }
        #[inline(always)]
        unsafe fn sum4(v: [Self; 4]) -> [f32; 4] {
            let [a, b, c, d] = v;
            // SAFETY: the caller's contract.
            unsafe {
                [
                    _mm512_reduce_add_ps(a.0),
                    _mm512_reduce_add_ps(b.0),
                    _mm512_reduce_add_ps(c.0),
                    _mm512_reduce_add_ps(d.0),
                ]
            }
        }
    }

    /// One AVX2 register of eight floats (with FMA).
    #[derive(Clone, Copy)]
    pub(in crate::fused::conv) struct Ymm(__m256);

    impl Vector for Ymm {
        const LANES: usize = 8;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            Ymm(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: the caller's contract.
            Ymm(unsafe { _mm256_set1_ps(v) })
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller's contract.
            Ymm(unsafe { _mm256_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        unsafe fn store_first(self, p: *mut f32, n: usize) {
            // SAFETY: the caller's contract; lanes whose mask sign bit is clear are neither
            // written nor faulted on.
            unsafe {
                let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), idx);
                _mm256_maskstore_ps(p, mask, self.0)
            }
        }
        #[inline(always)]
        unsafe fn store_interleaved(even: Self, odd: Self, p: *mut f32) {
            // SAFETY: the caller's contract. Within each 128-bit half the unpacks pair
            // lanes 0–1 (`lo`) and 2–3 (`hi`); the half swaps put them in order.
            unsafe {
                let lo = _mm256_unpacklo_ps(even.0, odd.0);
                let hi = _mm256_unpackhi_ps(even.0, odd.0);
                _mm256_storeu_ps(p, _mm256_permute2f128_ps::<0x20>(lo, hi));
                _mm256_storeu_ps(p.add(8), _mm256_permute2f128_ps::<0x31>(lo, hi));
            }
        }
        #[inline(always)]
        unsafe fn sum_lanes(v: &[Self]) -> Self {
            assert!(v.len() >= 8);
            // SAFETY: the caller's contract. As AVX-512's tree: after the two unpack
            // rounds position p of each 128-bit half of `u[m]` holds `v[4m + p]`'s half
            // sum; the half swap adds the halves.
            unsafe {
                let mut t = [_mm256_setzero_ps(); 4];
                for (k, t) in t.iter_mut().enumerate() {
                    let (a, b) = (v[2 * k].0, v[2 * k + 1].0);
                    *t = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
                }
                let mut u = [_mm256_setzero_ps(); 2];
                for (m, u) in u.iter_mut().enumerate() {
                    let (c, d) = (_mm256_castps_pd(t[2 * m]), _mm256_castps_pd(t[2 * m + 1]));
                    *u = _mm256_add_ps(
                        _mm256_castpd_ps(_mm256_unpacklo_pd(c, d)),
                        _mm256_castpd_ps(_mm256_unpackhi_pd(c, d)),
                    );
                }
                Ymm(_mm256_add_ps(
                    _mm256_permute2f128_ps::<0x20>(u[0], u[1]),
                    _mm256_permute2f128_ps::<0x31>(u[0], u[1]),
                ))
            }
        }
        #[inline(always)]
        unsafe fn sum4([a, b, c, d]: [Self; 4]) -> [f32; 4] {
            let mut out = [0.0f32; 4];
            // SAFETY: the caller's contract; `out` holds four floats. Pairwise sums within
            // each 128-bit half put register i's half-sums in lane i of each half.
            unsafe {
                let ab = _mm256_hadd_ps(a.0, b.0);
                let cd = _mm256_hadd_ps(c.0, d.0);
                let h = _mm256_hadd_ps(ab, cd);
                let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
                _mm_storeu_ps(out.as_mut_ptr(), s);
            }
            out
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// `sum_lanes`, `store_interleaved` and `store_first` at both widths.
    #[test]
    fn sums_lanes() {
        fn check<V: Vector>() {
            let n = V::LANES;
            let data: Vec<f32> = (0..n * n).map(|i| (i * i % 97) as f32 - 40.0).collect();
            let mut out = vec![0.0f32; n];
            // SAFETY: the caller checked `V`'s features; `data` holds `n` registers and
            // `out` one.
            unsafe {
                let v: Vec<V> = data.chunks_exact(n).map(|c| V::load(c.as_ptr())).collect();
                V::sum_lanes(&v).store(out.as_mut_ptr());
            }
            let want: Vec<f32> = data.chunks_exact(n).map(|c| c.iter().sum()).collect();
            assert_eq!(out, want, "{n} lanes");
        }
        fn stores<V: Vector>() {
            let n = V::LANES;
            let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..n).map(|i| 100.0 + i as f32).collect();
            // SAFETY: the caller checked `V`'s features; each buffer holds what is
            // written (`2n` floats, or `k ≤ n` of `n + 1`).
            unsafe {
                let (va, vb) = (V::load(a.as_ptr()), V::load(b.as_ptr()));
                let mut out = vec![0.0f32; 2 * n];
                V::store_interleaved(va, vb, out.as_mut_ptr());
                let want: Vec<f32> = (0..2 * n)
                    .map(|i| if i % 2 == 0 { a[i / 2] } else { b[i / 2] })
                    .collect();
                assert_eq!(out, want, "interleaved, {n} lanes");
                for k in 0..=n {
                    let mut out = vec![-1.0f32; n + 1];
                    va.store_first(out.as_mut_ptr(), k);
                    let want: Vec<f32> = (0..=n).map(|i| if i < k { a[i] } else { -1.0 }).collect();
                    assert_eq!(out, want, "first {k} of {n} lanes");
                }
            }
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            check::<Zmm>();
            stores::<Zmm>();
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            check::<Ymm>();
        } else {
            eprintln!("skipping: no AVX2 + FMA on this CPU");
        }
    }
}
