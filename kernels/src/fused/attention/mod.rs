//! Fused scaled-dot-product attention on the CPU: the forward tiles the queries (a tile
//! of scores `[TILE, Tk]` per task, never the whole `[Tq, Tk]` matrix), fuses scaling,
//! masking (causal, boolean or additive, read through broadcasting strides, so a key
//! padding mask is never expanded) and the softmax, and keeps only each row's
//! log-sum-exp; the backward recomputes the probabilities from it. Dropout on the
//! probabilities draws from a Philox stream keyed by (seed, row, column), so the backward
//! (and the CUDA kernel) regenerate the same mask. `attention.cu` beside it is the CUDA
//! forward.
//!
//! Rows whose every key is masked give zero output and zero gradient (PyTorch's
//! behaviour).

use crate::Layout;
use crate::cpu::HostBuffer;
use crate::cpu::simd::{FmaKernel, with_simd};
use crate::cpu::{
    PackedRhs, Parallelism, as_f32, as_f32_mut, gemm_into, num_threads, philox4x32_10, run_tasks,
    small_product,
};
use crate::cuda::KernelModule;
use num_traits::Float;
use std::sync::Mutex;

mod backward;

pub use backward::attention_backward;
use backward::{pack_f32, tile_product};

/// A tile of score rows (`lse.len()` rows of `width`) turned into unnormalised
/// probabilities in place, `e^(scale * (s - max))` (`scale` positive, so the scaled row's
/// max is `scale * max`); each row's log-sum-exp of the scaled scores goes to `lse` and
/// the reciprocal of its sum to `inv` (`-inf` and 0, and a zero row, when every score is
/// `-inf`). The caller scales the tile's output rows by `inv` instead of the rows of
/// probabilities (`dv` multiplies a row instead of `width`). By phases over the whole
/// tile (every row's max, then every row's exponentials and sum, then the logarithms and
/// reciprocals), so consecutive rows' dependency chains (a max or sum folded across
/// lanes, a division, a logarithm) are independent work for the core to overlap; the
/// exponentials are vectorised ([`crate::Real::exp_nonpos_normal`]: a probability below
/// the smallest normal f32 is 0) and summed in the same pass.
struct SoftmaxTile<'a, T> {
    s: &'a mut [T],
    width: usize,
    scale: T,
    /// A boolean mask (true takes part) applied in the max pass: row `r`'s is
    /// `keep[r * keep_stride..][..width]` (a stride of 0 broadcasts one row).
    keep: Option<(&'a [bool], usize)>,
    lse: &'a mut [T],
    inv: &'a mut [T],
}

/// `f` folded over 16 lanes as a tree (vector shuffles, not a serial chain).
#[inline(always)]
fn fold16<T: Copy>(mut v: [T; 16], f: impl Fn(T, T) -> T) -> T {
    let mut w = 8;
    while w > 0 {
        for i in 0..w {
            v[i] = f(v[i], v[i + w]);
        }
        w /= 2;
    }
    v[0]
}

