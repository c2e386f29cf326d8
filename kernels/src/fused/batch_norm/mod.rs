//! Batch norm in few passes. Eval mode is one pass: with the running statistics folded
//! into a per-channel `scale = weight / sqrt(var + eps)` and `shift = bias - mean * scale`
//! (as PyTorch's CPU kernel folds them), `y = x * scale[c] + shift[c]` reads and writes
//! each element once (instead of four broadcast passes for subtract, multiply, scale and
//! shift). Training mode adds one statistics pass per channel in front
//! ([`channel_moments`]: the mean, then the centred sum of squares, from the channel's
//! planes while they sit in cache), and its backward is one reduction pass
//! ([`channel_grad_sums`]) and one pass that writes the input gradient
//! ([`channel_grad_input`]), where the composed ops take some fifteen. On CUDA the runtime
//! applies broadcast ops, so this folder has no `.cu`.

use crate::WideFloat as Float;
use crate::cpu::HostBuffer;
use crate::cpu::reduce::for_each_outer;
use crate::cpu::simd::{SimdKernel, with_simd};
use std::mem::MaybeUninit;

/// `(v - center) * scale + shift` with one rounding for the product and sum: the affine
/// pass's value, and the pre-activation the ReLU's backward recomputes from it.
#[inline(always)]
fn affine<T: Float>(v: T, center: T, scale: T, shift: T) -> T {
    (v - center).mul_add(scale, shift)
}

/// One plane (a sample's channel): `dst = (src - center) * scale + shift`, then with
/// `RELU` `max(dst, 0)` as the runtime's `relu` computes it (`y > 0 ? y : 0`).
struct AffinePlane<'a, T, const RELU: bool> {
    src: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
    center: T,
    scale: T,
    shift: T,
}

impl<T: Float, const RELU: bool> SimdKernel for AffinePlane<'_, T, RELU> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (d, &v) in self.dst.iter_mut().zip(self.src) {
            let y = affine(v, self.center, self.scale, self.shift);
            d.write(if !RELU || y > T::ZERO { y } else { T::ZERO });
        }
    }
}

/// The ReLU that followed a batch norm's affine pass, for its backward: the gradient
/// passes where the pre-activation `(x - center[c]) * scale[c] + shift[c]`, recomputed
/// from the input exactly as the forward computed it, is not `<= 0` (the runtime's
/// `relu` backward: a NaN passes its gradient). The operands are the forward's own.
#[derive(Clone, Copy, Debug)]
pub struct ReluAfter<'a, T> {
    /// Per-channel center (the batch mean; zeros for [`channel_affine`]).
    pub center: &'a [T],
    /// Per-channel scale.
    pub scale: &'a [T],
    /// Per-channel shift.
    pub shift: &'a [T],
}

/// One channel's mask operands from a [`ReluAfter`].
#[derive(Clone, Copy)]
struct Mask<T> {
    center: T,
    scale: T,
    shift: T,
}

impl<T: Float> Mask<T> {
    /// `g` where the pre-activation of `x` is not `<= 0`, else zero.
    #[inline(always)]
    fn apply(self, g: T, x: T) -> T {
        let y = affine(x, self.center, self.scale, self.shift);
        if y <= T::ZERO { T::ZERO } else { g }
    }
}

impl<T: Float> ReluAfter<'_, T> {
    fn channel(&self, c: usize) -> Mask<T> {
        Mask {
            center: self.center[c],
            scale: self.scale[c],
            shift: self.shift[c],
        }
    }

    fn check(&self, channels: usize) {
        assert!(
            self.center.len() == channels
                && self.scale.len() == channels
                && self.shift.len() == channels,
            "batch_norm backward: the ReLU's operands are not {channels} channels long"
        );
    }
}

/// `y[n, c, i] = x[n, c, i] * scale[c] + shift[c]` over contiguous `x` viewed as
/// `[n, channels, inner]`, in one pass (planes in parallel above the threshold).
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_affine;
/// // [1, 2, 2]: channel 0 doubled, channel 1 shifted by 10
/// let y = channel_affine(&[1.0f32, 2.0, 3.0, 4.0], &[2.0, 1.0], &[0.0, 10.0], 2);
/// assert_eq!(y, vec![2.0, 4.0, 13.0, 14.0]);
/// ```
pub fn channel_affine<T: Float>(x: &[T], scale: &[T], shift: &[T], inner: usize) -> HostBuffer<T> {
    affine_planes::<T, false>(x, None, scale, shift, inner)
}

