//! Counter-based random numbers: Philox4x32-10, the generator of the CUDA dropout kernel,
//! so that a seed draws the same dropout mask on the CPU and on a GPU.

use super::PARALLEL_THRESHOLD;
use super::for_each_chunk_mut;
use crate::{Element, FloatElement};

/// Philox4x32-10 of a 128-bit `counter` under a 64-bit `key` (Salmon et al. 2011).
///
/// ```
/// // Known-answer test of the Random123 reference implementation.
/// let out = ferrograd_kernels::cpu::philox4x32_10([0; 4], [0; 2]);
/// assert_eq!(out, [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
/// ```
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(0x9E37_79B9);
            k[1] = k[1].wrapping_add(0xBB67_AE85);
        }
        let p0 = 0xD251_1F53u64 * c[0] as u64;
        let p1 = 0xCD9E_8D57u64 * c[2] as u64;
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// Dropout of contiguous `x` with keep-scale `scale` (`1 / (1 - p)`): returns `y = x * mask`
/// and `mask` (`scale` where kept, 0 where dropped). Element `i` is kept when the top 24
/// bits of word `i % 4` of `philox4x32_10([i / 4, 0, 0, 0], seed)`, as a fraction of
/// 2^24, are at least `p` — the CUDA kernel's rule.
///
/// ```
/// let (y, mask) = ferrograd_kernels::cpu::dropout(&[1.0f32; 1000], 7, 0.25, 1.0 / 0.75);
/// let kept = mask.iter().filter(|&&m| m != 0.0).count();
/// assert!((700..800).contains(&kept));
/// assert_eq!(y, mask); // x is all ones
/// ```
pub fn dropout<T: FloatElement>(x: &[T], seed: u64, p: f64, scale: f64) -> (Vec<T>, Vec<T>) {
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
    let mut mask = vec![T::ZERO; n];
    for_each_chunk_mut(&mut mask, chunk, |i, dst| {
        for (b, quad) in dst.chunks_mut(4).enumerate() {
            let block = (i * chunk / 4 + b) as u64;
            let bits = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], key);
            for (m, word) in quad.iter_mut().zip(bits) {
                let u = (word >> 8) as f64 * (1.0 / 16_777_216.0);
                *m = if u >= p { kept } else { T::ZERO };
            }
        }
    });
    let mut y = vec![T::ZERO; n];
    for_each_chunk_mut(&mut y, chunk, |i, dst| {
        let start = i * chunk;
        for ((d, &v), &m) in dst.iter_mut().zip(&x[start..]).zip(&mask[start..]) {
            *d = T::from_acc(v.to_acc() * m.to_acc());
        }
    });
    (y, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_known_answers() {
        // Random123's kat_vectors for philox4x32_10.
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

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
