//! Depthwise convolution (one filter per channel) on the CPU: forward, input gradient and
//! weight gradient as direct SIMD loops over planes.

use super::*;

/// The output rows `oy` and, for one tap, input row `y`, of kernel row `ki`: `None`
/// when the tap falls into the padding for that output row.
#[inline(always)]
pub(super) fn input_row(g: &Conv2dGeometry, oy: usize, ki: usize) -> Option<usize> {
    let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize - g.padding[0] as isize;
    (y >= 0 && (y as usize) < g.input[0]).then_some(y as usize)
}

/// Kernel column `kj`'s in-bounds output columns and the input column of the first one.
#[inline(always)]
pub(super) fn tap_columns(g: &Conv2dGeometry, ow: usize, kj: usize) -> (Range<usize>, usize) {
    let offset = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
    let cols = valid_columns(offset, g.stride[1], g.input[1], ow);
    let x0 = (cols.start as isize * g.stride[1] as isize + offset).max(0) as usize;
    (cols, x0)
}

/// One output plane: `out = bias + Σ_taps w[tap] * shifted input plane`.
pub(super) struct ForwardPlane<'a, T> {
    x: &'a [T],
    w: &'a [T],
    bias: T,
    out: &'a mut [T],
    g: &'a Conv2dGeometry,
    ow: usize,
}

impl<T: Float> SimdKernel for ForwardPlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (g, ow) = (self.g, self.ow);
        if g.stride[1] <= 2 {
            return self.padded();
        }
        let [kh, kw] = g.kernel;
        let (w_in, s1) = (g.input[1], g.stride[1]);
        let spans: Vec<_> = (0..kw).map(|kj| tap_columns(g, ow, kj)).collect();
        for (oy, row) in self.out.chunks_exact_mut(ow).enumerate() {
            row.fill(self.bias);
            for ki in 0..kh {
                let Some(y) = input_row(g, oy, ki) else {
                    continue;
                };
                let src = &self.x[y * w_in..(y + 1) * w_in];
                for (kj, (cols, x0)) in spans.iter().cloned().enumerate() {
                    let wv = self.w[ki * kw + kj];
                    let dst = &mut row[cols.clone()];
                    if s1 == 1 {
                        for (d, &v) in dst.iter_mut().zip(&src[x0..x0 + cols.len()]) {
                            *d = v.mul_add(wv, *d);
                        }
                    } else {
                        for (i, d) in dst.iter_mut().enumerate() {
                            *d = src[x0 + i * s1].mul_add(wv, *d);
                        }
                    }
                }
            }
        }
    }
}

