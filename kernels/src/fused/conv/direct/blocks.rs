use super::super::lanes::Lanes;
use super::{OB, Plan};

/// The bias of output-channel block `ob` (zero past the last channel).
#[inline(always)]
unsafe fn bias_block<L: Lanes>(plan: &Plan, ob: usize) -> L {
    let mut init = [0.0f32; OB];
    if let Some(b) = plan.bias {
        for (j, v) in init.iter_mut().enumerate() {
            *v = b.get(ob * OB + j).copied().unwrap_or(0.0);
        }
    }
    // SAFETY: `init` holds OB = 16 floats; the caller runs with `L`'s features.
    unsafe { L::load(init.as_ptr()) }
}

/// Stores channel block `ob` of the `PX` wide pixels from `q0c` (`acc[p]` holding
/// pixel `q0c + p`'s channels) into the sample's output `[O, oh, ow]`, dropping the
/// columns past `ow`: a block within one row's valid pixels turned over in
/// registers where `L` does that, else channel by channel and pixel by pixel.
#[inline(always)]
fn store_block<L: Lanes, const PX: usize>(
    plan: &Plan,
    ob: usize,
    acc: &[[f32; OB]; PX],
    q0c: usize,
    out: &mut [f32],
) {
    let [oh, ow] = plan.g.output().expect("checked by the caller");
    let (wp, plane) = (plan.wp, oh * ow);
    // Pixel `q0c + p` of the wide layout, tracked without a division each.
    let (mut y, mut xo) = (q0c / wp, q0c % wp);
    if L::TURNS && xo + PX <= ow {
        // SAFETY: `PX <= 16` (the AVX-512 blocks); the block is pixels `xo..xo + PX`
        // of row `y`, all valid.
        unsafe { store_row(plan, ob, acc, &mut out[y * ow + xo..]) };
        return;
    }
    for a in acc.iter() {
        if xo < ow {
            for (j, &v) in a.iter().enumerate().take(plan.o - ob * OB) {
                out[(ob * OB + j) * plane + y * ow + xo] = v;
            }
        }
        xo += 1;
        if xo == wp {
            (y, xo) = (y + 1, 0);
        }
    }
}

/// Stores a block of `PX` consecutive pixels of one output row (`acc[p]` holding
/// pixel `p`'s channels of block `ob`) at `out[o·plane + p]` for each live channel
/// `o` of the block, turning the block over sixteen pixels at a time so that each
/// channel's pixels are written as one run.
///
/// # Safety
/// `PX <= 16`, and `out[o·plane..][..PX]` is inside the sample's output for each live
/// channel `o` of the block (the block lies within one row's valid pixels).
#[inline(always)]
unsafe fn store_row<const PX: usize>(
    plan: &Plan,
    ob: usize,
    acc: &[[f32; OB]; PX],
    out: &mut [f32],
) {
    let plane = plan.g.output().map_or(0, |[oh, ow]| oh * ow);
    let mut blk = [[0.0f32; OB]; 16];
    blk[..PX].copy_from_slice(acc);
    let mut turned = [[0.0f32; 16]; OB];
    // SAFETY: both are 16 × 16 floats, rows 16 apart.
    unsafe {
        super::super::winograd::transpose16(blk.as_ptr().cast(), 16, turned.as_mut_ptr().cast(), 16)
    };
    for (j, row) in turned.iter().enumerate().take(plan.o - ob * OB) {
        out[(ob * OB + j) * plane..][..PX].copy_from_slice(&row[..PX]);
    }
}

/// The accumulators as arrays, for the scattered stores.
#[inline(always)]
unsafe fn spill<L: Lanes, const PX: usize>(acc: [L; PX]) -> [[f32; OB]; PX] {
    let mut out = [[0.0f32; OB]; PX];
    for (dst, a) in out.iter_mut().zip(acc) {
        // SAFETY: `dst` holds OB = 16 floats; the caller runs with `L`'s features.
        unsafe { a.store(dst.as_mut_ptr()) };
    }
    out
}

