//! Convolutions with a 4×4 kernel, stride 2 and padding 1 (DCGAN's and pix2pix's down-
//! and upsampling layers; their transposed convolution is this one's input gradient) by
//! space-to-depth: the input's four pixel parities become four channels each, and the
//! stride-2 4×4 convolution becomes a stride-1 2×2 one over `(H/2 + 1) × (W/2 + 1)`
//! frames. Each of the 2×2 taps is then one GEMM whose right operand is the frames
//! themselves at the tap's offset (the output is computed "wide", one garbage column and
//! row per frame, 13 % extra products on 16×16 planes), so no im2col columns are gathered
//! and no columns are scattered back: the layout passes read and write each element once.
//!
//! On f32 with AVX-512 or AVX2 and output rows a whole number of vectors wide, the
//! direct kernels of [`parity`](super::parity) take these layers instead; this module
//! serves the rest (other widths, other element types and CPUs).
//!
//! Notation: the convolution's input `x` `[N, C, H, W]`, output gradient `gy` `[N, O, oh,
//! ow]` with `oh = H/2`, `ow = W/2`; frames of width `fw = ow + 1` and `fp = (oh + 1)·fw`
//! elements, one per sample, side by side after a `fw + 1` zero head and before as long a
//! zero tail. Rows of the space-to-depth buffer are `r = c·4 + py·2 + px`, the frame of
//! row `r` holding `x[c, 2i + py − 1, 2j + px − 1]` at `(i, j)` (zero outside `x`). Tap
//! `t = ty·2 + tx`'s weights are `wt[t][o][r] = w[o, c, 2ty + py, 2tx + px]`, and
//! `y[o, a, b] = Σ_t Σ_r wt[t][o][r] · frame_r[a + ty, b + tx]`.
//!
//! The garbage columns and rows are zero in the output gradient's frames, so they add
//! nothing to the weight gradient, except that a NaN or infinity in `x` meets them as
//! `0 · NaN`: it can then reach weight-gradient entries of its parity that the definition
//! leaves finite (as it makes NaN the entries the definition does reach).

use crate::WideFloat as Float;
use crate::cpu::{Conv2dGeometry, HostBuffer, Parallelism, for_each_chunk_mut, num_threads};

/// Fewest channels each way served: below them the GEMMs' reductions (`4·C` or `O`) are
/// too short to beat the im2col tiles.
pub(super) const MIN_CHANNELS: usize = 8;

/// Shortest output side served: the frames' extra row and column cost
/// `(oh + 1)·(ow + 1) / (oh·ow) − 1` more products (13 % at 16×16, 27 % at 8×8, where the
/// tiles won), and reordering the weights costs as much as a GEMM over a few pixels (a
/// 4×4 plane at batch 1 ran 4× slower than the tiles).
const MIN_SIDE: usize = 16;

/// Most elements of one sample group's space-to-depth buffer (1 MiB of f32, the Zen 5's
/// L2 per core).
const GROUP_ELEMS: usize = 1 << 18;

/// Whether this module serves a convolution: one group, 4×4 kernel, stride 2, padding 1,
/// no dilation, even input sides of at least `2·`[`MIN_SIDE`], at least
/// [`MIN_CHANNELS`] input and output channels.
pub(crate) fn applies(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    groups == 1
        && g.kernel == [4, 4]
        && g.stride == [2, 2]
        && g.padding == [1, 1]
        && g.dilation == [1, 1]
        && g.input
            .iter()
            .all(|&s| s >= 2 * MIN_SIDE && s.is_multiple_of(2))
        && g.c >= MIN_CHANNELS
        && out_channels >= MIN_CHANNELS
        && g.n > 0
}

/// Whether [`weight_grad`] serves a convolution [`applies`] serves: its per-tap products
/// are `O × 4·C` summed over the frames, which the GEMM runs slowly when small (32 × 64
/// on 64×64 planes: 4.1 against the tiles' 3.7 ms at batch 8, the tiles timed second in
/// each pair; 64 × 128 on 16×16 planes at batch 1: 0.40 against 0.81).
pub(crate) fn weight_grad_applies(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    applies(g, out_channels, groups) && out_channels * 4 * g.c >= 64 * 128
}

