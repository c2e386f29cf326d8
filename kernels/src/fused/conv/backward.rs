//! Both gradients of a dense or grouped `conv2d` in one pass over the batch, a tile of
//! output pixels at a time: the tile's input columns are gathered (im2col, as the forward
//! does) and the weight gradient accumulates `gout_tile @ columnsᵀ`; the input gradient's
//! columns `Wᵀ @ gout_tile` are computed into a second tile buffer and scattered back
//! (col2im) into the input gradient. Neither the batch-wide column matrix nor a permuted
//! copy of the output gradient ever exists, and both GEMMs read the output gradient in
//! place (NCHW rows are already the `[out_channels, pixels]` operand they need).
//!
//! Samples are split between threads (each with its own weight-gradient partial, summed
//! at the end, and its own samples' input gradient); with fewer samples than threads each
//! GEMM runs in parallel instead. One-group layers with small planes and large weights
//! (ResNet's last stages) split the input channels instead ([`channel_blocked`]): no
//! per-thread copy of a weight-sized gradient, and GEMMs over the whole batch.

use crate::WideFloat as Float;
use crate::cpu::Parallelism;
use crate::cpu::unfold::{gather_tap, scatter_tap};
use crate::cpu::{Conv2dGeometry, HostBuffer, PARALLEL_THRESHOLD, num_threads, run_tasks};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Mutex;

/// Elements of one backward column tile (`[c/groups * kh * kw, pixels]`): larger than the
/// forward's, since the weight gradient's GEMM contracts over the tile's pixels and a
/// short contraction re-reads the whole gradient for little work.
const TILE_ELEMS: usize = 256 * 1024;
/// Fewest pixels per tile: the input gradient's GEMM repacks the whole weight (`O ×
/// C·kh·kw`) per tile, so a tile holds several small planes (ResNet-18's 14×14 backward
/// 26.3 -> 23.8 ms at batch 8 against 256 pixels), up to [`MAX_TILE_ELEMS`].
const MIN_COLS: usize = 1024;
/// Most elements of one column tile, whatever [`MIN_COLS`] asks: larger tiles outgrow
/// the caches (DCGAN's 4×4 / 2 transposed convolution, `C·kh·kw = 1024` on 16×16 planes,
/// forward + backward at batch 16: 29.5 ms at 1024 pixels per tile, 26 ms at 512).
const MAX_TILE_ELEMS: usize = 2 * TILE_ELEMS;

/// A tile of output pixels: output rows `rows` of each sample in `samples` (several
/// samples only when each holds whole planes).
#[derive(Clone)]
struct Tile {
    samples: Range<usize>,
    rows: Range<usize>,
}

/// The tiles covering samples `samples` with at most `cols` pixels each (at least one
/// output row).
fn tiles(samples: Range<usize>, [oh, ow]: [usize; 2], cols: usize) -> Vec<Tile> {
    let plane = oh * ow;
    let mut out = Vec::new();
    if plane <= cols {
        let per = (cols / plane).max(1);
        let mut n = samples.start;
        while n < samples.end {
            let end = (n + per).min(samples.end);
            out.push(Tile {
                samples: n..end,
                rows: 0..oh,
            });
            n = end;
        }
    } else {
        let rows = (cols / ow).clamp(1, oh);
        for n in samples {
            for r in (0..oh).step_by(rows) {
                out.push(Tile {
                    samples: n..n + 1,
                    rows: r..(r + rows).min(oh),
                });
            }
        }
    }
    out
}

/// Output planes smaller than this, with weights of at least [`LARGE_WEIGHT`] elements,
/// take the channel-blocked backward ([`channel_blocked`]): ResNet's 3×3 layers at 14×14
/// and 7×7, whose weights (up to 9.4 MB) a per-thread weight-gradient partial would
/// re-read and re-write per tile, and whose partials would be summed at the end
/// (7×7 layer at batch 8, both gradients: 26.9 -> 23.2 ms).
const SMALL_PLANE: usize = 384;
/// See [`SMALL_PLANE`] (smaller weights, such as ResNet's 1×1 downsampling, gain
/// nothing).
const LARGE_WEIGHT: usize = 1 << 18;
/// Most elements of one channel block's columns in [`channel_blocked`].
const BLOCK_ELEMS: usize = 1 << 20;

