//! Direct convolution for wide unit-stride layers (ResNet's 3×3 convolutions at 56² and
//! 28²), and at batch 1 for wide stride-2 ones (ResNet's 7×7 stem and its 56² -> 28²
//! downsampling): the register blocks of the narrow kernel ([`direct`](super::direct): 16 output
//! channels × a few output pixels, one weight vector and a broadcast input per FMA row),
//! cache-blocked the way a GEMM blocks its operands, with no im2col columns and no GEMM
//! packing.
//!
//! A sample's output is taken a tile of rows at a time. The tile's input rows (with the
//! kernel's halo) are copied once into a zero-padded scratch that stays in L2; then, for
//! each block of 16 output channels, the input channels are taken [`CB`] at a time so that
//! their weights (packed contiguously, `CB · kh · kw` vectors) stay in L1 while every
//! pixel block of the tile reads them. Partial sums of a pixel block live in its own slot
//! between channel blocks (vector loads and stores, no transposes); the last channel
//! block scatters the finished sums into the NCHW output.
//!
//! Stride 1 makes pixel `q = y·wp + x` of the tile's "wide" plane (`wp` the padded width)
//! read its window at offset `q` of each padded channel, so a block of pixels reads
//! consecutive floats at fixed per-tap displacements; with stride `s` the window lies at
//! offset `s·q` (every `s`-th float), and blocks stay within a row (the wide plane's
//! columns past `ow` would read beyond the tile).

use super::direct::{block_starts, check_sizes, f32s, pack_weight_blocks, pad_rows, tap_offsets};
use super::lanes::{Level, level};
use crate::WideFloat as Float;
use crate::cpu::{Conv2dGeometry, HostBuffer, for_each_chunk_mut, num_threads};
use crate::{DType, Element};
use std::mem::MaybeUninit;

/// Output channels per register block (one AVX-512 vector of f32, two AVX2 vectors); the
/// AVX-512 kernel takes two blocks at once ([`WIDE_OB`]) where the channels allow.
const OB: usize = 16;
/// Output channels per AVX-512 register block when they are a multiple of it.
const WIDE_OB: usize = 32;
/// Input channels per cache block: their `CB · kh · kw` weight vectors (9 KiB for 3×3)
/// stay in L1 across a tile's pixel blocks.
const CB: usize = 16;
/// Output pixels per row tile (its padded input rows stay in L2 across the output
/// channel blocks).
const TILE_PX: usize = 512;
/// Narrowest output rows served with stride 2: every register block lies within a row
/// (at least [`Zmm2::PX`](super::lanes::Lanes::PX) pixels).
const MIN_STRIDED_WIDTH: usize = 16;
/// Smallest output plane served: smaller planes waste too much of each pixel block at
/// row ends and gain little over the GEMM's packing.
const MIN_PLANE: usize = 24 * 24;

/// Whether the wide direct kernel serves a convolution: f32 on a CPU with AVX-512 or
/// AVX2 + FMA, one group, a multiple of 16 output channels (at least 32), output planes
/// of at least 24×24, and a task for every thread ([`tasks`]: samples, split by
/// output-channel blocks below one per thread for kernels larger than 1×1: MobileNetV2's
/// pointwise layers at batch 1 ran faster as im2col + GEMM, 9.4–9.9 against 10.8–11.0 ms
/// for the model); then either unit strides and at least 16 input channels, or (serving,
/// fewer samples than threads) stride 2, no dilation, a kernel larger than 1×1 and output
/// rows of at least 16. At batch 1 the stride-2 kernel took ResNet-18's stem from
/// 1.18–1.26 to 1.02–1.08 ms and its 56² -> 28² 3×3 layer from 0.96–1.01 to 0.56–0.63
/// (alone, alternated); at batch 8 the im2col GEMM, which packs the weights once for
/// all samples, stays ahead (4.1–4.3 against 4.6–4.8 ms for the latter).
pub(crate) fn applies<T: Element>(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    let Some([oh, ow]) = g.output() else {
        return false;
    };
    let threads = num_threads();
    let shape = match g.stride {
        [1, 1] => g.c >= CB,
        [2, 2] => {
            g.n < threads && g.kernel != [1, 1] && g.dilation == [1, 1] && ow >= MIN_STRIDED_WIDTH
        }
        _ => false,
    };
    T::DTYPE == DType::F32
        && groups == 1
        && shape
        && out_channels >= 2 * OB
        && out_channels.is_multiple_of(OB)
        && oh * ow >= MIN_PLANE
        && ow >= 8
        && level().is_some_and(|l| {
            g.n >= threads
                || (g.kernel != [1, 1]
                    && g.n * tasks(g.n, out_channels / block_width(l, out_channels)) >= threads)
        })
}

