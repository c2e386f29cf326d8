//! The backward of fused attention: the gradients of the query, key and value from the
//! saved log-sum-exp, tile by tile; and the packed tile products the forward shares.

use super::*;

/// The gradients `(dq, dk, dv)` of [`attention_forward`] for output gradient `dout`
/// (contiguous `[bh, tq, dv]`), from the forward's output and log-sum-exp: the
/// probabilities are recomputed tile by tile, never stored whole.
///
/// ```
/// use ferrograd_kernels::fused::attention::*;
/// let shape = AttentionShape { bh: 1, tq: 1, tk: 2, d: 1, dv: 1 };
/// let (q, k, v) = ([0.0f64], [1.0, -1.0], [2.0, 4.0]);
/// let (out, lse) = attention_forward(&q, &k, &v, shape, &Mask::None, 1.0, None);
/// let (_, _, dv) = attention_backward(&q, &k, &v, &out, &lse, &[1.0], shape, &Mask::None, 1.0, None);
/// assert!((dv[0] - 0.5).abs() < 1e-12 && (dv[1] - 0.5).abs() < 1e-12); // q = 0: equal weights
/// ```
#[allow(clippy::too_many_arguments)]
pub fn attention_backward<T: AttnFloat>(
    q: &[T],
    k: &[T],
    v: &[T],
    out: &[T],
    lse: &[T],
    dout: &[T],
    shape: AttentionShape,
    mask: &Mask<'_, T>,
    scale: T,
    dropout: Option<AttnDropout>,
) -> (HostBuffer<T>, HostBuffer<T>, HostBuffer<T>) {
    let AttentionShape { bh, tq, tk, d, dv } = shape;
    assert!(
        out.len() == bh * tq * dv && dout.len() == out.len() && lse.len() == bh * tq,
        "attention_backward: operand lengths do not match {shape:?}"
    );
    let mut dq = HostBuffer::<T>::zeroed(bh * tq * d);
    let mut dk = HostBuffer::<T>::zeroed(bh * tk * d);
    let mut dvv = HostBuffer::<T>::zeroed(bh * tk * dv);
    let pieces: Vec<_> = dq
        .chunks_mut((tq * d).max(1))
        .zip(dk.chunks_mut((tk * d).max(1)))
        .zip(dvv.chunks_mut((tk * dv).max(1)))
        .enumerate()
        .take(bh)
        .map(|(b, ((a, c), e))| (b, a, c, e))
        .collect();
    par_pieces(pieces, |(b, dq_b, dk_b, dv_b)| {
        let (qb, kb, vb) = (&q[b * tq * d..], &k[b * tk * d..], &v[b * tk * dv..]);
        let (ob, gb) = (&out[b * tq * dv..], &dout[b * tq * dv..]);
        // The products whose right operand is the same for every tile, packed once for
        // the f32 microkernel: `K^T` (the scores), `V^T` (dP) and `K` (dQ). A causal
        // tile that sees fewer keys multiplies through `gemm`.
        let kt = pack_f32(kb, (d, tk), (1, d));
        let vt = pack_f32(vb, (dv, tk), (1, dv));
        let kk = pack_f32(kb, (tk, d), (d, 1));
        // One tile's P and dP, reused by every tile of the problem (each product writes
        // its tile whole before anything reads it).
        let tile_len = TILE.min(tq) * tk;
        let (mut p_buf, mut dp_buf) = (vec![T::ZERO; tile_len], vec![T::ZERO; tile_len]);
        for q0 in (0..tq).step_by(TILE) {
            let rows = TILE.min(tq - q0);
            let width = visible(mask, q0 + rows - 1, tk);
            if width == 0 {
                continue;
            }
            // The packed operands (all `tk` keys) serve a tile that sees every key.
            let whole = width == tk;
            // P (recomputed), then the dropped-out P that multiplied V.
            let p = &mut p_buf[..rows * width];
            tile_product(
                kt.as_ref().filter(|_| whole),
                p,
                (rows, width, d),
                &qb[q0 * d..],
                (d, 1),
                kb,
                (1, d),
            );
            scale_and_mask(p, rows, width, b, q0, scale, mask);
            with_simd(Probabilities {
                p,
                lse: &lse[b * tq + q0..b * tq + q0 + rows],
                width,
            });
            // The tile's dropout factors (0 or 1 / (1 - p)), drawn once for P and dP.
            let factors = dropout.map(|drop| {
                let mut f = vec![T::ONE; rows * width];
                for (r, row) in f.chunks_mut(width).enumerate() {
                    drop.apply_row(b, q0 + r, row);
                }
                f
            });
            let dropped = factors
                .as_ref()
                .map(|f| p.iter().zip(f).map(|(&x, &k)| x * k).collect::<Vec<T>>());
            // dV += Pd^T @ dO
            let pd = dropped.as_deref().unwrap_or(p);
            transposed_product_acc(dv_b, (width, dv, rows), pd, &gb[q0 * dv..]);
            // dP = (dO @ V^T) * keep / (1 - p)
            let dp = &mut dp_buf[..rows * width];
            tile_product(
                vt.as_ref().filter(|_| whole),
                dp,
                (rows, width, dv),
                &gb[q0 * dv..],
                (dv, 1),
                vb,
                (1, dv),
            );
            if let Some(f) = &factors {
                dp.iter_mut().zip(f).for_each(|(x, &k)| *x = *x * k);
            }
            // dS = P * (dP - rowsum(dO * O)) * scale (the scale folded in here)
            with_simd(ScoreGrad {
                p,
                dp,
                out: &ob[q0 * dv..(q0 + rows) * dv],
                dout: &gb[q0 * dv..(q0 + rows) * dv],
                width,
                scale,
            });
            // dQ = dS @ K; dK += dS^T @ Q
            tile_product(
                kk.as_ref().filter(|_| whole),
                &mut dq_b[q0 * d..],
                (rows, d, width),
                dp,
                (width, 1),
                kb,
                (d, 1),
            );
            transposed_product_acc(dk_b, (width, d, rows), dp, &qb[q0 * d..]);
        }
    });
    (dq, dk, dvv)
}