/// [`sample`] for unit strides, over "wide" pixels `q = y·wp + x` (`x < wp`, the
/// padded input's width; columns `x ≥ ow` are computed and dropped): pixel `q`'s
/// window starts at input offset `q`, so a block of `PX` reads consecutive floats
/// per tap at fixed displacements, with no offset table.
///
/// # Safety
/// As [`sample`], with unit strides and `(oh - 1)·wp + ow ≥ PX`.
#[inline(always)]
pub(super) unsafe fn sample_unit_stride<L: Lanes, const PX: usize>(
    plan: &Plan,
    x: &[f32],
    out: &mut [f32],
) {
    let g = plan.g;
    let [oh, ow] = g.output().expect("checked by the caller");
    let wp = plan.wp;
    let ntaps = plan.taps.len();
    let starts = super::block_starts(oh, ow, wp, PX);
    for ob in 0..plan.opad / OB {
        // SAFETY: the caller runs with `L`'s features.
        let init = unsafe { bias_block::<L>(plan, ob) };
        for &q0c in &starts {
            let mut acc = [init; PX];
            for c in 0..g.c {
                let xc = x[c * plan.chan..(c + 1) * plan.chan].as_ptr();
                let wc = &plan.wt[c * ntaps * plan.opad..(c + 1) * ntaps * plan.opad];
                for (t, &tap) in plan.taps.iter().enumerate() {
                    // SAFETY: as in `sample`; `tap + q0c + PX - 1 <= tap + wide - 1 <
                    // chan`.
                    unsafe {
                        let w = L::load(wc.as_ptr().add(t * plan.opad + ob * OB));
                        let src = xc.add(tap + q0c);
                        for (i, a) in acc.iter_mut().enumerate() {
                            *a = L::fma(w, L::splat(*src.add(i)), *a);
                        }
                    }
                }
            }
            // SAFETY: the caller runs with `L`'s features.
            let acc = unsafe { spill(acc) };
            store_block::<L, PX>(plan, ob, &acc, q0c, out);
        }
    }
}

/// [`sample_unit_stride`] for undilated kernels `KW` wide, a kernel row at a time:
/// the row's `KW` weight vectors stay in registers, and each of the `PX + KW - 1`
/// input floats the block's pixels read in that row is broadcast once and feeds every
/// accumulator whose window covers it (up to `KW` FMAs per broadcast, where the
/// per-tap loop broadcasts once per FMA and is bound by the load ports).
///
/// # Safety
/// As [`sample_unit_stride`], with `plan.g.kernel[1] == KW` and unit dilation.
#[inline(always)]
pub(super) unsafe fn sample_unit_rows<L: Lanes, const PX: usize, const KW: usize>(
    plan: &Plan,
    x: &[f32],
    out: &mut [f32],
) {
    let g = plan.g;
    let [oh, ow] = g.output().expect("checked by the caller");
    let wp = plan.wp;
    let kh = g.kernel[0];
    let starts = super::block_starts(oh, ow, wp, PX);
    for ob in 0..plan.opad / OB {
        // SAFETY: the caller runs with `L`'s features.
        let init = unsafe { bias_block::<L>(plan, ob) };
        for &q0c in &starts {
            let mut acc = [init; PX];
            for c in 0..g.c {
                let xc = x[c * plan.chan..(c + 1) * plan.chan].as_ptr();
                let wc = &plan.wt[c * kh * KW * plan.opad..(c + 1) * kh * KW * plan.opad];
                for ki in 0..kh {
                    // SAFETY: row `ki·KW + kj` of this channel's weights has `opad`
                    // floats and `ob * OB + OB <= opad`; input float `j` of the row is
                    // tap `(ki, kj)` of pixel `j - kj`, read by the per-tap loop too.
                    unsafe {
                        let ws: [L; KW] = std::array::from_fn(|kj| {
                            L::load(wc.as_ptr().add((ki * KW + kj) * plan.opad + ob * OB))
                        });
                        let src = xc.add(ki * wp + q0c);
                        for j in 0..PX + KW - 1 {
                            let b = L::splat(*src.add(j));
                            for (kj, &w) in ws.iter().enumerate() {
                                if j >= kj && j - kj < PX {
                                    acc[j - kj] = L::fma(w, b, acc[j - kj]);
                                }
                            }
                        }
                    }
                }
            }
            // SAFETY: the caller runs with `L`'s features.
            let acc = unsafe { spill(acc) };
            store_block::<L, PX>(plan, ob, &acc, q0c, out);
        }
    }
}