impl<T: Float> ForwardPlane<'_, T> {
    /// Column strides 1 and 2 through a zero-padded copy of the plane, so that every tap
    /// is one contiguous multiply-add loop: for stride 1 in both dims over the whole
    /// plane at once, as rows `wp` wide (the columns past `ow` are dropped at the end;
    /// MobileNet's 7- and 14-wide rows no longer end in scalar tails), a chunk of rows at
    /// a time; otherwise per output row, for column stride 2 over the padded plane's even
    /// or odd columns, split from the input without a padded copy. The same terms in
    /// the same order as the plain loop (padding adds `0 * w`).
    #[inline(always)]
    fn padded(self) {
        let (g, ow) = (self.g, self.ow);
        let [h, w_in] = g.input;
        let [p0, p1] = g.padding;
        let (hp, wp) = (h + 2 * p0, w_in + 2 * p1);
        let oh = self.out.len() / ow;
        let [s0, s1] = g.stride;
        if s1 == 1 {
            let mut xp = vec![T::ZERO; hp * wp];
            for (src, dst) in self
                .x
                .chunks_exact(w_in)
                .zip(xp[p0 * wp..].chunks_exact_mut(wp))
            {
                dst[p1..p1 + w_in].copy_from_slice(src);
            }
            if s0 == 1 {
                return self.stride_one(&xp, wp, oh);
            }
            return self.padded_rows(&xp, hp, wp, 0, oh);
        }
        // Column stride 2: the padded plane's even columns and its odd ones, each row
        // split straight from the input (each tap then reads one half contiguously).
        let (we, wo) = (wp.div_ceil(2), wp / 2);
        let mut halves = vec![T::ZERO; hp * (we + wo)];
        let (even, odd) = halves.split_at_mut(hp * we);
        // Padded column `p1 + j` holds input column `j`: the even padded columns start at
        // input column `p1 % 2`, the odd ones at `1 - p1 % 2`.
        let (e0, o0) = (p1 % 2, 1 - p1 % 2);
        for (r, src) in self.x.chunks_exact(w_in).enumerate() {
            let r = r + p0;
            let e = &mut even[r * we + (p1 + e0) / 2..(r + 1) * we];
            let o: &mut [T] = if wo > 0 {
                &mut odd[r * wo + (p1 + o0) / 2..(r + 1) * wo]
            } else {
                &mut []
            };
            // Input columns 0, 2, .. land in the even half when `p1` is even.
            let (first, second) = if e0 == 0 { (e, o) } else { (o, e) };
            split_parity(src, first, second);
        }
        self.padded_rows(&halves, hp, we, wo, oh)
    }

    /// Stride 1 in both dims: the whole padded plane `xp` (rows `wp` wide) as one run
    /// per tap, the columns past `ow` dropped at the end, in chunks of rows (a chunk's
    /// sums are written once, then copied out row by row).
    #[inline(always)]
    fn stride_one(self, xp: &[T], wp: usize, oh: usize) {
        let (g, ow) = (self.g, self.ow);
        let [kh, kw] = g.kernel;
        let [d0, d1] = g.dilation;
        let rows_per = (2048 / wp).clamp(1, oh);
        let mut acc = vec![T::ZERO; (rows_per - 1) * wp + ow];
        let (mut stack, mut heap) = ([0; TAPS], Vec::new());
        let offs = tap_slots(&mut stack, &mut heap, kh * kw);
        for r0 in (0..oh).step_by(rows_per) {
            let r1 = (r0 + rows_per).min(oh);
            let a = &mut acc[..(r1 - 1 - r0) * wp + ow];
            for ki in 0..kh {
                for kj in 0..kw {
                    offs[ki * kw + kj] = (r0 + ki * d0) * wp + kj * d1;
                }
            }
            tap_sums(a, self.bias, self.w, xp, offs);
            for (row, src) in self.out[r0 * ow..r1 * ow]
                .chunks_exact_mut(ow)
                .zip(a.chunks(wp))
            {
                row.copy_from_slice(&src[..ow]);
            }
        }
    }

    /// Row by row from the padded plane (`halves[..]`, rows `we` wide, when the column
    /// stride is 1), or from its even columns (the first `hp * we` elements of `halves`,
    /// rows `we` wide) and its odd ones (the rest, rows `wo` wide) for column stride 2.
    #[inline(always)]
    fn padded_rows(self, halves: &[T], hp: usize, we: usize, wo: usize, oh: usize) {
        let (g, ow) = (self.g, self.ow);
        let [kh, kw] = g.kernel;
        let [d0, d1] = g.dilation;
        let [s0, s1] = g.stride;
        debug_assert_eq!(self.out.len(), oh * ow);
        let (mut stack, mut heap) = ([0; TAPS], Vec::new());
        let offs = tap_slots(&mut stack, &mut heap, kh * kw);
        for (oy, row) in self.out.chunks_exact_mut(ow).enumerate() {
            for ki in 0..kh {
                let r = oy * s0 + ki * d0;
                for kj in 0..kw {
                    let c = kj * d1;
                    offs[ki * kw + kj] = if s1 == 1 {
                        r * we + c
                    } else if c % 2 == 0 {
                        r * we + c / 2
                    } else {
                        hp * we + r * wo + c / 2
                    };
                }
            }
            tap_sums(row, self.bias, self.w, halves, offs);
        }
    }
}

