//! im2col (`unfold2d`) and its adjoint col2im (`fold2d`): convolution and pooling are
//! built on these plus matmul/reductions, so each has exactly one backward.

use super::PARALLEL_THRESHOLD;
use super::map::build_vec_in;
use super::par::for_each_chunk_mut;
use super::pool::HostBuffer;
use crate::NumElement;
use std::mem::MaybeUninit;

/// The sizes of a 2-D sliding window over `[n, c, h, w]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dGeometry {
    /// Batch size.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Input height and width.
    pub input: [usize; 2],
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride per spatial dim.
    pub stride: [usize; 2],
    /// Zero padding per spatial dim (both sides).
    pub padding: [usize; 2],
    /// Dilation per spatial dim.
    pub dilation: [usize; 2],
}

impl Conv2dGeometry {
    /// The output size along spatial dim `d`, or `None` when the window does not fit.
    ///
    /// ```
    /// use ferrograd_kernels::cpu::Conv2dGeometry;
    /// let g = Conv2dGeometry { n: 1, c: 1, input: [28, 28], kernel: [5, 5], stride: [1, 1], padding: [2, 2], dilation: [1, 1] };
    /// assert_eq!(g.output(), Some([28, 28]));
    /// ```
    pub fn output(&self) -> Option<[usize; 2]> {
        let mut out = [0; 2];
        #[allow(clippy::needless_range_loop)] // d indexes five parallel arrays
        for d in 0..2 {
            let span = self.dilation[d] * (self.kernel[d] - 1) + 1;
            let padded = self.input[d] + 2 * self.padding[d];
            if padded < span || self.stride[d] == 0 {
                return None;
            }
            out[d] = (padded - span) / self.stride[d] + 1;
        }
        Some(out)
    }

    fn out_unchecked(&self) -> [usize; 2] {
        self.output().expect("conv geometry checked by the caller")
    }
}

/// The output columns `ox` whose input column `ox * stride + offset` lies in `0..w`.
#[inline]
pub(crate) fn valid_columns(
    offset: isize,
    stride: usize,
    w: usize,
    ow: usize,
) -> std::ops::Range<usize> {
    let s = stride as isize;
    let lo = if offset >= 0 {
        0
    } else {
        ((-offset + s - 1) / s) as usize
    };
    let last = w as isize - 1 - offset;
    let hi = if last < 0 { 0 } else { (last / s + 1) as usize };
    lo.min(ow)..hi.min(ow).max(lo.min(ow))
}

/// Copies one kernel tap `(ki, kj)` of one image plane into a row of `oys.len() * ow`
/// columns (output rows `oys` of the `oh` rows), zero outside the input. The in-bounds part
/// of each output row is a plain copy, computed once per tap rather than tested per pixel;
/// every slot of `dst` is written.
pub(crate) fn gather_tap<T: NumElement>(
    img: &[T],
    g: &Conv2dGeometry,
    [oh, ow]: [usize; 2],
    oys: std::ops::Range<usize>,
    (ki, kj): (usize, usize),
    dst: &mut [MaybeUninit<T>],
) {
    let [h, w] = g.input;
    let offset = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
    let cols = valid_columns(offset, g.stride[1], w, ow);
    let x0 = (cols.start as isize * g.stride[1] as isize + offset).max(0) as usize;
    let zero = |d: &mut [MaybeUninit<T>]| d.iter_mut().for_each(|d| _ = d.write(T::ZERO));
    let dst = &mut dst[..oys.len() * ow];
    // Output rows whose input row lies inside the image; the others are all padding.
    let row_offset = (ki * g.dilation[0]) as isize - g.padding[0] as isize;
    let valid = valid_columns(row_offset, g.stride[0], h, oh);
    let rows = valid.start.clamp(oys.start, oys.end)..valid.end.clamp(oys.start, oys.end);
    if cols.is_empty() || rows.is_empty() {
        zero(dst);
        return;
    }
    let (first, last) = (rows.start - oys.start, rows.end - oys.start);
    zero(&mut dst[..first * ow]);
    zero(&mut dst[last * ow..]);
    let y0 = (rows.start as isize * g.stride[0] as isize + row_offset) as usize;
    let dst = &mut dst[first * ow..last * ow];
    for (i, dst_row) in dst.chunks_exact_mut(ow).enumerate() {
        let y = y0 + i * g.stride[0];
        let src_row = &img[y * w..(y + 1) * w];
        let (left, rest) = dst_row.split_at_mut(cols.start);
        let (inside, right) = rest.split_at_mut(cols.len());
        zero(left);
        zero(right);
        if g.stride[1] == 1 {
            copy_short(&src_row[x0..x0 + inside.len()], inside);
        } else if g.stride[1] == 2 && !inside.is_empty() {
            // By pairs (ResNet's stem and downsampling layers), so that the compiler can
            // vectorise the deinterleave; the last column's pair may end past the row.
            let n = inside.len();
            let pairs = &src_row[x0..x0 + 2 * (n - 1)];
            for (d, p) in inside[..n - 1].iter_mut().zip(pairs.chunks_exact(2)) {
                d.write(p[0]);
            }
            inside[n - 1].write(src_row[x0 + 2 * (n - 1)]);
        } else {
            for (i, d) in inside.iter_mut().enumerate() {
                d.write(src_row[x0 + i * g.stride[1]]);
            }
        }
    }
}

