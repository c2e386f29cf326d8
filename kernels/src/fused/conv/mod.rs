//! Direct depthwise convolution on the CPU (`groups == in_channels`, each output channel
//! reads one input channel): forward and both backward passes as SIMD loops over NCHW
//! planes, without the im2col copy that a grouped GEMM with one input channel per group
//! would spend most of its time on (MobileNet's 3×3 depthwise layers). On CUDA the
//! runtime keeps im2col + batched GEMM, so this folder has no `.cu`.
//!
//! Output channel `oc` reads input channel `oc / multiplier` (PyTorch's depthwise
//! "channel multiplier": `out_channels = multiplier * in_channels`). Every loop walks one
//! output (or input) row at a time with the kernel taps innermost, so the row stays in L1,
//! and the in-bounds span of each tap is computed once per row rather than tested per
//! pixel. Products are accumulated with `mul_add` (one rounding; an FMA instruction under
//! the AVX2/AVX-512 dispatch, a correctly rounded libm call elsewhere).
//!
//! [`conv2d`] picks among the folder's other kernels by shape: `direct` (9–32 output
//! channels, short reductions), `pixels` (1–8 output channels), `wide` (unit stride, 32+
//! channels, planes of 24×24 and up; also their input gradient), `winograd` (3×3, unit
//! stride, 128+ channels and 128+ output tiles of 2×2 in the batch; also their input
//! gradient; its F(4×4) variant is taken before `wide` on planes up to 32²), `subpixel`
//! (4×4, stride 2, padding 1, 8+ channels each way, outputs of 16×16 and up: space to
//! depth and one GEMM per 2×2 tap; also both gradients, so DCGAN's transposed
//! convolutions; `parity` takes those of them with output rows a whole number of f32
//! vectors, by direct kernels for all three), else im2col tiles and GEMMs here (a tile of
//! rows per GEMM, or several small planes per GEMM);
//! [`conv2d_backward`] (`backward`) runs the tiled gradients, or for the `wide` layers
//! `wide`'s input gradient and `weight_grad`'s pixel-vectorised weight gradient, and for
//! the `winograd` layers its input gradient and (over 256+ tiles) weight gradient.

mod backward;
mod direct;
mod lanes;
mod parity;
mod pixels;
mod subpixel;
mod weight_grad;
mod wide;
mod winograd;

pub use backward::conv2d_backward;

pub use direct::{backward_weight_applies, conv2d_direct, conv2d_direct_backward_weight};
pub use weight_grad::{conv2d_wide_weight_grad, weight_grad_applies};

use crate::WideFloat as Float;
use crate::cpu::Conv2dGeometry;
use crate::cpu::HostBuffer;
use crate::cpu::Parallelism;
use crate::cpu::reduce::for_each_outer;
use crate::cpu::simd::{SimdKernel, with_simd};
use crate::cpu::unfold::{gather_tap, valid_columns};
use crate::cpu::{PARALLEL_THRESHOLD, for_each_chunk_mut, num_threads};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{as_f32, as_f32_mut};
use std::mem::MaybeUninit;
use std::ops::Range;

/// The output rows `oy` and, for one tap, input row `y`, of kernel row `ki`: `None`
/// when the tap falls into the padding for that output row.
#[inline(always)]
fn input_row(g: &Conv2dGeometry, oy: usize, ki: usize) -> Option<usize> {
    let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize - g.padding[0] as isize;
    (y >= 0 && (y as usize) < g.input[0]).then_some(y as usize)
}

/// Kernel column `kj`'s in-bounds output columns and the input column of the first one.
#[inline(always)]
fn tap_columns(g: &Conv2dGeometry, ow: usize, kj: usize) -> (Range<usize>, usize) {
    let offset = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
    let cols = valid_columns(offset, g.stride[1], g.input[1], ow);
    let x0 = (cols.start as isize * g.stride[1] as isize + offset).max(0) as usize;
    (cols, x0)
}

/// One output plane: `out = bias + Σ_taps w[tap] * shifted input plane`.
struct ForwardPlane<'a, T> {
    x: &'a [T],
    w: &'a [T],
    bias: T,
    out: &'a mut [T],
    g: &'a Conv2dGeometry,
    ow: usize,
}

impl<T: Float> SimdKernel for ForwardPlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (g, ow) = (self.g, self.ow);
        if g.stride[1] <= 2 {
            return self.padded();
        }
        let [kh, kw] = g.kernel;
        let (w_in, s1) = (g.input[1], g.stride[1]);
        let spans: Vec<_> = (0..kw).map(|kj| tap_columns(g, ow, kj)).collect();
        for (oy, row) in self.out.chunks_exact_mut(ow).enumerate() {
            row.fill(self.bias);
            for ki in 0..kh {
                let Some(y) = input_row(g, oy, ki) else {
                    continue;
                };
                let src = &self.x[y * w_in..(y + 1) * w_in];
                for (kj, (cols, x0)) in spans.iter().cloned().enumerate() {
                    let wv = self.w[ki * kw + kj];
                    let dst = &mut row[cols.clone()];
                    if s1 == 1 {
                        for (d, &v) in dst.iter_mut().zip(&src[x0..x0 + cols.len()]) {
                            *d = v.mul_add(wv, *d);
                        }
                    } else {
                        for (i, d) in dst.iter_mut().enumerate() {
                            *d = src[x0 + i * s1].mul_add(wv, *d);
                        }
                    }
                }
            }
        }
    }
}