/// `first[k] = src[2k]` and `second[k] = src[2k + 1]`, as many of each as both sides
/// hold.
#[inline(always)]
pub(super) fn split_parity<T: Float>(src: &[T], first: &mut [T], second: &mut [T]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if lanes::level() == Some(lanes::Level::Avx512)
        && let (Some(s), Some(f), Some(g)) = (as_f32(src), as_f32_mut(first), as_f32_mut(second))
    {
        // SAFETY: AVX-512F is present (checked above).
        done = unsafe { split_parity_avx512(s, f, g) };
    }
    for (d, &v) in first[done..]
        .iter_mut()
        .zip(src[2 * done..].iter().step_by(2))
    {
        *d = v;
    }
    if src.len() > 2 * done + 1 {
        for (d, &v) in second[done..]
            .iter_mut()
            .zip(src[2 * done + 1..].iter().step_by(2))
        {
            *d = v;
        }
    }
}

/// [`split_parity`]'s whole blocks of 32 source floats (one shuffle per side per block);
/// returns how many of each side it wrote (a multiple of 16).
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn split_parity_avx512(
    src: &[f32],
    first: &mut [f32],
    second: &mut [f32],
) -> usize {
    use std::arch::x86_64::*;
    let blocks = (src.len() / 32)
        .min(first.len() / 16)
        .min(second.len() / 16);
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for b in 0..blocks {
        // SAFETY: block `b` reads `src[32b .. 32b + 32]` and writes `[16b .. 16b + 16]` of
        // each side, all in bounds by the choice of `blocks`.
        unsafe {
            let lo = _mm512_loadu_ps(src.as_ptr().add(32 * b));
            let hi = _mm512_loadu_ps(src.as_ptr().add(32 * b + 16));
            _mm512_storeu_ps(
                first.as_mut_ptr().add(16 * b),
                _mm512_permutex2var_ps(lo, evens, hi),
            );
            _mm512_storeu_ps(
                second.as_mut_ptr().add(16 * b),
                _mm512_permutex2var_ps(lo, odds, hi),
            );
        }
    }
    16 * blocks
}

/// Kernels with up to this many taps keep their tap offsets on the stack.
pub(super) const TAPS: usize = 32;

/// `taps` offset slots: in `stack` when they fit, else in `heap` (a plane's kernel loop
/// then allocates nothing of its own besides its padded copy).
pub(super) fn tap_slots<'a>(
    stack: &'a mut [usize; TAPS],
    heap: &'a mut Vec<usize>,
    taps: usize,
) -> &'a mut [usize] {
    if taps <= TAPS {
        &mut stack[..taps]
    } else {
        heap.resize(taps, 0);
        heap
    }
}

/// `dst[i] = bias + Σ_t w[t] * plane[offs[t] + i]`, the taps in order (the same terms in
/// the same order as one multiply-add pass per tap), a block of `dst` at a time held in
/// registers across all the taps: one store per output instead of one per tap.
#[inline(always)]
pub(super) fn tap_sums<T: Float>(dst: &mut [T], bias: T, w: &[T], plane: &[T], offs: &[usize]) {
    #[cfg(target_arch = "x86_64")]
    if lanes::level() == Some(lanes::Level::Avx512)
        && let (Some(d), Some(w), Some(p), Some(b)) = (
            as_f32_mut(dst),
            as_f32(w),
            as_f32(plane),
            as_f32(std::slice::from_ref(&bias)),
        )
    {
        assert!(
            w.len() >= offs.len() && offs.iter().all(|&o| o + d.len() <= p.len()),
            "depthwise tap_sums: a tap reads past the plane"
        );
        // SAFETY: AVX-512F is present (checked above); every tap's run of `d.len()`
        // elements from its offset lies inside `p` (asserted above), and `w` holds a
        // weight per tap.
        unsafe { tap_sums_avx512(d, b[0], w, p, offs) };
        return;
    }
    // Blocks of `B` sums (LLVM keeps them on the stack: one load and store per tap, but
    // in L1).
    const B: usize = 64;
    let mut start = 0;
    let mut blocks = dst.chunks_exact_mut(B);
    for d in &mut blocks {
        let mut a = [bias; B];
        for (&wv, &o) in w.iter().zip(offs) {
            let src: &[T; B] = plane[o + start..o + start + B]
                .try_into()
                .expect("a block of B elements");
            for (s, &v) in a.iter_mut().zip(src) {
                *s = v.mul_add(wv, *s);
            }
        }
        d.copy_from_slice(&a);
        start += B;
    }
    let rest = blocks.into_remainder();
    if !rest.is_empty() {
        rest.fill(bias);
        let n = rest.len();
        for (&wv, &o) in w.iter().zip(offs) {
            for (d, &v) in rest.iter_mut().zip(&plane[o + start..o + start + n]) {
                *d = v.mul_add(wv, *d);
            }
        }
    }
}