/// The frame geometry of a convolution this module serves, and its sample groups.
#[derive(Clone, Copy)]
struct Frames {
    oh: usize,
    ow: usize,
    h: usize,
    w: usize,
    fw: usize,
    fp: usize,
    /// Samples per group.
    per: usize,
}

impl Frames {
    fn new(g: &Conv2dGeometry, rows: usize) -> Self {
        let [h, w] = g.input;
        let (oh, ow) = (h / 2, w / 2);
        let fw = ow + 1;
        let fp = (oh + 1) * fw;
        let fit = (GROUP_ELEMS / (rows * fp)).max(1);
        let per = g.n.div_ceil(num_threads()).min(fit).max(1);
        Frames {
            oh,
            ow,
            h,
            w,
            fw,
            fp,
            per,
        }
    }
    /// The zero head (and tail) of every row.
    fn head(&self) -> usize {
        self.fw + 1
    }
    /// One row's length: a group's frames between the head and the tail (the last group
    /// may fill fewer).
    fn row_len(&self) -> usize {
        self.per * self.fp + 2 * self.head()
    }
    /// The frames of a full group, the row length of the GEMMs' destinations.
    fn width(&self) -> usize {
        self.per * self.fp
    }
    fn groups(&self, n: usize) -> usize {
        n.div_ceil(self.per)
    }
}

/// Runs `f(samples, parallelism, scratch)` on each sample group: the groups split evenly
/// among the threads (each GEMM on one thread) when there are at least as many as
/// threads, else one after another with parallel GEMMs. Each thread makes its `scratch`
/// once (`init`) and passes it to all its groups: buffers keep their zero margins, and
/// are neither allocated nor zeroed again.
fn for_groups<S>(
    n: usize,
    fr: &Frames,
    init: impl Fn() -> S + Sync,
    f: impl Fn(std::ops::Range<usize>, Parallelism, &mut S) + Sync,
) {
    let groups = fr.groups(n);
    let threads = num_threads();
    let range = |gi: usize| gi * fr.per..((gi + 1) * fr.per).min(n);
    if threads > 1 && groups >= threads {
        crate::cpu::run_tasks(threads, |t| {
            let mut scratch = init();
            for gi in (t * groups / threads)..((t + 1) * groups / threads) {
                f(range(gi), Parallelism::None, &mut scratch);
            }
        });
    } else {
        let par = if threads > 1 {
            Parallelism::Threads(threads)
        } else {
            Parallelism::None
        };
        let mut scratch = init();
        (0..groups).for_each(|gi| f(range(gi), par, &mut scratch));
    }
}

/// `wt[t][o][r]` from `w` `[O, C, 4, 4]`.
fn tap_weights<T: Float>(w: &[T], o: usize, c: usize) -> HostBuffer<T> {
    let k = 4 * c;
    let mut wt = HostBuffer::<T>::zeroed(4 * o * k);
    for_each_tap_weight(o, c, |src, dst| wt[dst] = w[src]);
    wt
}

/// Calls `f(w index, wt index)` for every weight, in `w`'s order.
fn for_each_tap_weight(o: usize, c: usize, mut f: impl FnMut(usize, usize)) {
    let k = 4 * c;
    let mut src = 0;
    for oc in 0..o {
        for ci in 0..c {
            for ky in 0..4 {
                for kx in 0..4 {
                    let t = (ky / 2) * 2 + kx / 2;
                    f(src, (t * o + oc) * k + ci * 4 + (ky % 2) * 2 + kx % 2);
                    src += 1;
                }
            }
        }
    }
}

