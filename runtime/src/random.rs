//! Seedable random number generation (`torch.manual_seed`, `torch.Generator`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::sync::{LazyLock, Mutex};

/// A random number generator (`torch.Generator`). Tensors drawn from a generator seeded
/// the same way are the same.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let mut a = Generator::new(7);
/// let mut b = Generator::new(7);
/// let x = Tensor::randn_with(&[4], DType::F32, &Device::Cpu, &mut a);
/// let y = Tensor::randn_with(&[4], DType::F32, &Device::Cpu, &mut b);
/// assert_eq!(x.to_vec::<f32>(), y.to_vec::<f32>());
/// ```
#[derive(Clone, Debug)]
pub struct Generator {
    rng: StdRng,
}

impl Generator {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// A uniform sample in `[0, 1)`.
    pub(crate) fn uniform(&mut self) -> f64 {
        self.rng.random::<f64>()
    }

    /// A standard normal sample.
    pub(crate) fn normal(&mut self) -> f64 {
        StandardNormal.sample(&mut self.rng)
    }

    /// 64 uniform random bits (a seed for a counter-based stream such as dropout's).
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.rng.random::<u64>()
    }

    /// A uniform integer in `[low, high)`.
    pub(crate) fn int_in(&mut self, low: i64, high: i64) -> i64 {
        self.rng.random_range(low..high)
    }
}

static GLOBAL: LazyLock<Mutex<Generator>> = LazyLock::new(|| Mutex::new(Generator::new(0x5eed)));

/// Seeds the global generator that `randn`, `rand`, dropout and initialisers use.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// manual_seed(3);
/// let a = Tensor::rand(&[3], DType::F64, &Device::Cpu);
/// manual_seed(3);
/// assert_eq!(a.to_vec::<f64>(), Tensor::rand(&[3], DType::F64, &Device::Cpu).to_vec::<f64>());
/// ```
pub fn manual_seed(seed: u64) {
    *GLOBAL.lock().unwrap_or_else(|e| e.into_inner()) = Generator::new(seed);
}

/// Runs `f` with the global generator.
pub(crate) fn with_global<R>(f: impl FnOnce(&mut Generator) -> R) -> R {
    f(&mut GLOBAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// A copy of the global generator's state (for checkpoint recomputation).
pub(crate) fn global_state() -> Generator {
    with_global(|g| g.clone())
}

/// Restores the global generator's state.
pub(crate) fn set_global_state(state: Generator) {
    with_global(|g| *g = state);
}