impl<T: AttnFloat> FmaKernel for SoftmaxTile<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        const L: usize = 16;
        let (width, scale) = (self.width, self.scale);
        let neg_inf = T::neg_infinity();
        let max_of = |m: T, v: T| if v > m { v } else { m };
        let rows = self
            .s
            .chunks_exact_mut(width.max(1))
            .zip(self.lse.iter_mut());
        // Each row's max (masked scores set to -inf), kept in `lse` for now.
        for (r, (row, max_out)) in rows.enumerate() {
            let mut lanes = [neg_inf; L];
            let mut max = neg_inf;
            match self.keep {
                Some((keep, stride)) => {
                    let keep = &keep[r * stride..][..width];
                    let mut chunks = row.chunks_exact_mut(L);
                    let mut keeps = keep.chunks_exact(L);
                    for (c, k) in (&mut chunks).zip(&mut keeps) {
                        for l in 0..L {
                            let v = if k[l] { c[l] } else { neg_inf };
                            c[l] = v;
                            lanes[l] = max_of(lanes[l], v);
                        }
                    }
                    for (v, &k) in chunks.into_remainder().iter_mut().zip(keeps.remainder()) {
                        if !k {
                            *v = neg_inf;
                        }
                        max = max_of(max, *v);
                    }
                }
                None => {
                    let chunks = row.chunks_exact(L);
                    max = chunks.remainder().iter().copied().fold(max, max_of);
                    for c in chunks {
                        for l in 0..L {
                            lanes[l] = max_of(lanes[l], c[l]);
                        }
                    }
                }
            }
            *max_out = max_of(max, fold16(lanes, max_of));
        }
        // The exponentials and each row's sum, kept in `inv` for now.
        let rows = self.s.chunks_exact_mut(width.max(1)).zip(self.lse.iter());
        for ((row, &max), sum_out) in rows.zip(self.inv.iter_mut()) {
            if max == neg_inf {
                row.iter_mut().for_each(|v| *v = T::ZERO);
                *sum_out = T::ZERO;
                continue;
            }
            let mut sums = [T::ZERO; L];
            let mut chunks = row.chunks_exact_mut(L);
            for c in &mut chunks {
                for l in 0..L {
                    let e = ((c[l] - max) * scale).exp_nonpos_normal::<FMA>();
                    c[l] = e;
                    sums[l] = sums[l] + e;
                }
            }
            let mut sum = T::ZERO;
            for v in chunks.into_remainder() {
                *v = ((*v - max) * scale).exp_nonpos_normal::<FMA>();
                sum = sum + *v;
            }
            *sum_out = sum + fold16(sums, |a, b| a + b);
        }
        for (lse, inv) in self.lse.iter_mut().zip(self.inv.iter_mut()) {
            if *lse != neg_inf {
                let sum = *inv;
                *lse = *lse * scale + sum.ln();
                *inv = T::ONE / sum;
            }
        }
    }
}

/// The CUDA kernels of attention (`attention.cu`), compiled by NVRTC.
pub const CUDA_MODULE: KernelModule = KernelModule::new("attention", include_str!("attention.cu"));

/// Query rows per task.
const TILE: usize = 64;

/// Sizes: `bh` independent (batch × head) problems of `tq` queries and `tk` keys, query
/// and key width `d`, value width `dv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Batch × heads.
    pub bh: usize,
    /// Queries per problem.
    pub tq: usize,
    /// Keys (and values) per problem.
    pub tk: usize,
    /// Query/key width.
    pub d: usize,
    /// Value width.
    pub dv: usize,
}

/// A mask read through broadcasting strides: problem `b`'s element (q, k) is
/// `data[batch_offsets[b] + q * strides[0] + k * strides[1]]` (stride 0 broadcasts, so a
/// key-padding mask `[B, 1, 1, Tk]` is never expanded).
#[derive(Clone, Copy, Debug)]
pub struct MaskView<'a, M> {
    /// The mask's storage.
    pub data: &'a [M],
    /// Where each problem's `[tq, tk]` mask starts.
    pub batch_offsets: &'a [usize],
    /// Strides over (query, key).
    pub strides: [usize; 2],
}

impl<M: Copy> MaskView<'_, M> {
    #[inline(always)]
    fn at(&self, b: usize, q: usize, k: usize) -> M {
        self.data[self.batch_offsets[b] + q * self.strides[0] + k * self.strides[1]]
    }
}

/// Which scores take part.
#[derive(Clone, Copy, Debug)]
pub enum Mask<'a, T> {
    /// Every key.
    None,
    /// Key `j` for query `i` when `j <= i` (top-left aligned, PyTorch's `is_causal`).
    Causal,
    /// Key `j` when the mask is true (PyTorch's boolean `attn_mask`).
    Bool(MaskView<'a, bool>),
    /// Every key, the mask added to the scaled score (`-inf` excludes).
    Float(MaskView<'a, T>),
}

/// Attention dropout: probability `p` and the Philox seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnDropout {
    /// Drop probability.
    pub p: f64,
    /// Seed of the stream.
    pub seed: u64,
}