/// Writes samples `samples` of `x` `[N, C, H, W]` into the space-to-depth rows `xs`
/// (`4·C` rows of `row_len`), leaving the zeros around each frame as they are.
fn space_to_depth<T: Float>(
    x: &[T],
    c: usize,
    fr: &Frames,
    samples: std::ops::Range<usize>,
    xs: &mut [T],
) {
    let sample = c * fr.h * fr.w;
    for (j, s) in samples.enumerate() {
        let at = fr.head() + j * fr.fp;
        sample_frames(
            &x[s * sample..(s + 1) * sample],
            [fr.h, fr.w],
            fr.row_len(),
            at,
            xs,
        );
    }
}

/// Writes one sample `x` `[C, H, W]` (`H`, `W` even) as space-to-depth frames of width
/// `W/2 + 1`: frame row `r = c·4 + py·2 + px` at `dst[r·stride + at..]`, holding
/// `x[c, 2i + py − 1, 2j + px − 1]` at `(i, j)`. The positions no input pixel maps to
/// (one row and one column of each frame) are left as they are.
pub(super) fn sample_frames<T: Copy>(
    x: &[T],
    [h, w]: [usize; 2],
    stride: usize,
    at: usize,
    dst: &mut [T],
) {
    let (ow, fw) = (w / 2, w / 2 + 1);
    for (ci, plane) in x.chunks_exact(h * w).enumerate() {
        for (y, src) in plane.chunks_exact(w).enumerate() {
            // Input row y is row i = ⌈y / 2⌉ of parity py = (y + 1) % 2.
            let (i, py) = (y.div_ceil(2), (y + 1) % 2);
            let start = at + i * fw;
            let r0 = ci * 4 + py * 2;
            // Even columns x = 2j' are px = 1 at j'; odd ones x = 2j' + 1 px = 0 at j' + 1.
            let (odd, even) = dst[r0 * stride..(r0 + 2) * stride].split_at_mut(stride);
            let (odd, even) = (&mut odd[start + 1..][..ow], &mut even[start..][..ow]);
            for ((pair, e), o) in src.chunks_exact(2).zip(even).zip(odd) {
                *e = pair[0];
                *o = pair[1];
            }
        }
    }
}

/// Writes samples `samples` of `gy` `[N, O, oh, ow]` into `gf` (`O` rows of `row_len`) at
/// frame offset `(1, 1)`, leaving the zeros as they are.
fn framed<T: Float>(
    gy: &[T],
    o: usize,
    fr: &Frames,
    samples: std::ops::Range<usize>,
    gf: &mut [T],
) {
    let len = fr.row_len();
    let plane = fr.oh * fr.ow;
    for (j, s) in samples.enumerate() {
        for oc in 0..o {
            let src = &gy[(s * o + oc) * plane..][..plane];
            let row = &mut gf[oc * len + fr.head() + j * fr.fp..][..fr.fp];
            for (a, line) in src.chunks_exact(fr.ow).enumerate() {
                row[(a + 1) * fr.fw + 1..][..fr.ow].copy_from_slice(line);
            }
        }
    }
}

