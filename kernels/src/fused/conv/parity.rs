//! Direct kernels for the 4×4, stride-2, padding-1 convolutions of
//! [`subpixel`](super::subpixel) (DCGAN's and pix2pix's down- and upsampling layers; their
//! transposed convolutions run the input gradient forward) whose output rows are a whole
//! number of vector registers wide: no GEMM, no packing of the frames, and no product
//! wasted on the frames' extra row and column (`subpixel`'s GEMMs compute 13 % more
//! at 16×16 outputs, and their packing and four passes over the destination cost as
//! much again).
//!
//! The input is taken to space-to-depth frames as in `subpixel`, one sample at a time:
//! row `r = c·4 + py·2 + px` holds `x[c, 2i + py − 1, 2j + px − 1]` at `(i, j)` of an
//! `(oh + 1) × (ow + 1)` frame, so the convolution is a unit-stride 2×2 one with `4·C`
//! input channels. All three kernels vectorise along an output row:
//!
//! - the forward holds [`MO`] output channels × `R` rows of one vector of pixels in
//!   registers, and for every frame and tap column loads `R + 1` vectors of the frame
//!   once for both tap rows and broadcasts `MO` weights per tap;
//! - the input gradient takes one row parity of [`MC`] input channels per block, both
//!   column parities, from the output gradient inside a zero border: the three column
//!   shifts the four taps read are each loaded once, and the two parities of a row are
//!   interleaved in registers into a whole input row;
//! - the weight gradient holds `LANES / 4` output channels × the four taps of one frame
//!   row as vectors of partial sums over the pixels, and sums the lanes of a whole
//!   block with one transposing tree per chunk of samples (chunks whose frames stay in
//!   L2).
//!
//! Blocks past the last multiple of a block size start earlier instead, recomputing (and
//! rewriting the same values to) part of the block before; the weight gradient adds
//! only the channels the block before did not. DCGAN's `[16, 128, 16, 16] ->
//! [16, 64, 32, 32]` transposed layer on two Zen 5 cores: forward 3.29–3.33 -> 2.32–2.40
//! ms, backward 6.8 -> 4.9–5.1 (PyTorch 2.80–2.86 and 5.08–5.17).

use super::direct::f32s;
use super::lanes::{Level, level};
use super::subpixel::{MIN_CHANNELS, SendPtr};
use crate::WideFloat as Float;
use crate::cpu::{Conv2dGeometry, HostBuffer, num_threads, run_tasks};
use crate::{DType, Element};

/// Output channels per register block.
const MO: usize = 6;

/// Output rows per register block on `level` (`MO · R` accumulators: 24 of AVX-512's 32
/// registers, 12 of AVX2's 16).
fn rows(level: Level) -> usize {
    match level {
        Level::Avx512 => 4,
        Level::Avx2 => 2,
    }
}

/// Whether the kernels here (the forward and both gradients) serve a convolution
/// `subpixel` serves: f32 on AVX-512 or AVX2 + FMA, output rows a multiple of the vector
/// width and at least a row block of them (`subpixel`'s channel minimum covers every
/// channel block here).
pub(crate) fn applies<T: Element>(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    let [oh, ow] = [g.input[0] / 2, g.input[1] / 2];
    T::DTYPE == DType::F32
        && super::subpixel::applies(g, out_channels, groups)
        && level().is_some_and(|l| ow.is_multiple_of(l.lanes()) && oh >= rows(l))
}

// Every block of channels fits in the fewest channels `subpixel` serves (the weight
// gradient's blocks are `LANES / 4`, at most 4).
const _: () = assert!(MO <= MIN_CHANNELS && MC <= MIN_CHANNELS && 4 <= MIN_CHANNELS);

/// The frame geometry of one sample.
#[derive(Clone, Copy)]
struct Frames {
    c: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    /// Frame width and size.
    fw: usize,
    fp: usize,
}

