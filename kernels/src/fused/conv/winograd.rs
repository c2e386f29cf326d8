//! Winograd F(2×2, 3×3) for f32 3×3 convolutions with unit stride and dilation (Lavin
//! and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015): each 2×2 block
//! of output pixels is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` for the block's 4×4 input patch `d`,
//! so the multiply-adds become 16 matrix products (one per element `ξ` of the 4×4
//! transformed tile) of `[out, in]` by `[in, tiles]`: 16 multiply-adds per 4 output
//! pixels per channel pair instead of 36, 2.25 times fewer. ResNet's 3×3 layers at 14²
//! and 7² (and their input gradients, which are the same convolution of the output
//! gradient by the flipped, transposed filters) are where im2col GEMMs ran furthest
//! below the FMA peak.
//!
//! F(4×4, 3×3) runs the same steps on 6×6 patches: 36 products per 16 output pixels, 4
//! times fewer multiply-adds than the direct convolution. It is taken unless its tiles
//! overshoot the plane by much more than 2×2 ones do (ResNet's 28², 14² and 7² planes
//! take it; see [`forward_tile`]), for the forward and both gradients. Its transforms
//! scale by up to 8 and by sixths, so its f32 results are a few times less exact than
//! F(2×2)'s (the tests bound both against the direct convolution: 1e-4 against 2e-5,
//! relative, per square root of the reduction); cuDNN's and NNPACK's f32 Winograd kernels
//! make the same trade (NNPACK's F(6×6, 3×3), further still).
//!
//! Five steps, each parallel (F(2×2)'s counts; F(4×4)'s 36 for 16):
//! 1. the filters, `U[ξ][o][i] = Σ_k T[ξ][k] w[o][i][k]` with `T = G ⊗ G` (16 × 9): one
//!    GEMM of the weights as `[o·i, 9]` by `Tᵀ`;
//! 2. the input, zero-padded and channels last (`[n, hp, wp, c]`, 16 × 16 blocks of
//!    channels by pixels turned over in registers), so that a tile's patch is 16 runs of
//!    contiguous channels;
//! 3. `V[ξ][t][i]` for every tile `t` of every sample, the channels in vector lanes;
//! 4. `M[ξ] = U[ξ] · V[ξ]ᵀ`, 16 GEMMs of `[o, i]` by `[i, tiles]`;
//! 5. the output, `Y = Aᵀ M A` plus the bias, the channels in vector lanes, scattered
//!    into NCHW.
//!
//! F(2×2)'s transforms only add, subtract and halve (`G`'s halves, exact in binary); its
//! result differs from a direct convolution by a few roundings of the transformed
//! values, within f32 tolerance of it (the tests compare the two).

use super::Float;
use crate::cpu::simd::{SimdKernel, with_simd};
use crate::cpu::{
    Conv2dGeometry, HostBuffer, Parallelism, as_f32, as_f32_mut, for_each_chunk_mut, gemm,
    num_threads, run_tasks,
};
use crate::{DType, Element};
use std::mem::MaybeUninit;

mod grads;
mod transforms;

pub(crate) use grads::{conv2d_winograd_input_grad, conv2d_winograd_weight_grad};
#[cfg(test)]
use grads::{input_grad, weight_grad};
use transforms::*;

/// Fewest input and output channels served: the transforms cost `O(channels · tiles)`
/// against the products' `O(in · out · tiles)`, so narrow layers gain little.
const MIN_CHANNELS: usize = 128;

/// Fewest 2×2 output tiles in the batch: the filter transform costs `O(in · out)`
/// whatever the batch, and its 16 transformed filters (16 MiB for 512 × 512 channels)
/// are read again by the products, so they must serve enough tiles. On a 2-core
/// AVX-512 Xeon (ms, im2col + GEMM / Winograd): 512 channels at 7² 7.3–7.7 / 6.2–6.3
/// at batch 8 (128 tiles), 1.5 / 1.9 at batch 1 (16 tiles); 256 channels at 14² 7.3–7.5
/// / 4.9 at batch 8 (392 tiles), 1.0 / 1.2 at batch 1 (49 tiles). (At 28² and up the
/// `wide` direct kernel, taken first, ran as fast: 128 channels at batch 8 6.7–7.1 /
/// 7.1–7.3.)
const MIN_TILES: usize = 128;