/// [`conv2d`](super::conv2d) where [`applies`] says so.
pub(crate) fn conv2d_subpixel<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    let c = g.c;
    let k = 4 * c;
    let fr = Frames::new(g, k);
    let wt = tap_weights(w, o, c);
    let plane = fr.oh * fr.ow;
    let mut out = HostBuffer::<T>::new_uninit(g.n * o * plane);
    let out_ptr = SendPtr(out.as_mut_ptr());
    let (len, width) = (fr.row_len(), fr.width());
    let init = || {
        (
            HostBuffer::<T>::zeroed(k * len),
            HostBuffer::<T>::zeroed(o * width),
        )
    };
    for_groups(g.n, &fr, init, |samples, par, (xs, y)| {
        let (s0, count) = (samples.start, samples.len());
        let cols = count * fr.fp;
        space_to_depth(x, c, &fr, samples, xs);
        for t in 0..4 {
            let off = fr.head() + (t / 2) * fr.fw + t % 2;
            // SAFETY: dst `y` is `o × cols` with row stride `width ≥ cols` (read after the
            // first tap). lhs: tap `t`'s `o × k` weights. rhs: `k × cols` with row stride
            // `len` from offset `off ≤ 2·head` of each row: the last column read is `off
            // + cols − 1 < len`. Nothing overlaps `y`.
            unsafe {
                crate::cpu::gemm(
                    o,
                    cols,
                    k,
                    y.as_mut_ptr(),
                    1,
                    width as isize,
                    t > 0,
                    wt[t * o * k..].as_ptr(),
                    1,
                    k as isize,
                    xs[off..].as_ptr(),
                    1,
                    len as isize,
                    T::ONE,
                    T::ONE,
                    par,
                );
            }
        }
        for j in 0..count {
            for oc in 0..o {
                let b = bias.map_or(T::ZERO, |b| b[oc]);
                // SAFETY: sample `s0 + j`'s plane of channel `oc` (uninitialised slots),
                // written by this group alone (groups cover disjoint samples); `out`
                // outlives the groups.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        out_ptr.get().add(((s0 + j) * o + oc) * plane),
                        plane,
                    )
                };
                let src = &y[oc * width + j * fr.fp..][..fr.fp];
                for (a, line) in dst.chunks_exact_mut(fr.ow).enumerate() {
                    for (d, &v) in line.iter_mut().zip(&src[a * fr.fw..][..fr.ow]) {
                        d.write(v + b);
                    }
                }
            }
        }
    });
    // SAFETY: the groups cover every sample, and each wrote all `oh × ow` pixels of
    // every channel of its samples.
    unsafe { out.assume_init() }
}

/// The input gradient `[N, C, H, W]` of a convolution [`applies`] serves, from `gy`
/// `[N, O, oh, ow]` and `w` `[O, C, 4, 4]` (the transposed convolution's forward).
pub(crate) fn input_grad<T: Float>(
    gy: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    let c = g.c;
    let k = 4 * c;
    let fr = Frames::new(g, k.max(o));
    let wt = tap_weights(w, o, c);
    let (h, wd) = (fr.h, fr.w);
    let mut dx = HostBuffer::<T>::new_uninit(g.n * c * h * wd);
    let dx_ptr = SendPtr(dx.as_mut_ptr());
    let (len, width) = (fr.row_len(), fr.width());
    let init = || {
        (
            HostBuffer::<T>::zeroed(o * len),
            HostBuffer::<T>::zeroed(k * width),
        )
    };
    for_groups(g.n, &fr, init, |samples, par, (gf, dxs)| {
        let (s0, count) = (samples.start, samples.len());
        let cols = count * fr.fp;
        framed(gy, o, &fr, samples, gf);
        for t in 0..4 {
            let (ty, tx) = (t / 2, t % 2);
            let off = fr.head() + (1 - ty) * fr.fw + 1 - tx;
            // SAFETY: dst `dxs` is `k × cols`, row stride `width ≥ cols` (read after the
            // first tap). lhs: tap `t`'s weights transposed, `k × o` (row stride 1,
            // column stride `k`). rhs: `o × cols` with row stride `len` from offset `off
            // ≤ 2·head`, the last column read `off + cols − 1 < len`. Nothing overlaps
            // `dxs`.
            unsafe {
                crate::cpu::gemm(
                    k,
                    cols,
                    o,
                    dxs.as_mut_ptr(),
                    1,
                    width as isize,
                    t > 0,
                    wt[t * o * k..].as_ptr(),
                    k as isize,
                    1,
                    gf[off..].as_ptr(),
                    1,
                    len as isize,
                    T::ONE,
                    T::ONE,
                    par,
                );
            }
        }
        // Depth to space: x[c, y, x'] is row c·4 + py·2 + px of frame position
        // ((y + 1) / 2, (x' + 1) / 2), py = (y + 1) % 2, px = (x' + 1) % 2.
        for j in 0..count {
            for ci in 0..c {
                // SAFETY: sample `s0 + j`'s plane of channel `ci` (uninitialised slots),
                // written by this group alone; `dx` outlives the groups.
                let plane = unsafe {
                    std::slice::from_raw_parts_mut(
                        dx_ptr.get().add(((s0 + j) * c + ci) * h * wd),
                        h * wd,
                    )
                };
                for (y, line) in plane.chunks_exact_mut(wd).enumerate() {
                    let (i, py) = (y.div_ceil(2), (y + 1) % 2);
                    let r0 = ci * 4 + py * 2;
                    let at = j * fr.fp + i * fr.fw;
                    let odd = &dxs[r0 * width + at + 1..][..fr.ow];
                    let even = &dxs[(r0 + 1) * width + at..][..fr.ow];
                    for ((pair, &e), &od) in line.chunks_exact_mut(2).zip(even).zip(odd) {
                        pair[0].write(e);
                        pair[1].write(od);
                    }
                }
            }
        }
    });
    // SAFETY: the groups cover every sample, and each wrote both columns of every pair
    // (`W` is even) of every row of every channel of its samples.
    unsafe { dx.assume_init() }
}