impl<T: Float> ForwardPlane<'_, T> {
    /// Column strides 1 and 2 through a zero-padded copy of the plane, so that every tap
    /// is one contiguous multiply-add loop: for stride 1 in both dims over the whole
    /// plane at once, as rows `wp` wide (the columns past `ow` are dropped at the end;
    /// MobileNet's 7- and 14-wide rows no longer end in scalar tails), a chunk of rows at
    /// a time; otherwise per output row, for column stride 2 over the padded plane's even
    /// or odd columns, split from the input without a padded copy. The same terms in
    /// the same order as the plain loop (padding adds `0 * w`).
    #[inline(always)]
    fn padded(self) {
        let (g, ow) = (self.g, self.ow);
        let [h, w_in] = g.input;
        let [p0, p1] = g.padding;
        let (hp, wp) = (h + 2 * p0, w_in + 2 * p1);
        let oh = self.out.len() / ow;
        let [s0, s1] = g.stride;
        if s1 == 1 {
            let mut xp = vec![T::ZERO; hp * wp];
            for (src, dst) in self
                .x
                .chunks_exact(w_in)
                .zip(xp[p0 * wp..].chunks_exact_mut(wp))
            {
                dst[p1..p1 + w_in].copy_from_slice(src);
            }
            if s0 == 1 {
                return self.stride_one(&xp, wp, oh);
            }
            return self.padded_rows(&xp, hp, wp, 0, oh);
        }
        // Column stride 2: the padded plane's even columns and its odd ones, each row
        // split straight from the input (each tap then reads one half contiguously).
        let (we, wo) = (wp.div_ceil(2), wp / 2);
        let mut halves = vec![T::ZERO; hp * (we + wo)];
        let (even, odd) = halves.split_at_mut(hp * we);
        // Padded column `p1 + j` holds input column `j`: the even padded columns start at
        // input column `p1 % 2`, the odd ones at `1 - p1 % 2`.
        let (e0, o0) = (p1 % 2, 1 - p1 % 2);
        for (r, src) in self.x.chunks_exact(w_in).enumerate() {
            let r = r + p0;
            let e = &mut even[r * we + (p1 + e0) / 2..(r + 1) * we];
            let o: &mut [T] = if wo > 0 {
                &mut odd[r * wo + (p1 + o0) / 2..(r + 1) * wo]
            } else {
                &mut []
            };
            // Input columns 0, 2, .. land in the even half when `p1` is even.
            let (first, second) = if e0 == 0 { (e, o) } else { (o, e) };
            split_parity(src, first, second);
        }
        self.padded_rows(&halves, hp, we, wo, oh)
    }

    /// Stride 1 in both dims: the whole padded plane `xp` (rows `wp` wide) as one run
    /// per tap, the columns past `ow` dropped at the end, in chunks of rows (a chunk's
    /// sums are written once, then copied out row by row).
    #[inline(always)]
    fn stride_one(self, xp: &[T], wp: usize, oh: usize) {
        let (g, ow) = (self.g, self.ow);
        let [kh, kw] = g.kernel;
        let [d0, d1] = g.dilation;
        let rows_per = (2048 / wp).clamp(1, oh);
        let mut acc = vec![T::ZERO; (rows_per - 1) * wp + ow];
        let (mut stack, mut heap) = ([0; TAPS], Vec::new());
        let offs = tap_slots(&mut stack, &mut heap, kh * kw);
        for r0 in (0..oh).step_by(rows_per) {
            let r1 = (r0 + rows_per).min(oh);
            let a = &mut acc[..(r1 - 1 - r0) * wp + ow];
            for ki in 0..kh {
                for kj in 0..kw {
                    offs[ki * kw + kj] = (r0 + ki * d0) * wp + kj * d1;
                }
            }
            tap_sums(a, self.bias, self.w, xp, offs);
            for (row, src) in self.out[r0 * ow..r1 * ow]
                .chunks_exact_mut(ow)
                .zip(a.chunks(wp))
            {
                row.copy_from_slice(&src[..ow]);
            }
        }
    }

    /// Row by row from the padded plane (`halves[..]`, rows `we` wide, when the column
    /// stride is 1), or from its even columns (the first `hp * we` elements of `halves`,
    /// rows `we` wide) and its odd ones (the rest, rows `wo` wide) for column stride 2.
    #[inline(always)]
    fn padded_rows(self, halves: &[T], hp: usize, we: usize, wo: usize, oh: usize) {
        let (g, ow) = (self.g, self.ow);
        let [kh, kw] = g.kernel;
        let [d0, d1] = g.dilation;
        let [s0, s1] = g.stride;
        debug_assert_eq!(self.out.len(), oh * ow);
        let (mut stack, mut heap) = ([0; TAPS], Vec::new());
        let offs = tap_slots(&mut stack, &mut heap, kh * kw);
        for (oy, row) in self.out.chunks_exact_mut(ow).enumerate() {
            for ki in 0..kh {
                let r = oy * s0 + ki * d0;
                for kj in 0..kw {
                    let c = kj * d1;
                    offs[ki * kw + kj] = if s1 == 1 {
                        r * we + c
                    } else if c % 2 == 0 {
                        r * we + c / 2
                    } else {
                        hp * we + r * wo + c / 2
                    };
                }
            }
            tap_sums(row, self.bias, self.w, halves, offs);
        }
    }
}

