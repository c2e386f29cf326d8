//! The weight gradient of wide layers (ResNet's 3×3 convolutions at 56², its 28² ones where
//! Winograd does not serve them, its 7×7 stride-2 stem) without im2col columns or GEMM
//! packing: `dW[o, r] = Σ_q gy[o, q] · x_r[q]`, where reduction row `r` is an input channel
//! and a tap, and `x_r` the channel's padded plane shifted by the tap. Vectorised along the
//! pixels `q`: a register block holds [`MO`] output channels × [`MT`] reduction rows of
//! vector partial sums, and each pixel vector costs `MO` gradient loads, `MT` input loads
//! and `MO · MT` FMAs, read straight from NCHW rows — nothing is transposed. The partial
//! sums are reduced across lanes once per sweep of a tile's pixels.
//!
//! A sample is taken a tile of output rows at a time (the whole sample unless it is
//! large): the gradient's rows in the "wide" layout (`wq` columns per row, zero past
//! `ow`) and the input rows they read, zero-padded, are copied into scratch, and each
//! register block sweeps the tile's pixels; pixel `q = y·wq + x` reads each tap at a
//! fixed displacement from `q`. Strided convolutions read phase planes (see [`Plan`]),
//! which make every stride a unit stride. Samples are split between threads, each
//! summing into its own partial gradient.

use super::direct::{f32s, pad_rows};
use super::lanes::{Level, level};
use crate::WideFloat as Float;
use crate::cpu::{Conv2dGeometry, HostBuffer, for_each_chunk_mut, num_threads};
use crate::{DType, Element};

/// Output channels per register block (AVX2).
const MO: usize = 2;
/// Reduction rows (input channel, tap) per register block: `MO · MT` accumulators, `MO`
/// gradient vectors and one input vector fill the 16 AVX2 registers.
const MT: usize = 6;
/// AVX-512's register block: 24 of its 32 registers hold `MO_512 · MT_512` accumulators,
/// so each pixel vector costs 10 loads per 24 FMAs, where AVX2's `2 × 6` block issues 8
/// per 12 (most of them unaligned input loads that split across two cache lines: a tap
/// shifts its row by a pixel) and leaves the FMA ports waiting on the load ports.
/// ResNet-18's 28² layer (`[8, 128, 28, 28]`, 3×3), forward + backward on two Xeon
/// cores: 24.6 -> 20.3 ms (`6 × 4` and `8 × 3` blocks measured the same).
const MO_512: usize = 4;
/// See [`MO_512`].
const MT_512: usize = 6;
/// Bytes of one tile's gradient and input scratch, unless that leaves fewer than
/// [`MIN_SWEEP`] pixels per sweep: the cross-lane sums and block setup of each sweep are
/// paid per tile (ResNet-18's 28² weight gradient: 13.8 ms at 12-row tiles of 384 KiB,
/// 11.7 ms at whole samples; its im2col + GEMM path takes 12.5 ms).
const TILE_BYTES: usize = 512 << 10;
/// Fewest pixels per sweep (a tile's rows), see [`TILE_BYTES`].
const MIN_SWEEP: usize = 1024;
/// Bytes of input per chunk of reduction rows, which every output-channel block sweeps
/// while it stays in L2 (ResNet-18's stride-2 56² -> 28² layer streamed its whole 900 KB
/// padded input per block from L3 without them).
const CHUNK_BYTES: usize = 160 << 10;
/// Fewest products per input element (`O·kh·kw / (s_h·s_w)`) for a strided convolution
/// to be served: ResNet-18's stem (784) 15.0 -> 12.4 ms at batch 8, its stride-2 3×3
/// layer at 56² (288) 6.1 -> 6.9 ms.
const MIN_STRIDED_WORK: usize = 512;
/// Smallest output plane served (smaller planes waste too much of each sweep on the
/// padding columns and on the cross-lane sums).
const MIN_PLANE: usize = 24 * 24;