impl AttnDropout {
    /// Whether the probability at (problem `b`, query `i`, key `j`) is kept: the top 24
    /// bits of word `j % 4` of `philox4x32_10([j / 4, i, b, 0], seed)` as a fraction of
    /// 2^24 are at least `p` (the CUDA kernel's rule).
    ///
    /// ```
    /// use ferrograd_kernels::fused::attention::AttnDropout;
    /// let d = AttnDropout { p: 0.5, seed: 3 };
    /// let kept = (0..1000).filter(|&j| d.keep(0, 0, j)).count();
    /// assert!((430..570).contains(&kept));
    /// ```
    pub fn keep(&self, b: usize, i: usize, j: usize) -> bool {
        let bits = self.block(b, i, j / 4);
        self.kept(bits[j % 4])
    }

    /// The Philox block of keys `4 * block .. 4 * block + 4` of row `i` of problem `b`.
    #[inline(always)]
    fn block(&self, b: usize, i: usize, block: usize) -> [u32; 4] {
        philox4x32_10(
            [block as u32, i as u32, b as u32, 0],
            [self.seed as u32, (self.seed >> 32) as u32],
        )
    }

    #[inline(always)]
    fn kept(&self, word: u32) -> bool {
        (word >> 8) as f64 * (1.0 / 16_777_216.0) >= self.p
    }

    /// Multiplies row `i` of problem `b` (keys from 0) in place by `1 / (1 - p)` where
    /// kept and 0 where dropped, drawing each Philox block once for its four keys.
    ///
    /// ```
    /// use ferrograd_kernels::fused::attention::AttnDropout;
    /// let d = AttnDropout { p: 0.5, seed: 3 };
    /// let mut row = vec![1.0f64; 10];
    /// d.apply_row(0, 2, &mut row);
    /// assert!((0..10).all(|j| row[j] == if d.keep(0, 2, j) { 2.0 } else { 0.0 }));
    /// ```
    pub fn apply_row<T: AttnFloat>(&self, b: usize, i: usize, row: &mut [T]) {
        let ks = T::from_f64(1.0 / (1.0 - self.p));
        for (blk, quad) in row.chunks_mut(4).enumerate() {
            let bits = self.block(b, i, blk);
            for (x, word) in quad.iter_mut().zip(bits) {
                *x = if self.kept(word) { *x * ks } else { T::ZERO };
            }
        }
    }
}

/// The float types the fused attention runs in (the runtime widens half inputs to f32).
pub trait AttnFloat: crate::NumElement + Float + crate::Real + Send + Sync + 'static {}
impl AttnFloat for f32 {}
impl AttnFloat for f64 {}

/// Runs `f` on every piece, in parallel across the pool.
fn par_pieces<P: Send>(pieces: Vec<P>, f: impl Fn(P) + Sync) {
    if pieces.len() <= 1 || num_threads() <= 1 {
        pieces.into_iter().for_each(f);
        return;
    }
    let slots: Vec<Mutex<Option<P>>> = pieces.into_iter().map(|p| Mutex::new(Some(p))).collect();
    run_tasks(slots.len(), |i| {
        let piece = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(piece) = piece {
            f(piece);
        }
    });
}

/// The keys a query row `i` can see under `mask` at most (causal: `i + 1`).
#[inline(always)]
fn visible(mask: &Mask<'_, impl Copy>, i: usize, tk: usize) -> usize {
    match mask {
        Mask::Causal => (i + 1).min(tk),
        _ => tk,
    }
}

/// Scales the scores `s` (`rows` × `width`, row stride `tk_eff`) of problem `b` from
/// query `q0`, masks them in place (`-inf` for excluded keys).
#[allow(clippy::too_many_arguments)]
fn scale_and_mask<T: AttnFloat>(
    s: &mut [T],
    rows: usize,
    width: usize,
    b: usize,
    q0: usize,
    scale: T,
    mask: &Mask<'_, T>,
) {
    let neg_inf = T::neg_infinity();
    for r in 0..rows {
        let i = q0 + r;
        let row = &mut s[r * width..(r + 1) * width];
        match mask {
            Mask::None => row.iter_mut().for_each(|v| *v = *v * scale),
            Mask::Causal => {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = if j <= i { *v * scale } else { neg_inf };
                }
            }
            Mask::Bool(m) => {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = if m.at(b, i, j) { *v * scale } else { neg_inf };
                }
            }
            Mask::Float(m) => {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = *v * scale + m.at(b, i, j);
                }
            }
        }
    }
}