/// The `[rows, cols]` matrix of `src` under `strides` packed for the f32 microkernel;
/// `None` for other dtypes, a CPU without the microkernel, or an empty matrix (the
/// callers then multiply through `gemm`).
pub(super) fn pack_f32<T: AttnFloat>(
    src: &[T],
    shape: (usize, usize),
    strides: (usize, usize),
) -> Option<PackedRhs> {
    if shape.0 == 0 || shape.1 == 0 {
        return None;
    }
    PackedRhs::pack(as_f32(src)?, shape, strides)
}

/// A tile's `dst = a @ b` (`[m, k] @ [k, n]` into row-major `dst`, operands through
/// (row, column) strides): by the f32 microkernel where `packed` holds `b` and `a`'s
/// features are contiguous (it reads whole rows of `a`), else by `gemm` on this thread.
pub(super) fn tile_product<T: AttnFloat>(
    packed: Option<&PackedRhs>,
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (a_rs, a_cs): (usize, usize),
    b: &[T],
    b_strides: (usize, usize),
) {
    if (a_cs == 1 || k == 1)
        && let (Some(packed), Some(d), Some(af)) = (packed, as_f32_mut(dst), as_f32(a))
    {
        packed.matmul_into(d, m, af, a_rs, false, 1);
        return;
    }
    gemm_into(
        Parallelism::None,
        dst,
        (m, n, k),
        a,
        (a_rs, a_cs),
        b,
        b_strides,
        false,
    );
}

/// A tile's `dst += a^T @ b` for `a` `[k, m]` and `b` `[k, n]` row-major (`dV += P^T dO`,
/// `dK += dS^T Q`, contracted over the tile's queries): by the f32 microkernel, reading
/// `a` down its columns and packing the tile's `b` a panel at a time, else by `gemm`.
pub(super) fn transposed_product_acc<T: AttnFloat>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: &[T],
    b: &[T],
) {
    if let (Some(d), Some(af), Some(bf)) = (as_f32_mut(dst), as_f32(a), as_f32(b))
        && small_product(d, (m, k, n), (af, (1, m)), (bf, (n, 1)), true).is_some()
    {
        return;
    }
    gemm_into(
        Parallelism::None,
        dst,
        (m, n, k),
        a,
        (1, m),
        b,
        (n, 1),
        true,
    );
}

/// The backward's probabilities recomputed in place from the scores of `lse.len()` rows
/// of `width`: `e^(s - lse)` (zero rows where every key was masked), vectorised.
pub(super) struct Probabilities<'a, T> {
    p: &'a mut [T],
    lse: &'a [T],
    width: usize,
}

impl<T: AttnFloat> FmaKernel for Probabilities<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        for (row, &l) in self.p.chunks_exact_mut(self.width).zip(self.lse) {
            if l == T::neg_infinity() {
                row.iter_mut().for_each(|x| *x = T::ZERO);
            } else {
                // `s - lse <= 0` up to rounding, where the exponential is still exact;
                // the forward's (`exp_nonpos_normal`), so the backward recomputes the
                // probabilities the forward used, flushed below the smallest normal alike.
                row.iter_mut()
                    .for_each(|x| *x = (*x - l).exp_nonpos_normal::<FMA>());
            }
        }
    }
}

/// `dS = P * (dP - rowsum(dO * O)) * scale` in place of `dp`, rows of `width` scores and
/// `out.len() / rows` output features, compiled per SIMD level.
pub(super) struct ScoreGrad<'a, T> {
    p: &'a [T],
    dp: &'a mut [T],
    out: &'a [T],
    dout: &'a [T],
    width: usize,
    scale: T,
}

impl<T: AttnFloat> FmaKernel for ScoreGrad<'_, T> {
    type Output = ();
    #[inline(always)]
    fn body<const FMA: bool>(self) {
        let rows = self.dp.len() / self.width;
        let dv = self.out.len() / rows.max(1);
        for (((p_row, dp_row), o_row), g_row) in self
            .p
            .chunks_exact(self.width)
            .zip(self.dp.chunks_exact_mut(self.width))
            .zip(self.out.chunks_exact(dv))
            .zip(self.dout.chunks_exact(dv))
        {
            let di = o_row
                .iter()
                .zip(g_row)
                .fold(T::ZERO, |acc, (&o, &g)| acc + o * g);
            for (x, &pv) in dp_row.iter_mut().zip(p_row) {
                *x = pv * (*x - di) * self.scale;
            }
        }
    }
}