/// Whether [`conv2d_winograd`] serves a convolution: f32, one group, a 3×3 kernel with
/// unit stride and dilation, at least [`MIN_CHANNELS`] input and output channels and
/// [`MIN_TILES`] output tiles.
pub(crate) fn applies<T: Element>(g: &Conv2dGeometry, out_channels: usize, groups: usize) -> bool {
    T::DTYPE == DType::F32
        && groups == 1
        && g.kernel == [3, 3]
        && g.stride == [1, 1]
        && g.dilation == [1, 1]
        && g.c >= MIN_CHANNELS
        && out_channels >= MIN_CHANNELS
        && tiles(g) >= MIN_TILES
}

/// The Winograd variant a convolution [`applies`] serves takes: F(4×4) unless its tiles
/// cover more than 4/3 of the pixels F(2×2)'s cover (then the extra products outweigh
/// its fewer per pixel: a 9² output is 12² of F(4×4) tiles against 10² of F(2×2)).
/// ResNet's 28², 14² and 7² planes take F(4×4): at 14² (16² covered against 14²), 256
/// channels at batch 8 on the Zen 5, alternated four times, the forward was level
/// (3.98–4.03 against 3.90–4.11 ms) and the backward 7.7–7.8 against 8.2–8.7 ms.
fn forward_tile(g: &Conv2dGeometry) -> Tile {
    match g.output() {
        Some([oh, ow]) => {
            let cover = |m: usize| oh.div_ceil(m) * m * ow.div_ceil(m) * m;
            if 3 * cover(4) <= 4 * cover(2) {
                Tile::F4
            } else {
                Tile::F2
            }
        }
        None => Tile::F2,
    }
}

/// Largest output side at which [`conv2d_winograd`]'s F(4×4) is taken before the `wide`
/// direct kernel (measured up to ResNet's 28² planes; larger planes stay direct).
const MAX_F4_BEFORE_WIDE: usize = 32;