/// [`tap_sums`] in f32 on AVX-512: blocks of eight registers of sums (128 outputs) held
/// across all the taps, then one block of up to eight for the rest, its last register
/// masked.
///
/// # Safety
/// The CPU has AVX-512F; `offs[t] + dst.len() <= plane.len()` for every tap `t`, and
/// `w.len() >= offs.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tap_sums_avx512(
    dst: &mut [f32],
    bias: f32,
    w: &[f32],
    plane: &[f32],
    offs: &[usize],
) {
    const V: usize = 16;
    let n = dst.len();
    let (d, p) = (dst.as_mut_ptr(), plane.as_ptr());
    let mut i = 0;
    // SAFETY (each block): its `NV * V` outputs from `i` (the last register masked to
    // `n`) are inside `dst`, and each tap reads the same span from its offset, inside
    // `plane` (the caller's promise).
    while i + 8 * V <= n {
        unsafe { tap_block_avx512::<8>(d.add(i), p.add(i), bias, w, offs, u16::MAX) };
        i += 8 * V;
    }
    let rest = n - i;
    if rest > 0 {
        let tail = rest % V;
        let mask = if tail == 0 {
            u16::MAX
        } else {
            (1u16 << tail) - 1
        };
        let (d, p) = unsafe { (d.add(i), p.add(i)) };
        macro_rules! by_count {
            ($($nv:literal)*) => {
                match rest.div_ceil(V) {
                    $($nv => unsafe { tap_block_avx512::<$nv>(d, p, bias, w, offs, mask) },)*
                    _ => unreachable!("fewer than eight registers are left"),
                }
            };
        }
        by_count!(1 2 3 4 5 6 7 8);
    }
}

/// `NV` registers of sums at `d`, over all the taps (tap `t` reads from `p + offs[t]`);
/// the last register is loaded and stored under `mask`.
///
/// # Safety
/// As [`tap_sums_avx512`], for the `NV` registers from `d` and `p`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn tap_block_avx512<const NV: usize>(
    d: *mut f32,
    p: *const f32,
    bias: f32,
    w: &[f32],
    offs: &[usize],
    mask: u16,
) {
    use std::arch::x86_64::*;
    const V: usize = 16;
    let mut acc = [_mm512_set1_ps(bias); NV];
    for (&o, &wv) in offs.iter().zip(w) {
        let wv = _mm512_set1_ps(wv);
        // SAFETY: as the caller promised.
        unsafe {
            let src = p.add(o);
            for (j, a) in acc.iter_mut().enumerate() {
                let v = if j + 1 < NV {
                    _mm512_loadu_ps(src.add(j * V))
                } else {
                    _mm512_maskz_loadu_ps(mask, src.add(j * V))
                };
                *a = _mm512_fmadd_ps(v, wv, *a);
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: as the caller promised.
        unsafe {
            if j + 1 < NV {
                _mm512_storeu_ps(d.add(j * V), *a);
            } else {
                _mm512_mask_storeu_ps(d.add(j * V), mask, *a);
            }
        }
    }
}

/// The channel multiplier of a depthwise convolution with `out_channels` outputs.
pub(super) fn multiplier(g: &Conv2dGeometry, out_channels: usize) -> usize {
    assert!(
        g.c > 0 && out_channels.is_multiple_of(g.c),
        "depthwise conv2d: {out_channels} output channels are not a multiple of {} input channels",
        g.c
    );
    out_channels / g.c
}

/// Depthwise `conv2d` forward of contiguous `x` `[n, c, h, w]` with weight
/// `[out_channels, 1, kh, kw]` (`out_channels` a multiple of `c`) and optional bias
/// `[out_channels]`: the contiguous output `[n, out_channels, oh, ow]`.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::depthwise_conv2d;
/// // two channels, a 2x2 kernel of ones on channel 0 and of twos on channel 1
/// let g = Conv2dGeometry { n: 1, c: 2, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let x = [1.0f32, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0];
/// let w = [1.0f32, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0];
/// assert_eq!(depthwise_conv2d(&x, &w, Some(&[0.5, 0.0]), &g, 2), vec![10.5, 8.0]);
/// ```
pub fn depthwise_conv2d<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    let m = multiplier(g, out_channels);
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [h, wd] = g.input;
    let [kh, kw] = g.kernel;
    let (plane, taps) = (oh * ow, kh * kw);
    let mut out = HostBuffer::<T>::zeroed(g.n * out_channels * plane);
    for_each_outer(&mut out, g.n * out_channels, plane * taps, |p, dst| {
        let (n, oc) = (p / out_channels, p % out_channels);
        let c = oc / m;
        let base = (n * g.c + c) * h * wd;
        with_simd(ForwardPlane {
            x: &x[base..base + h * wd],
            w: &w[oc * taps..(oc + 1) * taps],
            bias: bias.map_or(T::ZERO, |b| b[oc]),
            out: dst,
            g,
            ow,
        })
    });
    out
}

/// One input plane of the input gradient: the sum over the `m` output channels that read
/// it of each tap's weight times the output gradient, scattered back to the input pixels.
pub(super) struct InputGradPlane<'a, T> {
    /// The `m` output-gradient planes of this input channel, `[m, oh, ow]`.
    gout: &'a [T],
    /// Their weights, `[m, kh, kw]`.
    w: &'a [T],
    dx: &'a mut [T],
    g: &'a Conv2dGeometry,
    oh: usize,
    ow: usize,
}

