//! Direct convolution for narrow layers (LeNet's second): each output pixel is a dot
//! product of the weights with an input window, computed for a block of [`OB`] output
//! channels at once (the weights transposed to `[C·kh·kw, O]`, so one tap's weights are
//! one 16-float vector) and up to [`P`] output pixels at once (accumulators in registers:
//! eight AVX-512 vectors, or six pairs of AVX2 vectors; one weight load per block of
//! broadcast inputs). No im2col columns are written
//! and no GEMM packing runs, which is most of the time of the tiled path when `C·kh·kw`
//! and the output planes are small.
//!
//! Pixels are taken a block at a time in the flattened output plane (a block may span two
//! rows); the last block repeats its final pixel and stores only the real ones, so the
//! inner loop has no bounds branches. A padded convolution reads a zero-padded copy of
//! each sample, so no tap tests the border either.
//!
//! On AVX-512, unit-stride undilated kernels 3 or 5 wide run a kernel row at a time
//! (`sample_unit_rows`): the row's weight vectors stay in registers and each input float
//! is broadcast once for all the taps that read it, so the loop is bound by the FMAs,
//! not the load ports; and a block within one output row is turned over in registers
//! and stored as one run per channel instead of a scatter. LeNet's second layer (batch
//! 64, two Zen 5 cores): 107–111 -> 79–82 µs; a 3×3 16 -> 32-channel layer at 28²: 1.94
//! -> 1.40 ms; a 3 -> 16-channel one at 32²: 290 -> 68 µs (the scatter wrote a cache line
//! per float). AVX2's sixteen registers cannot hold a row's weights beside the
//! accumulators (the row loop ran 2× slower there), so it keeps the per-tap loop.
//!
//! The blocks are written once, generic over a 16-float vector type (`lanes`), with
//! AVX-512 and AVX2 + FMA intrinsics for f32 (autovectorisation kept the accumulators in
//! memory); other element types and CPUs take the tiled im2col + GEMM path ([`applies`]
//! says which).

use super::lanes::{Level, level};
use crate::WideFloat as Float;
use crate::cpu::{Conv2dGeometry, HostBuffer, for_each_chunk_mut, num_threads};
use crate::{DType, Element};
use std::mem::MaybeUninit;

/// Output channels per block (one AVX-512 vector of f32, two AVX2 vectors).
const OB: usize = 16;
/// The most output pixels per register block (of any level; see `lanes::Lanes::PX`).
const P: usize = 8;

/// Whether the direct kernel serves a convolution: f32 on a CPU with AVX-512 or AVX2 +
/// FMA, one group,
/// more than half a block of output channels, at most two blocks, and a short reduction
/// (`C·kh·kw`), where im2col + GEMM is dominated by its copies.
pub(crate) fn applies<T: Element>(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    OB / 2 < out_channels && narrow_f32::<T>(g, out_channels, groups)
}

/// f32 on AVX-512 or AVX2 + FMA, one group, at most two channel blocks, a reduction of at most 512.
fn narrow_f32<T: Element>(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    let k = g.c * g.kernel[0] * g.kernel[1];
    T::DTYPE == DType::F32
        && groups == 1
        && (1..=2 * OB).contains(&out_channels)
        && k <= 512
        && level().is_some()
}

/// The weights `[O, C, kh, kw]` as `[C·kh·kw, O rounded up to OB]`, zero-filled.
fn transpose_weights(w: &[f32], o: usize, k: usize) -> Vec<f32> {
    let opad = o.div_ceil(OB) * OB;
    let mut wt = vec![0.0; k * opad];
    for (oc, row) in w.chunks_exact(k).enumerate() {
        for (t, &v) in row.iter().enumerate() {
            wt[t * opad + oc] = v;
        }
    }
    wt
}

/// What one sample's blocks read.
struct Plan<'a> {
    g: &'a Conv2dGeometry,
    /// Padded input width and the padded channel size.
    wp: usize,
    chan: usize,
    /// Each tap's offset within a channel (`ki·dh·wp + kj·dw`).
    taps: Vec<usize>,
    wt: &'a [f32],
    opad: usize,
    bias: Option<&'a [f32]>,
    o: usize,
    /// Pixels per register block of the AVX-512 unit-stride kernel ([`unit_block_px`]).
    px: usize,
}

