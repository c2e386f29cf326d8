//! Direct convolution for layers with few output channels (LeNet's first: one input
//! channel, six outputs, 5×5), vectorised over output pixels instead of channels: a
//! register block holds [`OCB`] output channels × two registers of consecutive output
//! pixels (12 accumulators), and each tap costs two unaligned input loads and one
//! broadcast weight per channel. With so few channels the `direct` kernel's 16-channel
//! vectors would be mostly empty, and im2col + GEMM spends its time on copies.
//!
//! Unit strides only: over the padded input's "wide" pixels `q = y·wp + x`, pixel `q`'s
//! window starts at offset `q`, so a block of pixels reads consecutive floats per tap. The
//! blocks lie inside output rows where the rows are long enough (stored straight into the
//! output), otherwise along the wide pixels (stored pixel by pixel, skipping the columns
//! past a row's end).

use super::direct::{
    block_starts, check_sizes, f32s, for_each_padded_sample, pack_weight_blocks, tap_offsets,
};
use super::lanes::{Level, level};
use crate::WideFloat as Float;
use crate::cpu::{Conv2dGeometry, HostBuffer};
use crate::{DType, Element};

/// Output channels per register block.
const OCB: usize = 6;
/// Registers of pixels per register block.
const V: usize = 2;

/// Whether the pixel kernel serves a convolution: f32 on a CPU with AVX-512 or AVX2 +
/// FMA, one group, 1–8 output channels (more take `direct`'s channel blocks), unit
/// strides, a reduction `C·kh·kw` of at most 512, and a plane of at least one block.
pub(crate) fn applies<T: Element>(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    let Some(level) = level() else { return false };
    let Some([oh, ow]) = g.output() else {
        return false;
    };
    let wp = g.input[1] + 2 * g.padding[1];
    T::DTYPE == DType::F32
        && groups == 1
        && (1..=8).contains(&out_channels)
        && g.stride == [1, 1]
        && g.c * g.kernel[0] * g.kernel[1] <= 512
        && oh > 0
        && (oh - 1) * wp + ow >= V * level.lanes()
}

/// What one sample's blocks read.
struct Plan<'a> {
    g: &'a Conv2dGeometry,
    /// Padded input width and the padded channel size.
    wp: usize,
    chan: usize,
    /// Each tap's offset within a channel (`ki·dh·wp + kj·dw`).
    taps: Vec<usize>,
    /// The weights per channel block as `[block][C·kh·kw][OCB]`, zero past the last
    /// channel.
    wb: HostBuffer<f32>,
    bias: Option<&'a [f32]>,
    o: usize,
}

#[cfg(target_arch = "x86_64")]
mod levels {
    use super::super::lanes::{Vector, Ymm, Zmm};
    use super::{Level, OCB, Plan, V, block_starts};