/// The weight gradient `[O, C, 4, 4]` of a convolution [`applies`] serves, from `gy`
/// `[N, O, oh, ow]` and `x` `[N, C, H, W]`: per group, one GEMM per tap reducing over
/// the group's frames, into per-task partial sums added at the end.
pub(crate) fn weight_grad<T: Float>(
    gy: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    o: usize,
) -> HostBuffer<T> {
    let c = g.c;
    let k = 4 * c;
    let fr = Frames::new(g, k + o);
    let groups = fr.groups(g.n);
    let threads = num_threads();
    let tasks = if threads > 1 && groups >= threads {
        threads
    } else {
        1
    };
    let par = if tasks == 1 && threads > 1 {
        Parallelism::Threads(threads)
    } else {
        Parallelism::None
    };
    let part = 4 * o * k;
    let mut partial = HostBuffer::<T>::zeroed(tasks * part);
    for_each_chunk_mut(&mut partial, part, |task, dwt| {
        // One pair of buffers for all of the task's groups: only the frames are
        // rewritten; the zero margins stay (a last, shorter group leaves stale frames
        // past its own, which only meet the zeros of `gf`'s margins and tail).
        let len = fr.row_len();
        let mut xs = HostBuffer::<T>::zeroed(k * len);
        let mut gf = HostBuffer::<T>::zeroed(o * len);
        for gi in (task * groups / tasks)..((task + 1) * groups / tasks) {
            let samples = gi * fr.per..((gi + 1) * fr.per).min(g.n);
            let cols = samples.len() * fr.fp;
            space_to_depth(x, c, &fr, samples.clone(), &mut xs);
            framed(gy, o, &fr, samples, &mut gf);
            for t in 0..4 {
                let off = fr.head() + (t / 2) * fr.fw + t % 2;
                // SAFETY: dst: this task's `o × k` block of tap `t`. lhs: `gf` as `o ×
                // cols` (row stride `len`) from offset `head + fw + 1 = 2·head`. rhs:
                // `cols × k`, element `(q, r)` at `xs[r·len + off + q]` (row stride 1,
                // column stride `len`), `off ≤ 2·head`: every read ends before `len`.
                unsafe {
                    crate::cpu::gemm(
                        o,
                        k,
                        cols,
                        dwt[t * o * k..].as_mut_ptr(),
                        1,
                        k as isize,
                        true,
                        gf[2 * fr.head()..].as_ptr(),
                        1,
                        len as isize,
                        xs[off..].as_ptr(),
                        len as isize,
                        1,
                        T::ONE,
                        T::ONE,
                        par,
                    );
                }
            }
        }
    });
    let (first, rest) = partial.split_at_mut(part);
    for p in rest.chunks_exact(part) {
        first.iter_mut().zip(p).for_each(|(d, &v)| *d = *d + v);
    }
    let mut dw = HostBuffer::<T>::zeroed(o * c * 16);
    for_each_tap_weight(o, c, |dst, src| dw[dst] = first[src]);
    dw
}