/// Pixels per register block for the AVX-512 unit-stride forward on an `oh × ow` output
/// whose padded rows are `wp` wide: the lanes' default (8), unless a block as wide as
/// 10–16 pixels computes at least a tenth fewer pixels over the plane ([`block_starts`]'
/// count times the width). LeNet's second layer (10×10 outputs on 14-wide rows) computes
/// 136 pixels per 100 in blocks of 8 and exactly 100 in blocks of 10 (one per row).
fn unit_block_px(oh: usize, ow: usize, wp: usize) -> usize {
    let computed =
        |px: usize| ((oh - 1) * wp + ow >= px).then(|| block_starts(oh, ow, wp, px).len() * px);
    let base = computed(P).unwrap_or(usize::MAX);
    UNIT_PX
        .into_iter()
        .filter_map(|px| computed(px).map(|c| (c, px)))
        .min()
        .filter(|&(c, _)| c.saturating_mul(10) <= base.saturating_mul(9))
        .map_or(P, |(_, px)| px)
}

/// The wider pixel blocks [`unit_block_px`] may pick on AVX-512 (16 accumulators at most
/// of its 32 registers).
const UNIT_PX: [usize; 4] = [10, 12, 14, 16];

/// The first wide pixels of the `px`-pixel blocks that cover every output pixel of a
/// unit-stride plane (`oh` rows of `ow` valid pixels, `wp` apart), whichever way needs
/// fewer blocks: row by row (each block inside one row's valid pixels, so none is
/// wasted on the `wp - ow` columns past the row's end; needs `ow >= px`), or straight
/// along the wide pixels, blocks spanning rows. A row's or the plane's last block ends
/// at its last pixel, recomputing part of the one before.
pub(super) fn block_starts(oh: usize, ow: usize, wp: usize, px: usize) -> Vec<usize> {
    let wide = (oh - 1) * wp + ow;
    let along = (0..wide.div_ceil(px)).map(|b| (b * px).min(wide - px));
    if ow >= px && oh * ow.div_ceil(px) <= wide.div_ceil(px) {
        (0..oh)
            .flat_map(|y| (0..ow.div_ceil(px)).map(move |b| y * wp + (b * px).min(ow - px)))
            .collect()
    } else {
        along.collect()
    }
}

/// `v` as f32: for the kernels' `T`, which their `applies` checked is f32.
pub(super) fn f32s<T: Element>(v: &[T]) -> &[f32] {
    assert!(T::DTYPE == DType::F32, "the direct conv kernels take f32");
    // SAFETY: `T::DTYPE == F32` (asserted) means `T` is `f32`: same size, alignment and bits.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const f32, v.len()) }
}

/// The weights `[O, C, kh, kw]` (`k = C·kh·kw` per channel) packed per block of `block`
/// output channels: `[O/block rounded up, k, block]`, zero past the last channel, so one
/// block's weights for a run of input channels are contiguous (the `pixels` and `wide`
/// kernels' layout).
///
/// A block is transposed [`PACK_TAPS`] taps at a time, so its `block` source rows are
/// read a cache line each while the destination is written in order (a row at a time
/// wrote every float to another line: `[128, 1152]` into blocks of 32 took 203 µs, now
/// 55 on one thread); blocks of large layers are packed on the thread team, since the
/// packing runs on every call (ResNet's batch-1 layers take about 1 ms).
pub(super) fn pack_weight_blocks(w: &[f32], o: usize, k: usize, block: usize) -> HostBuffer<f32> {
    /// Taps per transposed tile: `block` source rows of one 64-byte line each.
    const PACK_TAPS: usize = 16;
    /// Fewest floats worth waking the thread team for.
    const PAR_MIN: usize = 1 << 16;
    assert!(
        block > 0 && w.len() == o * k,
        "pack_weight_blocks: {} weights for {o} channels of {k}",
        w.len()
    );
    if k == 0 {
        return HostBuffer::zeroed(0);
    }
    let mut packed = HostBuffer::<f32>::new_uninit(o.div_ceil(block) * k * block);
    let pack = |b: usize, dst: &mut [MaybeUninit<f32>]| {
        let rows = &w[b * block * k..((b + 1) * block).min(o) * k];
        let live = rows.len() / k;
        for t0 in (0..k).step_by(PACK_TAPS) {
            let t1 = (t0 + PACK_TAPS).min(k);
            for (j, row) in rows.chunks_exact(k).enumerate() {
                for (t, &v) in row[t0..t1].iter().enumerate() {
                    dst[(t0 + t) * block + j].write(v);
                }
            }
            if live < block {
                for t in t0..t1 {
                    for d in &mut dst[t * block + live..(t + 1) * block] {
                        d.write(0.0);
                    }
                }
            }
        }
    };
    if packed.len() >= PAR_MIN && num_threads() > 1 {
        for_each_chunk_mut(&mut packed, k * block, pack);
    } else {
        for (b, dst) in packed.chunks_mut(k * block).enumerate() {
            pack(b, dst);
        }
    }
    // SAFETY: every block's `k · block` floats were written: its live channels' taps by the
    // transposing loop, the rest zero.
    unsafe { packed.assume_init() }
}