/// [`channel_affine`] followed by a ReLU in the same pass (`y > 0 ? y : 0`): an eval-mode
/// batch norm and the activation after it.
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_affine_relu;
/// let y = channel_affine_relu(&[1.0f32, -2.0, 3.0, 4.0], &[2.0, 1.0], &[0.0, -13.5], 2);
/// assert_eq!(y, vec![2.0, 0.0, 0.0, 0.0]);
/// ```
pub fn channel_affine_relu<T: Float>(
    x: &[T],
    scale: &[T],
    shift: &[T],
    inner: usize,
) -> HostBuffer<T> {
    affine_planes::<T, true>(x, None, scale, shift, inner)
}

/// `y[n, c, i] = (x[n, c, i] - center[c]) * scale[c] + shift[c]` over contiguous `x`
/// viewed as `[n, channels, inner]`, in one pass: a training-mode batch norm with the
/// batch mean as `center` (subtracting it first keeps the precision that folding it into
/// the shift would lose when the mean is large against the spread).
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_normalize;
/// let y = channel_normalize(&[1.0f32, 3.0, 10.0, 30.0], &[2.0, 20.0], &[1.0, 0.1], &[0.0, 5.0], 2);
/// assert_eq!(y, vec![-1.0, 1.0, 4.0, 6.0]);
/// ```
pub fn channel_normalize<T: Float>(
    x: &[T],
    center: &[T],
    scale: &[T],
    shift: &[T],
    inner: usize,
) -> HostBuffer<T> {
    affine_planes::<T, false>(x, Some(center), scale, shift, inner)
}

/// [`channel_normalize`] followed by a ReLU in the same pass (`y > 0 ? y : 0`): a
/// training-mode batch norm and the activation after it. Its backward passes a
/// [`ReluAfter`] of the same operands to [`channel_grad_sums`] and [`channel_grad_input`].
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_normalize_relu;
/// let y = channel_normalize_relu(&[1.0f32, 3.0, 10.0, 30.0], &[2.0, 20.0], &[1.0, 0.1], &[0.0, 5.0], 2);
/// assert_eq!(y, vec![0.0, 1.0, 4.0, 6.0]);
/// ```
pub fn channel_normalize_relu<T: Float>(
    x: &[T],
    center: &[T],
    scale: &[T],
    shift: &[T],
    inner: usize,
) -> HostBuffer<T> {
    affine_planes::<T, true>(x, Some(center), scale, shift, inner)
}

/// The pass of [`channel_affine`] and [`channel_normalize`] (no center: zero), with or
/// without the ReLU.
fn affine_planes<T: Float, const RELU: bool>(
    x: &[T],
    center: Option<&[T]>,
    scale: &[T],
    shift: &[T],
    inner: usize,
) -> HostBuffer<T> {
    let channels = scale.len();
    assert!(
        shift.len() == channels
            && center.is_none_or(|m| m.len() == channels)
            && channels > 0
            && inner > 0
            && x.len().is_multiple_of(channels * inner),
        "channel_affine: {} elements are not [n, {channels}, {inner}] (center {:?}, shift {})",
        x.len(),
        center.map(<[T]>::len),
        shift.len()
    );
    let planes = x.len() / inner;
    let mut out = HostBuffer::<T>::new_uninit(x.len());
    for_each_outer(&mut out, planes, inner, |p, dst| {
        let c = p % channels;
        with_simd(AffinePlane::<T, RELU> {
            src: &x[p * inner..(p + 1) * inner],
            dst,
            center: center.map_or(T::ZERO, |m| m[c]),
            scale: scale[c],
            shift: shift[c],
        })
    });
    // SAFETY: `for_each_outer` hands each of the `planes` rows of `out` (all of it: its
    // length is `planes * inner`) to one `AffinePlane`, which writes every element.
    unsafe { out.assume_init() }
}

/// Lanes of the per-plane partial sums (the compiler keeps them in vector registers).
const LANES: usize = 16;