/// The adjoint of [`gather_tap`]: adds a row of `oys.len() * ow` columns (tap `(ki, kj)`
/// of output rows `oys`) back into the image plane `img` at the input pixels that tap
/// read; columns that fell into the padding are dropped.
pub(crate) fn scatter_tap<T: NumElement>(
    src: &[T],
    g: &Conv2dGeometry,
    [oh, ow]: [usize; 2],
    oys: std::ops::Range<usize>,
    (ki, kj): (usize, usize),
    img: &mut [T],
) {
    let [h, w] = g.input;
    let offset = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
    let cols = valid_columns(offset, g.stride[1], w, ow);
    let row_offset = (ki * g.dilation[0]) as isize - g.padding[0] as isize;
    let valid = valid_columns(row_offset, g.stride[0], h, oh);
    let rows = valid.start.clamp(oys.start, oys.end)..valid.end.clamp(oys.start, oys.end);
    if cols.is_empty() || rows.is_empty() {
        return;
    }
    let x0 = (cols.start as isize * g.stride[1] as isize + offset) as usize;
    let y0 = (rows.start as isize * g.stride[0] as isize + row_offset) as usize;
    let s1 = g.stride[1];
    for (i, oy) in rows.enumerate() {
        let at = (oy - oys.start) * ow;
        let src = &src[at + cols.start..at + cols.end];
        let y = y0 + i * g.stride[0];
        let row = &mut img[y * w..(y + 1) * w];
        if s1 == 1 {
            for (d, &v) in row[x0..x0 + src.len()].iter_mut().zip(src) {
                *d = *d + v;
            }
        } else {
            for (i, &v) in src.iter().enumerate() {
                let d = &mut row[x0 + i * s1];
                *d = *d + v;
            }
        }
    }
}

/// `dst = src` for the short rows of small feature maps (LeNet's are 10 to 28 wide), in
/// fixed blocks of 8 the compiler keeps inline: a `memcpy` call per row would cost more
/// than the copy.
#[inline(always)]
fn copy_short<T: Copy>(src: &[T], dst: &mut [MaybeUninit<T>]) {
    let mut s = src.chunks_exact(8);
    let mut d = dst.chunks_exact_mut(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let block: [T; 8] = s.try_into().expect("chunk of 8");
        for (d, x) in d.iter_mut().zip(block) {
            d.write(x);
        }
    }
    // At most 7 left: unrolled by hand so that it does not become a `memcpy` call.
    let (d, s) = (d.into_remainder(), s.remainder());
    macro_rules! tail {
        ($($i:literal)*) => {$(
            if $i < s.len() {
                d[$i].write(s[$i]);
            }
        )*};
    }
    tail!(0 1 2 3 4 5 6);
}