impl Frames {
    fn new(g: &Conv2dGeometry) -> Self {
        let [h, w] = g.input;
        let (oh, ow) = (h / 2, w / 2);
        Frames {
            c: g.c,
            h,
            w,
            oh,
            ow,
            fw: ow + 1,
            fp: (oh + 1) * (ow + 1),
        }
    }

    /// Writes sample `x` `[C, H, W]` into `dst`'s `4·C` frames (see
    /// `subpixel::sample_frames`), leaving the positions no input pixel maps to as they
    /// are: zero in a buffer that only ever holds frames.
    fn fill(&self, x: &[f32], dst: &mut [f32]) {
        super::subpixel::sample_frames(x, [self.h, self.w], self.fp, 0, dst);
    }
}

/// The first channel (or row) of each block of `size` covering `0..n` (`n ≥ size`): the
/// last block ends at `n`.
fn block_starts(n: usize, size: usize) -> impl Iterator<Item = usize> {
    (0..n.div_ceil(size)).map(move |b| (b * size).min(n - size))
}

/// Part `k` of `parts` of the `size`-blocks covering `0..n` ([`block_starts`]): a range
/// of block indices, the last block (which overlaps the one before where `size` does
/// not divide `n`) always with that one, so no two tasks write the same element.
fn part(n: usize, size: usize, parts: usize, k: usize) -> std::ops::Range<usize> {
    let nb = n.div_ceil(size);
    let units = if n.is_multiple_of(size) { nb } else { nb - 1 };
    let end = if k + 1 == parts {
        nb
    } else {
        (k + 1) * units / parts
    };
    k * units / parts..end
}

/// How the tasks split a batch: whole samples per thread when there are enough of
/// them, else each sample's `nb` blocks (of `size` over `n`) between `split` tasks.
#[derive(Clone, Copy)]
struct Split {
    n: usize,
    tasks: usize,
    split: usize,
    per_sample: bool,
}

impl Split {
    fn new(samples: usize, blocks: usize) -> Self {
        let threads = num_threads();
        let split = threads.div_ceil(samples.max(1)).min(blocks).max(1);
        let per_sample = samples >= threads;
        Split {
            n: samples,
            tasks: if per_sample { threads } else { samples * split },
            split,
            per_sample,
        }
    }

    /// Task `t`'s samples, and its part of each sample's blocks (`parts_of(k, parts)`
    /// gives part `k` of `parts`).
    fn task(
        &self,
        t: usize,
        parts_of: impl Fn(usize, usize) -> std::ops::Range<usize>,
    ) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        if self.per_sample {
            (
                t * self.n / self.tasks..(t + 1) * self.n / self.tasks,
                parts_of(0, 1),
            )
        } else {
            let (s, k) = (t / self.split, t % self.split);
            (s..s + 1, parts_of(k, self.split))
        }
    }
}

/// `w` `[O, C, 4, 4]` as `[blocks, 4·C, 4, MO]`: block `b` holds channels `start..start +
/// MO` ([`block_starts`]), frame row `r = c·4 + py·2 + px`, tap `t = ty·2 + tx` the
/// weight `w[o, c, 2ty + py, 2tx + px]`.
fn pack_forward(w: &[f32], o: usize, c: usize) -> Vec<f32> {
    let k = 4 * c;
    let starts: Vec<usize> = block_starts(o, MO).collect();
    let mut out = vec![0.0f32; starts.len() * k * 4 * MO];
    // Each block's weights (L1-sized) are written in any order while `w` is read in its
    // own; blocks on the thread team (the packing runs on every call).
    crate::cpu::for_each_chunk_mut(&mut out, k * 4 * MO, |b, blk| {
        let o0 = starts[b];
        for m in 0..MO {
            let row = &w[(o0 + m) * c * 16..][..c * 16];
            for (ci, taps) in row.chunks_exact(16).enumerate() {
                for (q, &v) in taps.iter().enumerate() {
                    let (ky, kx) = (q / 4, q % 4);
                    let r = ci * 4 + (ky % 2) * 2 + kx % 2;
                    let t = (ky / 2) * 2 + kx / 2;
                    blk[(r * 4 + t) * MO + m] = v;
                }
            }
        }
    });
    out
}