/// One sample: `x` its padded input `[C, hp, wp]`, `out` its output `[O, oh, ow]`.
///
/// # Safety
/// The CPU has `L`'s features; `x` holds `plan.g.c * plan.chan` elements, and every
/// tap offset plus every pixel offset is below `plan.chan` (asserted by the caller).
#[inline(always)]
pub(super) unsafe fn sample<L: Lanes, const PX: usize>(plan: &Plan, x: &[f32], out: &mut [f32]) {
    let g = plan.g;
    let [oh, ow] = g.output().expect("checked by the caller");
    let [sh, sw] = g.stride;
    let plane = oh * ow;
    let ntaps = plan.taps.len();
    for ob in 0..plan.opad / OB {
        // SAFETY: the caller runs with `L`'s features.
        let init = unsafe { bias_block::<L>(plan, ob) };
        for q0 in (0..plane).step_by(PX) {
            let offs: [usize; PX] = std::array::from_fn(|p| {
                let q = (q0 + p).min(plane - 1);
                (q / ow) * sh * plan.wp + (q % ow) * sw
            });
            let mut acc = [init; PX];
            for c in 0..g.c {
                let xc = x[c * plan.chan..(c + 1) * plan.chan].as_ptr();
                let wc = &plan.wt[c * ntaps * plan.opad..(c + 1) * ntaps * plan.opad];
                for (t, &tap) in plan.taps.iter().enumerate() {
                    // SAFETY: row `t` of this channel's weights has `opad` floats
                    // and `ob * OB + OB <= opad`; `tap + offs[p] < chan` (the
                    // caller's bound), so every input read is inside channel `c`.
                    unsafe {
                        let w = L::load(wc.as_ptr().add(t * plan.opad + ob * OB));
                        for (a, &off) in acc.iter_mut().zip(&offs) {
                            *a = L::fma(w, L::splat(*xc.add(tap + off)), *a);
                        }
                    }
                }
            }
            // SAFETY: the caller runs with `L`'s features.
            let acc = unsafe { spill(acc) };
            let valid = (plane - q0).min(PX);
            for j in 0..OB.min(plan.o - ob * OB) {
                let dst = &mut out[(ob * OB + j) * plane + q0..][..valid];
                for (d, a) in dst.iter_mut().zip(&acc) {
                    *d = a[j];
                }
            }
        }
    }
}

/// One sample's contribution to the weight gradient, added to `dwt`
/// (`[C·kh·kw, opad]`): `dwt[t, o] += Σ_q gyt[q, o] · x[taps[t] + q]` over wide
/// pixels `q` (`gyt` is the output gradient transposed to `[wide, opad]`, zero in the
/// columns `x ≥ ow`, so they add nothing), `PX` taps at a time in registers.
///
/// # Safety
/// The CPU has `L`'s features; `x` holds `c·chan` elements, every tap offset plus
/// the last wide pixel is below `chan`, `gyt` holds `wide·opad` and `dwt` `k·opad`.
#[inline(always)]
pub(super) unsafe fn weight_grad_sample<L: Lanes, const PX: usize>(
    plan: &Plan,
    x: &[f32],
    gyt: &[f32],
    wide: usize,
    dwt: &mut [f32],
) {
    let ntaps = plan.taps.len();
    let k = plan.g.c * ntaps;
    // Each reduction row's offset into the sample: its channel and tap.
    let rows: Vec<usize> = (0..k)
        .map(|t| (t / ntaps) * plan.chan + plan.taps[t % ntaps])
        .collect();
    assert!(
        x.len() >= plan.g.c * plan.chan
            && gyt.len() >= wide * plan.opad
            && dwt.len() >= k * plan.opad
    );
    for ob in 0..plan.opad / OB {
        let mut t0 = 0;
        while t0 < k {
            let n = (k - t0).min(PX);
            // Rows past the end repeat the last one (their sums are not stored).
            let r: [usize; PX] = std::array::from_fn(|i| rows[t0 + i.min(n - 1)]);
            // SAFETY: the caller runs with `L`'s features.
            let mut acc = [unsafe { L::splat(0.0) }; PX];
            let xp = x.as_ptr();
            for q in 0..wide {
                // SAFETY: `gyt` row `q` has `opad >= ob * OB + OB` floats; each
                // `r[i] + q` is a tap offset plus a wide pixel, inside the sample.
                unsafe {
                    let g = L::load(gyt.as_ptr().add(q * plan.opad + ob * OB));
                    for (a, &ri) in acc.iter_mut().zip(&r) {
                        *a = L::fma(g, L::splat(*xp.add(ri + q)), *a);
                    }
                }
            }
            // SAFETY: the caller runs with `L`'s features.
            let sums = unsafe { spill(acc) };
            for (i, sum) in sums.iter().enumerate().take(n) {
                let dst = &mut dwt[(t0 + i) * plan.opad + ob * OB..][..OB];
                for (d, &v) in dst.iter_mut().zip(sum) {
                    *d += v;
                }
            }
            t0 += n;
        }
    }
}