/// `first[k] = src[2k]` and `second[k] = src[2k + 1]`, as many of each as both sides
/// hold.
#[inline(always)]
fn split_parity<T: Float>(src: &[T], first: &mut [T], second: &mut [T]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if lanes::level() == Some(lanes::Level::Avx512)
        && let (Some(s), Some(f), Some(g)) = (as_f32(src), as_f32_mut(first), as_f32_mut(second))
    {
        // SAFETY: AVX-512F is present (checked above).
        done = unsafe { split_parity_avx512(s, f, g) };
    }
    for (d, &v) in first[done..]
        .iter_mut()
        .zip(src[2 * done..].iter().step_by(2))
    {
        *d = v;
    }
    if src.len() > 2 * done + 1 {
        for (d, &v) in second[done..]
            .iter_mut()
            .zip(src[2 * done + 1..].iter().step_by(2))
        {
            *d = v;
        }
    }
}

/// [`split_parity`]'s whole blocks of 32 source floats (one shuffle per side per block);
/// returns how many of each side it wrote (a multiple of 16).
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn split_parity_avx512(src: &[f32], first: &mut [f32], second: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let blocks = (src.len() / 32)
        .min(first.len() / 16)
        .min(second.len() / 16);
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for b in 0..blocks {
        // SAFETY: block `b` reads `src[32b .. 32b + 32]` and writes `[16b .. 16b + 16]` of
        // each side, all in bounds by the choice of `blocks`.
        unsafe {
            let lo = _mm512_loadu_ps(src.as_ptr().add(32 * b));
            let hi = _mm512_loadu_ps(src.as_ptr().add(32 * b + 16));
            _mm512_storeu_ps(
                first.as_mut_ptr().add(16 * b),
                _mm512_permutex2var_ps(lo, evens, hi),
            );
            _mm512_storeu_ps(
                second.as_mut_ptr().add(16 * b),
                _mm512_permutex2var_ps(lo, odds, hi),
            );
        }
    }
    16 * blocks
}

/// Kernels with up to this many taps keep their tap offsets on the stack.
const TAPS: usize = 32;

/// `taps` offset slots: in `stack` when they fit, else in `heap` (a plane's kernel loop
/// then allocates nothing of its own besides its padded copy).
fn tap_slots<'a>(
    stack: &'a mut [usize; TAPS],
    heap: &'a mut Vec<usize>,
    taps: usize,
) -> &'a mut [usize] {
    if taps <= TAPS {
        &mut stack[..taps]
    } else {
        heap.resize(taps, 0);
        heap
    }
}

/// `dst[i] = bias + Σ_t w[t] * plane[offs[t] + i]`, the taps in order (the same terms in
/// the same order as one multiply-add pass per tap), a block of `dst` at a time held in
/// registers across all the taps: one store per output instead of one per tap.
#[inline(always)]
fn tap_sums<T: Float>(dst: &mut [T], bias: T, w: &[T], plane: &[T], offs: &[usize]) {
    #[cfg(target_arch = "x86_64")]
    if lanes::level() == Some(lanes::Level::Avx512)
        && let (Some(d), Some(w), Some(p), Some(b)) = (
            as_f32_mut(dst),
            as_f32(w),
            as_f32(plane),
            as_f32(std::slice::from_ref(&bias)),
        )
    {
        assert!(
            w.len() >= offs.len() && offs.iter().all(|&o| o + d.len() <= p.len()),
            "depthwise tap_sums: a tap reads past the plane"
        );
        // SAFETY: AVX-512F is present (checked above); every tap's run of `d.len()`
        // elements from its offset lies inside `p` (asserted above), and `w` holds a
        // weight per tap.
        unsafe { tap_sums_avx512(d, b[0], w, p, offs) };
        return;
    }
    // Blocks of `B` sums (LLVM keeps them on the stack: one load and store per tap, but
    // in L1).
    const B: usize = 64;
    let mut start = 0;
    let mut blocks = dst.chunks_exact_mut(B);
    for d in &mut blocks {
        let mut a = [bias; B];
        for (&wv, &o) in w.iter().zip(offs) {
            let src: &[T; B] = plane[o + start..o + start + B]
                .try_into()
                .expect("a block of B elements");
            for (s, &v) in a.iter_mut().zip(src) {
                *s = v.mul_add(wv, *s);
            }
        }
        d.copy_from_slice(&a);
        start += B;
    }
    let rest = blocks.into_remainder();
    if !rest.is_empty() {
        rest.fill(bias);
        let n = rest.len();
        for (&wv, &o) in w.iter().zip(offs) {
            for (d, &v) in rest.iter_mut().zip(&plane[o + start..o + start + n]) {
                *d = v.mul_add(wv, *d);
            }
        }
    }
}

/// [`tap_sums`] in f32 on AVX-512: blocks of eight registers of sums (128 outputs) held
/// across all the taps, then one block of up to eight for the rest, its last register
/// masked.
///
/// # Safety
/// The CPU has AVX-512F; `offs[t] + dst.len() <= plane.len()` for every tap `t`, and
/// `w.len() >= offs.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tap_sums_avx512(dst: &mut [f32], bias: f32, w: &[f32], plane: &[f32], offs: &[usize]) {
    const V: usize = 16;
    let n = dst.len();
    let (d, p) = (dst.as_mut_ptr(), plane.as_ptr());
    let mut i = 0;
    // SAFETY (each block): its `NV * V` outputs from `i` (the last register masked to
    // `n`) are inside `dst`, and each tap reads the same span from its offset, inside
    // `plane` (the caller's promise).
    while i + 8 * V <= n {
        unsafe { tap_block_avx512::<8>(d.add(i), p.add(i), bias, w, offs, u16::MAX) };
        i += 8 * V;
    }
    let rest = n - i;
    if rest > 0 {
        let tail = rest % V;
        let mask = if tail == 0 {
            u16::MAX
        } else {
            (1u16 << tail) - 1
        };
        let (d, p) = unsafe { (d.add(i), p.add(i)) };
        macro_rules! by_count {
            ($($nv:literal)*) => {
                match rest.div_ceil(V) {
                    $($nv => unsafe { tap_block_avx512::<$nv>(d, p, bias, w, offs, mask) },)*
                    _ => unreachable!("fewer than eight registers are left"),
                }
            };
        }
        by_count!(1 2 3 4 5 6 7 8);
    }
}