/// The sizes every tile shares.
struct Plan<'a, T> {
    gout: &'a [T],
    x: &'a [T],
    w: &'a [T],
    g: &'a Conv2dGeometry,
    out_channels: usize,
    groups: usize,
    oh: usize,
    ow: usize,
    /// Input channels per group, and the column length `cg * kh * kw`.
    cg: usize,
    k: usize,
    pointwise: bool,
}

/// Scratch of one worker: the gathered input columns, the input gradient's columns and
/// the packed output-gradient tile.
struct Scratch<T> {
    cols: HostBuffer<MaybeUninit<T>>,
    dcols: HostBuffer<MaybeUninit<T>>,
    gpack: HostBuffer<MaybeUninit<T>>,
}

impl<T: Float> Plan<'_, T> {
    fn og(&self) -> usize {
        self.out_channels / self.groups
    }

    /// Accumulates one tile's contribution: `dw` (`[out_channels, k]`) += the weight
    /// gradient, and the input gradient into `dx` (samples from `dx_first`, zeroed before
    /// the first tile).
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &self,
        t: &Tile,
        dx: Option<(&mut [T], usize)>,
        dw: Option<&mut [T]>,
        s: &mut Scratch<T>,
        parallelism: Parallelism,
    ) {
        let g = self.g;
        let (oh, ow, k, cg, og) = (self.oh, self.ow, self.k, self.cg, self.og());
        let [kh, kw] = g.kernel;
        let in_plane = g.input[0] * g.input[1];
        let plane = oh * ow;
        let seg = t.rows.len() * ow;
        let cols_n = seg * t.samples.len();
        let single = t.samples.len() == 1;
        let direct = single && self.pointwise;
        let mut dx = dx;
        let mut dw = dw;
        for gi in 0..self.groups {
            // The output-gradient tile `[og, cols_n]`: in place for one sample, else packed.
            let (gptr, g_rs): (*const T, usize) = if single {
                let n = t.samples.start;
                let at = (n * self.out_channels + gi * og) * plane + t.rows.start * ow;
                (self.gout[at..].as_ptr(), plane)
            } else {
                for (o, dst) in s.gpack.chunks_exact_mut(cols_n).take(og).enumerate() {
                    for (j, n) in t.samples.clone().enumerate() {
                        let at = (n * self.out_channels + gi * og + o) * plane;
                        for (d, &v) in dst[j * seg..(j + 1) * seg]
                            .iter_mut()
                            .zip(&self.gout[at..at + seg])
                        {
                            d.write(v);
                        }
                    }
                }
                (s.gpack.as_ptr() as *const T, cols_n)
            };
            if let Some(dw) = dw.as_deref_mut() {
                let (cptr, c_cs): (*const T, usize) = if direct {
                    let n = t.samples.start;
                    let at = (n * g.c + gi * cg) * in_plane + t.rows.start * ow;
                    (self.x[at..].as_ptr(), in_plane)
                } else {
                    for (r, row) in s.cols.chunks_exact_mut(cols_n).take(k).enumerate() {
                        let (ci, tap) = (r / (kh * kw), r % (kh * kw));
                        for (j, n) in t.samples.clone().enumerate() {
                            let c = n * g.c + gi * cg + ci;
                            gather_tap(
                                &self.x[c * in_plane..(c + 1) * in_plane],
                                g,
                                [oh, ow],
                                t.rows.clone(),
                                (tap / kw, tap % kw),
                                &mut row[j * seg..(j + 1) * seg],
                            );
                        }
                    }
                    (s.cols.as_ptr() as *const T, cols_n)
                };
                let dst = &mut dw[gi * og * k..(gi + 1) * og * k];
                // SAFETY: dst: `og x k` row-major inside `dw` (initialised). lhs: the
                // output-gradient tile, `og` rows of `cols_n` at row stride `g_rs` — rows of
                // the NCHW gradient (inside `gout`) or the packed tile written above. rhs:
                // the columns transposed, element (j, r) at `r * c_cs + j` — the `k` rows of
                // `cols_n` gathered above, or for a pointwise conv the group's input planes
                // from the tile's first pixel. Nothing aliases `dst`.
                unsafe {
                    crate::cpu::gemm(
                        og,
                        k,
                        cols_n,
                        dst.as_mut_ptr(),
                        1,
                        k as isize,
                        true,
                        gptr,
                        1,
                        g_rs as isize,
                        cptr,
                        c_cs as isize,
                        1,
                        T::ONE,
                        T::ONE,
                        parallelism,
                    );
                }
            }
            if let Some((dx, first)) = dx.as_mut() {
                let wg = &self.w[gi * og * k..(gi + 1) * og * k];
                let sample0 = (t.samples.start - *first) * g.c * in_plane;
                // A pointwise conv's input gradient is the GEMM itself, into the planes (`k`
                // is then `cg`); any other goes through `dcols` and col2im.
                let (dptr, d_rs) = if direct {
                    let at = sample0 + gi * cg * in_plane + t.rows.start * ow;
                    (dx[at..].as_mut_ptr(), in_plane)
                } else {
                    (s.dcols.as_mut_ptr() as *mut T, cols_n)
                };
                // SAFETY: dst: `k` rows of `cols_n` at row stride `d_rs`, every element
                // written (beta only, read_dst false): for a pointwise conv the group's
                // channels from the tile's first pixel, inside this worker's samples of
                // `dx`; else `dcols`, `k x cols_n` row-major. lhs: `wg` transposed (element
                // (r, o) at `o * k + r`). rhs: the output-gradient tile as above. Nothing
                // aliases `dst`.
                unsafe {
                    crate::cpu::gemm(
                        k,
                        cols_n,
                        og,
                        dptr,
                        1,
                        d_rs as isize,
                        false,
                        wg.as_ptr(),
                        k as isize,
                        1,
                        gptr,
                        1,
                        g_rs as isize,
                        T::ZERO,
                        T::ONE,
                        parallelism,
                    );
                }
                if direct {
                    continue;
                }
                // SAFETY: the GEMM above wrote the first `k * cols_n` elements.
                let dcols =
                    unsafe { std::slice::from_raw_parts(s.dcols.as_ptr() as *const T, k * cols_n) };
                for (r, row) in dcols.chunks_exact(cols_n).enumerate() {
                    let (ci, tap) = (r / (kh * kw), r % (kh * kw));
                    for j in 0..t.samples.len() {
                        let at = sample0 + (j * g.c + gi * cg + ci) * in_plane;
                        scatter_tap(
                            &row[j * seg..(j + 1) * seg],
                            g,
                            [oh, ow],
                            t.rows.clone(),
                            (tap / kw, tap % kw),
                            &mut dx[at..at + in_plane],
                        );
                    }
                }
            }
        }
    }
}