/// Each kernel tap's offset within a padded channel `wp` wide (`ki·dh·wp + kj·dw`).
pub(super) fn tap_offsets(g: &Conv2dGeometry, wp: usize) -> Vec<usize> {
    let [kh, kw] = g.kernel;
    (0..kh)
        .flat_map(|ki| (0..kw).map(move |kj| ki * g.dilation[0] * wp + kj * g.dilation[1]))
        .collect()
}

/// Panics unless `x_len` input and `w_len` weight elements fit geometry `g` with `o`
/// output channels and one group.
#[track_caller]
pub(super) fn check_sizes(x_len: usize, w_len: usize, g: &Conv2dGeometry, o: usize) {
    let k = g.c * g.kernel[0] * g.kernel[1];
    assert!(
        x_len == g.n * g.c * g.input[0] * g.input[1] && w_len == o * k,
        "conv2d: {x_len} input and {w_len} weight elements do not match {g:?} with {o} outputs"
    );
}

/// Copies one sample `[C, h, w]` into `dst` `[C, h + 2·ph, w + 2·pw]` inside its zero
/// border (`dst`'s border must already be zero).
pub(super) fn pad_sample(src: &[f32], g: &Conv2dGeometry, dst: &mut [f32]) {
    let [h, wd] = g.input;
    let [ph, pw] = g.padding;
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    for (ci, plane_in) in src.chunks_exact(h * wd).enumerate() {
        for (y, row) in plane_in.chunks_exact(wd).enumerate() {
            let at = ci * hp * wp + (y + ph) * wp + pw;
            dst[at..at + wd].copy_from_slice(row);
        }
    }
}

/// Fills `dst` (rows of `row_len` floats) with rows of one padded input channel `chan`
/// (`[h, w]`, padding `[ph, pw]`): row `i` is padded row `first + i·sh`, and its column
/// `j` padded column `j·sw + b` (every padded row and column for unit strides; one stride
/// phase otherwise), zero where that falls outside the input.
pub(super) fn pad_rows(
    chan: &[f32],
    g: &Conv2dGeometry,
    first: usize,
    b: usize,
    row_len: usize,
    dst: &mut [f32],
) {
    let [h, wd] = g.input;
    let ([ph, pw], [sh, sw]) = (g.padding, g.stride);
    // Columns `j` with `j·sw + b - pw` inside the row.
    let lo = pw.saturating_sub(b).div_ceil(sw).min(row_len);
    let hi = (wd + pw).saturating_sub(b).div_ceil(sw).clamp(lo, row_len);
    for (i, row) in dst.chunks_exact_mut(row_len).enumerate() {
        let y = (first + i * sh) as isize - ph as isize;
        if y < 0 || y as usize >= h {
            row.fill(0.0);
            continue;
        }
        let src = &chan[y as usize * wd..][..wd];
        row[..lo].fill(0.0);
        if lo < hi {
            let x0 = lo * sw + b - pw;
            if sw == 1 {
                row[lo..hi].copy_from_slice(&src[x0..x0 + hi - lo]);
            } else {
                for (d, &v) in row[lo..hi].iter_mut().zip(src[x0..].iter().step_by(sw)) {
                    *d = v;
                }
            }
        }
        row[hi..].fill(0.0);
    }
}

/// The register-blocked loops, generic over the vector type (compiled into each
/// feature level's entry point in [`levels`]).
#[cfg(target_arch = "x86_64")]
mod blocks;