/// `Σ f(a[i])` over a plane in `LANES` partial sums of f64 (PyTorch accumulates batch
/// norm's statistics of f32 inputs in double as well: a channel can hold millions of
/// elements). By whole arrays of `LANES` (`as_chunks`), so the loop has no bounds checks
/// and compiles to vector code (indexed by position it stayed scalar: the statistics of
/// a `[8, 64, 112, 112]` f32 input took 3.0 ms on two Xeon cores, now 1.1).
#[inline(always)]
fn lane_sum<T: Float>(a: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut sa = [0.0f64; LANES];
    let (chunks, tail) = a.as_chunks::<LANES>();
    for x in chunks {
        for l in 0..LANES {
            sa[l] += f(x[l]);
        }
    }
    sa.iter()
        .fold(tail.iter().map(|&x| f(x)).sum(), |s, &l| s + l)
}

/// `(Σ g[i], Σ g[i] x[i])` over a plane (`x` as long as `g`), in f64 as [`lane_sum`].
/// The caller takes `Σ g (x - mean)` as `Σ g x - mean Σ g`: in f64, where an f32 product
/// is exact, that cancellation costs a few of its 16 digits. f32 planes on CPUs with AVX2
/// and FMA run [`dot_sums_avx2`]: the generic loop over two planes stays scalar (the
/// backward's sums over a `[8, 64, 112, 112]` f32 input took 3.3 ms on two Xeon cores,
/// 1.0 ms now).
///
/// With a `mask`, each `g[i]` first passes through [`Mask::apply`] (the ReLU after the
/// batch norm).
#[inline(always)]
fn lane_dot_sums<T: Float>(g: &[T], x: &[T], mask: Option<Mask<T>>) -> (f64, f64) {
    let x = &x[..g.len()];
    #[cfg(target_arch = "x86_64")]
    if let (Some(g32), Some(x32)) = (crate::cpu::as_f32(g), crate::cpu::as_f32(x))
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        let mask = mask.map(|m| {
            // T is f32 here: through f64 and back is exact.
            let f = |v: T| v.to_f64() as f32;
            [f(m.center), f(m.scale), f(m.shift)]
        });
        // SAFETY: AVX2 and FMA were detected just above; the planes have the same length.
        return unsafe {
            match mask {
                Some(m) => dot_sums_avx2::<true>(g32, x32, m),
                None => dot_sums_avx2::<false>(g32, x32, [0.0; 3]),
            }
        };
    }
    let gate = |gv: T, xv: T| mask.map_or(gv, |m| m.apply(gv, xv));
    let (mut sa, mut sb) = ([0.0f64; LANES], [0.0f64; LANES]);
    let ((gc, gt), (xc, xt)) = (g.as_chunks::<LANES>(), x.as_chunks::<LANES>());
    for (gv, xv) in gc.iter().zip(xc) {
        for l in 0..LANES {
            let gl = gate(gv[l], xv[l]).to_f64();
            sa[l] += gl;
            sb[l] += gl * xv[l].to_f64();
        }
    }
    let (mut ta, mut tb) = (0.0, 0.0);
    for (&gv, &xv) in gt.iter().zip(xt) {
        let gl = gate(gv, xv).to_f64();
        ta += gl;
        tb += gl * xv.to_f64();
    }
    let total = |lanes: [f64; LANES], tail: f64| lanes.iter().fold(tail, |s, &l| s + l);
    (total(sa, ta), total(sb, tb))
}

