//! Seedable random number generation (`torch.manual_seed`, `torch.Generator`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
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
    // ChaCha12, which is what `rand::rngs::StdRng` is, held directly so that its
    // position can be saved and restored.
    rng: ChaCha12Rng,
}

/// A generator state of the wrong size (not one [`Generator::get_state`] wrote).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a generator state is 56 bytes, got {len}")]
pub struct BadGeneratorState {
    /// The length given.
    pub len: usize,
}

/// Bytes of a [`Generator`]'s state: the 32-byte key, the stream (8) and the position in
/// it (16), little-endian.
const STATE_BYTES: usize = 56;

impl Generator {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: ChaCha12Rng::seed_from_u64(seed),
        }
    }

    /// The generator's state as bytes (`torch.Generator.get_state()`): a generator set
    /// to it draws the same numbers from there on.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// let mut g = Generator::new(1);
    /// Tensor::rand_with(&[3], DType::F32, &Device::Cpu, &mut g);
    /// let saved = g.get_state();
    /// let a = Tensor::rand_with(&[3], DType::F32, &Device::Cpu, &mut g);
    /// let mut h = Generator::new(99);
    /// h.set_state(&saved).unwrap();
    /// assert_eq!(Tensor::rand_with(&[3], DType::F32, &Device::Cpu, &mut h).to_vec::<f32>(), a.to_vec::<f32>());
    /// ```
    pub fn get_state(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STATE_BYTES);
        out.extend_from_slice(&self.rng.get_seed());
        out.extend_from_slice(&self.rng.get_stream().to_le_bytes());
        out.extend_from_slice(&self.rng.get_word_pos().to_le_bytes());
        out
    }

    /// Restores a state from [`Generator::get_state`].
    ///
    /// # Errors
    /// When `state` is not 56 bytes long (a state saved by this version); the generator
    /// is then unchanged.
    pub fn set_state(&mut self, state: &[u8]) -> Result<(), BadGeneratorState> {
        if state.len() != STATE_BYTES {
            return Err(BadGeneratorState { len: state.len() });
        }
        let seed: [u8; 32] = state[..32].try_into().expect("32 bytes");
        let stream = u64::from_le_bytes(state[32..40].try_into().expect("8 bytes"));
        let pos = u128::from_le_bytes(state[40..].try_into().expect("16 bytes"));
        let mut rng = ChaCha12Rng::from_seed(seed);
        rng.set_stream(stream);
        rng.set_word_pos(pos);
        self.rng = rng;
        Ok(())
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

/// The global generator's state (`torch.get_rng_state()`), for a checkpoint.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::{get_rng_state, set_rng_state};
/// let saved = get_rng_state();
/// let a = Tensor::rand(&[2], DType::F64, &Device::Cpu);
/// set_rng_state(&saved).unwrap();
/// assert_eq!(Tensor::rand(&[2], DType::F64, &Device::Cpu).to_vec::<f64>(), a.to_vec::<f64>());
/// ```
pub fn get_rng_state() -> Vec<u8> {
    with_global(|g| g.get_state())
}

/// Restores the global generator (`torch.set_rng_state`).
///
/// # Errors
/// As [`Generator::set_state`].
pub fn set_rng_state(state: &[u8]) -> Result<(), BadGeneratorState> {
    with_global(|g| g.set_state(state))
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