/// Whether [`conv2d_wide_weight_grad`] serves a convolution's weight gradient: f32 on a
/// CPU with AVX-512 or AVX2 + FMA, one group, at least 32 output channels, a reduction of
/// at least `MT` rows, output planes of at least 24×24, at least one sample per thread
/// (samples are its only parallelism), and unit strides or at least `MIN_STRIDED_WORK`
/// products per input element (the phase planes of a strided input are a gather, paid
/// for by ResNet's stem but not by its stride-2 3×3 layers).
pub fn weight_grad_applies<T: Element>(
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> bool {
    let plane = g.output().map_or(0, |[oh, ow]| oh * ow);
    let [sh, sw] = g.stride;
    let per_input = out_channels * g.kernel[0] * g.kernel[1] / (sh * sw).max(1);
    T::DTYPE == DType::F32
        && groups == 1
        && out_channels >= 32
        && g.c * g.kernel[0] * g.kernel[1] >= MT
        && plane >= MIN_PLANE
        && (g.stride == [1, 1] || per_input >= MIN_STRIDED_WORK)
        && g.n >= num_threads()
        && level().is_some()
}

/// What every tile of every sample shares.
///
/// A stride `s` is turned into unit strides over phase planes: phase `(a, b)` of a padded
/// channel holds its pixels `(y·s_h + a, x·s_w + b)`, so tap `(i, j)` of output pixel
/// `(oy, ox)` reads phase `(i·d_h mod s_h, j·d_w mod s_w)` at `(oy + i·d_h / s_h, ox +
/// j·d_w / s_w)`: a fixed offset from the pixel's position in the phase plane, as with
/// unit strides (one phase).
struct Plan<'a> {
    g: &'a Conv2dGeometry,
    o: usize,
    oh: usize,
    ow: usize,
    /// Phase-plane width (the padded width for unit strides), output rows per tile, and
    /// floats per gradient row, per phase plane and per input channel in the scratch.
    wq: usize,
    rows: usize,
    grow: usize,
    phase: usize,
    chan: usize,
    /// Each reduction row's offset into the input scratch: its channel, phase and the
    /// tap's displacement within the phase.
    offsets: Vec<usize>,
    /// Reduction rows per chunk (whole channels, [`CHUNK_BYTES`] of input).
    chunk: usize,
}

