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
mod depthwise;
mod direct;
mod lanes;
mod parity;
mod pixels;
mod subpixel;
mod weight_grad;
mod wide;
mod winograd;

pub use backward::conv2d_backward;
pub use depthwise::{
    depthwise_conv2d, depthwise_conv2d_backward_input, depthwise_conv2d_backward_weight,
};

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