/// Whether [`conv2d_winograd`] serves a convolution with F(4×4) at a plane small enough
/// to be taken before the `wide` direct kernel (and likewise its input gradient). At
/// 28², 128 channels, batch 8, on the Zen 5 (ms, wide / F(4×4), alternated three
/// times): forward 4.43–4.46 / 3.71–3.79, backward (then with the F(2×2) weight
/// gradient) 8.9–9.2 / 7.6–7.9.
pub(crate) fn before_wide<T: Element>(
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> bool {
    applies::<T>(g, out_channels, groups)
        && forward_tile(g) == Tile::F4
        && g.output()
            .is_some_and(|[oh, ow]| oh.max(ow) <= MAX_F4_BEFORE_WIDE)
}

/// The 2×2 output tiles of a convolution's batch (0 when the window does not fit).
fn tiles(g: &Conv2dGeometry) -> usize {
    g.output()
        .map_or(0, |[oh, ow]| g.n * oh.div_ceil(2) * ow.div_ceil(2))
}

/// Whether [`conv2d_winograd_input_grad`] serves a convolution's input gradient: as
/// [`applies`] (the gradient is the same kind of convolution), with padding at most 2.
pub(crate) fn input_grad_applies<T: Element>(
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> bool {
    applies::<T>(g, out_channels, groups) && g.padding[0] <= 2 && g.padding[1] <= 2
}

/// Fewest output tiles for the weight gradient: its filter-side steps (the 16 gradients
/// of the transformed filters, then their transform back, both `O(in · out)` and bound
/// by memory) weigh more against the products than the forward's. On a 2-core AVX-512
/// Xeon (ms, im2col + GEMM / Winograd): 256 channels at 14², batch 8 (392 tiles), 6.6 /
/// 4.8; 512 channels at 7², batch 8 (128 tiles), 6.3 / 6.2.
const MIN_WEIGHT_GRAD_TILES: usize = 256;

/// Whether [`conv2d_winograd_weight_grad`] serves a convolution's weight gradient: as
/// [`applies`], over at least [`MIN_WEIGHT_GRAD_TILES`] tiles.
pub(crate) fn weight_grad_applies<T: Element>(
    g: &Conv2dGeometry,
    out_channels: usize,
    groups: usize,
) -> bool {
    applies::<T>(g, out_channels, groups) && tiles(g) >= MIN_WEIGHT_GRAD_TILES
}

/// The output tile of a Winograd variant: F(2×2, 3×3) (4×4 input patches, 16
/// products per tile) or F(4×4, 3×3) (6×6 patches, 36 products for 16 output pixels:
/// 2.25 per pixel against F(2×2)'s 4 and a direct convolution's 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tile {
    /// F(2×2, 3×3).
    F2,
    /// F(4×4, 3×3).
    F4,
}

impl Tile {
    /// Output pixels along each side of a tile.
    const fn m(self) -> usize {
        match self {
            Tile::F2 => 2,
            Tile::F4 => 4,
        }
    }

    /// Input pixels along each side of a tile's patch (`m + 2`).
    const fn alpha(self) -> usize {
        self.m() + 2
    }

    /// Elements of a transformed tile (`alpha²`), one matrix product each.
    const fn xis(self) -> usize {
        self.alpha() * self.alpha()
    }
}

/// `G ⊗ G` as `[9, alpha²]`: entry `(a·3 + b, i·alpha + j)` is `G[i][a] · G[j][b]`, with
/// F(2×2)'s `G = [[1, 0, 0], [½, ½, ½], [½, -½, ½], [0, 0, 1]]` and F(4×4)'s
/// `G = [[¼, 0, 0], [-⅙, -⅙, -⅙], [-⅙, ⅙, -⅙], [1/24, 1/12, ⅙], [1/24, -1/12, ⅙],
/// [0, 0, 1]]` (Lavin and Gray's interpolation points 0, ±1, ±2 and ∞).
fn filter_matrix(tile: Tile) -> Vec<f32> {
    const G2: [[f64; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    const G4: [[f64; 3]; 6] = [
        [0.25, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];
    let g: &[[f64; 3]] = match tile {
        Tile::F2 => &G2,
        Tile::F4 => &G4,
    };
    let (alpha, xis) = (tile.alpha(), tile.xis());
    let mut t = vec![0.0; 9 * xis];
    for i in 0..alpha {
        for j in 0..alpha {
            for a in 0..3 {
                for b in 0..3 {
                    t[(a * 3 + b) * xis + i * alpha + j] = (g[i][a] * g[j][b]) as f32;
                }
            }
        }
    }
    t
}

/// A pointer the tasks of one step share; each writes only its own elements.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: every task writes a disjoint set of elements (see each use), and nothing
// reads them until `run_tasks` returns.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

impl Shared {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// The convolution of `x` `[n, c, h, w]` by `w` `[out_channels, c, 3, 3]` (unit stride
/// and dilation, any padding) plus `bias`, by Winograd F(2×2, 3×3): the contiguous
/// output `[n, out_channels, oh, ow]`. [`applies`] says when the convolution dispatch
/// takes this path; any f32 shape is computed correctly.
///
/// # Panics
/// When `T` is not f32, the geometry is not a unit-stride, undilated 3×3 one, or the
/// slices do not match it.
pub(crate) fn conv2d_winograd<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    winograd(x, w, bias, g, out_channels, false, forward_tile(g))
}

/// [`conv2d_winograd`], with `w` as given (`[out_channels, c, 3, 3]`), or, when
/// `flipped_transposed`, the filters of the convolution whose input gradient this is
/// (`[c, out_channels, 3, 3]`, applied flipped in space with the channels swapped: the
/// flip is folded into the filter transform's matrix, the swap into the products'
/// strides, so no flipped copy is made).
fn winograd<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
    flipped_transposed: bool,
    tile: Tile,
) -> HostBuffer<T> {
    assert!(
        g.kernel == [3, 3] && g.stride == [1, 1] && g.dilation == [1, 1],
        "conv2d_winograd: a 3x3 kernel with unit stride and dilation, got {g:?}"
    );
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let (ic, oc) = (g.c, out_channels);
    let (m, xis) = (tile.m(), tile.xis());
    let (th, tw) = (oh.div_ceil(m), ow.div_ceil(m));
    let [h, wd] = g.input;
    let (Some(x), Some(w)) = (as_f32(x), as_f32(w)) else {
        panic!("conv2d_winograd: f32 only");
    };
    let bias = bias.map(|b| as_f32(b).expect("the bias has the input's dtype"));
    assert!(
        x.len() == g.n * ic * h * wd
            && w.len() == oc * ic * 9
            && bias.is_none_or(|b| b.len() == oc),
        "conv2d_winograd: slices do not match {g:?} with {oc} outputs"
    );
    let mut out = HostBuffer::<T>::zeroed(g.n * oc * oh * ow);
    if out.is_empty() || ic == 0 {
        if let Some(b) = bias {
            let out = as_f32_mut(&mut out).expect("f32");
            for (i, plane) in out.chunks_mut((oh * ow).max(1)).enumerate() {
                plane.fill(b[i % oc]);
            }
        }
        return out;
    }
    let threads = Parallelism::Threads(num_threads());
    // Tiles in the batch.
    let n = g.n * th * tw;

    // 1. U[ξ][o][i] = Σ_k T[ξ][k] w[o][i][k]: w as [o·i, 9] times T's transpose [9, xis],
    // written column-major (ξ the slow index). Flipped, tap k is tap 8 - k.
    let mut t = filter_matrix(tile);
    if flipped_transposed {
        for k in 0..4 {
            for xi in 0..xis {
                t.swap(k * xis + xi, (8 - k) * xis + xi);
            }
        }
    }
    // Filter (o, i) of this convolution: `U[ξ]` at `o * lhs_rs + i * lhs_cs`.
    let (lhs_rs, lhs_cs) = if flipped_transposed { (1, oc) } else { (ic, 1) };
    let mut u = HostBuffer::<f32>::new_uninit(xis * oc * ic);
    // SAFETY: the destination has `xis` columns of `oc * ic` elements (column stride
    // `oc * ic`, unit row stride), every one written (`read_dst` false); `w` holds
    // `oc * ic` rows of 9 (checked above) and `t` 9 rows of `xis`; nothing overlaps.
    unsafe {
        gemm(
            oc * ic,
            xis,
            9,
            u.as_mut_ptr().cast::<f32>(),
            (oc * ic) as isize,
            1,
            false,
            w.as_ptr(),
            1,
            9,
            t.as_ptr(),
            1,
            xis as isize,
            1.0,
            1.0,
            threads,
        );
    }
    // SAFETY: the GEMM wrote all `xis * oc * ic` elements.
    let u = unsafe { u.assume_init() };

    // 2, 3. V[ξ][t][i].
    let v = transform_input(x, g, th, tw, tile);

    // 4. M[ξ] = U[ξ] V[ξ]ᵀ: [oc, ic] by [ic, n], stored tile-major (`[n, oc]`).
    let mut mm = HostBuffer::<f32>::new_uninit(xis * oc * n);
    for xi in 0..xis {
        // SAFETY: destination `(o, t)` at `t * oc + o` inside `mm` (block ξ), every element
        // written (`read_dst` false); `U[ξ]` `(o, i)` at `o * ic + i` and `V[ξ]` `(i, t)` at
        // `t * ic + i` inside `u` and `v`; nothing overlaps.
        unsafe {
            gemm(
                oc,
                n,
                ic,
                mm.as_mut_ptr().cast::<f32>().add(xi * oc * n),
                oc as isize,
                1,
                false,
                u.as_ptr().add(xi * oc * ic),
                lhs_cs as isize,
                lhs_rs as isize,
                v.as_ptr().add(xi * ic * n),
                ic as isize,
                1,
                1.0,
                1.0,
                threads,
            );
        }
    }
    // SAFETY: the `xis` GEMMs wrote every element.
    let mm = unsafe { mm.assume_init() };
    drop(v);

    // 5. Y = Aᵀ M A + bias, a chunk of tiles per task, scattered into NCHW.
    let out_f = as_f32_mut(&mut out).expect("f32");
    let op = Shared(out_f.as_mut_ptr());
    let zeros;
    let bias = match bias {
        Some(b) => b,
        None => {
            zeros = vec![0.0f32; oc];
            &zeros
        }
    };
    for_tile_chunks(n, |chunk| {
        let mut y = vec![0.0f32; m * m * oc];
        for t in chunk {
            let [s, ty, tx] = tile_at(t, [th, tw]);
            let rows: [&[f32]; 36] = std::array::from_fn(|xi| {
                if xi < xis {
                    &mm[(xi * n + t) * oc..][..oc]
                } else {
                    &[]
                }
            });
            match tile {
                Tile::F2 => with_simd(SeparableOut::<OutputLine2, 4, 2>::new(
                    &rows[..16],
                    bias,
                    &mut y,
                )),
                Tile::F4 => with_simd(SeparableOut::<OutputLine4, 6, 4>::new(&rows, bias, &mut y)),
            }
            let (rows_in, cols_in) = ((oh - m * ty).min(m), (ow - m * tx).min(m));
            // F(4×4)'s 16 pixels by 16 channels at a time turned over, each channel's
            // rows then written as runs; the other channels one value at a time.
            let mut done = 0;
            if tile == Tile::F4 {
                let mut turned = [0.0f32; 256];
                while done + 16 <= oc {
                    // SAFETY: reads `y[p * oc + done + j]` for pixels p < 16 (y holds 16
                    // pixels of `oc`) and writes `turned[j * 16 + p]`, for j < 16.
                    unsafe { transpose16(y.as_ptr().add(done), oc, turned.as_mut_ptr(), 16) };
                    for (j, px) in turned.chunks_exact(16).enumerate() {
                        let base = ((s * oc + done + j) * oh + m * ty) * ow + m * tx;
                        for dy in 0..rows_in {
                            let run = &px[dy * 4..dy * 4 + 4];
                            // SAFETY: row m ty + dy (< oh), columns m tx.. m tx + cols_in
                            // (<= ow) of channel done + j of sample s: inside `out`, and
                            // written by this tile alone.
                            unsafe {
                                let at = op.get().add(base + dy * ow);
                                if cols_in == 4 {
                                    at.cast::<[f32; 4]>()
                                        .write_unaligned([run[0], run[1], run[2], run[3]]);
                                } else {
                                    for (dx, &v) in run[..cols_in].iter().enumerate() {
                                        *at.add(dx) = v;
                                    }
                                }
                            }
                        }
                    }
                    done += 16;
                }
            }
            for o in done..oc {
                let base = ((s * oc + o) * oh + m * ty) * ow + m * tx;
                for dy in 0..rows_in {
                    for dx in 0..cols_in {
                        // SAFETY: pixel (m ty + dy, m tx + dx) of sample s, channel o:
                        // inside `out` (both within the plane), and written by this tile
                        // alone (each pixel belongs to one tile).
                        unsafe { *op.get().add(base + dy * ow + dx) = y[(dy * m + dx) * oc + o] };
                    }
                }
            }
        }
    });
    out
}

/// Runs `f` on chunks of `0..tiles` in parallel, four chunks per thread.
fn for_tile_chunks(tiles: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    let chunk = tiles.div_ceil(4 * num_threads()).max(1);
    run_tasks(tiles.div_ceil(chunk), |task| {
        f(task * chunk..((task + 1) * chunk).min(tiles))
    });
}

/// Tile `t`'s sample, tile row and tile column (`th × tw` tiles per sample).
fn tile_at(t: usize, [th, tw]: [usize; 2]) -> [usize; 3] {
    let r = t % (th * tw);
    [t / (th * tw), r / tw, r % tw]
}

/// Steps 2 and 3: `V[ξ][t][i] = (Bᵀ d B)[ξ]` for the `alpha × alpha` input patch `d` of
/// every `m × m` output tile `t` (`th × tw` per sample, sample-major) and channel `i` of
/// `x` `[n, c, h, w]` under `g`'s padding.
fn transform_input(
    x: &[f32],
    g: &Conv2dGeometry,
    th: usize,
    tw: usize,
    tile: Tile,
) -> HostBuffer<f32> {
    let ic = g.c;
    let (m, alpha) = (tile.m(), tile.alpha());
    // 2. The input, zero-padded and channels last: `[n, hp, wp, ic]`, where tile (ty,
    // tx)'s patch is rows m ty..m ty + alpha and columns m tx..m tx + alpha.
    let (hp, wp) = (m * th + 2, m * tw + 2);
    let xp = channels_last(x, g.n, ic, g.input, [hp, wp], g.padding);
    // 3. V[ξ][t][i] (channels contiguous).
    per_tile(g.n, [th, tw], ic, tile.xis(), |s, ty, tx, out| {
        let row = |i: usize| &xp[((s * hp + m * ty + i) * wp + m * tx) * ic..][..alpha * ic];
        match tile {
            Tile::F2 => with_simd(Separable::<InputLine2, 4, 4>::new(
                std::array::from_fn(row),
                out,
                ic,
            )),
            Tile::F4 => with_simd(Separable::<InputLine4, 6, 6>::new(
                std::array::from_fn(row),
                out,
                ic,
            )),
        }
    })
}

/// `src` `[n, c, h, w]` zero-padded to `[n, hp, wp, c]` (channels last), input pixel
/// `(y, x)` at `(y + pad[0], x + pad[1])`.
fn channels_last(
    src: &[f32],
    n: usize,
    c: usize,
    [h, w]: [usize; 2],
    [hp, wp]: [usize; 2],
    [ph, pw]: [usize; 2],
) -> HostBuffer<f32> {
    let mut dst = HostBuffer::<f32>::new_uninit(n * hp * wp * c);
    let zero = |px: &mut [MaybeUninit<f32>]| {
        px.iter_mut().for_each(|v| {
            v.write(0.0);
        })
    };
    assert!(
        hp >= ph + h && wp >= pw + w,
        "channels_last: [{hp}, {wp}] does not hold [{h}, {w}] padded by [{ph}, {pw}]"
    );
    let plane = h * w;
    // The padding: whole rows above and below the input, pixels left and right of it.
    let (left, right) = (pw.min(wp), (pw + w).min(wp));
    for_each_chunk_mut(&mut dst, wp * c, |row, out| {
        let yp = row % hp;
        if yp < ph || yp >= ph + h {
            return zero(out);
        }
        zero(&mut out[..left * c]);
        zero(&mut out[right * c..]);
    });
    // The input pixels, a run of a sample's plane per task: blocks of 16 consecutive
    // pixels by 16 channels turned over in registers into a scratch, then each pixel's 16
    // channels written as one run at its padded place (so planes narrower than 16 are
    // served too); pixels and channels left over one value at a time.
    let cols = right - left;
    if cols > 0 && h > 0 && c > 0 {
        let run = 256;
        let runs = plane.div_ceil(run);
        let dp = Shared(dst.as_mut_ptr().cast::<f32>());
        let at = move |s: usize, q: usize| {
            let (y, x) = (q / w, q % w);
            ((s * hp + y + ph) * wp + x + pw) * c
        };
        run_tasks(n * runs, |task| {
            let (s, first) = (task / runs, (task % runs) * run);
            let last = (first + run).min(plane);
            let src = &src[s * c * plane..][..c * plane];
            let mut turned = [0.0f32; 256];
            let mut cb = 0;
            while cb + 16 <= c {
                let mut q = first;
                while q + 16 <= last {
                    // SAFETY: reads `src[(cb + i) * plane + q + j]` (channel cb + i < c,
                    // pixel q + j < plane) and writes `turned[j * 16 + i]`, for i, j < 16.
                    unsafe {
                        transpose16(
                            src.as_ptr().add(cb * plane + q),
                            plane,
                            turned.as_mut_ptr(),
                            16,
                        )
                    };
                    for (j, px) in turned.chunks_exact(16).enumerate() {
                        // SAFETY: pixel q + j's channels cb..cb + 16 at their padded
                        // place: inside `dst`, written by this task alone (its pixels).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                px.as_ptr(),
                                dp.get().add(at(s, q + j) + cb),
                                16,
                            )
                        };
                    }
                    q += 16;
                }
                for q in q..last {
                    for k in 0..16 {
                        // SAFETY: as above, one value.
                        unsafe { *dp.get().add(at(s, q) + cb + k) = src[(cb + k) * plane + q] };
                    }
                }
                cb += 16;
            }
            for ch in cb..c {
                for q in first..last {
                    // SAFETY: as above, one value.
                    unsafe { *dp.get().add(at(s, q) + ch) = src[ch * plane + q] };
                }
            }
        });
    }
    // SAFETY: every padding element was zeroed and every input pixel copied above; a
    // padded row is all padding or `left` padding pixels, `cols` input pixels (those
    // `left..right`) and the rest padding.
    unsafe { dst.assume_init() }
}

/// `dst[j · ds + i] = src[i · ss + j]` for `i, j < 16`: a 16 × 16 block turned over
/// (in registers on AVX-512: four rounds of shuffles, 64 for 256 floats).
///
/// # Safety
/// `src` is readable at `i · ss + j` and `dst` writable at `j · ds + i` for all
/// `i, j < 16`, and the two do not overlap.
#[inline(always)]
pub(super) unsafe fn transpose16(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
    #[cfg(target_arch = "x86_64")]
    if super::lanes::level() == Some(super::lanes::Level::Avx512) {
        // SAFETY: AVX-512F is present (checked above); the caller's bounds.
        return unsafe { transpose16_avx512(src, ss, dst, ds) };
    }
    for i in 0..16 {
        for j in 0..16 {
            // SAFETY: the caller's bounds.
            unsafe { *dst.add(j * ds + i) = *src.add(i * ss + j) };
        }
    }
}

/// [`transpose16`] with AVX-512F: 32-bit then 64-bit interleaves within 128-bit lanes
/// (register `4k + j`'s lane `l` then holds column `4l + j` of rows `4k..4k + 4`), then
/// two rounds of lane shuffles gather each column's four lanes.
///
/// # Safety
/// As [`transpose16`], and the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16_avx512(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
    use std::arch::x86_64::*;
    const EVEN: i32 = 0b10_00_10_00;
    const ODD: i32 = 0b11_01_11_01;
    let mut r = [_mm512_setzero_ps(); 16];
    for (i, ri) in r.iter_mut().enumerate() {
        // SAFETY: row i's 16 floats are readable (the caller's bounds).
        *ri = unsafe { _mm512_loadu_ps(src.add(i * ss)) };
    }
    let mut t = [_mm512_setzero_ps(); 16];
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    for k in 0..4 {
        let (a, b, c, d) = (
            _mm512_castps_pd(t[4 * k]),
            _mm512_castps_pd(t[4 * k + 1]),
            _mm512_castps_pd(t[4 * k + 2]),
            _mm512_castps_pd(t[4 * k + 3]),
        );
        u[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for j in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<EVEN>(u[j], u[4 + j]);
        let v1 = _mm512_shuffle_f32x4::<ODD>(u[j], u[4 + j]);
        let w0 = _mm512_shuffle_f32x4::<EVEN>(u[8 + j], u[12 + j]);
        let w1 = _mm512_shuffle_f32x4::<ODD>(u[8 + j], u[12 + j]);
        // SAFETY: columns j, 4 + j, 8 + j and 12 + j's 16 floats are writable (the
        // caller's bounds).
        unsafe {
            _mm512_storeu_ps(dst.add(j * ds), _mm512_shuffle_f32x4::<EVEN>(v0, w0));
            _mm512_storeu_ps(dst.add((4 + j) * ds), _mm512_shuffle_f32x4::<EVEN>(v1, w1));
            _mm512_storeu_ps(dst.add((8 + j) * ds), _mm512_shuffle_f32x4::<ODD>(v0, w0));
            _mm512_storeu_ps(dst.add((12 + j) * ds), _mm512_shuffle_f32x4::<ODD>(v1, w1));
        }
    }
}

/// `[xis, n·th·tw, width]`: for every tile (sample `s`, tile row `ty`, column `tx`),
/// `fill` writes its `xis` rows of `width` (one per ξ), a chunk of tiles per task.
fn per_tile(
    samples: usize,
    [th, tw]: [usize; 2],
    width: usize,
    xis: usize,
    fill: impl Fn(usize, usize, usize, &mut [&mut [f32]]) + Sync,
) -> HostBuffer<f32> {
    let n = samples * th * tw;
    let mut buf = HostBuffer::<f32>::new_uninit(xis * n * width);
    let bp = Shared(buf.as_mut_ptr().cast::<f32>());
    for_tile_chunks(n, |chunk| {
        for t in chunk {
            let [s, ty, tx] = tile_at(t, [th, tw]);
            // SAFETY: tile t's `xis` rows of `width` elements (one per ξ, `(ξ * n + t) *
            // width` on) are inside the buffer and written by this task alone.
            let mut out: [&mut [f32]; 36] = std::array::from_fn(|xi| {
                if xi < xis {
                    unsafe {
                        std::slice::from_raw_parts_mut(bp.get().add((xi * n + t) * width), width)
                    }
                } else {
                    &mut []
                }
            });
            fill(s, ty, tx, &mut out[..xis]);
        }
    });
    // SAFETY: `fill` wrote every tile's `xis` rows.
    unsafe { buf.assume_init() }
}

/// Runs `step(start, width)` over `0..len` in steps of [`L`] lanes, the last one short.
#[inline(always)]
fn by_lanes(len: usize, mut step: impl FnMut(usize, usize)) {
    let mut at = 0;
    while at + L <= len {
        step(at, L);
        at += L;
    }
    if at < len {
        step(at, len - at);
    }
}

#[cfg(test)]
mod tests;