/// `[n, c, h, w]` (contiguous) to kernel-major columns `[c*kh*kw, n*oh*ow]`, zero outside
/// the input. With the batch folded into the columns, a convolution is a single GEMM
/// `[out, c*kh*kw] @ [c*kh*kw, n*oh*ow]` instead of `n` small ones.
///
/// ```
/// use ferrograd_kernels::cpu::{unfold2d, Conv2dGeometry};
/// // two 2x2 images, 2x2 kernel: one window per image; row k holds tap k of both images
/// let g = Conv2dGeometry { n: 2, c: 1, input: [2, 2], kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
/// assert_eq!(unfold2d(&x, &g), vec![1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]);
/// ```
pub fn unfold2d<T: NumElement>(src: &[T], g: &Conv2dGeometry) -> HostBuffer<T> {
    let [oh, ow] = g.out_unchecked();
    let [h, w] = g.input;
    let [kh, kw] = g.kernel;
    let plane = oh * ow;
    let row_len = g.n * plane;
    let len = g.c * kh * kw * row_len;
    if row_len == 0 {
        return HostBuffer::zeroed(len);
    }
    let fill_row = |r: usize, row: &mut [MaybeUninit<T>]| {
        let (c, tap) = (r / (kh * kw), r % (kh * kw));
        for n in 0..g.n {
            let img = &src[(n * g.c + c) * h * w..(n * g.c + c + 1) * h * w];
            gather_tap(
                img,
                g,
                [oh, ow],
                0..oh,
                (tap / kw, tap % kw),
                &mut row[n * plane..(n + 1) * plane],
            );
        }
    };
    // One output row (one channel and tap over the whole batch) per task.
    let chunk = if len < PARALLEL_THRESHOLD {
        len
    } else {
        row_len
    };
    build_vec_in(len, chunk, |start, rows| {
        for (i, row) in rows.chunks_mut(row_len).enumerate() {
            fill_row(start / row_len + i, row);
        }
    })
}

