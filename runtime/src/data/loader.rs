//! [`DataLoader`]: batches of a data set in a sampler's order, loaded on worker threads
//! with a bounded number of batches in flight and delivered in order.

use super::collate::{Collate, DefaultCollate};
use super::rng::{in_sample, mix};
use super::sampler::{BatchSampler, RandomSampler, Sampler, SequentialSampler};
use super::{DataError, Dataset};
use crate::Generator;
use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

/// One batch to load: which epoch pass it belongs to, its position, its indices.
struct Job {
    generation: u64,
    batch_no: usize,
    indices: Vec<usize>,
    seed: u64,
}

type Done<B> = (u64, usize, Result<B, DataError>);

/// Worker threads, each with its own job queue, sending results to one channel.
struct Pool<B> {
    jobs: Vec<Sender<Job>>,
    results: Receiver<Done<B>>,
    handles: Vec<JoinHandle<()>>,
}

impl<B> Drop for Pool<B> {
    /// Closes every job queue (a worker exits when its queue is closed and empty) and
    /// joins the threads, so no worker outlives the pool.
    fn drop(&mut self) {
        self.jobs.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Loads and collates one batch; a sample's error or panic names its index.
fn load_batch<D, C>(
    dataset: &D,
    collate: &C,
    indices: &[usize],
    seed: u64,
) -> Result<C::Batch, DataError>
where
    D: Dataset,
    C: Collate<D::Item>,
{
    let stacked = catch_unwind(AssertUnwindSafe(|| {
        in_sample(seed, || collate.collate_from(dataset, indices))
    }));
    match stacked {
        Ok(Some(batch)) => return batch,
        Ok(None) => {}
        Err(payload) => {
            return Err(DataError::Collate(format!(
                "panicked fetching the batch starting at sample {}: {}",
                indices.first().copied().unwrap_or(0),
                panic_message(payload.as_ref())
            )));
        }
    }
    let mut items = Vec::with_capacity(indices.len());
    for &index in indices {
        let got = catch_unwind(AssertUnwindSafe(|| {
            in_sample(mix(seed, index as u64), || dataset.get(index))
        }));
        match got {
            Ok(Ok(item)) => items.push(item),
            Ok(Err(e)) => {
                return Err(DataError::Sample {
                    index,
                    message: e.to_string(),
                });
            }
            Err(payload) => {
                return Err(DataError::Sample {
                    index,
                    message: format!("panicked: {}", panic_message(payload.as_ref())),
                });
            }
        }
    }
    match catch_unwind(AssertUnwindSafe(|| collate.collate(items))) {
        Ok(batch) => batch,
        Err(payload) => Err(DataError::Collate(format!(
            "panicked on the batch starting at sample {}: {}",
            indices.first().copied().unwrap_or(0),
            panic_message(payload.as_ref())
        ))),
    }
}

/// Batches a [`Dataset`] (`torch.utils.data.DataLoader`): `batch_size`, `shuffle`,
/// `drop_last`, a [`Sampler`], a [`Collate`] function, and `num_workers` worker threads
/// keeping `prefetch_factor` batches each in flight. Batches arrive in the sampler's
/// order; with a seed, epoch `e`'s batches (and the random transforms inside them, see
/// [`with_sample_rng`](super::with_sample_rng)) are the same for any number of workers.
/// Each [`iter`](Self::iter) is one epoch and moves to the next; [`set_epoch`](Self::set_epoch)
/// picks one. Workers stop and are joined when the epoch's iterator is dropped (or, with
/// `persistent_workers`, when the loader is).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{DataLoader, TensorDataset};
/// let d = TensorDataset::new(Tensor::arange(0.0, 10.0, 1.0, DType::F32, &Device::Cpu));
/// let mut loader = DataLoader::builder(d).batch_size(4).drop_last(true).num_workers(2).build();
/// let sizes: Vec<usize> = loader.iter().map(|b| b.unwrap().shape()[0]).collect();
/// assert_eq!(sizes, vec![4, 4]);
/// ```
pub struct DataLoader<D: Dataset + 'static, C: Collate<D::Item> = DefaultCollate> {
    dataset: Arc<D>,
    collate: Arc<C>,
    batches: BatchSampler<Arc<dyn Sampler>>,
    num_workers: usize,
    prefetch_factor: usize,
    persistent_workers: bool,
    seed: u64,
    epoch: u64,
    generation: u64,
    pool: Option<Pool<C::Batch>>,
    /// Batches of the next epoch to skip (a resumed position).
    skip: usize,
    /// The epoch being iterated and the batches of it yielded (or skipped) so far.
    cursor: Option<(u64, usize)>,
}

/// Where a [`DataLoader`] is: its seed, and the epoch and batch it yields next. An
/// epoch's order and random streams depend only on (seed, epoch), so a loader set to a
/// saved state ([`DataLoader::load_state`]) goes on with exactly the batches the saved
/// one would have yielded, in a fresh process too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderState {
    /// The seed of shuffling and per-sample streams.
    pub seed: u64,
    /// The epoch of the next batch.
    pub epoch: u64,
    /// The next batch's position in its epoch.
    pub batch: usize,
}