/// The forward's masking of the unscaled scores `s` (as [`scale_and_mask`]), leaving a
/// positive `scale` to the softmax ([`SoftmaxTile`] folds it into the exponent: one pass
/// fewer over the scores) and a boolean mask contiguous along the keys to its max pass.
/// Returns the scale left to apply (1 when applied here: an additive mask, or a scale
/// that is not positive) and the boolean mask left.
#[allow(clippy::too_many_arguments)]
fn mask_for_softmax<'m, T: AttnFloat>(
    s: &mut [T],
    rows: usize,
    width: usize,
    b: usize,
    q0: usize,
    scale: T,
    mask: &Mask<'m, T>,
) -> (T, Option<MaskView<'m, bool>>) {
    if scale.partial_cmp(&T::ZERO) != Some(std::cmp::Ordering::Greater)
        || matches!(mask, Mask::Float(_))
    {
        scale_and_mask(s, rows, width, b, q0, scale, mask);
        return (T::ONE, None);
    }
    match mask {
        Mask::Causal => {
            let neg_inf = T::neg_infinity();
            for (r, row) in s.chunks_exact_mut(width.max(1)).take(rows).enumerate() {
                row.iter_mut().skip(q0 + r + 1).for_each(|v| *v = neg_inf);
            }
        }
        Mask::Bool(m) if m.strides[1] == 1 => return (scale, Some(*m)),
        Mask::Bool(_) => {
            scale_and_mask(s, rows, width, b, q0, T::ONE, mask);
        }
        Mask::None | Mask::Float(_) => {}
    }
    (scale, None)
}

/// The forward of attention over contiguous `q: [bh, tq, d]`, `k: [bh, tk, d]`,
/// `v: [bh, tk, dv]`: returns the output `[bh, tq, dv]` and each row's log-sum-exp of the
/// (scaled, masked) scores `[bh, tq]` (`-inf` for a row with no visible key).
///
/// ```
/// use ferrograd_kernels::fused::attention::{attention_forward, AttentionShape, Mask};
/// let shape = AttentionShape { bh: 1, tq: 1, tk: 2, d: 1, dv: 1 };
/// // Equal scores: the output is the mean of the values.
/// let (out, lse) = attention_forward(&[1.0f64], &[1.0, 1.0], &[2.0, 4.0], shape, &Mask::None, 1.0, None);
/// assert!((out[0] - 3.0).abs() < 1e-12 && (lse[0] - (1.0 + 2f64.ln())).abs() < 1e-12);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn attention_forward<T: AttnFloat>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: AttentionShape,
    mask: &Mask<'_, T>,
    scale: T,
    dropout: Option<AttnDropout>,
) -> (HostBuffer<T>, HostBuffer<T>) {
    let AttentionShape { bh, tq, tk, d, dv } = shape;
    assert!(
        q.len() == bh * tq * d && k.len() == bh * tk * d && v.len() == bh * tk * dv,
        "attention_forward: operand lengths do not match {shape:?}"
    );
    let offsets = |per: usize| (0..bh).map(|b| b * per).collect::<Vec<_>>();
    let (qo, ko, vo) = (offsets(tq * d), offsets(tk * d), offsets(tk * dv));
    attention_forward_strided(
        Operand::new(q, &qo, d, 1),
        Operand::new(k, &ko, d, 1),
        Operand::new(v, &vo, dv, 1),
        shape,
        mask,
        scale,
        dropout,
    )
}

/// An operand `[bh, rows, cols]` of [`attention_forward_strided`] in any layout: element
/// `(b, r, c)` is `data[batch_offsets[b] + r * row_stride + c * col_stride]` (the heads
/// of a `[batch, len, heads, d]` projection, read without a copy).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a, T> {
    data: &'a [T],
    batch_offsets: &'a [usize],
    row_stride: usize,
    col_stride: usize,
}