/// A pointer the tasks write disjoint parts of an output through (here and in
/// `parity`).
#[derive(Clone, Copy)]
pub(super) struct SendPtr<T>(pub(super) *mut T);
// SAFETY: each task writes only its own part of the output (see the uses).
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above; the pointer itself is only copied.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    pub(super) fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::fused::conv::backward::tiled_backward;
    use crate::fused::conv::tiled_conv2d;

    fn values(len: usize, seed: usize) -> Vec<f64> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104729) % 1009) as f64 / 1009.0 - 0.5)
            .collect()
    }

    /// The data of one case: geometry, output channels, input, weight, bias, output
    /// gradient.
    pub(in crate::fused::conv) type Case<'a> = (
        &'a Conv2dGeometry,
        usize,
        &'a [f64],
        &'a [f64],
        &'a [f64],
        &'a [f64],
    );

    /// Runs `check` on each 4×4, stride-2, padding-1 case `(n, c, o, [h, w])` with fixed
    /// pseudo-random data in `[-0.5, 0.5)`, at one and then two threads.
    pub(in crate::fused::conv) fn each_case(
        cases: &[(usize, usize, usize, [usize; 2])],
        mut check: impl FnMut(Case),
    ) {
        let _lock = crate::cpu::thread_count_lock();
        let before = num_threads();
        for threads in [1, 2] {
            crate::cpu::set_num_threads(threads);
            for &(n, c, o, [h, w]) in cases {
                let g = Conv2dGeometry {
                    n,
                    c,
                    input: [h, w],
                    kernel: [4, 4],
                    stride: [2, 2],
                    padding: [1, 1],
                    dilation: [1, 1],
                };
                let [oh, ow] = g.output().unwrap();
                check((
                    &g,
                    o,
                    &values(n * c * h * w, 1),
                    &values(o * c * 16, 2),
                    &values(o, 3),
                    &values(n * o * oh * ow, 4),
                ));
            }
        }
        crate::cpu::set_num_threads(before);
    }

    /// Forward, input and weight gradient against the im2col tiles, in f64, over
    /// batches that fill one or several sample groups (in parallel or one after another
    /// with parallel GEMMs; a thread's buffers reused by a shorter last group), square
    /// and oblong planes, a bias, and one and two threads.
    #[test]
    fn matches_the_tiles() {
        let cases = [
            (1, 8, 8, [2, 2]),
            (3, 8, 16, [6, 10]),
            (5, 16, 8, [16, 16]),
            (2, 64, 32, [32, 8]),
            (16, 32, 16, [16, 16]),
            (1, 8, 8, [32, 32]),
            (3, 16, 8, [34, 40]),
            // groups of 3 (the 1 MiB budget): three groups, the last of one sample,
            // two on one thread reusing its buffers
            (7, 64, 8, [32, 32]),
        ];
        each_case(&cases, |(g, o, x, wt, b, gy)| {
            let [h, w] = g.input;
            // Smaller planes go to the tiles, but the kernels serve any even shape.
            assert_eq!(applies(g, o, 1), h >= 32 && w >= 32);
            let close = |a: &[f64], e: &[f64], what: &str| {
                assert_eq!(a.len(), e.len(), "{what}");
                for (i, (a, e)) in a.iter().zip(e).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-12 * (1.0 + e.abs()),
                        "{what} {g:?} {o} at {i}: {a} vs {e}"
                    );
                }
            };
            let y = conv2d_subpixel(x, wt, Some(b), g, o);
            close(&y, &tiled_conv2d(x, wt, Some(b), g, o, 1), "forward");
            let (dx, dw) = tiled_backward(gy, x, wt, g, o, 1, [true, true]);
            close(&input_grad(gy, wt, g, o), &dx.unwrap(), "input gradient");
            close(&weight_grad(gy, x, g, o), &dw.unwrap(), "weight gradient");
        });
    }
}