/// The input gradient `[n, c, h, w]` and the weight gradient `[out_channels, c/groups, kh,
/// kw]` of [`conv2d`](super::conv2d), each when wanted, from the output gradient `gout`
/// `[n, out_channels, oh, ow]`, the input `x` and the weight `w` (all contiguous; `x` is
/// read only for the weight gradient and may be empty without it). The bias gradient is
/// a plain sum and not computed here.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::conv2d_backward;
/// // one 1x3 image, a 1x2 kernel: two windows; the middle pixel feeds both outputs
/// let g = Conv2dGeometry { n: 1, c: 1, input: [1, 3], kernel: [1, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let (dx, dw) = conv2d_backward(&[1.0f32, 10.0], &[1.0, 2.0, 3.0], &[0.5, 2.0], &g, 1, 1, [true, true]);
/// assert_eq!(dx.unwrap(), vec![0.5, 7.0, 20.0]);
/// assert_eq!(dw.unwrap(), vec![21.0, 32.0]);
/// ```
///
/// Wide f32 layers take their input gradient from the wide forward kernel (unit
/// strides: a forward convolution of `gout` with the flipped, transposed weights) and
/// their weight gradient from Winograd where it serves (3×3, at least 128 channels each
/// way), else from [`conv2d_wide_weight_grad`](super::conv2d_wide_weight_grad) (unit
/// strides, and stems); the tiles compute the rest.
#[allow(clippy::type_complexity)]
pub fn conv2d_backward<T: Float>(
    gout: &[T],
    x: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
    [want_x, want_w]: [bool; 2],
) -> (Option<HostBuffer<T>>, Option<HostBuffer<T>>) {
    // F(4×4) Winograd before the wide kernel where it serves (see `before_wide`).
    let wide_x = want_x
        && !(super::winograd::before_wide::<T>(g, out_channels, groups)
            && super::winograd::input_grad_applies::<T>(g, out_channels, groups))
        && super::wide::input_grad_applies::<T>(g, out_channels, groups);
    let winograd_x =
        want_x && !wide_x && super::winograd::input_grad_applies::<T>(g, out_channels, groups);
    // Winograd first where both serve (ResNet-18's 128-channel 28² layers at batch 8,
    // two Xeon cores: 8.6–9.1 ms wide, 7.5–7.6 Winograd, alternated four times).
    let winograd_w = want_w && super::winograd::weight_grad_applies::<T>(g, out_channels, groups);
    let wide_w = want_w
        && !winograd_w
        && super::weight_grad::weight_grad_applies::<T>(g, out_channels, groups);
    let subpixel_x =
        want_x && !wide_x && !winograd_x && super::subpixel::applies(g, out_channels, groups);
    let subpixel_w = want_w
        && !wide_w
        && !winograd_w
        && super::subpixel::weight_grad_applies(g, out_channels, groups);
    let tiled = [
        want_x && !wide_x && !winograd_x && !subpixel_x,
        want_w && !wide_w && !winograd_w && !subpixel_w,
    ];
    let (dx, dw) = if tiled[0] || tiled[1] {
        tiled_backward(gout, x, w, g, out_channels, groups, tiled)
    } else {
        (None, None)
    };
    let dx = dx
        .or_else(|| wide_x.then(|| super::wide::conv2d_wide_input_grad(gout, w, g, out_channels)))
        .or_else(|| {
            winograd_x
                .then(|| super::winograd::conv2d_winograd_input_grad(gout, w, g, out_channels))
        })
        .or_else(|| {
            (subpixel_x && super::parity::applies::<T>(g, out_channels, groups))
                .then(|| super::parity::input_grad(gout, w, g, out_channels))
        })
        .or_else(|| subpixel_x.then(|| super::subpixel::input_grad(gout, w, g, out_channels)));
    let dw = dw
        .or_else(|| {
            wide_w.then(|| super::weight_grad::conv2d_wide_weight_grad(gout, x, g, out_channels))
        })
        .or_else(|| {
            winograd_w
                .then(|| super::winograd::conv2d_winograd_weight_grad(gout, x, g, out_channels))
        })
        .or_else(|| {
            (subpixel_w && super::parity::applies::<T>(g, out_channels, groups))
                .then(|| super::parity::weight_grad(gout, x, g, out_channels))
        })
        .or_else(|| subpixel_w.then(|| super::subpixel::weight_grad(gout, x, g, out_channels)));
    (dx, dw)
}