/// `NV` registers of sums at `d`, over all the taps (tap `t` reads from `p + offs[t]`);
/// the last register is loaded and stored under `mask`.
///
/// # Safety
/// As [`tap_sums_avx512`], for the `NV` registers from `d` and `p`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tap_block_avx512<const NV: usize>(
    d: *mut f32,
    p: *const f32,
    bias: f32,
    w: &[f32],
    offs: &[usize],
    mask: u16,
) {
    use std::arch::x86_64::*;
    const V: usize = 16;
    let mut acc = [_mm512_set1_ps(bias); NV];
    for (&o, &wv) in offs.iter().zip(w) {
        let wv = _mm512_set1_ps(wv);
        // SAFETY: as the caller promised.
        unsafe {
            let src = p.add(o);
            for (j, a) in acc.iter_mut().enumerate() {
                let v = if j + 1 < NV {
                    _mm512_loadu_ps(src.add(j * V))
                } else {
                    _mm512_maskz_loadu_ps(mask, src.add(j * V))
                };
                *a = _mm512_fmadd_ps(v, wv, *a);
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: as the caller promised.
        unsafe {
            if j + 1 < NV {
                _mm512_storeu_ps(d.add(j * V), *a);
            } else {
                _mm512_mask_storeu_ps(d.add(j * V), mask, *a);
            }
        }
    }
}

/// The channel multiplier of a depthwise convolution with `out_channels` outputs.
fn multiplier(g: &Conv2dGeometry, out_channels: usize) -> usize {
    assert!(
        g.c > 0 && out_channels.is_multiple_of(g.c),
        "depthwise conv2d: {out_channels} output channels are not a multiple of {} input channels",
        g.c
    );
    out_channels / g.c
}

/// Depthwise `conv2d` forward of contiguous `x` `[n, c, h, w]` with weight
/// `[out_channels, 1, kh, kw]` (`out_channels` a multiple of `c`) and optional bias
/// `[out_channels]`: the contiguous output `[n, out_channels, oh, ow]`.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::depthwise_conv2d;
/// // two channels, a 2x2 kernel of ones on channel 0 and of twos on channel 1
/// let g = Conv2dGeometry { n: 1, c: 2, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let x = [1.0f32, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0];
/// let w = [1.0f32, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0];
/// assert_eq!(depthwise_conv2d(&x, &w, Some(&[0.5, 0.0]), &g, 2), vec![10.5, 8.0]);
/// ```
pub fn depthwise_conv2d<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    let m = multiplier(g, out_channels);
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [h, wd] = g.input;
    let [kh, kw] = g.kernel;
    let (plane, taps) = (oh * ow, kh * kw);
    let mut out = HostBuffer::<T>::zeroed(g.n * out_channels * plane);
    for_each_outer(&mut out, g.n * out_channels, plane * taps, |p, dst| {
        let (n, oc) = (p / out_channels, p % out_channels);
        let c = oc / m;
        let base = (n * g.c + c) * h * wd;
        with_simd(ForwardPlane {
            x: &x[base..base + h * wd],
            w: &w[oc * taps..(oc + 1) * taps],
            bias: bias.map_or(T::ZERO, |b| b[oc]),
            out: dst,
            g,
            ow,
        })
    });
    out
}

/// One input plane of the input gradient: the sum over the `m` output channels that read
/// it of each tap's weight times the output gradient, scattered back to the input pixels.
struct InputGradPlane<'a, T> {
    /// The `m` output-gradient planes of this input channel, `[m, oh, ow]`.
    gout: &'a [T],
    /// Their weights, `[m, kh, kw]`.
    w: &'a [T],
    dx: &'a mut [T],
    g: &'a Conv2dGeometry,
    oh: usize,
    ow: usize,
}