/// The entry points: each feature level's copy of the [`blocks`] loops.
#[cfg(target_arch = "x86_64")]
mod levels;

/// `conv2d` of `x` `[N, C, H, W]` with `w` `[O, C, kh, kw]` (one group) and optional
/// `bias`; output `[N, O, oh, ow]`. Samples run in parallel. Only where `applies` says
/// so (f32, AVX-512 or AVX2 + FMA).
pub fn conv2d_direct<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    assert!(
        applies::<T>(g, out_channels, 1),
        "conv2d_direct: f32 on an AVX-512 or AVX2 CPU with 9..=32 output channels only ({g:?})"
    );
    let level = level().expect("checked by `applies`");
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let k = g.c * kh * kw;
    let (h, wd) = (g.input[0], g.input[1]);
    let [ph, pw] = g.padding;
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    check_sizes(x.len(), w.len(), g, out_channels);
    let plane = oh * ow;
    let mut out = HostBuffer::<T>::zeroed(g.n * out_channels * plane);
    if out.is_empty() {
        return out;
    }
    let (x, w, bias) = (f32s(x), f32s(w), bias.map(f32s));
    let wt = transpose_weights(w, out_channels, k);
    let taps = tap_offsets(g, wp);
    let last_pixel = (oh - 1) * g.stride[0] * wp + (ow - 1) * g.stride[1];
    assert!(
        taps.last().copied().unwrap_or(0) + last_pixel < hp * wp,
        "direct conv2d: a window leaves the padded input ({g:?})"
    );
    let plan = Plan {
        g,
        wp,
        chan: hp * wp,
        taps,
        wt: &wt,
        opad: out_channels.div_ceil(OB) * OB,
        bias,
        o: out_channels,
        px: if g.stride == [1, 1] && level == Level::Avx512 {
            unit_block_px(oh, ow, wp)
        } else {
            P
        },
    };
    let unit = g.stride == [1, 1] && (oh - 1) * wp + ow >= P;
    for_each_padded_sample(x, g, &mut out, out_channels * plane, |xs, dst| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `level` is this CPU's; `xs` holds `c` padded channels and the assert
        // above bounds every tap and pixel offset by the channel size (for unit strides,
        // the last wide pixel is the last pixel).
        unsafe {
            if unit {
                levels::sample_unit_stride(level, &plan, xs, dst)
            } else {
                levels::sample(level, &plan, xs, dst)
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (xs, dst, &plan, level);
    });
    out
}

/// Runs `kernel` on each sample of `x` `[N, C, H, W]` — zero-padded by `g.padding` into a
/// scratch copy where it has any — and the sample's `per` elements of `out`, which holds
/// f32 (`T` is f32: the callers' `applies` checked it). Samples run in parallel.
pub(super) fn for_each_padded_sample<T: Float>(
    x: &[f32],
    g: &Conv2dGeometry,
    out: &mut HostBuffer<T>,
    per: usize,
    kernel: impl Fn(&[f32], &mut [f32]) + Sync,
) {
    assert!(T::DTYPE == DType::F32, "the direct conv kernels write f32");
    let [h, wd] = g.input;
    let [ph, pw] = g.padding;
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    let sample = |n: usize, dst: &mut [T]| {
        let src = &x[n * g.c * h * wd..(n + 1) * g.c * h * wd];
        let copy;
        let xs: &[f32] = if ph > 0 || pw > 0 {
            let mut buf = HostBuffer::<f32>::zeroed(g.c * hp * wp);
            pad_sample(src, g, &mut buf);
            copy = buf;
            &copy
        } else {
            src
        };
        // SAFETY: `T::DTYPE == F32` (asserted above) means `T` is `f32`.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, dst.len()) };
        kernel(xs, dst);
    };
    if num_threads() > 1 && g.n > 1 {
        for_each_chunk_mut(out, per, sample);
    } else {
        for (n, dst) in out.chunks_mut(per).enumerate() {
            sample(n, dst);
        }
    }
}