/// [`conv2d`](super::conv2d) where [`applies`] says so.
pub(crate) fn conv2d<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    conv2d_on(level().expect("checked by `applies`"), x, w, bias, g, o)
}

/// [`conv2d`] at `level` (the tests run every level the CPU has).
fn conv2d_on<T: Float>(
    level: Level,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    let (x, w, bias) = (f32s(x), f32s(w), bias.map(f32s));
    let fr = Frames::new(g);
    let (k, plane) = (4 * g.c, fr.oh * fr.ow);
    let wpk = pack_forward(w, o, g.c);
    let starts: Vec<usize> = block_starts(o, MO).collect();
    let mut out = HostBuffer::<T>::new_uninit(g.n * o * plane);
    let dst = SendPtr(out.as_mut_ptr().cast::<f32>());
    let split = Split::new(g.n, starts.len());
    let in_len = g.c * fr.h * fr.w;
    run_tasks(split.tasks, |t| {
        let (samples, blocks) = split.task(t, |k, parts| part(o, MO, parts, k));
        let mut frames = vec![0.0f32; k * fr.fp];
        for s in samples {
            fr.fill(&x[s * in_len..(s + 1) * in_len], &mut frames);
            for b in blocks.clone() {
                let o0 = starts[b];
                let bias: [f32; MO] = std::array::from_fn(|m| bias.map_or(0.0, |v| v[o0 + m]));
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `level` is this CPU's; `frames` holds the sample's `k` frames,
                // `wpk` block `b`'s `k·4·MO` weights, and the output pointer sample `s`'s
                // channels `o0..o0 + MO` (`o0 + MO ≤ o`), each `oh × ow`, written by this
                // task alone.
                unsafe {
                    levels::forward(
                        level,
                        &fr,
                        &frames,
                        &wpk[b * k * 4 * MO..(b + 1) * k * 4 * MO],
                        bias,
                        dst.get().add((s * o + o0) * plane),
                    )
                };
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (level, &frames, &wpk, bias, dst);
            }
        }
    });
    // SAFETY: every sample's every channel block (the blocks cover `0..o`) wrote all its
    // rows (the row blocks cover `0..oh`) and columns (`ow` a multiple of the lanes).
    unsafe { out.assume_init() }
}

/// Input channels per register block of the input gradient (each with both column
/// parities of one row parity: `MC · 2 · R` accumulators).
const MC: usize = 3;

/// `w` `[O, C, 4, 4]` for the input gradient: per block of [`MC`] input channels
/// ([`block_starts`]) and row parity `py`, `[O, MC, 2 (px), 4 (t = ty·2 + tx)]` holding
/// `w[o, c, 2ty + py, 2tx + px]`.
fn pack_input_grad(w: &[f32], o: usize, c: usize) -> Vec<f32> {
    let per = o * MC * 8;
    let starts: Vec<usize> = block_starts(c, MC).collect();
    let mut out = vec![0.0f32; starts.len() * 2 * per];
    // Blocks on the thread team: the packing runs on every call.
    crate::cpu::for_each_chunk_mut(&mut out, 2 * per, |b, blk| {
        let c0 = starts[b];
        for oc in 0..o {
            for m in 0..MC {
                let taps = &w[(oc * c + c0 + m) * 16..][..16];
                for (q, &v) in taps.iter().enumerate() {
                    let (ky, kx) = (q / 4, q % 4);
                    let (py, px, t) = (ky % 2, kx % 2, (ky / 2) * 2 + kx / 2);
                    blk[py * per + oc * MC * 8 + (m * 2 + px) * 4 + t] = v;
                }
            }
        }
    });
    out
}