/// The adjoint of [`unfold2d`]: kernel-major columns `[c*kh*kw, n*oh*ow]` summed back
/// into `[n, c, h, w]` (overlapping windows add up).
///
/// ```
/// use ferrograd_kernels::cpu::{fold2d, Conv2dGeometry};
/// let g = Conv2dGeometry { n: 1, c: 1, input: [1, 3], kernel: [1, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
/// // two windows of width 2 over 3 pixels: the middle pixel is covered twice
/// assert_eq!(fold2d(&[1.0f32, 1.0, 1.0, 1.0], &g), vec![1.0, 2.0, 1.0]);
/// ```
pub fn fold2d<T: NumElement>(cols: &[T], g: &Conv2dGeometry) -> HostBuffer<T> {
    let [oh, ow] = g.out_unchecked();
    let [h, w] = g.input;
    let [kh, kw] = g.kernel;
    let plane = oh * ow;
    let row_len = g.n * plane;
    let mut out = HostBuffer::<T>::zeroed(g.n * g.c * h * w);
    if h * w == 0 {
        return out;
    }
    // Each output plane (n, c) is written by one task: no two tasks touch the same pixel.
    // A tap's in-bounds output columns are found once (not tested per pixel), so with
    // unit stride each row is one contiguous add that vectorises.
    let s1 = g.stride[1];
    let body = |nc: usize, img: &mut [T]| {
        let (n, c) = (nc / g.c, nc % g.c);
        for ki in 0..kh {
            for kj in 0..kw {
                let r = (c * kh + ki) * kw + kj;
                let taps = &cols[r * row_len + n * plane..r * row_len + (n + 1) * plane];
                let offset = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
                let valid = valid_columns(offset, s1, w, ow);
                if valid.is_empty() {
                    continue;
                }
                let x0 = (valid.start as isize * s1 as isize + offset) as usize;
                for oy in 0..oh {
                    let y =
                        (oy * g.stride[0] + ki * g.dilation[0]) as isize - g.padding[0] as isize;
                    if y < 0 || y >= h as isize {
                        continue;
                    }
                    let src = &taps[oy * ow + valid.start..oy * ow + valid.end];
                    let row = &mut img[y as usize * w..(y as usize + 1) * w];
                    if s1 == 1 {
                        for (d, &v) in row[x0..x0 + src.len()].iter_mut().zip(src) {
                            *d = *d + v;
                        }
                    } else {
                        for (i, &v) in src.iter().enumerate() {
                            let d = &mut row[x0 + i * s1];
                            *d = *d + v;
                        }
                    }
                }
            }
        }
    };
    if cols.len() < PARALLEL_THRESHOLD {
        out.chunks_mut(h * w)
            .enumerate()
            .for_each(|(i, d)| body(i, d));
    } else {
        for_each_chunk_mut(&mut out, h * w, body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one pixel at a time.
    fn naive_unfold(src: &[f64], g: &Conv2dGeometry) -> Vec<f64> {
        let [oh, ow] = g.output().unwrap();
        let [h, w] = g.input;
        let [kh, kw] = g.kernel;
        let mut out = vec![0.0; g.c * kh * kw * g.n * oh * ow];
        for c in 0..g.c {
            for ki in 0..kh {
                for kj in 0..kw {
                    for n in 0..g.n {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let y = (oy * g.stride[0] + ki * g.dilation[0]) as isize
                                    - g.padding[0] as isize;
                                let x = (ox * g.stride[1] + kj * g.dilation[1]) as isize
                                    - g.padding[1] as isize;
                                let row = (c * kh + ki) * kw + kj;
                                let col = (n * oh + oy) * ow + ox;
                                if (0..h as isize).contains(&y) && (0..w as isize).contains(&x) {
                                    out[row * g.n * oh * ow + col] =
                                        src[((n * g.c + c) * h + y as usize) * w + x as usize];
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn unfold_and_fold_match_the_definition_over_many_geometries() {
        let mut checked = 0;
        // Long stride-2 rows (the paired copy), odd and even widths.
        for width in [40, 41] {
            let g = Conv2dGeometry {
                n: 2,
                c: 2,
                input: [3, width],
                kernel: [3, 3],
                stride: [1, 2],
                padding: [1, 1],
                dilation: [1, 1],
            };
            let src: Vec<f64> = (0..2 * 2 * 3 * width).map(|i| i as f64).collect();
            assert_eq!(unfold2d(&src, &g), naive_unfold(&src, &g), "unfold {g:?}");
        }
        for stride in 1..=3 {
            for padding in 0..=2 {
                for dilation in 1..=2 {
                    for (kh, kw) in [(1, 1), (2, 3), (3, 3)] {
                        let g = Conv2dGeometry {
                            n: 2,
                            c: 2,
                            input: [5, 7],
                            kernel: [kh, kw],
                            stride: [stride, stride + 1],
                            padding: [padding, padding],
                            dilation: [dilation, dilation],
                        };
                        if g.output().is_none() {
                            continue;
                        }
                        let src: Vec<f64> = (0..2 * 2 * 5 * 7)
                            .map(|i| (i as f64 * 0.37).sin())
                            .collect();
                        let cols = unfold2d(&src, &g);
                        assert_eq!(cols, naive_unfold(&src, &g), "unfold {g:?}");
                        // fold is the adjoint: <unfold(x), y> == <x, fold(y)>.
                        let y: Vec<f64> =
                            (0..cols.len()).map(|i| (i as f64 * 0.11).cos()).collect();
                        let lhs: f64 = cols.iter().zip(&y).map(|(a, b)| a * b).sum();
                        let rhs: f64 = src
                            .iter()
                            .zip(fold2d(&y, &g).iter())
                            .map(|(a, b)| a * b)
                            .sum();
                        assert!((lhs - rhs).abs() < 1e-9, "fold {g:?}: {lhs} vs {rhs}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 40);
    }
}
