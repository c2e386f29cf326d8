//! Dropout: the CPU kernel and, in `dropout.cu` beside it, the CUDA kernel, both drawing
//! the mask from the same Philox4x32-10 stream.

use crate::cpu::HostBuffer;
use crate::cpu::{PARALLEL_THRESHOLD, for_each_chunk_mut, philox4x32_10};
use crate::cuda::KernelModule;
use crate::{Element, FloatElement};

/// The CUDA kernels of dropout (`dropout.cu`), compiled by NVRTC.
pub const CUDA_MODULE: KernelModule = KernelModule::new("dropout", include_str!("dropout.cu"));

/// Dropout of contiguous `x` with keep-scale `scale` (`1 / (1 - p)`): returns `y = x * mask`
/// and `mask` (`scale` where kept, 0 where dropped). Element `i` is kept when the top 24
/// bits of word `i % 4` of `philox4x32_10([i / 4, 0, 0, 0], seed)`, as a fraction of
/// 2^24, are at least `p` — the CUDA kernel's rule.
///
/// ```
/// let (y, mask) = ferrograd_kernels::fused::dropout::dropout(&[1.0f32; 1000], 7, 0.25, 1.0 / 0.75);
/// let kept = mask.iter().filter(|&&m| m != 0.0).count();
/// assert!((700..800).contains(&kept));
/// assert_eq!(y, mask); // x is all ones
/// ```
pub fn dropout<T: FloatElement>(
    x: &[T],
    seed: u64,
    p: f64,
    scale: f64,
) -> (HostBuffer<T>, HostBuffer<T>) {
    let n = x.len();
    let kept = T::from_acc(<T::Acc as Element>::from_f64(scale));
    let key = [seed as u32, (seed >> 32) as u32];
    // The mask, four elements (one Philox block) at a time; chunks are multiples of four,
    // so no block straddles two tasks.
    let chunk = if n < PARALLEL_THRESHOLD {
        n.max(4)
    } else {
        1 << 14
    };
    // Both buffers are written whole, chunk by chunk (no zero fill first).
    let mut mask = HostBuffer::<T>::new_uninit(n);
    for_each_chunk_mut(&mut mask, chunk, |i, dst| {
        for (b, quad) in dst.chunks_mut(4).enumerate() {
            let block = (i * chunk / 4 + b) as u64;
            let bits = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], key);
            for (m, word) in quad.iter_mut().zip(bits) {
                let u = (word >> 8) as f64 * (1.0 / 16_777_216.0);
                m.write(if u >= p { kept } else { T::ZERO });
            }
        }
    });
    // SAFETY: the chunks tile the mask and every slot of each was written.
    let mask = unsafe { mask.assume_init() };
    let mut y = HostBuffer::<T>::new_uninit(n);
    for_each_chunk_mut(&mut y, chunk, |i, dst| {
        let start = i * chunk;
        for ((d, &v), &m) in dst.iter_mut().zip(&x[start..]).zip(&mask[start..]) {
            d.write(T::from_acc(v.to_acc() * m.to_acc()));
        }
    });
    // SAFETY: as the mask: the chunks tile `y`, every slot written (`x` is as long).
    (unsafe { y.assume_init() }, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropout_is_deterministic_per_seed_and_split_invariant() {
        let x: Vec<f64> = (0..PARALLEL_THRESHOLD * 2 + 5).map(|i| i as f64).collect();
        let (y1, m1) = dropout(&x, 42, 0.5, 2.0);
        let (y2, _) = dropout(&x, 42, 0.5, 2.0);
        assert_eq!(y1, y2);
        // The serial path on a prefix draws the same mask as the parallel path.
        let (_, m_prefix) = dropout(&x[..1001], 42, 0.5, 2.0);
        assert_eq!(&m1[..1001], &m_prefix[..]);
        let (_, m_other) = dropout(&x, 43, 0.5, 2.0);
        assert_ne!(m1, m_other);
        let kept = m1.iter().filter(|&&m| m == 2.0).count() as f64 / x.len() as f64;
        assert!((kept - 0.5).abs() < 0.02, "kept fraction {kept}");
        assert!(y1.iter().zip(&m1).zip(&x).all(|((y, m), x)| *y == x * m));
    }
}