impl<T: Float> SimdKernel for InputGradPlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (g, oh, ow) = (self.g, self.oh, self.ow);
        let [kh, kw] = g.kernel;
        let (w_in, s0, s1) = (g.input[1], g.stride[0], g.stride[1]);
        let (plane, taps) = (oh * ow, kh * kw);
        let m = self.w.len() / taps;
        let spans: Vec<_> = (0..kw).map(|kj| tap_columns(g, ow, kj)).collect();
        for (y, row) in self.dx.chunks_exact_mut(w_in).enumerate() {
            row.fill(T::ZERO);
            for ki in 0..kh {
                // The output row that reads input row `y` through kernel row `ki`.
                let t = (y + g.padding[0]) as isize - (ki * g.dilation[0]) as isize;
                if t < 0 || !(t as usize).is_multiple_of(s0) || t as usize / s0 >= oh {
                    continue;
                }
                let oy = t as usize / s0;
                for j in 0..m {
                    let grow = &self.gout[j * plane + oy * ow..j * plane + (oy + 1) * ow];
                    for (kj, (cols, x0)) in spans.iter().cloned().enumerate() {
                        let wv = self.w[j * taps + ki * kw + kj];
                        let src = &grow[cols.clone()];
                        if s1 == 1 {
                            for (d, &v) in row[x0..x0 + cols.len()].iter_mut().zip(src) {
                                *d = v.mul_add(wv, *d);
                            }
                        } else {
                            for (i, &v) in src.iter().enumerate() {
                                let d = &mut row[x0 + i * s1];
                                *d = v.mul_add(wv, *d);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The input gradient of [`depthwise_conv2d`]: contiguous `[n, c, h, w]` from the output
/// gradient `gout` `[n, out_channels, oh, ow]` and the weight.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::depthwise_conv2d_backward_input;
/// let g = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// // one output pixel reads every input pixel once, scaled by the matching tap
/// let dx = depthwise_conv2d_backward_input(&[2.0f32], &[1.0, 2.0, 3.0, 4.0], &g, 1);
/// assert_eq!(dx, vec![2.0, 4.0, 6.0, 8.0]);
/// ```
pub fn depthwise_conv2d_backward_input<T: Float>(
    gout: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    let m = multiplier(g, out_channels);
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [h, wd] = g.input;
    let taps = g.kernel[0] * g.kernel[1];
    let plane = oh * ow;
    let mut dx = HostBuffer::<T>::zeroed(g.n * g.c * h * wd);
    for_each_outer(&mut dx, g.n * g.c, plane * taps * m, |p, dst| {
        let (n, c) = (p / g.c, p % g.c);
        let first = n * out_channels + c * m;
        with_simd(InputGradPlane {
            gout: &gout[first * plane..(first + m) * plane],
            w: &w[c * m * taps..(c + 1) * m * taps],
            dx: dst,
            g,
            oh,
            ow,
        })
    });
    dx
}

/// One output channel's weight gradient: each tap's dot product of the output gradient
/// with the shifted input, over the batch, summed in several lanes.
struct WeightGradChannel<'a, T> {
    /// The channel's output-gradient planes of every sample, `n` planes `batch_stride` apart.
    gout: &'a [T],
    /// The input planes it reads, likewise.
    x: &'a [T],
    gout_stride: usize,
    x_stride: usize,
    n: usize,
    dw: &'a mut [T],
    g: &'a Conv2dGeometry,
    oh: usize,
    ow: usize,
}

impl<T: Float> SimdKernel for WeightGradChannel<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        const LANES: usize = 8;
        let (g, oh, ow) = (self.g, self.oh, self.ow);
        let [kh, kw] = g.kernel;
        let (w_in, s1) = (g.input[1], g.stride[1]);
        let plane_in = g.input[0] * w_in;
        for ki in 0..kh {
            for kj in 0..kw {
                let (cols, x0) = tap_columns(g, ow, kj);
                let mut lanes = [T::ZERO; LANES];
                let mut tail = T::ZERO;
                for n in 0..self.n {
                    let gp = &self.gout[n * self.gout_stride..n * self.gout_stride + oh * ow];
                    let xp = &self.x[n * self.x_stride..n * self.x_stride + plane_in];
                    for oy in 0..oh {
                        let Some(y) = input_row(g, oy, ki) else {
                            continue;
                        };
                        let grow = &gp[oy * ow + cols.start..oy * ow + cols.end];
                        let src = &xp[y * w_in..(y + 1) * w_in];
                        if s1 == 1 {
                            let src = &src[x0..x0 + cols.len()];
                            let gc = grow.chunks_exact(LANES);
                            let sc = src.chunks_exact(LANES);
                            for (&a, &b) in gc.remainder().iter().zip(sc.remainder()) {
                                tail = a.mul_add(b, tail);
                            }
                            for (a, b) in gc.zip(sc) {
                                for l in 0..LANES {
                                    lanes[l] = a[l].mul_add(b[l], lanes[l]);
                                }
                            }
                        } else {
                            for (i, &a) in grow.iter().enumerate() {
                                tail = a.mul_add(src[x0 + i * s1], tail);
                            }
                        }
                    }
                }
                let total = lanes.iter().fold(tail, |s, &l| s + l);
                self.dw[ki * kw + kj] = total;
            }
        }
    }
}

/// The weight gradient of [`depthwise_conv2d`]: `[out_channels, 1, kh, kw]` from the
/// output gradient and the input. Channels run in parallel; each sums over the batch.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::depthwise_conv2d_backward_weight;
/// let g = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let dw = depthwise_conv2d_backward_weight(&[2.0f32], &[1.0, 2.0, 3.0, 4.0], &g, 1);
/// assert_eq!(dw, vec![2.0, 4.0, 6.0, 8.0]);
/// ```
pub fn depthwise_conv2d_backward_weight<T: Float>(
    gout: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    let m = multiplier(g, out_channels);
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let plane_in = g.input[0] * g.input[1];
    let plane = oh * ow;
    let mut dw = HostBuffer::<T>::zeroed(out_channels * kh * kw);
    for_each_outer(&mut dw, out_channels, g.n * plane * kh * kw, |oc, dst| {
        let c = oc / m;
        with_simd(WeightGradChannel {
            gout: &gout[oc * plane..],
            x: &x[c * plane_in..],
            gout_stride: out_channels * plane,
            x_stride: g.c * plane_in,
            n: g.n,
            dw: dst,
            g,
            oh,
            ow,
        })
    });
    dw
}

/// Elements of one im2col tile (1 MiB of f32): about L2-sized while the GEMM packs it, and
/// wide enough that each GEMM amortises its packing (ResNet-18 forward 116 -> 108 ms
/// against 64 Ki elements).
const TILE_ELEMS: usize = 256 * 1024;
/// Fewest output columns per tile (a narrower GEMM wastes its microkernel).
const MIN_TILE_COLS: usize = 128;

/// `conv2d` forward of contiguous `x` `[n, c, h, w]` with weight `[out_channels, c/groups,
/// kh, kw]` and optional bias: the contiguous output `[n, out_channels, oh, ow]`.
///
/// Per sample and group, the output rows are taken a tile at a time: the tile's im2col
/// columns (`[c/groups * kh * kw, rows * ow]`, sized to stay in L2) are gathered and one
/// GEMM writes the tile straight into the NCHW output, on top of the bias. The batch-wide
/// column matrix never exists, nor a permuted copy of the output. A 1×1 convolution with
/// stride 1 and no padding is a plain GEMM on the input. Samples run in parallel (one
/// thread per GEMM) when there are enough of them, else each GEMM is parallel.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::conv2d;
/// // one 2x2 image with two channels, one 1x1 filter summing them, bias 0.5
/// let g = Conv2dGeometry { n: 1, c: 2, input: [2, 2], kernel: [1, 1], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let x = [1.0f32, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0];
/// assert_eq!(conv2d(&x, &[1.0, 1.0], Some(&[0.5]), &g, 1, 1), vec![11.5, 22.5, 33.5, 44.5]);
/// ```
pub fn conv2d<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> HostBuffer<T> {
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let in_plane = g.input[0] * g.input[1];
    let plane = oh * ow;
    assert!(
        groups > 0 && g.c.is_multiple_of(groups) && out_channels.is_multiple_of(groups),
        "conv2d: {groups} groups do not divide {} input and {out_channels} output channels",
        g.c
    );
    let cg = g.c / groups;
    let k = cg * kh * kw;
    assert!(
        x.len() == g.n * g.c * in_plane && w.len() == out_channels * k,
        "conv2d: {} input and {} weight elements do not match {g:?} with {out_channels} outputs",
        x.len(),
        w.len()
    );
    let len = g.n * out_channels * plane;
    if len == 0 {
        return HostBuffer::zeroed(len);
    }
    if k == 0 {
        // No input channels: the output is the bias.
        let mut out = HostBuffer::<T>::zeroed(len);
        if let Some(b) = bias {
            for (i, row) in out.chunks_mut(plane).enumerate() {
                row.fill(b[i % out_channels]);
            }
        }
        return out;
    }
    if direct::applies::<T>(g, out_channels, groups) {
        return direct::conv2d_direct(x, w, bias, g, out_channels);
    }
    if pixels::applies::<T>(g, out_channels, groups) {
        return pixels::conv2d_pixels(x, w, bias, g, out_channels);
    }
    if winograd::before_wide::<T>(g, out_channels, groups) {
        return winograd::conv2d_winograd(x, w, bias, g, out_channels);
    }
    if wide::applies::<T>(g, out_channels, groups) {
        return wide::conv2d_wide(x, w, bias, g, out_channels);
    }
    if winograd::applies::<T>(g, out_channels, groups) {
        return winograd::conv2d_winograd(x, w, bias, g, out_channels);
    }
    if parity::applies::<T>(g, out_channels, groups) {
        return parity::conv2d(x, w, bias, g, out_channels);
    }
    if subpixel::applies(g, out_channels, groups) {
        return subpixel::conv2d_subpixel(x, w, bias, g, out_channels);
    }
    let samples_per_gemm = plane_group(g, k);
    if samples_per_gemm > 1 {
        return grouped_conv2d(x, w, bias, g, out_channels, groups, samples_per_gemm);
    }
    tiled_conv2d(x, w, bias, g, out_channels, groups)
}

/// Fewest GEMM columns worth packing a layer's weights for: a GEMM repacks its whole
/// left operand (`O × C·kh·kw`, megabytes in ResNet's last stages) per call, so one
/// call per 7×7 or 14×14 sample spends as long reading weights as multiplying.
const MIN_GEMM_COLS: usize = 384;

/// How many samples' whole output planes one forward GEMM takes (1: a sample, or a
/// tile of its rows, per GEMM) when a plane has fewer than [`MIN_GEMM_COLS`] pixels: an
/// even share of the batch per thread (each GEMM on one thread beats fewer, parallel
/// GEMMs), while their im2col columns stay within [`GROUP_ELEMS`]. At batch 8 on two
/// threads, four samples per GEMM against eight (one parallel GEMM): ResNet-18's 7² 3×3
/// layer 12.9 -> 11.8 ms, its 14² -> 7² stride-2 one 6.4 -> 5.9.
fn plane_group(g: &Conv2dGeometry, k: usize) -> usize {
    let plane = g.output().map_or(0, |[oh, ow]| oh * ow);
    if plane == 0 || plane >= MIN_GEMM_COLS || g.n < 2 {
        return 1;
    }
    let fit = (GROUP_ELEMS / (k * plane)).max(1);
    g.n.div_ceil(num_threads()).min(fit).min(g.n)
}

/// Most elements of one sample group's im2col columns (4 MiB of f32; larger groups
/// outgrow the caches: DCGAN's 4×4 / 2 convolution at batch 16, `C·kh·kw = 1024` on
/// 16×16 planes, ran slower with eight samples per GEMM than with four).
const GROUP_ELEMS: usize = 4 * TILE_ELEMS;

/// [`conv2d`] for small output planes: `per` samples at a time, their im2col columns side
/// by side (`[C/groups·kh·kw, per·oh·ow]`), one GEMM per group into a scratch
/// `[O, per·oh·ow]` that is then copied into each sample's NCHW block. Sample groups run
/// in parallel when there are enough of them, else each GEMM is parallel.
fn grouped_conv2d<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
    per: usize,
) -> HostBuffer<T> {
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let in_plane = g.input[0] * g.input[1];
    let plane = oh * ow;
    let (cg, og) = (g.c / groups, out_channels / groups);
    let k = cg * kh * kw;
    let run = |n0: usize, dst: &mut [MaybeUninit<T>], parallelism: Parallelism| {
        let count = dst.len() / (out_channels * plane);
        let cols_n = count * plane;
        let mut cols = HostBuffer::<T>::new_uninit(k * cols_n);
        let mut tmp = HostBuffer::<T>::new_uninit(out_channels * cols_n);
        for gi in 0..groups {
            for (r, row) in cols.chunks_exact_mut(cols_n).enumerate() {
                let (ci, tap) = (r / (kh * kw), r % (kh * kw));
                for (j, seg) in row.chunks_exact_mut(plane).enumerate() {
                    let c = (n0 + j) * g.c + gi * cg + ci;
                    gather_tap(
                        &x[c * in_plane..(c + 1) * in_plane],
                        g,
                        [oh, ow],
                        0..oh,
                        (tap / kw, tap % kw),
                        seg,
                    );
                }
            }
            let tmp_g = &mut tmp[gi * og * cols_n..(gi + 1) * og * cols_n];
            if let Some(b) = bias {
                for (o, row) in tmp_g.chunks_exact_mut(cols_n).enumerate() {
                    row.iter_mut().for_each(|d| _ = d.write(b[gi * og + o]));
                }
            }
            // SAFETY: dst: `tmp_g`, `og x cols_n` row-major, written above when there is a
            // bias (read_dst), else only written by gemm. lhs: the group's weights, `og x
            // k` row-major. rhs: `cols`, `k x cols_n` row-major, every element written by
            // `gather_tap` above (each row's `count` segments of `plane`). No overlap.
            unsafe {
                crate::cpu::gemm(
                    og,
                    cols_n,
                    k,
                    tmp_g.as_mut_ptr() as *mut T,
                    1,
                    cols_n as isize,
                    bias.is_some(),
                    w[gi * og * k..].as_ptr(),
                    1,
                    k as isize,
                    cols.as_ptr() as *const T,
                    1,
                    cols_n as isize,
                    T::ONE,
                    T::ONE,
                    parallelism,
                );
            }
        }
        // SAFETY: every group's GEMM wrote its `og` rows of `cols_n`: all of `tmp`.
        let tmp = unsafe { tmp.assume_init() };
        for (j, sample) in dst.chunks_exact_mut(out_channels * plane).enumerate() {
            for (o, row) in sample.chunks_exact_mut(plane).enumerate() {
                let src = &tmp[o * cols_n + j * plane..][..plane];
                row.iter_mut().zip(src).for_each(|(d, &v)| _ = d.write(v));
            }
        }
    };
    let mut out = HostBuffer::<T>::new_uninit(g.n * out_channels * plane);
    let parallel_groups = g.n.div_ceil(per) >= num_threads();
    for_each_block(
        &mut out,
        per * out_channels * plane,
        [parallel_groups, true],
        |i, dst, parallelism| run(i * per, dst, parallelism),
    );
    // SAFETY: each block's samples were copied out of `tmp` above: every element.
    unsafe { out.assume_init() }
}

/// Calls `run(i, block, parallelism)` on each `chunk`-element block `i` of `out`: the
/// blocks in parallel, each GEMM on one thread, when `parallel_blocks` (and there are
/// threads); else one block after another, each GEMM parallel when `parallel_gemm`.
fn for_each_block<T: Send>(
    out: &mut [T],
    chunk: usize,
    [parallel_blocks, parallel_gemm]: [bool; 2],
    run: impl Fn(usize, &mut [T], Parallelism) + Sync,
) {
    let threads = num_threads();
    if threads > 1 && parallel_blocks {
        for_each_chunk_mut(out, chunk, |i, dst| run(i, dst, Parallelism::None));
    } else {
        let parallelism = if threads > 1 && parallel_gemm {
            Parallelism::Threads(threads)
        } else {
            Parallelism::None
        };
        for (i, dst) in out.chunks_mut(chunk).enumerate() {
            run(i, dst, parallelism);
        }
    }
}

/// [`conv2d`] by tiles of im2col columns and GEMMs, for every convolution (sizes checked
/// by the caller; `k > 0` and a non-empty output).
pub(super) fn tiled_conv2d<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> HostBuffer<T> {
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let in_plane = g.input[0] * g.input[1];
    let plane = oh * ow;
    let (cg, og) = (g.c / groups, out_channels / groups);
    let k = cg * kh * kw;
    let len = g.n * out_channels * plane;
    let pointwise = kh == 1 && kw == 1 && g.stride == [1, 1] && g.padding == [0, 0];
    let threads = num_threads();
    let parallel_samples = g.n >= threads && g.n * out_channels * k * plane >= PARALLEL_THRESHOLD;
    let parallel_gemm = og * k * plane >= 48 * 48 * 48;
    let mut rows_per_tile = if pointwise {
        oh
    } else {
        (TILE_ELEMS / k / ow)
            .max(MIN_TILE_COLS.div_ceil(ow))
            .clamp(1, oh)
    };
    // Fewer samples than threads (batch 1, the serving case): when the im2col tiles are at
    // least as many as the threads, the threads take whole tiles (their own gather and a
    // one-thread GEMM, the tile count rounded to a multiple of the threads) rather than
    // gathering on one thread and splitting each GEMM's rows, which leaves narrow row
    // blocks (32 of 64 channels) to the GEMM's microkernel and the other thread idle.
    // (A pointwise conv stays one GEMM over the plane, split by the GEMM: one tile per
    // thread measured no faster on MobileNetV2 at batch 1.)
    let parallel_tiles = !pointwise
        && threads > 1
        && !parallel_samples
        && parallel_gemm
        && oh.div_ceil(rows_per_tile) >= threads;
    if parallel_tiles {
        let tiles = oh.div_ceil(rows_per_tile).div_ceil(threads) * threads;
        rows_per_tile = oh.div_ceil(tiles);
    }
    let tiles = oh.div_ceil(rows_per_tile);
    // One tile: gather rows `oys` of the group's image into `cols` (unless pointwise) and
    // multiply, into the group's output block at `dst` (`og` rows of `plane`).
    let tile = |img: &[T],
                wg: &[T],
                dst: *mut MaybeUninit<T>,
                oys: Range<usize>,
                cols: Option<&mut [MaybeUninit<T>]>,
                parallelism: Parallelism| {
        let oy0 = oys.start;
        let cols_n = oys.len() * ow;
        let (rhs, rhs_rs): (*const T, usize) = match cols {
            None => (img[oy0 * ow..].as_ptr(), in_plane),
            Some(cols) => {
                for (r, row) in cols.chunks_exact_mut(cols_n).take(k).enumerate() {
                    let (ci, tap) = (r / (kh * kw), r % (kh * kw));
                    gather_tap(
                        &img[ci * in_plane..(ci + 1) * in_plane],
                        g,
                        [oh, ow],
                        oys.clone(),
                        (tap / kw, tap % kw),
                        row,
                    );
                }
                (cols.as_ptr() as *const T, cols_n)
            }
        };
        // SAFETY: dst: rows `o < og` of this group's output block, columns `oy0 * ow ..
        // oy0 * ow + cols_n` (row stride `plane`), inside the block the caller points at
        // and written by no other tile; with a bias they were written first (read_dst),
        // else gemm only writes them. lhs: `wg`, `og x k` row-major. rhs: `k x cols_n`
        // with row stride `rhs_rs` — the tile's columns, every element written by
        // `gather_tap` above (each of the first `k` rows of `cols_n` slots), or for a
        // pointwise conv the input channels' planes from column `oy0 * ow` (`cols_n` of
        // them: `oys` ends at `oh` at most). Nothing overlaps `dst`.
        unsafe {
            crate::cpu::gemm(
                og,
                cols_n,
                k,
                dst.add(oy0 * ow) as *mut T,
                1,
                plane as isize,
                bias.is_some(),
                wg.as_ptr(),
                1,
                k as isize,
                rhs,
                1,
                rhs_rs as isize,
                T::ONE,
                T::ONE,
                parallelism,
            );
        }
    };
    let sample = |n: usize, dst: &mut [MaybeUninit<T>], parallelism: Parallelism| {
        let mut cols = (!pointwise && !parallel_tiles)
            .then(|| HostBuffer::<T>::new_uninit(k * rows_per_tile * ow));
        for gi in 0..groups {
            let first = n * g.c + gi * cg;
            let img = &x[first * in_plane..(first + cg) * in_plane];
            let wg = &w[gi * og * k..(gi + 1) * og * k];
            let dst = &mut dst[gi * og * plane..(gi + 1) * og * plane];
            if let Some(b) = bias {
                for (o, row) in dst.chunks_exact_mut(plane).enumerate() {
                    row.iter_mut().for_each(|d| _ = d.write(b[gi * og + o]));
                }
            }
            if parallel_tiles {
                let out = TileDst(dst.as_mut_ptr());
                crate::cpu::run_tasks(tiles, |t| {
                    let oys = t * rows_per_tile..((t + 1) * rows_per_tile).min(oh);
                    let mut cols =
                        (!pointwise).then(|| HostBuffer::<T>::new_uninit(k * oys.len() * ow));
                    tile(
                        img,
                        wg,
                        out.get(),
                        oys,
                        cols.as_deref_mut(),
                        Parallelism::None,
                    );
                });
            } else {
                for oy0 in (0..oh).step_by(rows_per_tile) {
                    let oys = oy0..(oy0 + rows_per_tile).min(oh);
                    tile(
                        img,
                        wg,
                        dst.as_mut_ptr(),
                        oys,
                        cols.as_deref_mut(),
                        parallelism,
                    );
                }
            }
        }
    };
    let mut out = HostBuffer::<T>::new_uninit(len);
    for_each_block(
        &mut out,
        out_channels * plane,
        [parallel_samples, parallel_gemm && !parallel_tiles],
        sample,
    );
    // SAFETY: each sample's block is `groups` blocks of `og` rows of `plane` elements; the
    // row tiles cover `0..oh` and every GEMM writes its `og x cols_n` tile, so every
    // element of `out` was written.
    unsafe { out.assume_init() }
}

/// A group's output block shared by the tile tasks of [`tiled_conv2d`].
struct TileDst<T>(*mut MaybeUninit<T>);
// SAFETY: each task writes only its own tile's columns of the block (disjoint ranges).
unsafe impl<T: Send> Sync for TileDst<T> {}
impl<T> TileDst<T> {
    fn get(&self) -> *mut MaybeUninit<T> {
        self.0
    }
}

#[cfg(test)]
mod tests;