/// [`lane_dot_sums`] of f32 planes with AVX2 and FMA: 8 floats a step widened to two
/// vectors of f64, four f64 accumulators. (An AVX-512 twin of 16 floats a step measured
/// the same on an AVX-512 Xeon: the pass is bound by memory, not by the vector width.)
///
/// With `MASK`, each `g[i]` passes only where `(x[i] - m[0]) * m[1] + m[2]` (one fused
/// multiply-add, as the forward computed it) is not `<= 0` ([`Mask::apply`]).
///
/// # Safety
/// The CPU has AVX2 and FMA; `x` is at least as long as `g`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_sums_avx2<const MASK: bool>(g: &[f32], x: &[f32], m: [f32; 3]) -> (f64, f64) {
    use std::arch::x86_64::*;
    let n = g.len() / 8 * 8;
    let (mc, ms, mt) = (
        _mm256_set1_ps(m[0]),
        _mm256_set1_ps(m[1]),
        _mm256_set1_ps(m[2]),
    );
    let (mut a0, mut a1, mut b0, mut b1) = (
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
    );
    for i in (0..n).step_by(8) {
        // SAFETY: `i + 8 <= n <= g.len() <= x.len()`.
        unsafe {
            let (mut gv, xv) = (
                _mm256_loadu_ps(g.as_ptr().add(i)),
                _mm256_loadu_ps(x.as_ptr().add(i)),
            );
            if MASK {
                let y = _mm256_fmadd_ps(_mm256_sub_ps(xv, mc), ms, mt);
                // Zero where y <= 0 (ordered: a NaN pre-activation keeps its gradient).
                gv = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(y, _mm256_setzero_ps()), gv);
            }
            let (glo, ghi) = (
                _mm256_cvtps_pd(_mm256_castps256_ps128(gv)),
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(gv)),
            );
            let (xlo, xhi) = (
                _mm256_cvtps_pd(_mm256_castps256_ps128(xv)),
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(xv)),
            );
            a0 = _mm256_add_pd(a0, glo);
            a1 = _mm256_add_pd(a1, ghi);
            b0 = _mm256_fmadd_pd(glo, xlo, b0);
            b1 = _mm256_fmadd_pd(ghi, xhi, b1);
        }
    }
    let mut lanes = [[0.0f64; 4]; 2];
    // SAFETY: each row holds 4 doubles.
    unsafe {
        _mm256_storeu_pd(lanes[0].as_mut_ptr(), _mm256_add_pd(a0, a1));
        _mm256_storeu_pd(lanes[1].as_mut_ptr(), _mm256_add_pd(b0, b1));
    }
    let (mut sa, mut sb) = (lanes[0].iter().sum::<f64>(), lanes[1].iter().sum::<f64>());
    for (&gv, &xv) in g[n..].iter().zip(&x[n..]) {
        let y = (xv - m[0]).mul_add(m[1], m[2]);
        let gv = if MASK && y <= 0.0 { 0.0 } else { gv };
        sa += gv as f64;
        sb += gv as f64 * xv as f64;
    }
    (sa, sb)
}

/// One channel's mean and biased variance over its `n` planes (`stride` elements apart).
struct Moments<'a, T> {
    x: &'a [T],
    n: usize,
    stride: usize,
    inner: usize,
}

impl<T: Float> SimdKernel for Moments<'_, T> {
    type Output = (f64, f64);
    #[inline(always)]
    fn run(self) -> (f64, f64) {
        let plane = |i: usize| &self.x[i * self.stride..i * self.stride + self.inner];
        let count = (self.n * self.inner) as f64;
        let sum: f64 = (0..self.n)
            .map(|i| lane_sum(plane(i), |v| v.to_f64()))
            .sum();
        let mean = sum / count;
        let sq: f64 = (0..self.n)
            .map(|i| {
                lane_sum(plane(i), |v| {
                    let d = v.to_f64() - mean;
                    d * d
                })
            })
            .sum();
        (mean, sq / count)
    }
}

/// Each channel's mean and biased variance over contiguous `x` viewed as `[n, channels,
/// inner]` (two passes over the channel's planes, which the second reads from cache;
/// sums in f64). Channels run in parallel.
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_moments;
/// // [2, 1, 2]: one channel holding 1, 2, 3, 4
/// let (mean, var) = channel_moments(&[1.0f32, 2.0, 3.0, 4.0], 1, 2);
/// assert_eq!((mean, var), (vec![2.5], vec![1.25]));
/// ```
pub fn channel_moments<T: Float>(x: &[T], channels: usize, inner: usize) -> (Vec<f64>, Vec<f64>) {
    assert!(
        channels > 0 && inner > 0 && x.len().is_multiple_of(channels * inner),
        "batch_norm: {} elements are not [n, {channels}, {inner}]",
        x.len()
    );
    let n = x.len() / (channels * inner);
    let mut out = vec![(0.0, 0.0); channels];
    for_each_outer(&mut out, channels, n * inner * 2, |c, slot| {
        slot[0] = with_simd(Moments {
            x: &x[c * inner..],
            n,
            stride: channels * inner,
            inner,
        });
    });
    out.into_iter().unzip()
}

/// One channel's `Σ gy` and `Σ gy * (x - mean)` (`gy` masked by the ReLU after the norm,
/// if any).
struct GradSums<'a, T> {
    gy: &'a [T],
    x: &'a [T],
    mask: Option<Mask<T>>,
    mean: f64,
    n: usize,
    stride: usize,
    inner: usize,
}

