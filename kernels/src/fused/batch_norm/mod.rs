//! Eval-mode batch norm as one pass: with the running statistics folded into a per-channel
//! `scale = weight / sqrt(var + eps)` and `shift = bias - mean * scale` (as PyTorch's CPU
//! kernel folds them), `y = x * scale[c] + shift[c]` reads and writes each element once
//! (instead of four broadcast passes for subtract, multiply, scale and shift). On CUDA
//! the runtime applies the folded scale and shift as two broadcast ops, so this folder
//! has no `.cu`.

use crate::WideFloat as Float;
use crate::cpu::HostBuffer;
use crate::cpu::reduce::for_each_outer;
use crate::cpu::simd::{SimdKernel, with_simd};
use std::mem::MaybeUninit;

/// One plane (a sample's channel): `dst = src * scale + shift`.
struct AffinePlane<'a, T> {
    src: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
    scale: T,
    shift: T,
}

impl<T: Float> SimdKernel for AffinePlane<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (d, &v) in self.dst.iter_mut().zip(self.src) {
            d.write(v.mul_add(self.scale, self.shift));
        }
    }
}

/// `y[n, c, i] = x[n, c, i] * scale[c] + shift[c]` over contiguous `x` viewed as
/// `[n, channels, inner]`, in one pass (planes in parallel above the threshold).
///
/// ```
/// use ferrograd_kernels::fused::batch_norm::channel_affine;
/// // [1, 2, 2]: channel 0 doubled, channel 1 shifted by 10
/// let y = channel_affine(&[1.0f32, 2.0, 3.0, 4.0], &[2.0, 1.0], &[0.0, 10.0], 2);
/// assert_eq!(y, vec![2.0, 4.0, 13.0, 14.0]);
/// ```
pub fn channel_affine<T: Float>(x: &[T], scale: &[T], shift: &[T], inner: usize) -> HostBuffer<T> {
    let channels = scale.len();
    assert!(
        shift.len() == channels
            && channels > 0
            && inner > 0
            && x.len().is_multiple_of(channels * inner),
        "channel_affine: {} elements are not [n, {channels}, {inner}] (shift has {})",
        x.len(),
        shift.len()
    );
    let planes = x.len() / inner;
    let mut out = HostBuffer::<T>::new_uninit(x.len());
    for_each_outer(&mut out, planes, inner, |p, dst| {
        let c = p % channels;
        with_simd(AffinePlane {
            src: &x[p * inner..(p + 1) * inner],
            dst,
            scale: scale[c],
            shift: shift[c],
        })
    });
    // SAFETY: `for_each_outer` hands each of the `planes` rows of `out` (all of it: its
    // length is `planes * inner`) to one `AffinePlane`, which writes every element.
    unsafe { out.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plane_gets_its_channels_scale_and_shift() {
        let (n, c, inner) = (5, 7, 300);
        let x: Vec<f64> = (0..n * c * inner).map(|i| (i % 17) as f64 - 8.0).collect();
        let scale: Vec<f64> = (0..c).map(|i| i as f64 * 0.5 - 1.0).collect();
        let shift: Vec<f64> = (0..c).map(|i| i as f64 * 3.0).collect();
        let y = channel_affine(&x, &scale, &shift, inner);
        for (i, (&a, &v)) in y.iter().zip(&x).enumerate() {
            let ch = (i / inner) % c;
            assert_eq!(a, v * scale[ch] + shift[ch], "[{i}]");
        }
    }
}