/// Output channels per register block on `level` for `out_channels` channels.
fn block_width(level: Level, out_channels: usize) -> usize {
    if level == Level::Avx512 && out_channels.is_multiple_of(WIDE_OB) {
        WIDE_OB
    } else {
        OB
    }
}

/// Tasks per sample: one, or with fewer samples than threads (serving at batch 1) as many
/// as give every thread one, each a share of the output-channel blocks (`blocks` of them)
/// that divides them evenly. Each task copies the sample's input tile for itself.
fn tasks(n: usize, blocks: usize) -> usize {
    let want = num_threads().div_ceil(n.max(1));
    (want..=blocks)
        .find(|t| blocks.is_multiple_of(*t))
        .unwrap_or(1)
}

/// What every tile of every sample shares.
struct Plan<'a> {
    g: &'a Conv2dGeometry,
    o: usize,
    /// Output size, padded input width, the rows per tile, and the stride (pixel `q =
    /// y·wp + x` of the "wide" output plane reads its window from offset `stride · q` of
    /// each padded tile channel).
    oh: usize,
    ow: usize,
    wp: usize,
    rows: usize,
    stride: usize,
    /// Each tap's offset within a padded tile channel.
    taps: Vec<usize>,
    /// Output channels per register block: the weights are packed in blocks this wide.
    ob: usize,
    wpk: &'a [f32],
    bias: Option<&'a [f32]>,
}