impl<T: Float> SimdKernel for GradSums<'_, T> {
    type Output = (f64, f64);
    #[inline(always)]
    fn run(self) -> (f64, f64) {
        let (mut sg, mut sgx) = (0.0, 0.0);
        for i in 0..self.n {
            let at = i * self.stride;
            let g = &self.gy[at..at + self.inner];
            let x = &self.x[at..at + self.inner];
            let (a, b) = lane_dot_sums(g, x, self.mask);
            sg += a;
            sgx += b;
        }
        (sg, sgx - self.mean * sg)
    }
}

/// The per-channel sums a training-mode batch norm's backward needs, over contiguous
/// `gy` and `x` viewed as `[n, channels, inner]`: `Σ gy` (the bias gradient) and
/// `Σ gy * (x - mean)` (times `invstd`, the weight gradient). Channels run in parallel.
/// With `relu`, `gy` is the gradient of the ReLU after the norm, masked here on the fly.
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_grad_sums;
/// let (sg, sgx) = channel_grad_sums(&[1.0f32, -1.0, 2.0, 0.5], &[1.0, 2.0, 3.0, 4.0], &[2.5], 2, None);
/// assert_eq!((sg, sgx), (vec![2.5], vec![1.0 * -1.5 + -1.0 * -0.5 + 2.0 * 0.5 + 0.5 * 1.5]));
/// ```
pub fn channel_grad_sums<T: Float>(
    gy: &[T],
    x: &[T],
    mean: &[f64],
    inner: usize,
    relu: Option<ReluAfter<'_, T>>,
) -> (Vec<f64>, Vec<f64>) {
    let channels = mean.len();
    if let Some(r) = &relu {
        r.check(channels);
    }
    assert!(
        channels > 0
            && inner > 0
            && x.len() == gy.len()
            && x.len().is_multiple_of(channels * inner),
        "batch_norm backward: {} gradient and {} input elements are not [n, {channels}, {inner}]",
        gy.len(),
        x.len()
    );
    let n = x.len() / (channels * inner);
    let mut out = vec![(0.0, 0.0); channels];
    for_each_outer(&mut out, channels, n * inner * 2, |c, slot| {
        slot[0] = with_simd(GradSums {
            gy: &gy[c * inner..],
            x: &x[c * inner..],
            mask: relu.map(|r| r.channel(c)),
            mean: mean[c],
            n,
            stride: channels * inner,
            inner,
        });
    });
    out.into_iter().unzip()
}

/// One plane of the input gradient: `dx = a * gy + b * x + c` (`gy` masked by the ReLU
/// after the norm, if any).
struct GradInputPlane<'a, T> {
    gy: &'a [T],
    x: &'a [T],
    dx: &'a mut [MaybeUninit<T>],
    coef: [T; 3],
    mask: Option<Mask<T>>,
}

impl<T: Float> SimdKernel for GradInputPlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let [a, b, c] = self.coef;
        let pairs = self.dx.iter_mut().zip(self.gy).zip(self.x);
        match self.mask {
            None => {
                for ((d, &g), &x) in pairs {
                    d.write(g.mul_add(a, x.mul_add(b, c)));
                }
            }
            Some(m) => {
                for ((d, &g), &x) in pairs {
                    d.write(m.apply(g, x).mul_add(a, x.mul_add(b, c)));
                }
            }
        }
    }
}