/// How [`scheduled_backward`] splits the work.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Schedule {
    /// Channel blocks for one-group convolutions with small planes and large weights,
    /// else tiles.
    Auto,
    /// [`channel_blocked`] (one group only; the tests run both ways).
    #[cfg_attr(not(test), allow(dead_code))]
    ChannelBlocks,
    /// Tiles of output pixels.
    #[cfg_attr(not(test), allow(dead_code))]
    Tiles,
}

/// [`conv2d_backward`] by im2col columns and GEMMs, for every convolution.
#[allow(clippy::type_complexity)]
pub(super) fn tiled_backward<T: Float>(
    gout: &[T],
    x: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
    want: [bool; 2],
) -> (Option<HostBuffer<T>>, Option<HostBuffer<T>>) {
    scheduled_backward(gout, x, w, g, out_channels, groups, want, Schedule::Auto)
}

/// [`tiled_backward`] with the work split as `schedule` says.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn scheduled_backward<T: Float>(
    gout: &[T],
    x: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
    [want_x, want_w]: [bool; 2],
    schedule: Schedule,
) -> (Option<HostBuffer<T>>, Option<HostBuffer<T>>) {
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let in_plane = g.input[0] * g.input[1];
    let plane = oh * ow;
    assert!(
        groups > 0 && g.c.is_multiple_of(groups) && out_channels.is_multiple_of(groups),
        "conv2d backward: {groups} groups do not divide {} input and {out_channels} output channels",
        g.c
    );
    let cg = g.c / groups;
    let k = cg * kh * kw;
    assert!(
        gout.len() == g.n * out_channels * plane
            && (!want_w || x.len() == g.n * g.c * in_plane)
            && w.len() == out_channels * k,
        "conv2d backward: {} gradient, {} input and {} weight elements do not match {g:?} with {out_channels} outputs",
        gout.len(),
        x.len(),
        w.len()
    );
    let mut dx = want_x.then(|| HostBuffer::<T>::zeroed(g.n * g.c * in_plane));
    let mut dw = want_w.then(|| HostBuffer::<T>::zeroed(out_channels * k));
    if g.n * plane == 0 || k == 0 || out_channels == 0 || !(want_x || want_w) {
        return (dx, dw);
    }
    let plan = Plan {
        gout,
        x,
        w,
        g,
        out_channels,
        groups,
        oh,
        ow,
        cg,
        k,
        pointwise: kh == 1 && kw == 1 && g.stride == [1, 1] && g.padding == [0, 0],
    };
    let blocked = match schedule {
        Schedule::Auto => groups == 1 && plane < SMALL_PLANE && out_channels * k >= LARGE_WEIGHT,
        Schedule::ChannelBlocks => {
            assert_eq!(groups, 1, "channel blocks take one group");
            true
        }
        Schedule::Tiles => false,
    };
    if blocked {
        channel_blocked(&plan, dx.as_deref_mut(), dw.as_deref_mut());
        return (dx, dw);
    }
    let tile_cols = (TILE_ELEMS / k).max(MIN_COLS).min(MAX_TILE_ELEMS / k);
    let scratch = |cols_n: usize| Scratch {
        cols: HostBuffer::<T>::new_uninit(if want_w { k * cols_n } else { 0 }),
        dcols: HostBuffer::<T>::new_uninit(if want_x { k * cols_n } else { 0 }),
        gpack: HostBuffer::<T>::new_uninit(plan.og() * cols_n),
    };
    let threads = num_threads();
    let work = g.n * out_channels * k * plane;
    let tasks = if threads > 1 && work >= PARALLEL_THRESHOLD {
        threads.min(g.n)
    } else {
        1
    };
    if tasks <= 1 {
        let parallelism = if threads > 1 && work >= 48 * 48 * 48 {
            Parallelism::Threads(threads)
        } else {
            Parallelism::None
        };
        let all = tiles(0..g.n, [oh, ow], tile_cols);
        let widest = all.iter().map(|t| t.samples.len() * t.rows.len()).max();
        let mut s = scratch(widest.unwrap_or(0) * ow);
        for t in &all {
            let dxs = dx.as_deref_mut().map(|d| (d, 0));
            plan.tile(t, dxs, dw.as_deref_mut(), &mut s, parallelism);
        }
        return (dx, dw);
    }
    // One job per task: its samples' input gradient and its own weight-gradient partial
    // (task 0 writes the output's directly).
    let mut partials = HostBuffer::<T>::zeroed(if want_w {
        (tasks - 1) * out_channels * k
    } else {
        0
    });
    let bounds: Vec<usize> = (0..=tasks).map(|t| t * g.n / tasks).collect();
    let mut dx_parts: Vec<Option<&mut [T]>> = Vec::with_capacity(tasks);
    let mut rest = dx.as_deref_mut();
    for t in 0..tasks {
        let len = (bounds[t + 1] - bounds[t]) * g.c * in_plane;
        let (head, tail) = match rest.take() {
            Some(r) => {
                let (h, t) = r.split_at_mut(len);
                (Some(h), Some(t))
            }
            None => (None, None),
        };
        dx_parts.push(head);
        rest = tail;
    }
    let mut dw_parts: Vec<Option<&mut [T]>> = Vec::with_capacity(tasks);
    dw_parts.push(dw.as_deref_mut());
    let mut chunks = partials.chunks_mut((out_channels * k).max(1));
    for _ in 1..tasks {
        dw_parts.push(if want_w { chunks.next() } else { None });
    }
    let jobs: Vec<Mutex<Option<_>>> = dx_parts
        .into_iter()
        .zip(dw_parts)
        .map(|job| Mutex::new(Some(job)))
        .collect();
    run_tasks(tasks, |t| {
        let (dx_t, dw_t) = jobs[t]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("each task runs once");
        let mine = tiles(bounds[t]..bounds[t + 1], [oh, ow], tile_cols);
        let widest = mine.iter().map(|t| t.samples.len() * t.rows.len()).max();
        let mut s = scratch(widest.unwrap_or(0) * ow);
        let (mut dx_t, mut dw_t) = (dx_t, dw_t);
        for tile in &mine {
            let dxs = dx_t.as_deref_mut().map(|d| (d, bounds[t]));
            plan.tile(tile, dxs, dw_t.as_deref_mut(), &mut s, Parallelism::None);
        }
    });
    drop(jobs);
    if let Some(dw) = dw.as_deref_mut() {
        for part in partials.chunks_exact(out_channels * k) {
            for (d, &p) in dw.iter_mut().zip(part) {
                *d = *d + p;
            }
        }
    }
    (dx, dw)
}