impl Plan<'_> {
    /// Padded input rows a tile of `rows` output rows reads.
    fn tile_in_rows(&self, rows: usize) -> usize {
        (rows - 1) * self.stride + (self.g.kernel[0] - 1) * self.g.dilation[0] + 1
    }

    /// Copies the input rows that output rows `r0..r0 + rows` read from sample `x`
    /// `[C, h, w]` into `dst` `[C, tile_in_rows, wp]`, zero outside the input.
    fn fill_tile(&self, x: &[f32], r0: usize, rows: usize, dst: &mut [f32]) {
        // Every padded row and column from the tile's first: the stride is in the
        // kernel's reads.
        let g = &Conv2dGeometry {
            stride: [1, 1],
            ..*self.g
        };
        let in_plane = g.input[0] * g.input[1];
        let th = self.tile_in_rows(rows);
        for (c, chan) in dst.chunks_exact_mut(th * self.wp).take(g.c).enumerate() {
            pad_rows(
                &x[c * in_plane..][..in_plane],
                g,
                r0 * self.stride,
                0,
                self.wp,
                chan,
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod blocks {
    use super::super::lanes::Lanes;
    use super::{CB, Plan, WIDE_OB};
    use std::mem::MaybeUninit;

    /// One input channel's taps added to `acc`: `x` the channel from the block's first
    /// pixel's window, `w` its `taps.len()` packed weight vectors; pixel `i` reads from
    /// `S · i` (the stride).
    ///
    /// # Safety
    /// The CPU has `L`'s features; `w` holds `taps.len() · L::WIDTH` floats and `x` at
    /// least `tap + S · (PX - 1) + 1` from each tap offset.
    #[inline(always)]
    unsafe fn channel<L: Lanes, const PX: usize, const S: usize, Taps: AsRef<[usize]> + ?Sized>(
        acc: &mut [L; PX],
        x: *const f32,
        w: *const f32,
        taps: &Taps,
    ) {
        for (t, &tap) in taps.as_ref().iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe {
                let wv = L::load(w.add(t * L::WIDTH));
                let src = x.add(tap);
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = L::fma(wv, L::splat(*src.add(S * i)), *a);
                }
            }
        }
    }

    /// The first pixels `q = y·wp + x` of the register blocks of `rows` output rows: with
    /// unit stride [`block_starts`](super::super::direct::block_starts)'s (blocks may run
    /// across the padded columns into the next row), else blocks within each row (the
    /// wide plane's columns from `ow` to `wp` would read past the tile's rows).
    fn starts<const S: usize>(rows: usize, ow: usize, wp: usize, px: usize) -> Vec<usize> {
        if S == 1 {
            super::block_starts(rows, ow, wp, px)
        } else {
            assert!(
                ow >= px,
                "wide conv2d: {ow} output columns for blocks of {px}"
            );
            (0..rows)
                .flat_map(|y| (0..ow.div_ceil(px)).map(move |b| y * wp + (b * px).min(ow - px)))
                .collect()
        }
    }

    /// One sample's output-channel blocks `obs`: `x` its input `[C, h, w]`, `out` those
    /// channels of its output (`[obs.len() · L::WIDTH, oh, ow]`), every element of which
    /// is written (the pixel blocks cover every output pixel).
    ///
    /// # Safety
    /// The CPU has `L`'s features; `x` and `out` hold one sample of `plan`'s geometry
    /// (`out` the channels of `obs`); `plan.ob == L::WIDTH`.
    #[inline(always)]
    pub(super) unsafe fn sample<L: Lanes, const PX: usize, const S: usize>(
        plan: &Plan,
        x: &[f32],
        out: &mut [MaybeUninit<f32>],
        obs: std::ops::Range<usize>,
    ) {
        let g = plan.g;
        let ob_w = L::WIDTH;
        assert!(
            plan.ob == ob_w && ob_w <= WIDE_OB,
            "wide conv2d: weights packed in blocks of {} for a kernel of {ob_w} channels",
            plan.ob
        );
        let (oh, ow, wp) = (plan.oh, plan.ow, plan.wp);
        assert_eq!(
            plan.stride, S,
            "wide conv2d: a stride-{S} kernel for stride {}",
            plan.stride
        );
        let plane = oh * ow;
        let ntaps = plan.taps.len();
        let k = g.c * ntaps;
        let th_max = plan.tile_in_rows(plan.rows);
        let mut tile = crate::cpu::HostBuffer::<f32>::zeroed(g.c * th_max * wp);
        let starts_max = starts::<S>(plan.rows, ow, wp, PX).len();
        let mut slots = crate::cpu::HostBuffer::<f32>::zeroed(starts_max * PX * ob_w);
        // 3×3 kernels get the tap loop unrolled (their offsets in registers).
        let taps9: Option<[usize; 9]> = plan.taps.as_slice().try_into().ok();
        for r0 in (0..oh).step_by(plan.rows) {
            let rows = plan.rows.min(oh - r0);
            let th = plan.tile_in_rows(rows);
            let chan = th * wp;
            plan.fill_tile(x, r0, rows, &mut tile);
            let starts = starts::<S>(rows, ow, wp, PX);
            let last_q = starts.iter().max().copied().unwrap_or(0) + PX - 1;
            assert!(
                plan.taps.last().copied().unwrap_or(0) + S * last_q < chan
                    && tile.len() >= g.c * chan
                    && slots.len() >= starts.len() * PX * ob_w,
                "wide conv2d: a window leaves the tile ({g:?})"
            );
            assert!(
                obs.end <= plan.o / ob_w && out.len() >= obs.len() * ob_w * plane,
                "wide conv2d: output blocks {obs:?} of {} channels",
                plan.o
            );
            for ob in obs.clone() {
                let wob = &plan.wpk[ob * k * ob_w..(ob + 1) * k * ob_w];
                // SAFETY: the caller runs with `L`'s features; `ob_w` floats from
                // `ob * ob_w`.
                let init = unsafe {
                    match plan.bias {
                        Some(b) => L::load(b[ob * ob_w..(ob + 1) * ob_w].as_ptr()),
                        None => L::splat(0.0),
                    }
                };
                for c0 in (0..g.c).step_by(CB) {
                    let c1 = (c0 + CB).min(g.c);
                    let (first, last) = (c0 == 0, c1 == g.c);
                    for (b, &q0) in starts.iter().enumerate() {
                        let slot = &mut slots[b * PX * ob_w..(b + 1) * PX * ob_w];
                        if last {
                            // The output lines this block scatters into once its sums
                            // are done, fetched while it computes them: in a training
                            // step the output buffer is cold, and the scatter's 32
                            // channel rows per pixel each wait on their line otherwise
                            // (ResNet-18's 56² and 28² layers at batch 8 with cold
                            // caches 6.25-6.90 -> 6.01-6.78 ms, hot 1-2 % faster).
                            let (y, xo) = (q0 / wp, q0 % wp);
                            if xo < ow {
                                let at = (r0 + y) * ow + xo;
                                let first = (ob - obs.start) * ob_w;
                                for j in 0..ob_w {
                                    let row = (first + j) * plane;
                                    for px in [at, (at + PX - 1).min(plane - 1)] {
                                        if let Some(v) = out.get(row + px) {
                                            // SAFETY: a prefetch reads nothing; `v` is
                                            // in `out`. SSE comes with x86_64.
                                            unsafe {
                                                std::arch::x86_64::_mm_prefetch::<
                                                    { std::arch::x86_64::_MM_HINT_T0 },
                                                >(
                                                    v.as_ptr().cast()
                                                );
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        let mut acc = [init; PX];
                        if !first {
                            for (p, a) in acc.iter_mut().enumerate() {
                                // SAFETY: slot `b` holds `PX · ob_w` floats.
                                *a = unsafe { L::load(slot.as_ptr().add(p * ob_w)) };
                            }
                        }
                        for c in c0..c1 {
                            let xc = tile[c * chan..(c + 1) * chan].as_ptr();
                            let wc = wob[c * ntaps * ob_w..(c + 1) * ntaps * ob_w].as_ptr();
                            // SAFETY: `wc` holds `ntaps · ob_w` floats; `tap + S · (q0 + PX -
                            // 1) <= tap + S · last_q < chan` (asserted), inside channel `c`.
                            unsafe {
                                let xq = xc.add(S * q0);
                                match taps9 {
                                    Some(t9) => channel::<L, PX, S, _>(&mut acc, xq, wc, &t9),
                                    None => channel::<L, PX, S, _>(&mut acc, xq, wc, &plan.taps),
                                }
                            }
                        }
                        if last {
                            let mut sums = [[0.0f32; WIDE_OB]; PX];
                            for (s, a) in sums.iter_mut().zip(acc) {
                                // SAFETY: `s` holds `WIDE_OB >= ob_w` floats.
                                unsafe { a.store(s.as_mut_ptr()) };
                            }
                            // Pixel `q0 + p`, tracked without a division each.
                            let (mut y, mut xo) = (q0 / wp, q0 % wp);
                            for s in sums.iter() {
                                if xo < ow {
                                    let at = (r0 + y) * ow + xo;
                                    let first = (ob - obs.start) * ob_w;
                                    for (j, &v) in s[..ob_w].iter().enumerate() {
                                        out[(first + j) * plane + at].write(v);
                                    }
                                }
                                xo += 1;
                                if xo == wp {
                                    (y, xo) = (y + 1, 0);
                                }
                            }
                        } else {
                            for (p, a) in acc.iter().enumerate() {
                                // SAFETY: slot `b` holds `PX · ob_w` floats.
                                unsafe { a.store(slot.as_mut_ptr().add(p * ob_w)) };
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod levels {
    use super::super::lanes::{Lanes, Ymm2, Zmm, Zmm2};
    use super::{Level, Plan, WIDE_OB, blocks};
    use std::mem::MaybeUninit;

    type Obs = std::ops::Range<usize>;

    #[target_feature(enable = "avx512f")]
    unsafe fn sample_avx512(plan: &Plan, x: &[f32], out: &mut [MaybeUninit<f32>], obs: Obs) {
        // SAFETY: AVX-512F is enabled here; the rest is the caller's contract (the
        // weights' block width and the stride pick the kernel).
        unsafe {
            match (plan.ob == WIDE_OB, plan.stride == 1) {
                (true, true) => blocks::sample::<Zmm2, { Zmm2::PX }, 1>(plan, x, out, obs),
                (true, false) => blocks::sample::<Zmm2, { Zmm2::PX }, 2>(plan, x, out, obs),
                (false, true) => blocks::sample::<Zmm, { Zmm::PX }, 1>(plan, x, out, obs),
                (false, false) => blocks::sample::<Zmm, { Zmm::PX }, 2>(plan, x, out, obs),
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn sample_avx2(plan: &Plan, x: &[f32], out: &mut [MaybeUninit<f32>], obs: Obs) {
        // SAFETY: AVX2 and FMA are enabled here; the rest is the caller's contract.
        unsafe {
            if plan.stride == 1 {
                blocks::sample::<Ymm2, { Ymm2::PX }, 1>(plan, x, out, obs)
            } else {
                blocks::sample::<Ymm2, { Ymm2::PX }, 2>(plan, x, out, obs)
            }
        }
    }

    /// # Safety
    /// The CPU has `level`'s features; the rest as [`blocks::sample`].
    pub(super) unsafe fn sample(
        level: Level,
        plan: &Plan,
        x: &[f32],
        out: &mut [MaybeUninit<f32>],
        obs: Obs,
    ) {
        // SAFETY: the caller checked the level's features.
        unsafe {
            match level {
                Level::Avx512 => sample_avx512(plan, x, out, obs),
                Level::Avx2 => sample_avx2(plan, x, out, obs),
            }
        }
    }
}

/// `conv2d` of `x` `[N, C, H, W]` with `w` `[O, C, kh, kw]` (one group, stride 1, or 2
/// with fewer samples than threads) and optional `bias`; output `[N, O, oh, ow]`. Samples run in parallel. Only where
/// [`applies`] says so.
pub fn conv2d_wide<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    assert!(
        applies::<T>(g, out_channels, 1),
        "conv2d_wide: f32 on an AVX-512 or AVX2 CPU, unit strides, 32+ output channels in blocks of 16 only ({g:?})"
    );
    let level = level().expect("checked by `applies`");
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    check_sizes(x.len(), w.len(), g, out_channels);
    let k = g.c * g.kernel[0] * g.kernel[1];
    let stride = g.stride[0];
    let wp = g.input[1] + 2 * g.padding[1];
    let (x, w, bias) = (f32s(x), f32s(w), bias.map(f32s));
    // AVX-512 takes 32 channels per block where they come in 32s.
    let ob = block_width(level, out_channels);
    let wpk = pack_weight_blocks(w, out_channels, k, ob);
    let plan = Plan {
        g,
        o: out_channels,
        oh,
        ow,
        wp,
        rows: (TILE_PX / ow).clamp(1, oh),
        stride,
        taps: tap_offsets(g, wp),
        ob,
        wpk: &wpk,
        bias,
    };
    let plane = oh * ow;
    let in_len = g.c * g.input[0] * g.input[1];
    let blocks = out_channels / ob;
    let per_sample = tasks(g.n, blocks);
    let task_blocks = blocks / per_sample;
    let mut out = HostBuffer::<T>::new_uninit(g.n * out_channels * plane);
    // Task `t`: sample `t / per_sample`, its output-channel blocks `task_blocks` at a time
    // (a contiguous run of its output, since a sample is laid out channel by channel).
    let task = |t: usize, dst: &mut [MaybeUninit<T>]| {
        let (n, first) = (t / per_sample, t % per_sample * task_blocks);
        // SAFETY: `T::DTYPE == F32` (checked by `applies`) means `T` is `f32`.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut MaybeUninit<f32>, dst.len())
        };
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `level` is this CPU's; `x`'s sample has the plan's geometry and `dst`
        // holds the output of its blocks `first..first + task_blocks`.
        unsafe {
            levels::sample(
                level,
                &plan,
                &x[n * in_len..(n + 1) * in_len],
                dst,
                first..first + task_blocks,
            )
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (dst, &plan, level, n, first, in_len);
    };
    let chunk = task_blocks * ob * plane;
    if num_threads() > 1 {
        for_each_chunk_mut(&mut out, chunk, task);
    } else {
        for (t, dst) in out.chunks_mut(chunk).enumerate() {
            task(t, dst);
        }
    }
    // SAFETY: `blocks::sample` wrote every element of each sample's output.
    unsafe { out.assume_init() }
}

/// The geometry and weights that make a unit-stride convolution's input gradient a
/// forward convolution of the output gradient: `dx = conv2d(gy, w')` with `w'[c, o, i, j]
/// = w[o, c, kh-1-i, kw-1-j]` and padding `(k-1)·d - p` (the "full" correlation), when
/// that padding is not negative. `None` for other convolutions.
fn input_grad_geometry(g: &Conv2dGeometry, out_channels: usize) -> Option<Conv2dGeometry> {
    let [oh, ow] = g.output()?;
    let pad = |i: usize| ((g.kernel[i] - 1) * g.dilation[i]).checked_sub(g.padding[i]);
    (g.stride == [1, 1]).then_some(())?;
    Some(Conv2dGeometry {
        n: g.n,
        c: out_channels,
        input: [oh, ow],
        kernel: g.kernel,
        stride: [1, 1],
        padding: [pad(0)?, pad(1)?],
        dilation: g.dilation,
    })
}

/// Whether [`conv2d_wide_input_grad`] serves the input gradient of a convolution.
pub(crate) fn input_grad_applies<T: Element>(
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> bool {
    groups == 1
        && input_grad_geometry(g, out_channels)
            .is_some_and(|gt| gt.output() == Some(g.input) && applies::<T>(&gt, g.c, 1))
}

/// The input gradient `[N, C, H, W]` of a unit-stride, one-group convolution with weight
/// `w` `[O, C, kh, kw]`, from the output gradient `gy` `[N, O, oh, ow]`: the wide forward
/// kernel run on `gy` with the weights transposed and flipped. Only where
/// [`input_grad_applies`] says so.
pub fn conv2d_wide_input_grad<T: Float>(
    gy: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    assert!(
        input_grad_applies::<T>(g, out_channels, 1),
        "conv2d_wide_input_grad: f32 on an AVX-512 or AVX2 CPU, unit strides, 32+ input channels in blocks of 16 only ({g:?})"
    );
    let gt = input_grad_geometry(g, out_channels).expect("checked above");
    let [kh, kw] = g.kernel;
    let (o, c, taps) = (out_channels, g.c, kh * kw);
    let mut wt = Vec::with_capacity(w.len());
    for ci in 0..c {
        for oi in 0..o {
            let src = &w[(oi * c + ci) * taps..][..taps];
            wt.extend(src.iter().rev());
        }
    }
    conv2d_wide(gy, &wt, None, &gt, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::tests::values_f32 as values;

    /// The forward against the tiled im2col + GEMM path (itself tested against the
    /// definition), and the input gradient against the tiled backward, over tile and
    /// channel-block boundaries, paddings, dilations and kernel sizes. Skips (saying so)
    /// on CPUs without AVX2 + FMA. Holds the thread-count lock: the kernel applies only
    /// to batches of at least one sample per thread, so another test changing the count
    /// between the check and the call (2 threads here, the 16-core default there) would
    /// refuse the batch.
    #[test]
    fn matches_the_tiled_path() {
        let _threads = crate::cpu::thread_count_lock();
        if level().is_none() {
            eprintln!("skipped: no AVX-512 or AVX2 + FMA on this CPU");
            return;
        }
        let cases = [
            // (c, o, input, kernel, stride, padding, dilation)
            (16, 32, [24, 24], [3, 3], 1, [1, 1], [1, 1]),
            (40, 48, [30, 26], [3, 3], 1, [1, 1], [1, 1]),
            (32, 32, [28, 31], [3, 3], 1, [0, 2], [1, 2]),
            (17, 32, [26, 40], [5, 3], 1, [2, 1], [1, 1]),
            (32, 64, [60, 30], [1, 1], 1, [0, 0], [1, 1]),
            // Stride 2 (served at batch 1 only): a ResNet stem (3 channels, 7×7, odd
            // and even sizes, blocks of 32 and of 16 channels) and a 3×3 downsampling
            // layer.
            (3, 64, [50, 51], [7, 7], 2, [3, 3], [1, 1]),
            (3, 48, [56, 48], [7, 5], 2, [3, 2], [1, 1]),
            (40, 64, [53, 54], [3, 3], 2, [1, 1], [1, 1]),
        ];
        // A batch of one sample per thread, and one sample (serving), whose output
        // channel blocks the threads share where they divide.
        let (mut served_one, mut strided) = (false, 0);
        for (n, (c, o, input, kernel, stride, padding, dilation)) in [1, num_threads().max(2)]
            .into_iter()
            .flat_map(|n| cases.map(|case| (n, case)))
        {
            let g = Conv2dGeometry {
                n,
                c,
                input,
                kernel,
                stride: [stride; 2],
                padding,
                dilation,
            };
            if (n == 1 || stride != 1) && !applies::<f32>(&g, o, 1) {
                continue;
            }
            served_one |= n == 1;
            strided += usize::from(stride != 1);
            assert!(
                applies::<f32>(&g, o, 1),
                "{g:?} should take the wide kernel"
            );
            let x = values(n * c * input[0] * input[1], 1);
            let w = values(o * c * kernel[0] * kernel[1], 2);
            let b = values(o, 3);
            for bias in [None, Some(&b[..])] {
                let got = conv2d_wide(&x, &w, bias, &g, o);
                let want = super::super::tiled_conv2d(&x, &w, bias, &g, o, 1);
                for (i, (a, r)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (a - r).abs() <= 1e-3 * (1.0 + r.abs()),
                        "{g:?}: y[{i}] {a} vs {r}"
                    );
                }
            }
            let gy = values(got_len(&g, o), 4);
            if input_grad_applies::<f32>(&g, o, 1) {
                let got = conv2d_wide_input_grad(&gy, &w, &g, o);
                let (want, _) =
                    super::super::backward::tiled_backward(&gy, &x, &w, &g, o, 1, [true, false]);
                let want = want.expect("wanted");
                for (i, (a, r)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (a - r).abs() <= 1e-3 * (1.0 + r.abs()),
                        "{g:?}: dx[{i}] {a} vs {r}"
                    );
                }
            }
        }
        assert!(served_one, "no one-sample case took the wide kernel");
        if num_threads() > 1 {
            assert_eq!(strided, 3, "a stride-2 case did not take the wide kernel");
        }
    }

    fn got_len(g: &Conv2dGeometry, o: usize) -> usize {
        let [oh, ow] = g.output().unwrap();
        g.n * o * oh * ow
    }
}