impl<T: Float> SimdKernel for InputGradPlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (g, oh, ow) = (self.g, self.oh, self.ow);
        let [kh, kw] = g.kernel;
        let (w_in, s0, s1) = (g.input[1], g.stride[0], g.stride[1]);
        let (plane, taps) = (oh * ow, kh * kw);
        let m = self.w.len() / taps;
        let spans: Vec<_> = (0..kw).map(|kj| tap_columns(g, ow, kj)).collect();
        for (y, row) in self.dx.chunks_exact_mut(w_in).enumerate() {
            row.fill(T::ZERO);
            for ki in 0..kh {
                // The output row that reads input row `y` through kernel row `ki`.
                let t = (y + g.padding[0]) as isize - (ki * g.dilation[0]) as isize;
                if t < 0 || !(t as usize).is_multiple_of(s0) || t as usize / s0 >= oh {
                    continue;
                }
                let oy = t as usize / s0;
                for j in 0..m {
                    let grow = &self.gout[j * plane + oy * ow..j * plane + (oy + 1) * ow];
                    for (kj, (cols, x0)) in spans.iter().cloned().enumerate() {
                        let wv = self.w[j * taps + ki * kw + kj];
                        let src = &grow[cols.clone()];
                        if s1 == 1 {
                            for (d, &v) in row[x0..x0 + cols.len()].iter_mut().zip(src) {
                                *d = v.mul_add(wv, *d);
                            }
                        } else {
                            for (i, &v) in src.iter().enumerate() {
                                let d = &mut row[x0 + i * s1];
                                *d = v.mul_add(wv, *d);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The input gradient of [`depthwise_conv2d`]: contiguous `[n, c, h, w]` from the output
/// gradient `gout` `[n, out_channels, oh, ow]` and the weight.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::depthwise_conv2d_backward_input;
/// let g = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// // one output pixel reads every input pixel once, scaled by the matching tap
/// let dx = depthwise_conv2d_backward_input(&[2.0f32], &[1.0, 2.0, 3.0, 4.0], &g, 1);
/// assert_eq!(dx, vec![2.0, 4.0, 6.0, 8.0]);
/// ```
pub fn depthwise_conv2d_backward_input<T: Float>(
    gout: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    let m = multiplier(g, out_channels);
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [h, wd] = g.input;
    let taps = g.kernel[0] * g.kernel[1];
    let plane = oh * ow;
    let mut dx = HostBuffer::<T>::zeroed(g.n * g.c * h * wd);
    for_each_outer(&mut dx, g.n * g.c, plane * taps * m, |p, dst| {
        let (n, c) = (p / g.c, p % g.c);
        let first = n * out_channels + c * m;
        with_simd(InputGradPlane {
            gout: &gout[first * plane..(first + m) * plane],
            w: &w[c * m * taps..(c + 1) * m * taps],
            dx: dst,
            g,
            oh,
            ow,
        })
    });
    dx
}

/// One output channel's weight gradient: each tap's dot product of the output gradient
/// with the shifted input, over the batch, summed in several lanes.
pub(super) struct WeightGradChannel<'a, T> {
    /// The channel's output-gradient planes of every sample, `n` planes `batch_stride` apart.
    gout: &'a [T],
    /// The input planes it reads, likewise.
    x: &'a [T],
    gout_stride: usize,
    x_stride: usize,
    n: usize,
    dw: &'a mut [T],
    g: &'a Conv2dGeometry,
    oh: usize,
    ow: usize,
}

impl<T: Float> SimdKernel for WeightGradChannel<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        const LANES: usize = 8;
        let (g, oh, ow) = (self.g, self.oh, self.ow);
        let [kh, kw] = g.kernel;
        let (w_in, s1) = (g.input[1], g.stride[1]);
        let plane_in = g.input[0] * w_in;
        for ki in 0..kh {
            for kj in 0..kw {
                let (cols, x0) = tap_columns(g, ow, kj);
                let mut lanes = [T::ZERO; LANES];
                let mut tail = T::ZERO;
                for n in 0..self.n {
                    let gp = &self.gout[n * self.gout_stride..n * self.gout_stride + oh * ow];
                    let xp = &self.x[n * self.x_stride..n * self.x_stride + plane_in];
                    for oy in 0..oh {
                        let Some(y) = input_row(g, oy, ki) else {
                            continue;
                        };
                        let grow = &gp[oy * ow + cols.start..oy * ow + cols.end];
                        let src = &xp[y * w_in..(y + 1) * w_in];
                        if s1 == 1 {
                            let src = &src[x0..x0 + cols.len()];
                            let gc = grow.chunks_exact(LANES);
                            let sc = src.chunks_exact(LANES);
                            for (&a, &b) in gc.remainder().iter().zip(sc.remainder()) {
                                tail = a.mul_add(b, tail);
                            }
                            for (a, b) in gc.zip(sc) {
                                for l in 0..LANES {
                                    lanes[l] = a[l].mul_add(b[l], lanes[l]);
                                }
                            }
                        } else {
                            for (i, &a) in grow.iter().enumerate() {
                                tail = a.mul_add(src[x0 + i * s1], tail);
                            }
                        }
                    }
                }
                let total = lanes.iter().fold(tail, |s, &l| s + l);
                self.dw[ki * kw + kj] = total;
            }
        }
    }
}

/// The weight gradient of [`depthwise_conv2d`]: `[out_channels, 1, kh, kw]` from the
/// output gradient and the input. Channels run in parallel; each sums over the batch.
///
/// ```
/// use ferrograd_kernels::cpu::Conv2dGeometry;
/// use ferrograd_kernels::fused::conv::depthwise_conv2d_backward_weight;
/// let g = Conv2dGeometry { n: 1, c: 1, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let dw = depthwise_conv2d_backward_weight(&[2.0f32], &[1.0, 2.0, 3.0, 4.0], &g, 1);
/// assert_eq!(dw, vec![2.0, 4.0, 6.0, 8.0]);
/// ```
pub fn depthwise_conv2d_backward_weight<T: Float>(
    gout: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    let m = multiplier(g, out_channels);
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let [kh, kw] = g.kernel;
    let plane_in = g.input[0] * g.input[1];
    let plane = oh * ow;
    let mut dw = HostBuffer::<T>::zeroed(out_channels * kh * kw);
    for_each_outer(&mut dw, out_channels, g.n * plane * kh * kw, |oc, dst| {
        let c = oc / m;
        with_simd(WeightGradChannel {
            gout: &gout[oc * plane..],
            x: &x[c * plane_in..],
            gout_stride: out_channels * plane,
            x_stride: g.c * plane_in,
            n: g.n,
            dw: dst,
            g,
            oh,
            ow,
        })
    });
    dw
}