impl<'a, T> Operand<'a, T> {
    /// The view; [`attention_forward_strided`] checks that it stays inside `data`.
    pub fn new(
        data: &'a [T],
        batch_offsets: &'a [usize],
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        Operand {
            data,
            batch_offsets,
            row_stride,
            col_stride,
        }
    }

    /// The elements from problem `b`'s row `r` on.
    fn from(&self, b: usize, r: usize) -> &'a [T] {
        &self.data[self.batch_offsets[b] + r * self.row_stride..]
    }

    /// Whether every element of a `[bh, rows, cols]` view is inside `data`.
    fn fits(&self, bh: usize, rows: usize, cols: usize) -> bool {
        self.batch_offsets.len() == bh
            && (rows == 0
                || cols == 0
                || self.batch_offsets.iter().all(|&o| {
                    o + (rows - 1) * self.row_stride + (cols - 1) * self.col_stride
                        < self.data.len()
                }))
    }
}

/// [`attention_forward`] over operands in any layout (see [`Operand`]); the output and
/// log-sum-exp are contiguous `[bh, tq, dv]` and `[bh, tq]`.
///
/// ```
/// use ferrograd_kernels::fused::attention::*;
/// // q, k and v of 2 heads interleaved per position, as [len, heads, d] stores them.
/// let shape = AttentionShape { bh: 2, tq: 1, tk: 2, d: 1, dv: 1 };
/// let (q, k, v) = ([0.0f64, 1.0], [1.0, 1.0, 1.0, -1.0], [2.0, 2.0, 4.0, 4.0]);
/// let heads = [0, 1]; // head h starts at element h; rows (positions) are 2 apart
/// let (out, _) = attention_forward_strided(
///     Operand::new(&q, &heads, 2, 1), Operand::new(&k, &heads, 2, 1),
///     Operand::new(&v, &heads, 2, 1), shape, &Mask::None, 1.0, None);
/// assert!((out[0] - 3.0).abs() < 1e-12); // head 0: equal scores, the mean
/// let w = 1.0 / (1.0 + (-2.0f64).exp()); // head 1: softmax(1, -1)
/// assert!((out[1] - (2.0 * w + 4.0 * (1.0 - w))).abs() < 1e-12);
/// ```
pub fn attention_forward_strided<T: AttnFloat>(
    q: Operand<'_, T>,
    k: Operand<'_, T>,
    v: Operand<'_, T>,
    shape: AttentionShape,
    mask: &Mask<'_, T>,
    scale: T,
    dropout: Option<AttnDropout>,
) -> (HostBuffer<T>, HostBuffer<T>) {
    let AttentionShape { bh, tq, tk, d, dv } = shape;
    assert!(
        q.fits(bh, tq, d) && k.fits(bh, tk, d) && v.fits(bh, tk, dv),
        "attention_forward: an operand view leaves its data for {shape:?}"
    );
    let mut out = HostBuffer::<T>::zeroed(bh * tq * dv);
    let mut lse = HostBuffer::full(bh * tq, T::neg_infinity());
    // A problem's query tiles share one piece (its keys and values packed once) when
    // there are enough problems to keep the threads busy; causal tiles see different
    // keys, so they stay apart.
    let group = if bh >= 4 * num_threads() && !matches!(mask, Mask::Causal) {
        tq.div_ceil(TILE).max(1)
    } else {
        1
    };
    let mut pieces = Vec::new();
    for (b, (o_b, l_b)) in out
        .chunks_mut((tq * dv).max(1))
        .zip(lse.chunks_mut(tq.max(1)))
        .enumerate()
        .take(bh)
    {
        for (t, (o, l)) in o_b
            .chunks_mut((group * TILE * dv).max(1))
            .zip(l_b.chunks_mut(group * TILE))
            .enumerate()
        {
            pieces.push((b, t * group * TILE, o, l));
        }
    }
    par_pieces(pieces, |(b, q0, o, l)| {
        let width = visible(mask, q0 + l.len() - 1, tk);
        // The problem's keys (as `K^T`) and values, packed once for its tiles: at
        // attention's shapes the `gemm` crate would repack both for every tile.
        let kt = pack_f32(k.from(b, 0), (d, width), (k.col_stride, k.row_stride));
        let vp = pack_f32(v.from(b, 0), (width, dv), (v.row_stride, v.col_stride));
        let mut s = vec![T::ZERO; l.len().min(TILE) * width];
        let mut inv = [T::ZERO; TILE];
        for (t, (o, l)) in o
            .chunks_mut((TILE * dv).max(1))
            .zip(l.chunks_mut(TILE))
            .enumerate()
        {
            let (q0, rows) = (q0 + t * TILE, l.len());
            let s = &mut s[..rows * width];
            tile_product(
                kt.as_ref(),
                s,
                (rows, width, d),
                q.from(b, q0),
                (q.row_stride, q.col_stride),
                k.from(b, 0),
                (k.col_stride, k.row_stride),
            );
            let (scale, keep) = mask_for_softmax(s, rows, width, b, q0, scale, mask);
            let keep = keep.map(|m| {
                let at = m.batch_offsets[b] + q0 * m.strides[0];
                (&m.data[at..], m.strides[0])
            });
            let inv = &mut inv[..rows];
            with_simd(SoftmaxTile {
                s: &mut *s,
                width,
                scale,
                keep,
                lse: &mut *l,
                inv: &mut *inv,
            });
            if let Some(drop) = dropout {
                // The row's scale (1 / its sum) is applied to the output instead: the
                // same product, as dropout multiplies each probability by 0 or a constant.
                for (r, row) in s.chunks_exact_mut(width.max(1)).enumerate() {
                    if l[r] != T::neg_infinity() {
                        drop.apply_row(b, q0 + r, row);
                    }
                }
            }
            tile_product(
                vp.as_ref(),
                o,
                (rows, dv, width),
                s,
                (width, 1),
                v.from(b, 0),
                (v.row_stride, v.col_stride),
            );
            for (o, &inv) in o.chunks_exact_mut(dv.max(1)).zip(inv.iter()) {
                o.iter_mut().for_each(|v| *v = *v * inv);
            }
        }
    });
    (out, lse)
}

