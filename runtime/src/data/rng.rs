//! Per-sample random streams: inside a [`DataLoader`](super::DataLoader) each sample is
//! produced with a generator seeded from the loader's seed, the epoch and the sample's
//! index, so random transforms give the same result whichever worker runs them.

use crate::Generator;
use std::cell::RefCell;

thread_local! {
    static SAMPLE_RNG: RefCell<Option<Generator>> = const { RefCell::new(None) };
}

/// SplitMix64: a well-mixed 64-bit seed from `(seed, index)`.
pub(crate) fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `f` with the generator of the sample being loaded: inside a data loader, one
/// seeded from the loader's seed, the epoch and the sample index (so a run is
/// reproducible whatever the number of workers); elsewhere the global generator. Random
/// transforms draw from it.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::with_sample_rng;
/// let t = with_sample_rng(|g| Tensor::rand_with(&[2], DType::F32, &Device::Cpu, g));
/// assert_eq!(t.shape(), &[2]);
/// ```
pub fn with_sample_rng<R>(f: impl FnOnce(&mut Generator) -> R) -> R {
    let mut f = Some(f);
    let local = SAMPLE_RNG.with(|cell| {
        cell.borrow_mut()
            .as_mut()
            .map(|g| (f.take().expect("called once"))(g))
    });
    match local {
        Some(r) => r,
        None => crate::random::with_global(f.take().expect("not called yet")),
    }
}

/// Runs `f` with the per-sample generator seeded by `seed`.
/// (The previous generator is restored even if `f` panics.)
pub(crate) fn in_sample<R>(seed: u64, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Generator>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SAMPLE_RNG.with(|cell| *cell.borrow_mut() = previous);
        }
    }
    let _restore = Restore(SAMPLE_RNG.with(|cell| cell.replace(Some(Generator::new(seed)))));
    f()
}