/// A pointer shared by the tasks of [`channel_blocked`], each writing its own elements.
struct Shared<T>(*mut T);

// SAFETY: the tasks write disjoint elements through it (see `channel_blocked`), and `T`
// values may be sent between threads.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer `i` elements on (a method, so closures capture the whole `Shared`).
    ///
    /// # Safety
    /// As `pointer::add`.
    unsafe fn at(&self, i: usize) -> *mut T {
        // SAFETY: the caller's contract.
        unsafe { self.0.add(i) }
    }
}

/// Both gradients of a one-group convolution with small output planes, by blocks of
/// input channels instead of tiles of pixels: the output gradient is packed once as one
/// `[O, N·plane]` matrix, and each block gathers its channels' im2col columns for the
/// whole batch, writes its columns of the weight gradient with one GEMM (a contraction
/// over every sample's pixels, nothing accumulated across threads), and computes and
/// scatters its channels' input-gradient columns. Blocks run in parallel; each writes
/// only its own channels of `dx` and its own columns of `dw`. `dx` must be zeroed.
fn channel_blocked<T: Float>(plan: &Plan<'_, T>, dx: Option<&mut [T]>, dw: Option<&mut [T]>) {
    let g = plan.g;
    let (o, k, oh, ow) = (plan.out_channels, plan.k, plan.oh, plan.ow);
    let [kh, kw] = g.kernel;
    let taps = kh * kw;
    let (plane, in_plane) = (oh * ow, g.input[0] * g.input[1]);
    let nq = g.n * plane;
    let mut gp = HostBuffer::<T>::new_uninit(o * nq);
    for (oc, row) in gp.chunks_exact_mut(nq).enumerate() {
        for (n, dst) in row.chunks_exact_mut(plane).enumerate() {
            let src = &plan.gout[(n * o + oc) * plane..][..plane];
            for (d, &v) in dst.iter_mut().zip(src) {
                d.write(v);
            }
        }
    }
    // SAFETY: every element was written above.
    let gp = unsafe { gp.assume_init() };
    let threads = num_threads();
    let least = if threads > 1 { 2 * threads } else { 1 };
    let blocks = (k * nq).div_ceil(BLOCK_ELEMS).max(least).min(g.c);
    let cb = g.c.div_ceil(blocks);
    let (want_x, want_w) = (dx.is_some(), dw.is_some());
    let dx = Shared(dx.map_or(std::ptr::null_mut(), |d| d.as_mut_ptr()));
    let dw = Shared(dw.map_or(std::ptr::null_mut(), |d| d.as_mut_ptr()));
    run_tasks(g.c.div_ceil(cb), |b| {
        let (c0, c1) = (b * cb, ((b + 1) * cb).min(g.c));
        let (r0, rn) = (c0 * taps, (c1 - c0) * taps);
        if want_w {
            let mut cols = HostBuffer::<T>::new_uninit(rn * nq);
            for (r, row) in cols.chunks_exact_mut(nq).enumerate() {
                let (ci, tap) = (c0 + r / taps, r % taps);
                for (n, dst) in row.chunks_exact_mut(plane).enumerate() {
                    let c = n * g.c + ci;
                    gather_tap(
                        &plan.x[c * in_plane..(c + 1) * in_plane],
                        g,
                        [oh, ow],
                        0..oh,
                        (tap / kw, tap % kw),
                        dst,
                    );
                }
            }
            // SAFETY: dst: columns `r0..r0 + rn` of `dw` (`O x k` row-major, initialised),
            // written by this block only, every element (read_dst false). lhs: `gp`, `O x
            // nq` row-major. rhs: the columns transposed, element (q, r) at `r * nq + q`,
            // all gathered above.
            unsafe {
                crate::cpu::gemm(
                    o,
                    rn,
                    nq,
                    dw.at(r0),
                    1,
                    k as isize,
                    false,
                    gp.as_ptr(),
                    1,
                    nq as isize,
                    cols.as_ptr() as *const T,
                    nq as isize,
                    1,
                    T::ZERO,
                    T::ONE,
                    Parallelism::None,
                );
            }
        }
        if want_x {
            let mut dcols = HostBuffer::<T>::new_uninit(rn * nq);
            // SAFETY: dst: `dcols`, `rn x nq` row-major, every element written (read_dst
            // false). lhs: rows `r0..r0 + rn` of `wᵀ` (element (r, oc) at `oc * k + r0 +
            // r`). rhs: `gp`, `O x nq` row-major.
            unsafe {
                crate::cpu::gemm(
                    rn,
                    nq,
                    o,
                    dcols.as_mut_ptr() as *mut T,
                    1,
                    nq as isize,
                    false,
                    plan.w[r0..].as_ptr(),
                    k as isize,
                    1,
                    gp.as_ptr(),
                    1,
                    nq as isize,
                    T::ZERO,
                    T::ONE,
                    Parallelism::None,
                );
            }
            // SAFETY: the GEMM above wrote every element.
            let dcols = unsafe { dcols.assume_init() };
            for (r, row) in dcols.chunks_exact(nq).enumerate() {
                let (ci, tap) = (c0 + r / taps, r % taps);
                for (n, src) in row.chunks_exact(plane).enumerate() {
                    let c = n * g.c + ci;
                    // SAFETY: plane `c` of `dx` (`N x C` planes, zeroed by the caller)
                    // belongs to channel `ci` of this block, which no other block touches.
                    let img =
                        unsafe { std::slice::from_raw_parts_mut(dx.at(c * in_plane), in_plane) };
                    scatter_tap(src, g, [oh, ow], 0..oh, (tap / kw, tap % kw), img);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests;