impl Sampler for Arc<dyn Sampler> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn indices(&self, epoch: u64, generator: &mut Generator) -> Vec<usize> {
        (**self).indices(epoch, generator)
    }
}

/// The options of a [`DataLoader`], with PyTorch's defaults (batch size 1, no shuffle,
/// no workers, prefetch factor 2).
pub struct DataLoaderBuilder<D, C> {
    dataset: D,
    collate: C,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    sampler: Option<Arc<dyn Sampler>>,
    num_workers: usize,
    prefetch_factor: usize,
    persistent_workers: bool,
    seed: Option<u64>,
}

impl<D: Dataset + 'static> DataLoader<D, DefaultCollate>
where
    D::Item: super::Stack,
{
    /// Starts configuring a loader over `dataset`, batching with [`DefaultCollate`].
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::{DataLoader, TensorDataset};
    /// let d = TensorDataset::new(Tensor::zeros(&[5, 2], DType::F32, &Device::Cpu));
    /// assert_eq!(DataLoader::builder(d).batch_size(2).build().len(), 3);
    /// ```
    pub fn builder(dataset: D) -> DataLoaderBuilder<D, DefaultCollate> {
        DataLoaderBuilder::new(dataset)
    }
}

impl<D: Dataset + 'static> DataLoaderBuilder<D, DefaultCollate> {
    /// Starts configuring a loader over `dataset` whose samples need a custom
    /// [`collate`](Self::collate) ([`DataLoader::builder`] when they can be stacked).
    ///
    /// ```
    /// use ferrograd_runtime::data::{DataError, DataLoaderBuilder, Dataset};
    /// struct Words;
    /// impl Dataset for Words {
    ///     type Item = String;
    ///     fn len(&self) -> usize { 3 }
    ///     fn get(&self, i: usize) -> Result<String, DataError> { Ok(format!("w{i}")) }
    /// }
    /// let join = |items: Vec<String>| -> Result<String, DataError> { Ok(items.join(" ")) };
    /// let mut loader = DataLoaderBuilder::new(Words).batch_size(2).collate(join).build();
    /// let batches: Vec<String> = loader.iter().map(Result::unwrap).collect();
    /// assert_eq!(batches, ["w0 w1", "w2"]);
    /// ```
    pub fn new(dataset: D) -> Self {
        DataLoaderBuilder {
            dataset,
            collate: DefaultCollate,
            batch_size: 1,
            shuffle: false,
            drop_last: false,
            sampler: None,
            num_workers: 0,
            prefetch_factor: 2,
            persistent_workers: false,
            seed: None,
        }
    }
}

