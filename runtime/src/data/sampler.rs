//! Samplers: the order in which a [`DataLoader`](super::DataLoader) visits a data set in
//! one epoch, drawn from the epoch's generator (so an epoch's order depends only on the
//! loader's seed and the epoch number).

use super::DataError;
use crate::Generator;

/// A uniformly random permutation of `0..n` (Fisher-Yates).
pub(crate) fn permutation(n: usize, generator: &mut Generator) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = generator.int_in(0, i as i64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// The indices one epoch visits (`torch.utils.data.Sampler`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{Sampler, SequentialSampler};
/// let s = SequentialSampler::new(3);
/// assert_eq!(s.indices(0, &mut Generator::new(0)), vec![0, 1, 2]);
/// ```
pub trait Sampler: Send + Sync {
    /// How many indices an epoch yields.
    fn len(&self) -> usize;

    /// Whether an epoch yields nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices of epoch `epoch`, drawing any randomness from `generator` (seeded by
    /// the loader for this epoch).
    fn indices(&self, epoch: u64, generator: &mut Generator) -> Vec<usize>;
}

/// `0, 1, ..., n - 1` (`SequentialSampler`).
///
/// ```
/// use ferrograd_runtime::data::{Sampler, SequentialSampler};
/// assert_eq!(SequentialSampler::new(4).len(), 4);
/// ```
#[derive(Clone, Debug)]
pub struct SequentialSampler {
    n: usize,
}

impl SequentialSampler {
    /// Every index of a data set of `n` samples, in order.
    pub fn new(n: usize) -> Self {
        SequentialSampler { n }
    }
}

impl Sampler for SequentialSampler {
    fn len(&self) -> usize {
        self.n
    }
    fn indices(&self, _: u64, _: &mut Generator) -> Vec<usize> {
        (0..self.n).collect()
    }
}

/// A random order (`RandomSampler`): a permutation, or with `replacement` `num_samples`
/// independent uniform draws; without replacement, `num_samples` above `n` repeats whole
/// permutations, as PyTorch.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{RandomSampler, Sampler};
/// let mut order = RandomSampler::new(5).indices(0, &mut Generator::new(1));
/// order.sort();
/// assert_eq!(order, vec![0, 1, 2, 3, 4]);
/// ```
#[derive(Clone, Debug)]
pub struct RandomSampler {
    n: usize,
    replacement: bool,
    num_samples: usize,
}

impl RandomSampler {
    /// A permutation of `0..n` each epoch.
    pub fn new(n: usize) -> Self {
        RandomSampler {
            n,
            replacement: false,
            num_samples: n,
        }
    }

    /// `num_samples` draws per epoch, with or without replacement.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::{RandomSampler, Sampler};
    /// let s = RandomSampler::with_replacement(3, true, 10);
    /// let draws = s.indices(0, &mut Generator::new(0));
    /// assert!(draws.len() == 10 && draws.iter().all(|&i| i < 3));
    /// ```
    pub fn with_replacement(n: usize, replacement: bool, num_samples: usize) -> Self {
        RandomSampler {
            n,
            replacement,
            num_samples,
        }
    }
}

impl Sampler for RandomSampler {
    fn len(&self) -> usize {
        self.num_samples
    }
    fn indices(&self, _: u64, generator: &mut Generator) -> Vec<usize> {
        if self.n == 0 {
            return Vec::new();
        }
        if self.replacement {
            return (0..self.num_samples)
                .map(|_| generator.int_in(0, self.n as i64) as usize)
                .collect();
        }
        let mut out = Vec::with_capacity(self.num_samples);
        while out.len() < self.num_samples {
            let take = (self.num_samples - out.len()).min(self.n);
            out.extend_from_slice(&permutation(self.n, generator)[..take]);
        }
        out
    }
}

/// Indices drawn with probability proportional to `weights` (`WeightedRandomSampler`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{Sampler, WeightedRandomSampler};
/// let s = WeightedRandomSampler::new(vec![0.0, 1.0, 0.0], 5, true).unwrap();
/// assert_eq!(s.indices(0, &mut Generator::new(0)), vec![1; 5]);
/// ```
#[derive(Clone, Debug)]
pub struct WeightedRandomSampler {
    cumulative: Vec<f64>,
    num_samples: usize,
    replacement: bool,
}

impl WeightedRandomSampler {
    /// `num_samples` draws per epoch with these (non-negative, not all zero) weights;
    /// without `replacement` each index is drawn at most once.
    pub fn new(
        weights: Vec<f64>,
        num_samples: usize,
        replacement: bool,
    ) -> Result<Self, DataError> {
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().all(|&w| w == 0.0) {
            return Err(DataError::Invalid(format!(
                "WeightedRandomSampler: weights must be finite, non-negative and not all zero, got {weights:?}"
            )));
        }
        let positive = weights.iter().filter(|&&w| w > 0.0).count();
        if !replacement && num_samples > positive {
            return Err(DataError::Invalid(format!(
                "WeightedRandomSampler: cannot draw {num_samples} samples without replacement from {positive} with positive weight"
            )));
        }
        let cumulative = weights
            .iter()
            .scan(0.0, |acc, w| {
                *acc += w;
                Some(*acc)
            })
            .collect();
        Ok(WeightedRandomSampler {
            cumulative,
            num_samples,
            replacement,
        })
    }
}

impl Sampler for WeightedRandomSampler {
    fn len(&self) -> usize {
        self.num_samples
    }
    fn indices(&self, _: u64, generator: &mut Generator) -> Vec<usize> {
        let mut cumulative = self.cumulative.clone();
        let mut out = Vec::with_capacity(self.num_samples);
        for _ in 0..self.num_samples {
            let total = *cumulative.last().expect("weights are not empty");
            let u = generator.uniform() * total;
            let i = cumulative
                .partition_point(|&c| c <= u)
                .min(cumulative.len() - 1);
            out.push(i);
            if !self.replacement {
                // Remove index i's weight from every cumulative sum from i on.
                let w = cumulative[i] - if i == 0 { 0.0 } else { cumulative[i - 1] };
                cumulative[i..].iter_mut().for_each(|c| *c -= w);
            }
        }
        out
    }
}

/// Groups another sampler's indices into batches (`BatchSampler`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{BatchSampler, SequentialSampler};
/// let b = BatchSampler::new(SequentialSampler::new(5), 2, false);
/// assert_eq!(b.batches(0, &mut Generator::new(0)), vec![vec![0, 1], vec![2, 3], vec![4]]);
/// assert_eq!(BatchSampler::new(SequentialSampler::new(5), 2, true).len(), 2);
/// ```
pub struct BatchSampler<S> {
    sampler: S,
    batch_size: usize,
    drop_last: bool,
}

impl<S: Sampler> BatchSampler<S> {
    /// Batches of `batch_size` (> 0); the last partial one is dropped with `drop_last`.
    #[track_caller]
    pub fn new(sampler: S, batch_size: usize, drop_last: bool) -> Self {
        assert!(batch_size > 0, "BatchSampler: batch_size must be positive");
        BatchSampler {
            sampler,
            batch_size,
            drop_last,
        }
    }

    /// The number of batches per epoch.
    pub fn len(&self) -> usize {
        let n = self.sampler.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch has no batch.
    ///
    /// ```
    /// use ferrograd_runtime::data::{BatchSampler, SequentialSampler};
    /// assert!(BatchSampler::new(SequentialSampler::new(1), 2, true).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batches of epoch `epoch`.
    pub fn batches(&self, epoch: u64, generator: &mut Generator) -> Vec<Vec<usize>> {
        let indices = self.sampler.indices(epoch, generator);
        let mut batches: Vec<Vec<usize>> = indices
            .chunks(self.batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        if self.drop_last && batches.last().is_some_and(|b| b.len() < self.batch_size) {
            batches.pop();
        }
        batches
    }
}

/// This replica's share of a data set for data-parallel training
/// (`DistributedSampler`): every replica draws the same permutation (seeded by `seed +
/// epoch`, so call the loader's `set_epoch`), padded by repeating indices (or trimmed
/// with `drop_last`) to a multiple of `num_replicas`, and takes every
/// `num_replicas`-th index from `rank`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{DistributedSampler, Sampler};
/// let ranks: Vec<Vec<usize>> = (0..2)
///     .map(|r| DistributedSampler::new(5, 2, r, false, 0, false).unwrap().indices(0, &mut Generator::new(0)))
///     .collect();
/// assert_eq!(ranks, vec![vec![0, 2, 4], vec![1, 3, 0]]);
/// ```
#[derive(Clone, Debug)]
pub struct DistributedSampler {
    n: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// Replica `rank` of `num_replicas` over `n` samples.
    pub fn new(
        n: usize,
        num_replicas: usize,
        rank: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
    ) -> Result<Self, DataError> {
        if num_replicas == 0 || rank >= num_replicas {
            return Err(DataError::Invalid(format!(
                "DistributedSampler: invalid rank {rank}, rank should be in the interval [0, {}]",
                num_replicas.saturating_sub(1)
            )));
        }
        Ok(DistributedSampler {
            n,
            num_replicas,
            rank,
            shuffle,
            seed,
            drop_last,
        })
    }

    fn total(&self) -> usize {
        if self.drop_last {
            self.n / self.num_replicas * self.num_replicas
        } else {
            self.n.div_ceil(self.num_replicas) * self.num_replicas
        }
    }
}

impl Sampler for DistributedSampler {
    fn len(&self) -> usize {
        self.total() / self.num_replicas
    }
    fn indices(&self, epoch: u64, _: &mut Generator) -> Vec<usize> {
        let mut order: Vec<usize> = if self.shuffle {
            permutation(self.n, &mut Generator::new(self.seed.wrapping_add(epoch)))
        } else {
            (0..self.n).collect()
        };
        let total = self.total();
        if order.len() < total && !order.is_empty() {
            let base = order.clone();
            while order.len() < total {
                let take = (total - order.len()).min(base.len());
                order.extend_from_slice(&base[..take]);
            }
        }
        order.truncate(total);
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.num_replicas)
            .collect()
    }
}