impl Plan<'_> {
    fn new<'a>(g: &'a Conv2dGeometry, o: usize, lanes: usize) -> Plan<'a> {
        let [oh, ow] = g.output().expect("conv geometry checked by the caller");
        let ([kh, kw], [sh, sw], [dh, dw]) = (g.kernel, g.stride, g.dilation);
        let wq = (g.input[1] + 2 * g.padding[1]).div_ceil(sw);
        let (halo, reach) = ((kh - 1) * dh / sh, (kw - 1) * dw / sw);
        let per_row = 4 * (o + g.c * sh) * wq;
        let rows = (TILE_BYTES / per_row)
            .max(MIN_SWEEP.div_ceil(wq))
            .clamp(1, oh);
        let grow = (rows * wq).next_multiple_of(lanes);
        // The last pixel vector reads up to `grow - 1` past a tap's displacement, the
        // largest being `halo · wq + reach`.
        let phase = (rows + halo) * wq + reach + lanes;
        let chan = sh * sw * phase;
        let offsets = (0..g.c)
            .flat_map(|c| {
                (0..kh * kw).map(move |t| {
                    let (i, j) = (t / kw * dh, t % kw * dw);
                    c * chan + (i % sh * sw + j % sw) * phase + i / sh * wq + j / sw
                })
            })
            .collect();
        let chunk = (CHUNK_BYTES / (4 * chan)).max(1) * kh * kw;
        Plan {
            g,
            o,
            oh,
            ow,
            wq,
            rows,
            grow,
            phase,
            chan,
            offsets,
            chunk,
        }
    }

    /// Copies the gradient rows `r0..r0 + rows` of sample `gy` `[O, oh, ow]` into `dst`
    /// `[O, grow]` in the wide layout (`wq` per row), zero past each row's `ow` pixels
    /// and past the rows.
    fn fill_grad(&self, gy: &[f32], r0: usize, rows: usize, dst: &mut [f32]) {
        let (ow, wq, plane) = (self.ow, self.wq, self.oh * self.ow);
        for (o, drow) in dst.chunks_exact_mut(self.grow).take(self.o).enumerate() {
            let src = &gy[o * plane + r0 * ow..][..rows * ow];
            for (d, s) in drow.chunks_exact_mut(wq).zip(src.chunks_exact(ow)) {
                d[..ow].copy_from_slice(s);
                d[ow..].fill(0.0);
            }
            drow[rows * wq..].fill(0.0);
        }
    }

    /// Copies the input that output rows `r0..r0 + rows` read from sample `x` `[C, h, w]`
    /// into `dst` `[C, phases, phase]`, zero outside the input and past the rows.
    fn fill_input(&self, x: &[f32], r0: usize, rows: usize, dst: &mut [f32]) {
        let g = self.g;
        let in_plane = g.input[0] * g.input[1];
        let sh = g.stride[0];
        let th = rows + (g.kernel[0] - 1) * g.dilation[0] / sh;
        for (c, chan) in dst.chunks_exact_mut(self.chan).take(g.c).enumerate() {
            let src = &x[c * in_plane..][..in_plane];
            for (p, plane) in chan.chunks_exact_mut(self.phase).enumerate() {
                let (a, b) = (p / g.stride[1], p % g.stride[1]);
                let (body, rest) = plane.split_at_mut(th * self.wq);
                pad_rows(src, g, r0 * sh + a, b, self.wq, body);
                rest.fill(0.0);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod blocks {
    use super::super::lanes::Vector;
    use super::Plan;

    /// One tile's contribution, added to `dw` (`[O, C·kh·kw]`): `gt` the tile's
    /// gradient (`[O, grow]`, wide), `xt` its input (`[C, chan]`), `len` the pixels to
    /// sweep (a multiple of the lanes, at most `grow`).
    ///
    /// # Safety
    /// The CPU has `V`'s features; `gt` and `xt` hold the plan's tile sizes, and every
    /// reduction row's offset plus `len` is at most `xt.len()` (asserted by the caller).
    #[inline(always)]
    pub(super) unsafe fn tile<V: Vector, const MO: usize, const MT: usize>(
        plan: &Plan,
        gt: &[f32],
        xt: &[f32],
        len: usize,
        dw: &mut [f32],
    ) {
        let (o, k) = (plan.o, plan.offsets.len());
        let (gp, xp) = (gt.as_ptr(), xt.as_ptr());
        // A chunk of reduction rows (whole channels) at a time, so its input stays in
        // L2 while every output-channel block sweeps it.
        for k0 in (0..k).step_by(plan.chunk) {
            let k1 = (k0 + plan.chunk).min(k);
            for o0 in (0..o).step_by(MO) {
                // SAFETY: as this function's.
                unsafe { pair::<V, MO, MT>(plan, gp, xp, len, o0, k0..k1, dw) }
            }
        }
    }

    /// Output channels `o0..o0 + MO` against reduction rows `ks`, `MT` rows at a time.
    ///
    /// # Safety
    /// As [`tile`], with `gp` and `xp` its scratch.
    #[inline(always)]
    unsafe fn pair<V: Vector, const MO: usize, const MT: usize>(
        plan: &Plan,
        gp: *const f32,
        xp: *const f32,
        len: usize,
        o0: usize,
        ks: std::ops::Range<usize>,
        dw: &mut [f32],
    ) {
        let (o, k, grow) = (plan.o, plan.offsets.len(), plan.grow);
        // Rows past the end repeat the last one (their sums are not stored).
        let orows: [usize; MO] = std::array::from_fn(|i| (o0 + i).min(o - 1) * grow);
        let mo = (o - o0).min(MO);
        for t0 in ks.clone().step_by(MT) {
            let mt = (ks.end - t0).min(MT);
            let r: [usize; MT] = std::array::from_fn(|j| plan.offsets[t0 + j.min(mt - 1)]);
            // SAFETY: the caller runs with `V`'s features.
            let zero = unsafe { V::splat(0.0) };
            let mut acc = [[zero; MT]; MO];
            for q in (0..len).step_by(V::LANES) {
                // SAFETY: `orows[i] + q + LANES <= O · grow` (`len <= grow`); `r[j] + q
                // + LANES <= xt.len()` (the caller's bound).
                unsafe {
                    let gv: [V; MO] = std::array::from_fn(|i| V::load(gp.add(orows[i] + q)));
                    for (j, &rj) in r.iter().enumerate() {
                        let xv = V::load(xp.add(rj + q));
                        for (a, &g) in acc.iter_mut().zip(&gv) {
                            a[j] = V::fma(g, xv, a[j]);
                        }
                    }
                }
            }
            for (i, a) in acc.iter().enumerate().take(mo) {
                let mut sums = [0.0f32; 8];
                debug_assert!(MT <= sums.len());
                for (c, chunk) in sums[..MT.next_multiple_of(4)]
                    .chunks_exact_mut(4)
                    .enumerate()
                {
                    let v: [V; 4] = std::array::from_fn(|l| a[(4 * c + l).min(MT - 1)]);
                    // SAFETY: the caller runs with `V`'s features.
                    chunk.copy_from_slice(&unsafe { V::sum4(v) });
                }
                let dst = &mut dw[(o0 + i) * k + t0..][..mt];
                for (d, s) in dst.iter_mut().zip(sums) {
                    *d += s;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod levels {
    use super::super::lanes::{Vector, Ymm, Zmm};
    use super::{Level, MO, MO_512, MT, MT_512, Plan, blocks};

    #[target_feature(enable = "avx512f")]
    unsafe fn tile_avx512(plan: &Plan, gt: &[f32], xt: &[f32], len: usize, dw: &mut [f32]) {
        // SAFETY: AVX-512F is enabled here; the rest is the caller's contract.
        unsafe { blocks::tile::<Zmm, MO_512, MT_512>(plan, gt, xt, len, dw) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_avx2(plan: &Plan, gt: &[f32], xt: &[f32], len: usize, dw: &mut [f32]) {
        // SAFETY: AVX2 and FMA are enabled here; the rest is the caller's contract.
        unsafe { blocks::tile::<Ymm, MO, MT>(plan, gt, xt, len, dw) }
    }

    /// # Safety
    /// The CPU has `level`'s features; the rest as [`blocks::tile`].
    pub(super) unsafe fn tile(
        level: Level,
        plan: &Plan,
        gt: &[f32],
        xt: &[f32],
        len: usize,
        dw: &mut [f32],
    ) {
        // SAFETY: the caller checked the level's features.
        unsafe {
            match level {
                Level::Avx512 => tile_avx512(plan, gt, xt, len, dw),
                Level::Avx2 => tile_avx2(plan, gt, xt, len, dw),
            }
        }
    }

    /// The lanes of `level`'s vectors.
    pub(super) fn lanes(level: Level) -> usize {
        match level {
            Level::Avx512 => <Zmm as Vector>::LANES,
            Level::Avx2 => <Ymm as Vector>::LANES,
        }
    }
}

/// The weight gradient `[O, C, kh, kw]` of a one-group convolution of `x`
/// `[N, C, H, W]`, from the output gradient `gy` `[N, O, oh, ow]`. Only where
/// [`weight_grad_applies`] says so.
///
/// ```
/// use ferrograd_kernels::cpu::{Conv2dGeometry, num_threads};
/// use ferrograd_kernels::fused::conv::{conv2d_wide_weight_grad, weight_grad_applies};
/// // a 1×1 kernel from 6 input channels to 32 outputs, one sample per thread:
/// // dW[o, c] = Σ_{n, q} gy[n, o, q] · x[n, c, q]
/// let n = num_threads();
/// let g = Conv2dGeometry { n, c: 6, input: [24, 24], kernel: [1, 1], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let x = vec![0.5f32; n * 6 * 24 * 24];
/// let gy = vec![2.0f32; n * 32 * 24 * 24];
/// // (false only on CPUs without AVX2 + FMA, where the tiled path serves)
/// if weight_grad_applies::<f32>(&g, 32, 1) {
///     let dw = conv2d_wide_weight_grad(&gy, &x, &g, 32);
///     assert_eq!(dw.len(), 32 * 6);
///     assert!(dw.iter().all(|&v| v == (n * 576) as f32));
/// }
/// ```
pub fn conv2d_wide_weight_grad<T: Float>(
    gy: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    assert!(
        weight_grad_applies::<T>(g, out_channels, 1),
        "conv2d_wide_weight_grad: f32 on an AVX-512 or AVX2 CPU, one group, 32+ output channels, planes of 24×24 and up only ({g:?})"
    );
    let level = level().expect("checked by `weight_grad_applies`");
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let o = out_channels;
    let (in_len, plane) = (g.c * g.input[0] * g.input[1], oh * ow);
    let k = g.c * g.kernel[0] * g.kernel[1];
    assert!(
        x.len() == g.n * in_len && gy.len() == g.n * o * plane,
        "conv2d backward: {} input and {} gradient elements do not match {g:?} with {o} outputs",
        x.len(),
        gy.len()
    );
    let (x, gy) = (f32s(x), f32s(gy));
    #[cfg(target_arch = "x86_64")]
    let lanes = levels::lanes(level);
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = 8;
    let plan = Plan::new(g, o, lanes);
    let last_row = plan.offsets.iter().copied().max().unwrap_or(0);
    let tasks = num_threads().min(g.n).max(1);
    // Pooled buffers: the scratch is megabytes, fresh pages every call would fault.
    let mut partial = HostBuffer::<f32>::zeroed(tasks * o * k);
    for_each_chunk_mut(&mut partial, o * k, |task, dw| {
        let mut gt = HostBuffer::<f32>::zeroed(o * plan.grow);
        let mut xt = HostBuffer::<f32>::zeroed(g.c * plan.chan);
        for n in (task * g.n / tasks)..((task + 1) * g.n / tasks) {
            for r0 in (0..oh).step_by(plan.rows) {
                let rows = plan.rows.min(oh - r0);
                let len = (rows * plan.wq).next_multiple_of(lanes);
                plan.fill_grad(&gy[n * o * plane..(n + 1) * o * plane], r0, rows, &mut gt);
                plan.fill_input(&x[n * in_len..(n + 1) * in_len], r0, rows, &mut xt);
                assert!(
                    last_row + len <= xt.len() && len <= plan.grow,
                    "wide conv2d weight gradient: a window leaves the tile ({g:?})"
                );
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `level` is this CPU's; the scratch has the plan's sizes and the
                // assert above bounds every read.
                unsafe {
                    levels::tile(level, &plan, &gt, &xt, len, dw)
                };
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (level, len, dw.len());
            }
        }
    });
    let mut out = HostBuffer::<T>::zeroed(o * k);
    // SAFETY: `T` is f32 (checked by `weight_grad_applies`).
    let dst = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, o * k) };
    for part in partial.chunks_exact(o * k) {
        for (d, &p) in dst.iter_mut().zip(part) {
            *d += p;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::tests::values_f32 as values;

    /// Against the tiled im2col + GEMM backward (itself tested against the definition),
    /// over tile boundaries (a last tile of fewer rows), reduction tails (rows not a
    /// multiple of `MT`), odd output channels, strides, paddings, dilations and kernel
    /// sizes, at one thread and at two. Skips (saying so) on CPUs without AVX2 + FMA.
    #[test]
    fn matches_the_tiled_path() {
        let _threads = crate::cpu::thread_count_lock();
        if level().is_none() {
            eprintln!("skipped: no AVX-512 or AVX2 + FMA on this CPU");
            return;
        }
        let cases = [
            // (c, o, input, kernel, stride, padding, dilation)
            (16, 32, [24, 24], [3, 3], [1, 1], [1, 1], [1, 1]),
            (5, 33, [30, 26], [3, 3], [1, 1], [1, 1], [1, 1]),
            (32, 32, [28, 31], [3, 3], [1, 1], [0, 2], [1, 2]),
            (7, 40, [26, 40], [5, 3], [1, 1], [2, 1], [1, 1]),
            (6, 32, [60, 30], [1, 1], [1, 1], [0, 0], [1, 1]),
            // several tiles per sample (rows of 100 floats)
            (64, 64, [90, 98], [3, 3], [1, 1], [1, 1], [1, 1]),
            // strides: phase planes (the stem's 7×7 / 2, odd sizes, mixed strides)
            (3, 64, [52, 50], [7, 7], [2, 2], [3, 3], [1, 1]),
            (5, 240, [49, 51], [3, 3], [2, 2], [1, 1], [2, 1]),
            (4, 171, [50, 26], [3, 2], [2, 1], [1, 0], [1, 2]),
            (8, 513, [75, 76], [3, 3], [3, 3], [2, 1], [1, 1]),
        ];
        for threads in [1, 2] {
            crate::cpu::set_num_threads(threads);
            // At least as many samples as any test's thread count.
            let n = num_threads().max(4);
            for (c, o, input, kernel, stride, padding, dilation) in cases {
                let g = Conv2dGeometry {
                    n,
                    c,
                    input,
                    kernel,
                    stride,
                    padding,
                    dilation,
                };
                assert!(weight_grad_applies::<f32>(&g, o, 1), "{g:?}");
                let [oh, ow] = g.output().unwrap();
                let x = values(n * c * input[0] * input[1], 1);
                let w = values(o * c * kernel[0] * kernel[1], 2);
                let gy = values(n * o * oh * ow, 4);
                let got = conv2d_wide_weight_grad(&gy, &x, &g, o);
                let (_, want) =
                    super::super::backward::tiled_backward(&gy, &x, &w, &g, o, 1, [false, true]);
                let want = want.expect("wanted");
                assert_eq!(got.len(), want.len());
                for (i, (a, r)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (a - r).abs() <= 1e-3 * (1.0 + r.abs()),
                        "{g:?}: dw[{i}] {a} vs {r}"
                    );
                }
            }
        }
        crate::cpu::set_num_threads(0);
    }
}