impl<D: Dataset + 'static, C> DataLoaderBuilder<D, C> {
    /// Samples per batch (> 0).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
    /// A fresh random order every epoch (ignored when a sampler is given).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }
    /// Drop the last batch if it is smaller than `batch_size`.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }
    /// The order of samples within an epoch.
    pub fn sampler(mut self, sampler: impl Sampler + 'static) -> Self {
        self.sampler = Some(Arc::new(sampler));
        self
    }
    /// Worker threads (0 loads on the calling thread).
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.num_workers = num_workers;
        self
    }
    /// Batches in flight per worker (at least 1).
    pub fn prefetch_factor(mut self, prefetch_factor: usize) -> Self {
        self.prefetch_factor = prefetch_factor.max(1);
        self
    }
    /// Keep the workers between epochs.
    pub fn persistent_workers(mut self, persistent: bool) -> Self {
        self.persistent_workers = persistent;
        self
    }
    /// The seed of the shuffling and of the per-sample random streams (by default drawn
    /// from the global generator when the loader is built).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// A custom collate function.
    pub fn collate<C2: Collate<D::Item>>(self, collate: C2) -> DataLoaderBuilder<D, C2> {
        DataLoaderBuilder {
            dataset: self.dataset,
            collate,
            batch_size: self.batch_size,
            shuffle: self.shuffle,
            drop_last: self.drop_last,
            sampler: self.sampler,
            num_workers: self.num_workers,
            prefetch_factor: self.prefetch_factor,
            persistent_workers: self.persistent_workers,
            seed: self.seed,
        }
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> DataLoaderBuilder<D, C> {
    /// The loader.
    #[track_caller]
    pub fn build(self) -> DataLoader<D, C> {
        assert!(
            self.batch_size > 0,
            "DataLoader: batch_size must be positive"
        );
        let n = self.dataset.len();
        let sampler: Arc<dyn Sampler> = match self.sampler {
            Some(s) => s,
            None if self.shuffle => Arc::new(RandomSampler::new(n)),
            None => Arc::new(SequentialSampler::new(n)),
        };
        let seed = self
            .seed
            .unwrap_or_else(|| crate::random::with_global(|g| g.next_u64()));
        DataLoader {
            dataset: Arc::new(self.dataset),
            collate: Arc::new(self.collate),
            batches: BatchSampler::new(sampler, self.batch_size, self.drop_last),
            num_workers: self.num_workers,
            prefetch_factor: self.prefetch_factor,
            persistent_workers: self.persistent_workers,
            seed,
            epoch: 0,
            generation: 0,
            pool: None,
            skip: 0,
            cursor: None,
        }
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> DataLoader<D, C> {
    /// The number of batches per epoch.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data set.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    /// The epoch the next [`iter`](Self::iter) runs (its order and random streams).
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The epoch the next [`iter`](Self::iter) runs.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The seed of the shuffling and of the per-sample random streams.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The position to save in a checkpoint: the seed and the next batch (within the
    /// epoch being iterated, or the start of the next one).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::{DataLoader, TensorDataset};
    /// let ds = || TensorDataset::new(vec![Tensor::arange(0.0, 10.0, 1.0, DType::F32, &Device::Cpu)]);
    /// let mut loader = DataLoader::builder(ds()).batch_size(2).shuffle(true).seed(5).build();
    /// let mut it = loader.iter();
    /// it.next();
    /// it.next();
    /// drop(it);
    /// let saved = loader.state(); // epoch 0, batch 2
    /// let mut fresh = DataLoader::builder(ds()).batch_size(2).shuffle(true).build();
    /// fresh.load_state(&saved);
    /// let resumed: Vec<Vec<f32>> = fresh.iter().map(|b| b.unwrap()[0].to_vec::<f32>()).collect();
    /// let mut again = DataLoader::builder(ds()).batch_size(2).shuffle(true).seed(5).build();
    /// let whole: Vec<Vec<f32>> = again.iter().map(|b| b.unwrap()[0].to_vec::<f32>()).collect();
    /// assert_eq!(resumed, whole[2..]); // the three batches the saved loader had left
    /// ```
    pub fn state(&self) -> LoaderState {
        match self.cursor {
            Some((epoch, done)) if done < self.len() => LoaderState {
                seed: self.seed,
                epoch,
                batch: done,
            },
            _ => LoaderState {
                seed: self.seed,
                epoch: self.epoch,
                batch: self.skip,
            },
        }
    }

    /// Moves to a saved position: the next [`iter`](Self::iter) runs `state.epoch` from
    /// batch `state.batch` on, with `state.seed`.
    pub fn load_state(&mut self, state: &LoaderState) {
        self.seed = state.seed;
        self.epoch = state.epoch;
        self.skip = state.batch;
        self.cursor = None;
    }

    /// One epoch's batches, in order, as `Result`s (a sample's error or panic names its
    /// index); the loader then moves to the next epoch.
    pub fn iter(&mut self) -> Batches<'_, D, C> {
        let epoch = self.epoch;
        self.epoch += 1;
        self.generation += 1;
        let epoch_seed = mix(self.seed, epoch);
        let mut generator = Generator::new(epoch_seed ^ 0x5A17_CAFE);
        let mut batches = self.batches.batches(epoch, &mut generator);
        // A resumed position: those batches were yielded before the checkpoint.
        let skip = std::mem::take(&mut self.skip).min(batches.len());
        batches.drain(..skip);
        self.cursor = Some((epoch, skip));
        if self.num_workers > 0 && self.pool.is_none() {
            self.pool = Some(self.spawn());
        }
        Batches {
            loader: self,
            batches,
            next_send: 0,
            next_yield: 0,
            ready: BTreeMap::new(),
            epoch_seed,
        }
    }

    fn spawn(&self) -> Pool<C::Batch> {
        let (done_tx, results) = mpsc::channel::<Done<C::Batch>>();
        let mut jobs = Vec::with_capacity(self.num_workers);
        let mut handles = Vec::with_capacity(self.num_workers);
        for w in 0..self.num_workers {
            let (job_tx, job_rx) = mpsc::channel::<Job>();
            let (dataset, collate, done) = (
                Arc::clone(&self.dataset),
                Arc::clone(&self.collate),
                done_tx.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("ferrograd-data-{w}"))
                .spawn(move || {
                    while let Ok(job) = job_rx.recv() {
                        let start = std::time::Instant::now();
                        let batch = load_batch(&*dataset, &*collate, &job.indices, job.seed);
                        ferrograd_kernels::cpu::spans::record(
                            || format!("DataLoader batch {}", job.batch_no),
                            start,
                        );
                        if done.send((job.generation, job.batch_no, batch)).is_err() {
                            return;
                        }
                    }
                })
                .expect("the operating system could not start a data worker thread");
            jobs.push(job_tx);
            handles.push(handle);
        }
        Pool {
            jobs,
            results,
            handles,
        }
    }
}

/// One epoch of a [`DataLoader`]: an iterator of batches in order, with an exact length.
pub struct Batches<'a, D: Dataset + 'static, C: Collate<D::Item>> {
    loader: &'a mut DataLoader<D, C>,
    batches: Vec<Vec<usize>>,
    next_send: usize,
    next_yield: usize,
    ready: BTreeMap<usize, Result<C::Batch, DataError>>,
    epoch_seed: u64,
}

impl<D: Dataset + 'static, C: Collate<D::Item>> Batches<'_, D, C> {
    /// Queues batches until `prefetch_factor` per worker are in flight.
    fn fill(&mut self) {
        let Some(pool) = &self.loader.pool else {
            return;
        };
        let limit = self.loader.num_workers * self.loader.prefetch_factor;
        while self.next_send < self.batches.len() && self.next_send - self.next_yield < limit {
            let batch_no = self.next_send;
            let job = Job {
                generation: self.loader.generation,
                batch_no,
                indices: std::mem::take(&mut self.batches[batch_no]),
                seed: self.epoch_seed,
            };
            // A worker that died (it only can by a bug) leaves its queue closed; the
            // batch then surfaces as an error below rather than hanging.
            if pool.jobs[batch_no % pool.jobs.len()].send(job).is_err() {
                self.ready.insert(
                    batch_no,
                    Err(DataError::Invalid(format!(
                        "data worker {} has exited",
                        batch_no % pool.jobs.len()
                    ))),
                );
            }
            self.next_send += 1;
        }
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> Iterator for Batches<'_, D, C> {
    type Item = Result<C::Batch, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next_yield >= self.batches.len() {
            return None;
        }
        let batch_no = self.next_yield;
        if let Some((_, done)) = &mut self.loader.cursor {
            *done += 1;
        }
        if self.loader.pool.is_none() {
            self.next_yield += 1;
            let indices = std::mem::take(&mut self.batches[batch_no]);
            return Some(load_batch(
                &*self.loader.dataset,
                &*self.loader.collate,
                &indices,
                self.epoch_seed,
            ));
        }
        self.fill();
        while !self.ready.contains_key(&batch_no) {
            let pool = self.loader.pool.as_ref().expect("workers are running");
            match pool.results.recv() {
                Ok((generation, no, batch)) if generation == self.loader.generation => {
                    self.ready.insert(no, batch);
                }
                Ok(_) => {} // a batch of an abandoned epoch
                Err(_) => {
                    self.ready.insert(
                        batch_no,
                        Err(DataError::Invalid("every data worker has exited".into())),
                    );
                }
            }
        }
        self.next_yield += 1;
        self.fill();
        self.ready.remove(&batch_no)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batches.len() - self.next_yield;
        (left, Some(left))
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> ExactSizeIterator for Batches<'_, D, C> {}

impl<D: Dataset + 'static, C: Collate<D::Item>> Drop for Batches<'_, D, C> {
    /// Without persistent workers, stops and joins them with the epoch.
    fn drop(&mut self) {
        if !self.loader.persistent_workers {
            self.loader.pool = None;
        }
    }
}