/// The input gradient `[N, C, H, W]` of a convolution [`applies`] serves, from
/// `gy` `[N, O, oh, ow]` and `w` `[O, C, 4, 4]`: per row parity `py` and column parity
/// `px` of the input, a 2×2 correlation of the zero-bordered output gradient, the two
/// column parities of a row interleaved in registers and stored as whole input rows.
pub(crate) fn input_grad<T: Float>(
    gy: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    input_grad_on(level().expect("checked by `applies`"), gy, w, g, o)
}

/// [`input_grad`] at `level`.
fn input_grad_on<T: Float>(
    level: Level,
    gy: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    let (gy, w) = (f32s(gy), f32s(w));
    let fr = Frames::new(g);
    let (c, plane, in_plane) = (g.c, fr.oh * fr.ow, fr.h * fr.w);
    let gpl = (fr.oh + 2) * (fr.ow + 2);
    let wpk = pack_input_grad(w, o, c);
    let per = o * MC * 8;
    let starts: Vec<usize> = block_starts(c, MC).collect();
    let mut dx = HostBuffer::<T>::new_uninit(g.n * c * in_plane);
    let dst = SendPtr(dx.as_mut_ptr().cast::<f32>());
    let split = Split::new(g.n, starts.len());
    run_tasks(split.tasks, |t| {
        let (samples, blocks) = split.task(t, |k, parts| part(c, MC, parts, k));
        let mut frames = vec![0.0f32; o * gpl];
        for s in samples {
            // The sample's output gradient inside a zero border of one.
            for (src, f) in gy[s * o * plane..(s + 1) * o * plane]
                .chunks_exact(plane)
                .zip(frames.chunks_exact_mut(gpl))
            {
                for (a, line) in src.chunks_exact(fr.ow).enumerate() {
                    f[(a + 1) * (fr.ow + 2) + 1..][..fr.ow].copy_from_slice(line);
                }
            }
            for b in blocks.clone() {
                let c0 = starts[b];
                for py in 0..2 {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `level` is this CPU's; `frames` holds the sample's `o`
                    // bordered planes, the weights block `b`'s row parity `py`, and the
                    // pointer sample `s`'s channels `c0..c0 + MC` (`≤ c`), whose rows of
                    // parity `py` this task alone writes.
                    unsafe {
                        levels::input_grad(
                            level,
                            &fr,
                            o,
                            &frames,
                            &wpk[(b * 2 + py) * per..][..per],
                            py,
                            dst.get().add((s * c + c0) * in_plane),
                        )
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    let _ = (level, &frames, &wpk, dst, c0, py, per);
                }
            }
        }
    });
    // SAFETY: every sample's channel blocks (covering `0..c`) wrote both row parities of
    // every row block (covering every row of each parity) and every column pair.
    unsafe { dx.assume_init() }
}

/// Bytes of frames and output gradient one chunk of samples may take (about the L2 of a
/// core): every block of output channels sweeps all of a chunk's frames.
const CHUNK_BYTES: usize = 1 << 20;

/// Output channels per weight-gradient register block at `level`: with the four taps,
/// one accumulator per lane, so one transposing tree sums a block.
fn weight_block(level: Level) -> usize {
    level.lanes() / 4
}

/// The weight gradient `[O, C, 4, 4]` of a convolution [`applies`] serves, from
/// `gy` `[N, O, oh, ow]` and `x` `[N, C, H, W]`:
/// `dW[o, r, t] = Σ gy[o, a, b] · frame_r[a + ty, b + tx]`, vectorised along the rows
/// `b`, a register block holding a few output channels × the four taps of one frame
/// row. The samples are taken in chunks whose
/// frames stay in L2 while every block of output channels sweeps them; each block's
/// lane sums are added up once per chunk.
pub(crate) fn weight_grad<T: Float>(
    gy: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    weight_grad_on(level().expect("checked by `applies`"), gy, x, g, o)
}

/// [`weight_grad`] at `level`.
fn weight_grad_on<T: Float>(
    level: Level,
    gy: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    let (gy, x) = (f32s(gy), f32s(x));
    let fr = Frames::new(g);
    let (c, k, plane) = (g.c, 4 * g.c, fr.oh * fr.ow);
    let in_len = c * fr.h * fr.w;
    let mo = weight_block(level);
    let starts: Vec<usize> = block_starts(o, mo).collect();
    let threads = num_threads();
    // Tasks: sample ranges with partial sums, or (fewer samples than threads) ranges of
    // channel blocks over every sample.
    let by_samples = g.n >= threads;
    let tasks = threads
        .min(if by_samples { g.n } else { starts.len() })
        .max(1);
    let per_sample = (k * fr.fp + o * plane) * 4;
    let mut partial = HostBuffer::<f32>::zeroed(tasks * o * k * 4);
    crate::cpu::for_each_chunk_mut(&mut partial, o * k * 4, |t, dwt| {
        let (samples, blocks) = if by_samples {
            (t * g.n / tasks..(t + 1) * g.n / tasks, 0..starts.len())
        } else {
            (0..g.n, part(o, mo, tasks, t))
        };
        let chunk = (CHUNK_BYTES / per_sample).clamp(1, samples.len().max(1));
        let mut frames = vec![0.0f32; chunk * k * fr.fp];
        let mut s0 = samples.start;
        while s0 < samples.end {
            let count = chunk.min(samples.end - s0);
            for (j, f) in frames.chunks_exact_mut(k * fr.fp).take(count).enumerate() {
                let s = s0 + j;
                fr.fill(&x[s * in_len..(s + 1) * in_len], f);
            }
            for b in blocks.clone() {
                let o0 = starts[b];
                // Channels before `fresh` belong to the block before (the last block
                // overlaps it): their sums are not added again.
                let fresh = if b > 0 {
                    (starts[b - 1] + mo).saturating_sub(o0)
                } else {
                    0
                };
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `level` is this CPU's; `frames` holds `count` samples' frames,
                // `gy` from sample `s0` holds `count` samples' gradients, and channels
                // `o0..o0 + mo ≤ o`.
                unsafe {
                    levels::weight_grad(
                        level,
                        &fr,
                        &frames[..count * k * fr.fp],
                        &gy[s0 * o * plane..(s0 + count) * o * plane],
                        o,
                        o0,
                        fresh,
                        dwt,
                    )
                };
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (level, &frames, o0, fresh, &dwt);
            }
            s0 += count;
        }
    });
    let (first, rest) = partial.split_at_mut(o * k * 4);
    for p in rest.chunks_exact(o * k * 4) {
        first.iter_mut().zip(p).for_each(|(d, &v)| *d += v);
    }
    let mut dw = HostBuffer::<T>::zeroed(o * c * 16);
    // SAFETY: `T` is f32 (`applies`).
    let out = unsafe { std::slice::from_raw_parts_mut(dw.as_mut_ptr().cast::<f32>(), dw.len()) };
    for (oc, taps) in out.chunks_exact_mut(16 * c).enumerate() {
        for (q, d) in taps.iter_mut().enumerate() {
            let (ci, ky, kx) = (q / 16, q / 4 % 4, q % 4);
            let r = ci * 4 + (ky % 2) * 2 + kx % 2;
            *d = first[(oc * k + r) * 4 + (ky / 2) * 2 + kx / 2];
        }
    }
    dw
}

/// The register-blocked loops, generic over the vector type.
#[cfg(target_arch = "x86_64")]
mod blocks {
    use super::super::lanes::Vector;
    use super::{Frames, MC, MO};

    /// One block of `MO` output channels, over every row block and column vector of the
    /// sample: `out[m·plane + a·ow + col..]` for channel `m` of the block.
    ///
    /// # Safety
    /// The CPU has `V`'s features; `frames` holds `4·C` frames, `wpk` `4·C·4·MO` weights,
    /// `out` is writable for `MO` planes of `oh × ow`; `ow` is a multiple of `V::LANES`
    /// and `oh ≥ R`.
    #[inline(always)]
    pub(super) unsafe fn forward<V: Vector, const R: usize>(
        fr: &Frames,
        frames: &[f32],
        wpk: &[f32],
        bias: [f32; MO],
        out: *mut f32,
    ) {
        let (fw, fp, ow, plane) = (fr.fw, fr.fp, fr.ow, fr.oh * fr.ow);
        let k = 4 * fr.c;
        assert!(frames.len() >= k * fp && wpk.len() >= k * 4 * MO);
        for a0 in super::block_starts(fr.oh, R) {
            for col in (0..ow).step_by(V::LANES) {
                // SAFETY (all of the block): frame `r`'s rows `a0..a0 + R + 1` (≤ oh + 1)
                // at columns `col + tx..col + tx + LANES` (≤ ow + 1 = fw) lie inside it;
                // weight `(r·4 + t)·MO + m < k·4·MO`; the stores are output rows `a0 + i
                // < oh`, columns `col..col + LANES ≤ ow` of the block's planes.
                unsafe {
                    let mut acc: [[V; R]; MO] = std::array::from_fn(|m| [V::splat(bias[m]); R]);
                    let base = frames.as_ptr().add(a0 * fw + col);
                    for r in 0..k {
                        let f = base.add(r * fp);
                        let wr = wpk.as_ptr().add(r * 4 * MO);
                        for tx in 0..2 {
                            // Rows a0..a0 + R + 1 at the column shift: tap (ty, tx) of
                            // row i reads row i + ty.
                            let b: [V; 8] = std::array::from_fn(|i| {
                                if i <= R {
                                    V::load(f.add(i * fw + tx))
                                } else {
                                    V::splat(0.0)
                                }
                            });
                            for ty in 0..2 {
                                let t = ty * 2 + tx;
                                for (m, row) in acc.iter_mut().enumerate() {
                                    let wv = V::splat(*wr.add(t * MO + m));
                                    for (i, a) in row.iter_mut().enumerate() {
                                        *a = V::fma(wv, b[i + ty], *a);
                                    }
                                }
                            }
                        }
                    }
                    for (m, row) in acc.iter().enumerate() {
                        for (i, a) in row.iter().enumerate() {
                            a.store(out.add(m * plane + (a0 + i) * ow + col));
                        }
                    }
                }
            }
        }
    }

    /// The input gradient's rows of parity `py` for one block of `MC` input channels:
    /// `dx[m·H·W + y·W + 2·col..]` with `y = 2·iw + 1 − py` for channel `m` of the block,
    /// from the `o` zero-bordered gradient planes `gp` (`(oh + 2) × (ow + 2)` each) and
    /// the block's weights `wpk` (`[o, MC, 2, 4]`).
    ///
    /// Input pixel `(2·iw + 1 − py, 2·jw + 1 − px)` is frame position `(iw + 1 − py, jw +
    /// 1 − px)` of row `c·4 + py·2 + px`, whose gradient is `Σ_{o,ty,tx} w[o, c, 2ty +
    /// py, 2tx + px] · gp_o[iw + 2 − py − ty, jw + 2 − px − tx]`: a column shift `s = 2 −
    /// px − tx` of 0, 1 or 2, each loaded once for both column parities.
    ///
    /// # Safety
    /// The CPU has `V`'s features; `gp` holds `o` bordered planes, `wpk` `o·MC·8`
    /// weights, `dx` is writable for `MC` planes of `H × W`; `ow` is a multiple of
    /// `V::LANES`, `oh ≥ R`, `py < 2`.
    #[inline(always)]
    pub(super) unsafe fn input_grad<V: Vector, const R: usize>(
        fr: &Frames,
        o: usize,
        gp: &[f32],
        wpk: &[f32],
        py: usize,
        dx: *mut f32,
    ) {
        let (oh, ow, w) = (fr.oh, fr.ow, fr.w);
        let (gw, gpl, in_plane) = (ow + 2, (oh + 2) * (ow + 2), fr.h * fr.w);
        assert!(gp.len() >= o * gpl && wpk.len() >= o * MC * 8 && py < 2);
        for iw0 in super::block_starts(oh, R) {
            for col in (0..ow).step_by(V::LANES) {
                // SAFETY (all of the block): plane rows `iw0 + 1 − py..iw0 + 2 − py + R`
                // (≤ oh + 1) at columns `col + s..col + s + LANES` (≤ ow + 1 < gw); weight
                // `oc·MC·8 + (m·2 + px)·4 + t < o·MC·8`; stores: row `2·(iw0 + i) + 1 −
                // py < H`, columns `2·col..2·(col + LANES) ≤ W` of the block's planes.
                unsafe {
                    let mut acc = [[[V::splat(0.0); R]; 2]; MC];
                    let base = gp.as_ptr().add((iw0 + 1 - py) * gw + col);
                    for oc in 0..o {
                        let g = base.add(oc * gpl);
                        let wr = wpk.as_ptr().add(oc * MC * 8);
                        for sh in 0..3 {
                            let b: [V; 8] = std::array::from_fn(|i| {
                                if i <= R {
                                    V::load(g.add(i * gw + sh))
                                } else {
                                    V::splat(0.0)
                                }
                            });
                            for px in 0..2 {
                                // tx = 2 − px − sh, when it is a tap.
                                if sh + px == 0 || sh + px > 2 {
                                    continue;
                                }
                                let tx = 2 - px - sh;
                                for ty in 0..2 {
                                    for (m, pair) in acc.iter_mut().enumerate() {
                                        let wv = V::splat(*wr.add((m * 2 + px) * 4 + ty * 2 + tx));
                                        for (i, a) in pair[px].iter_mut().enumerate() {
                                            *a = V::fma(wv, b[i + 1 - ty], *a);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    for (m, [odd, even]) in acc.iter().enumerate() {
                        // Even columns 2jw are px = 1, odd ones px = 0.
                        for (i, (&e, &od)) in even.iter().zip(odd).enumerate() {
                            let y = 2 * (iw0 + i) + 1 - py;
                            V::store_interleaved(e, od, dx.add(m * in_plane + y * w + 2 * col));
                        }
                    }
                }
            }
        }
    }

    /// One block of `MW` output channels `o0..o0 + MW` of the weight gradient, summed
    /// over `frames` (`count` samples of `4·C` frames) and `gy` (the same samples'
    /// gradients, `o` planes each), added to `dwt` `[o, 4·C, 4]` for channels from
    /// `o0 + fresh` on.
    ///
    /// # Safety
    /// The CPU has `V`'s features; `MW · 4 == V::LANES`; `o0 + MW ≤ o`; `frames` and
    /// `gy` hold whole samples (the same count); `ow` is a multiple of `V::LANES`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) unsafe fn weight_grad<V: Vector, const MW: usize>(
        fr: &Frames,
        frames: &[f32],
        gy: &[f32],
        o: usize,
        o0: usize,
        fresh: usize,
        dwt: &mut [f32],
    ) {
        let (fw, fp, oh, ow) = (fr.fw, fr.fp, fr.oh, fr.ow);
        let (k, plane) = (4 * fr.c, oh * ow);
        let count = frames.len() / (k * fp);
        assert!(
            MW * 4 == V::LANES
                && o0 + MW <= o
                && gy.len() == count * o * plane
                && dwt.len() == o * k * 4
        );
        for r in 0..k {
            // SAFETY (all of the sweep): frame `r` of sample `s`, rows `a + ty ≤ oh`, columns
            // `col + tx..col + tx + LANES ≤ ow + 1 = fw`; gradient planes `o0 + m < o` of
            // sample `s`, row `a < oh`, columns `col..col + LANES ≤ ow`.
            unsafe {
                let mut acc = [[V::splat(0.0); 4]; MW];
                for s in 0..count {
                    let f = frames.as_ptr().add((s * k + r) * fp);
                    let gs = gy.as_ptr().add((s * o + o0) * plane);
                    for a in 0..oh {
                        for col in (0..ow).step_by(V::LANES) {
                            let gv: [V; MW] =
                                std::array::from_fn(|m| V::load(gs.add(m * plane + a * ow + col)));
                            for t in 0..4 {
                                let (ty, tx) = (t / 2, t % 2);
                                let fv = V::load(f.add((a + ty) * fw + col + tx));
                                for (row, &g) in acc.iter_mut().zip(&gv) {
                                    row[t] = V::fma(g, fv, row[t]);
                                }
                            }
                        }
                    }
                }
                let flat: [V; 16] = std::array::from_fn(|i| {
                    if i < MW * 4 {
                        acc[i / 4][i % 4]
                    } else {
                        V::splat(0.0)
                    }
                });
                let mut sums = [0.0f32; 16];
                V::sum_lanes(&flat).store(sums.as_mut_ptr());
                for m in fresh..MW {
                    let d = &mut dwt[((o0 + m) * k + r) * 4..][..4];
                    for (t, d) in d.iter_mut().enumerate() {
                        *d += sums[m * 4 + t];
                    }
                }
            }
        }
    }
}

/// Each feature level's copy of the [`blocks`] loops.
#[cfg(target_arch = "x86_64")]
mod levels {
    use super::super::lanes::{Ymm, Zmm};
    use super::{Frames, Level, MO, blocks};

    /// The entry point `$name(level, args…)` and the AVX-512 and AVX2 + FMA copies of
    /// `blocks::$name` it dispatches to, with `$zmm` and `$ymm` as the kernel's block
    /// size on each.
    macro_rules! entry {
        ($name:ident, $avx512:ident = $zmm:literal, $avx2:ident = $ymm:literal, ($($arg:ident: $ty:ty),*)) => {
            #[target_feature(enable = "avx512f")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn $avx512($($arg: $ty),*) {
                // SAFETY: AVX-512F is enabled here; the rest is the caller's contract.
                unsafe { blocks::$name::<Zmm, $zmm>($($arg),*) }
            }
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn $avx2($($arg: $ty),*) {
                // SAFETY: AVX2 and FMA are enabled here; the rest is the caller's contract.
                unsafe { blocks::$name::<Ymm, $ymm>($($arg),*) }
            }
            /// # Safety
            /// The CPU has `level`'s features; the rest as the block loop of this name,
            /// at the level's block size.
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(level: Level, $($arg: $ty),*) {
                // SAFETY: the caller's contract.
                unsafe {
                    match level {
                        Level::Avx512 => $avx512($($arg),*),
                        Level::Avx2 => $avx2($($arg),*),
                    }
                }
            }
        };
    }

    // Rows per block ([`super::rows`]) for the forward and input gradient, output
    // channels per block ([`super::weight_block`]) for the weight gradient.
    entry!(
        forward,
        forward_avx512 = 4,
        forward_avx2 = 2,
        (fr: &Frames, frames: &[f32], wpk: &[f32], bias: [f32; MO], out: *mut f32)
    );
    entry!(
        input_grad,
        input_grad_avx512 = 4,
        input_grad_avx2 = 2,
        (fr: &Frames, o: usize, gp: &[f32], wpk: &[f32], py: usize, dx: *mut f32)
    );
    entry!(
        weight_grad,
        weight_grad_avx512 = 4,
        weight_grad_avx2 = 2,
        (
            fr: &Frames,
            frames: &[f32],
            gy: &[f32],
            o: usize,
            o0: usize,
            fresh: usize,
            dwt: &mut [f32]
        )
    );
}

#[cfg(test)]
mod tests;