/// The dropout keep mask of problem `b` as 0/`1/(1-p)` factors `[tq, tk]`, for the
/// differentiable (unfused) path.
pub fn dropout_factors<T: AttnFloat>(drop: AttnDropout, bh: usize, tq: usize, tk: usize) -> Vec<T> {
    let mut out = vec![T::ONE; bh * tq * tk];
    for (n, row) in out.chunks_mut(tk.max(1)).enumerate() {
        drop.apply_row(n / tq.max(1), n % tq.max(1), row);
    }
    out
}

/// Where each of the `bh` problems' masks starts in a mask broadcast to
/// `[batch..., tq, tk]` with layout `layout` (the batch dims in row-major order).
///
/// ```
/// use ferrograd_kernels::{Layout, fused::attention::batch_offsets};
/// // A [2, 1, 1, 5] key-padding mask broadcast over 3 heads and 4 queries.
/// let l = Layout::contiguous(&[2, 1, 1, 5]).broadcast_to(&[2, 3, 4, 5]);
/// assert_eq!(batch_offsets(&l), vec![0, 0, 0, 5, 5, 5]);
/// ```
pub fn batch_offsets(layout: &Layout) -> Vec<usize> {
    let (shape, strides) = (layout.shape(), layout.strides());
    let nb = shape.len().saturating_sub(2);
    let count: usize = shape[..nb].iter().product();
    let mut out = Vec::with_capacity(count);
    let mut index = vec![0usize; nb];
    for _ in 0..count {
        out.push(
            layout.offset()
                + index
                    .iter()
                    .zip(&strides[..nb])
                    .map(|(i, s)| i * s)
                    .sum::<usize>(),
        );
        for d in (0..nb).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests;