    /// One sample: `x` its padded input `[C, hp, wp]`, `out` its output `[O, oh, ow]`.
    ///
    /// # Safety
    /// The CPU has `L`'s features; `x` holds `c·chan` floats and every tap offset plus
    /// the last wide pixel is below `chan` (asserted by the caller); the plane has at
    /// least `V·LANES` wide pixels.
    #[inline(always)]
    unsafe fn sample<L: Vector>(plan: &Plan, x: &[f32], out: &mut [f32]) {
        let g = plan.g;
        let [oh, ow] = g.output().expect("checked by the caller");
        let (wp, plane) = (plan.wp, oh * ow);
        let ntaps = plan.taps.len();
        let k = g.c * ntaps;
        let px = V * L::LANES;
        let starts = block_starts(oh, ow, wp, px);
        for cb in 0..plan.o.div_ceil(OCB) {
            let wb = &plan.wb[cb * k * OCB..(cb + 1) * k * OCB];
            let nch = (plan.o - cb * OCB).min(OCB);
            let init: [L; OCB] = std::array::from_fn(|j| {
                let b = plan.bias.and_then(|b| b.get(cb * OCB + j)).copied();
                // SAFETY: the caller runs with `L`'s features.
                unsafe { L::splat(b.unwrap_or(0.0)) }
            });
            for &q0 in &starts {
                let mut acc: [[L; V]; OCB] = init.map(|b| [b; V]);
                for c in 0..g.c {
                    let xc = x[c * plan.chan..(c + 1) * plan.chan].as_ptr();
                    let wc = &wb[c * ntaps * OCB..(c + 1) * ntaps * OCB];
                    for (t, &tap) in plan.taps.iter().enumerate() {
                        // SAFETY: `tap + q0 + px - 1 <= tap + wide - 1 < chan` (the
                        // caller's bound; blocks end by the last wide pixel), and row `t`
                        // of this channel's weights has OCB floats.
                        unsafe {
                            let src = xc.add(tap + q0);
                            let xv: [L; V] =
                                std::array::from_fn(|v| L::load(src.add(v * L::LANES)));
                            let wt = wc.as_ptr().add(t * OCB);
                            for (j, row) in acc.iter_mut().enumerate() {
                                let w = L::splat(*wt.add(j));
                                for (a, &xi) in row.iter_mut().zip(&xv) {
                                    *a = L::fma(xi, w, *a);
                                }
                            }
                        }
                    }
                }
                let (y, x0) = (q0 / wp, q0 % wp);
                if x0 + px <= ow {
                    // Inside one output row: straight stores.
                    for (j, row) in acc.iter().enumerate().take(nch) {
                        let at = (cb * OCB + j) * plane + y * ow + x0;
                        let dst = &mut out[at..at + px];
                        for (v, a) in row.iter().enumerate() {
                            // SAFETY: `dst` holds `V·LANES` floats.
                            unsafe { a.store(dst.as_mut_ptr().add(v * L::LANES)) };
                        }
                    }
                } else if x0 + px <= wp {
                    // Inside one padded row, past the output's end: the row's real
                    // pixels by masked stores, nothing past them.
                    if x0 < ow {
                        let len = ow - x0;
                        for (j, row) in acc.iter().enumerate().take(nch) {
                            let at = (cb * OCB + j) * plane + y * ow + x0;
                            let dst = &mut out[at..at + len];
                            for (v, a) in row.iter().enumerate() {
                                let n = len.saturating_sub(v * L::LANES).min(L::LANES);
                                if n > 0 {
                                    // SAFETY: `dst` holds `len` floats, and register `v`
                                    // writes `n` of them from `v·LANES < len`.
                                    unsafe { a.store_first(dst.as_mut_ptr().add(v * L::LANES), n) };
                                }
                            }
                        }
                    }
                } else {
                    let mut buf = [0.0f32; 64];
                    for (j, row) in acc.iter().enumerate().take(nch) {
                        for (v, a) in row.iter().enumerate() {
                            // SAFETY: `buf` holds 64 >= V·LANES floats.
                            unsafe { a.store(buf.as_mut_ptr().add(v * L::LANES)) };
                        }
                        // The block spans rows of the wide layout: copy its runs of
                        // real columns, skipping the padding columns between rows.
                        let base = (cb * OCB + j) * plane;
                        let (mut p, mut yy, mut xx) = (0, y, x0);
                        while p < px {
                            let span = (wp - xx).min(px - p);
                            if xx < ow {
                                let (at, len) = (base + yy * ow + xx, span.min(ow - xx));
                                out[at..at + len].copy_from_slice(&buf[p..p + len]);
                            }
                            p += span;
                            (yy, xx) = (yy + 1, 0);
                        }
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn sample_avx512(plan: &Plan, x: &[f32], out: &mut [f32]) {
        // SAFETY: AVX-512F is enabled here; the rest is the caller's contract.
        unsafe { sample::<Zmm>(plan, x, out) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn sample_avx2(plan: &Plan, x: &[f32], out: &mut [f32]) {
        // SAFETY: AVX2 and FMA are enabled here; the rest is the caller's contract.
        unsafe { sample::<Ymm>(plan, x, out) }
    }

    /// # Safety
    /// The CPU has `level`'s features; the rest as [`sample`].
    pub(super) unsafe fn run(level: Level, plan: &Plan, x: &[f32], out: &mut [f32]) {
        // SAFETY: the caller checked the level's features.
        unsafe {
            match level {
                Level::Avx512 => sample_avx512(plan, x, out),
                Level::Avx2 => sample_avx2(plan, x, out),
            }
        }
    }
}

/// `conv2d` of `x` `[N, C, H, W]` with `w` `[O, C, kh, kw]` (one group, unit strides) and
/// optional `bias`; output `[N, O, oh, ow]`. Samples run in parallel. Only where
/// [`applies`] says so.
pub fn conv2d_pixels<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    assert!(
        applies::<T>(g, out_channels, 1),
        "conv2d_pixels: f32, AVX-512 or AVX2, unit strides, 1..=8 output channels only ({g:?})"
    );
    let level = level().expect("checked by `applies`");
    let [oh, ow] = g.output().expect("checked by `applies`");
    let [kh, kw] = g.kernel;
    let k = g.c * kh * kw;
    let [h, wd] = g.input;
    let [ph, pw] = g.padding;
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    let o = out_channels;
    check_sizes(x.len(), w.len(), g, o);
    let plane = oh * ow;
    let mut out = HostBuffer::<T>::zeroed(g.n * o * plane);
    if out.is_empty() {
        return out;
    }
    let (x, w, bias) = (f32s(x), f32s(w), bias.map(f32s));
    let wb = pack_weight_blocks(w, o, k, OCB);
    let taps = tap_offsets(g, wp);
    let wide = (oh - 1) * wp + ow;
    assert!(
        taps.last().copied().unwrap_or(0) + wide - 1 < hp * wp,
        "conv2d_pixels: a window leaves the padded input ({g:?})"
    );
    let plan = Plan {
        g,
        wp,
        chan: hp * wp,
        taps,
        wb,
        bias,
        o,
    };
    for_each_padded_sample(x, g, &mut out, o * plane, |xs, dst| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `level` is this CPU's; `xs` holds `c` padded channels, the assert above
        // bounds every tap plus wide pixel by the channel size, and `applies` checked the
        // plane holds a block.
        unsafe {
            levels::run(level, &plan, xs, dst)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (xs, dst, &plan, level);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::conv::direct::tests::check_forward;

    #[test]
    fn matches_the_definition() {
        // LeNet's first layer, several channel blocks, rows shorter than a block (blocks
        // along the wide pixels), dilation, no padding.
        let cases = [
            (3, 1, [28, 28], 6, [5, 5], [1, 1], [2, 2], [1, 1]),
            (2, 2, [20, 37], 8, [3, 3], [1, 1], [1, 1], [1, 1]),
            (2, 3, [9, 11], 1, [3, 2], [1, 1], [1, 0], [2, 1]),
            (1, 4, [12, 12], 7, [5, 5], [1, 1], [0, 0], [1, 1]),
            // Blocks inside one padded row but past the output row's end (masked
            // stores), the second register's share 0 or 1 (AVX-512) or 6 (AVX2).
            (2, 2, [6, 31], 5, [2, 17], [1, 1], [0, 1], [1, 1]),
            (2, 1, [5, 12], 3, [3, 3], [1, 1], [2, 2], [1, 1]),
        ];
        if level().is_some() {
            for &(n, c, input, o, kernel, stride, padding, dilation) in &cases {
                let g = Conv2dGeometry {
                    n,
                    c,
                    input,
                    kernel,
                    stride,
                    padding,
                    dilation,
                };
                assert!(applies::<f32>(&g, o, 1), "{g:?}");
            }
        }
        check_forward("pixel", conv2d_pixels::<f32>, &cases);
    }
}