/// Whether [`conv2d_direct_backward_weight`] serves a convolution: f32 on AVX-512 or
/// AVX2 + FMA, one
/// group, 1–32 output channels, `C·kh·kw ≤ 512`, unit strides.
pub fn backward_weight_applies<T: Element>(
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> bool {
    let [oh, ow] = g.output().unwrap_or([0, 0]);
    let wp = g.input[1] + 2 * g.padding[1];
    // Unlike the forward, a block of fewer than 16 channels still beats the im2col
    // columns of its input (LeNet's first layer: 6 channels).
    narrow_f32::<T>(g, out_channels, groups)
        && g.stride == [1, 1]
        && oh > 0
        && (oh - 1) * wp + ow >= P
}

/// The weight gradient `[O, C, kh, kw]` of a one-group convolution of `x` `[N, C, H, W]`
/// given the output gradient `gy` `[N, O, oh, ow]`, without im2col columns: each thread
/// sums its samples' contributions (see `weight_grad_sample`), then the partial sums are
/// added. Only where [`backward_weight_applies`] says so.
pub fn conv2d_direct_backward_weight<T: Float>(
    gy: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    assert!(
        backward_weight_applies::<T>(g, out_channels, 1),
        "conv2d_direct_backward_weight: f32, AVX-512 or AVX2, unit strides, 1..=32 output channels only ({g:?})"
    );
    let level = level().expect("checked by `backward_weight_applies`");
    let [oh, ow] = g.output().expect("checked above");
    let [kh, kw] = g.kernel;
    let (h, wd) = (g.input[0], g.input[1]);
    let [ph, pw] = g.padding;
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    let o = out_channels;
    let (plane, k) = (oh * ow, g.c * kh * kw);
    assert!(
        x.len() == g.n * g.c * h * wd && gy.len() == g.n * o * plane,
        "conv2d backward: {} input and {} gradient elements do not match {g:?} with {o} outputs",
        x.len(),
        gy.len()
    );
    let (x, gy) = (f32s(x), f32s(gy));
    let opad = o.div_ceil(OB) * OB;
    let taps = tap_offsets(g, wp);
    let wide = (oh - 1) * wp + ow;
    assert!(
        taps.last().copied().unwrap_or(0) + wide - 1 < hp * wp,
        "direct conv2d backward: a window leaves the padded input ({g:?})"
    );
    let plan = Plan {
        g,
        wp,
        chan: hp * wp,
        taps,
        wt: &[],
        opad,
        bias: None,
        o,
        px: P,
    };
    let tasks = num_threads().min(g.n).max(1);
    let mut partial = HostBuffer::<f32>::zeroed(tasks * k * opad);
    for_each_chunk_mut(&mut partial, k * opad, |task, dwt| {
        let mut xs = HostBuffer::<f32>::zeroed(g.c * hp * wp);
        let mut gyt = HostBuffer::<f32>::zeroed(wide * opad);
        for n in (task * g.n / tasks)..((task + 1) * g.n / tasks) {
            pad_sample(&x[n * g.c * h * wd..(n + 1) * g.c * h * wd], g, &mut xs);
            // The gradient as [wide pixel, channel]; columns past `ow` stay zero. Each
            // pixel's channels are written as one contiguous row, read from `o`
            // sequential streams (a per-channel scatter strides every store by `opad`).
            let gs = &gy[n * o * plane..(n + 1) * o * plane];
            for r in 0..oh {
                for (c, row) in gyt[r * wp * opad..]
                    .chunks_exact_mut(opad)
                    .take(ow)
                    .enumerate()
                {
                    let q = r * ow + c;
                    for (oc, d) in row[..o].iter_mut().enumerate() {
                        *d = gs[oc * plane + q];
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `level` is this CPU's; the buffers have the sizes
            // `weight_grad_sample` needs and the assert above bounds the offsets.
            unsafe {
                levels::weight_grad_sample(level, &plan, &xs, &gyt, wide, dwt)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (&plan, level, wide);
        }
    });
    // Sum the partial gradients and transpose [k, opad] to [O, k].
    let mut out = HostBuffer::<T>::zeroed(o * k);
    // SAFETY: `T` is f32 (as above).
    let dst = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, o * k) };
    for part in partial.chunks_exact(k * opad) {
        for (t, row) in part.chunks_exact(opad).enumerate() {
            for (oc, &v) in row[..o].iter().enumerate() {
                dst[oc * k + t] += v;
            }
        }
    }
    out
}

#[cfg(test)]
pub(super) mod tests;