/// The input gradient of a training-mode batch norm over `[n, channels, inner]`, given
/// per channel the statistics and the sums of [`channel_grad_sums`]: with `M` elements per
/// channel, `k = weight * invstd`,
/// `dx = k * (gy - Σgy / M - (x - mean) * invstd² * Σgy(x - mean) / M)`,
/// which is affine in `gy` and `x` per channel, so one pass (planes in parallel). With
/// `relu`, `gy` is masked as in [`channel_grad_sums`] (which must have had the same).
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_grad_input;
/// // a constant gradient has no effect through the normalisation
/// let dx = channel_grad_input(&[1.0f32; 4], &[1.0, 2.0, 3.0, 4.0], &[2.5], &[1.0], None, &[4.0], &[0.0], 2, None);
/// assert!(dx.iter().all(|v| v.abs() < 1e-6));
/// ```
#[allow(clippy::too_many_arguments)]
pub fn channel_grad_input<T: Float>(
    gy: &[T],
    x: &[T],
    mean: &[f64],
    invstd: &[f64],
    weight: Option<&[T]>,
    sum_gy: &[f64],
    sum_gyx: &[f64],
    inner: usize,
    relu: Option<ReluAfter<'_, T>>,
) -> HostBuffer<T> {
    let channels = mean.len();
    if let Some(r) = &relu {
        r.check(channels);
    }
    let planes = x.len() / (channels * inner).max(1) * channels;
    let m = (x.len() / channels.max(1)) as f64;
    let coef: Vec<[T; 3]> = (0..channels)
        .map(|c| {
            let k = weight.map_or(1.0, |w| w[c].to_f64()) * invstd[c];
            let b = -k * invstd[c] * invstd[c] * sum_gyx[c] / m;
            let cst = -k * sum_gy[c] / m - b * mean[c];
            [T::from_f64(k), T::from_f64(b), T::from_f64(cst)]
        })
        .collect();
    let mut out = HostBuffer::<T>::new_uninit(x.len());
    for_each_outer(&mut out, planes, inner * 2, |p, dst| {
        with_simd(GradInputPlane {
            gy: &gy[p * inner..(p + 1) * inner],
            x: &x[p * inner..(p + 1) * inner],
            dx: dst,
            coef: coef[p % channels],
            mask: relu.map(|r| r.channel(p % channels)),
        })
    });
    // SAFETY: `for_each_outer` hands each of the `planes` rows of `out` (all of it) to one
    // `GradInputPlane`, which writes every element.
    unsafe { out.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plane_gets_its_channels_scale_and_shift() {
        let (n, c, inner) = (5, 7, 300);
        let x: Vec<f64> = (0..n * c * inner).map(|i| (i % 17) as f64 - 8.0).collect();
        let scale: Vec<f64> = (0..c).map(|i| i as f64 * 0.5 - 1.0).collect();
        let shift: Vec<f64> = (0..c).map(|i| i as f64 * 3.0).collect();
        let y = channel_affine(&x, &scale, &shift, inner);
        for (i, (&a, &v)) in y.iter().zip(&x).enumerate() {
            let ch = (i / inner) % c;
            assert_eq!(a, v * scale[ch] + shift[ch], "[{i}]");
        }
    }

    #[test]
    fn training_statistics_and_gradients_match_the_definition() {
        let (n, c, inner) = (3, 5, 37);
        let x: Vec<f64> = (0..n * c * inner)
            .map(|i| (i as f64 * 0.7).sin() * 3.0 + 1e3)
            .collect();
        let gy: Vec<f64> = (0..n * c * inner).map(|i| (i as f64 * 0.3).cos()).collect();
        let w: Vec<f64> = (0..c).map(|i| 0.5 + i as f64).collect();
        let eps = 1e-5;
        let (mean, var) = channel_moments(&x, c, inner);
        let (sg, sgx) = channel_grad_sums(&gy, &x, &mean, inner, None);
        let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
        let dx = channel_grad_input(&gy, &x, &mean, &invstd, Some(&w), &sg, &sgx, inner, None);
        let m = (n * inner) as f64;
        let at = |i: usize, ch: usize, j: usize| (i * c + ch) * inner + j;
        for ch in 0..c {
            let idx: Vec<usize> = (0..n)
                .flat_map(|i| (0..inner).map(move |j| at(i, ch, j)))
                .collect();
            let mu = idx.iter().map(|&k| x[k]).sum::<f64>() / m;
            let v = idx.iter().map(|&k| (x[k] - mu).powi(2)).sum::<f64>() / m;
            assert!((mean[ch] - mu).abs() < 1e-9 && (var[ch] - v).abs() < 1e-9);
            let g_mean = idx.iter().map(|&k| gy[k]).sum::<f64>() / m;
            let xh = |k: usize| (x[k] - mu) / (v + eps).sqrt();
            let gx_mean = idx.iter().map(|&k| gy[k] * xh(k)).sum::<f64>() / m;
            assert!((sg[ch] - g_mean * m).abs() < 1e-9);
            for &k in &idx {
                let want = w[ch] / (v + eps).sqrt() * (gy[k] - g_mean - xh(k) * gx_mean);
                assert!((dx[k] - want).abs() < 1e-9, "dx[{k}]: {} vs {want}", dx[k]);
            }
        }
    }

    #[test]
    fn f32_statistics_of_a_large_offset_channel_stay_accurate() {
        // 2^20 elements near 1e4 with unit spread: f32 running sums would lose the spread.
        let (n, inner) = (16, 1 << 16);
        let x: Vec<f32> = (0..n * inner)
            .map(|i| 1e4 + ((i as f32) * 0.618).sin())
            .collect();
        let (mean, var) = channel_moments(&x, 1, inner);
        let m = x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64;
        let v = x.iter().map(|&a| (a as f64 - m).powi(2)).sum::<f64>() / x.len() as f64;
        assert!((mean[0] - m).abs() < 1e-9 * m, "mean {} vs {m}", mean[0]);
        assert!((var[0] - v).abs() < 1e-9 * v, "var {} vs {v}", var[0]);
    }

    /// The vector loop against the definition, over tails of every length, with and
    /// without the ReLU's mask (pre-activation `(x - 3) * 1.5 - 0.25`: about half masked,
    /// and a NaN input whose gradient passes).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_dot_sums_match_the_definition() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            eprintln!("skipped: no AVX2 + FMA on this CPU");
            return;
        }
        let g: Vec<f32> = (0..1037).map(|i| ((i as f32) * 0.377).cos()).collect();
        let x: Vec<f32> = (0..1037)
            .map(|i| 3.0 + ((i as f32) * 0.618).sin())
            .collect();
        let mut with_nan = x.clone();
        with_nan[5] = f32::NAN;
        let m = [3.0f32, 1.5, -0.25];
        for (masked, nan) in [(false, false), (true, false), (true, true)] {
            let x = if nan { &with_nan } else { &x };
            for len in (0..40).chain([1000, 1037]) {
                let (g, x) = (&g[..len], &x[..len]);
                let gate = |a: f32, b: f32| {
                    let y = (b - m[0]).mul_add(m[1], m[2]);
                    if masked && y <= 0.0 { 0.0 } else { a as f64 }
                };
                let want_g: f64 = g.iter().zip(x).map(|(&a, &b)| gate(a, b)).sum();
                let want_gx: f64 = g.iter().zip(x).map(|(&a, &b)| gate(a, b) * b as f64).sum();
                // SAFETY: detected just above; same lengths.
                let (sg, sgx) = unsafe {
                    if masked {
                        dot_sums_avx2::<true>(g, x, m)
                    } else {
                        dot_sums_avx2::<false>(g, x, [0.0; 3])
                    }
                };
                assert!(
                    (sg - want_g).abs() <= 1e-12 * (1.0 + want_g.abs()),
                    "len {len}, masked {masked}: {sg} vs {want_g}"
                );
                if nan && len > 5 {
                    // The NaN passes its gradient (counted in `Σ g`) and makes `Σ g x` NaN.
                    assert!(sgx.is_nan(), "len {len}: {sgx}");
                } else {
                    assert!(
                        (sgx - want_gx).abs() <= 1e-12 * (1.0 + want_gx.abs()),
                        "len {len}, masked {masked}: {sgx} vs {want_gx}"
                    );
                }
            }
        }
    }

    #[test]
    fn f32_gradient_sums_of_a_large_offset_channel_stay_accurate() {
        // `Σ gy (x - mean)` is taken as `Σ gy x - mean Σ gy`: with x near 1e4 and unit
        // spread, the cancellation must still leave it accurate. Odd plane lengths cover
        // the vector loop's tail; two channels the strides.
        let (n, channels, inner) = (3, 2, 40_001);
        let len = n * channels * inner;
        let x: Vec<f32> = (0..len).map(|i| 1e4 + ((i as f32) * 0.618).sin()).collect();
        let gy: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.377).cos()).collect();
        let (mean, _) = channel_moments(&x, channels, inner);
        let (sg, sgx) = channel_grad_sums(&gy, &x, &mean, inner, None);
        for c in 0..channels {
            let idx = (0..n).flat_map(|s| (0..inner).map(move |i| (s * channels + c) * inner + i));
            let want_g: f64 = idx.clone().map(|i| gy[i] as f64).sum();
            let want_gx: f64 = idx.map(|i| gy[i] as f64 * (x[i] as f64 - mean[c])).sum();
            assert!(
                (sg[c] - want_g).abs() <= 1e-9 * (1.0 + want_g.abs()),
                "Σgy {} vs {want_g}",
                sg[c]
            );
            assert!(
                (sgx[c] - want_gx).abs() <= 1e-7 * (1.0 + want_gx.abs()),
                "Σgy(x - mean) {} vs {want_gx}",
                sgx[c]
            );
        }
    }
}
