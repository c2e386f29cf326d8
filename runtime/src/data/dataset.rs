//! Map-style data sets and their combinators: [`TensorDataset`], [`Subset`],
//! [`ConcatDataset`], [`Map`] (per-sample transforms) and [`random_split`].

use super::DataError;
use super::collate::Stack;
use super::sampler::permutation;
use crate::{Generator, Tensor};
use std::sync::Arc;

/// A map-style data set (`torch.utils.data.Dataset`): `len` samples, each produced by
/// `get(index)`. Shared between worker threads, so `Send + Sync`.
///
/// ```
/// use ferrograd_runtime::data::{DataError, Dataset};
/// struct Squares(usize);
/// impl Dataset for Squares {
///     type Item = u64;
///     fn len(&self) -> usize { self.0 }
///     fn get(&self, index: usize) -> Result<u64, DataError> { Ok((index * index) as u64) }
/// }
/// let d = Squares(4).map(|v| v + 1);
/// assert_eq!(d.get(3).unwrap(), 10);
/// ```
pub trait Dataset: Send + Sync {
    /// One sample.
    type Item: Send + 'static;

    /// The number of samples.
    fn len(&self) -> usize;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sample `index` (`__getitem__`); an index past the end is an
    /// [`DataError::IndexOutOfRange`].
    fn get(&self, index: usize) -> Result<Self::Item, DataError>;

    /// The samples at `indices` already batched, in one step rather than one per sample
    /// (PyTorch's `__getitems__`), or `None` to load them one by one. A
    /// [`DataLoader`](super::DataLoader) with the default collate asks for this first;
    /// [`TensorDataset`] answers with one `index_select` per tensor.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::{Dataset, TensorDataset};
    /// let d = TensorDataset::new(Tensor::arange(0.0, 5.0, 1.0, DType::F32, &Device::Cpu));
    /// let batch = d.get_stacked(&[4, 1]).unwrap().unwrap();
    /// assert_eq!(batch.to_vec::<f32>(), vec![4.0, 1.0]);
    /// ```
    fn get_stacked(
        &self,
        indices: &[usize],
    ) -> Option<Result<<Self::Item as Stack>::Batch, DataError>>
    where
        Self::Item: Stack,
    {
        let _ = indices;
        None
    }

    /// This data set with `f` applied to every sample (a transform).
    fn map<F, U>(self, f: F) -> Map<Self, F>
    where
        Self: Sized,
        F: Fn(Self::Item) -> U + Send + Sync,
        U: Send + 'static,
    {
        Map { dataset: self, f }
    }
}

/// Shared and boxed data sets are data sets.
macro_rules! forward_dataset {
    ($($wrapper:ident),*) => {$(
        impl<D: Dataset + ?Sized> Dataset for $wrapper<D> {
            type Item = D::Item;
            fn len(&self) -> usize {
                (**self).len()
            }
            fn get(&self, index: usize) -> Result<D::Item, DataError> {
                (**self).get(index)
            }
            fn get_stacked(&self, indices: &[usize]) -> Option<Result<<D::Item as Stack>::Batch, DataError>>
            where
                D::Item: Stack,
            {
                (**self).get_stacked(indices)
            }
        }
    )*};
}

forward_dataset!(Arc, Box);

/// An iterable-style data set (`torch.utils.data.IterableDataset`): a stream of samples
/// rather than random access, for data read sequentially.
///
/// ```
/// use ferrograd_runtime::data::{DataError, IterableDataset};
/// struct Count(u32);
/// impl IterableDataset for Count {
///     type Item = u32;
///     fn iter(&self) -> Box<dyn Iterator<Item = Result<u32, DataError>> + Send + '_> {
///         Box::new((0..self.0).map(Ok))
///     }
/// }
/// assert_eq!(Count(3).iter().map(|r| r.unwrap()).sum::<u32>(), 3);
/// ```
pub trait IterableDataset: Send + Sync {
    /// One sample.
    type Item: Send + 'static;

    /// A fresh pass over the samples.
    fn iter(&self) -> Box<dyn Iterator<Item = Result<Self::Item, DataError>> + Send + '_>;

    /// One pass in batches of `batch_size` joined by `collate` (the last partial batch
    /// dropped with `drop_last`); a sample's error ends its batch as that error.
    ///
    /// ```
    /// use ferrograd_runtime::data::{DataError, DefaultCollate, IterableDataset};
    /// struct Count(i64);
    /// impl IterableDataset for Count {
    ///     type Item = i64;
    ///     fn iter(&self) -> Box<dyn Iterator<Item = Result<i64, DataError>> + Send + '_> {
    ///         Box::new((0..self.0).map(Ok))
    ///     }
    /// }
    /// let batches: Vec<Vec<i64>> = Count(5)
    ///     .batches(2, false, DefaultCollate)
    ///     .map(|b| b.unwrap().to_vec::<i64>())
    ///     .collect();
    /// assert_eq!(batches, vec![vec![0, 1], vec![2, 3], vec![4]]);
    /// ```
    fn batches<C: super::Collate<Self::Item>>(
        &self,
        batch_size: usize,
        drop_last: bool,
        collate: C,
    ) -> Box<dyn Iterator<Item = Result<C::Batch, DataError>> + Send + '_>
    where
        Self: Sized,
    {
        assert!(batch_size > 0, "batches: batch_size must be positive");
        let mut samples = self.iter();
        Box::new(std::iter::from_fn(move || {
            let mut items = Vec::with_capacity(batch_size);
            for sample in samples.by_ref() {
                match sample {
                    Ok(item) => items.push(item),
                    Err(e) => return Some(Err(e)),
                }
                if items.len() == batch_size {
                    break;
                }
            }
            if items.is_empty() || (drop_last && items.len() < batch_size) {
                return None;
            }
            Some(collate.collate(items))
        }))
    }
}

/// A data set with a transform applied to each sample ([`Dataset::map`]).
pub struct Map<D, F> {
    dataset: D,
    f: F,
}

impl<D, F, U> Dataset for Map<D, F>
where
    D: Dataset,
    F: Fn(D::Item) -> U + Send + Sync,
    U: Send + 'static,
{
    type Item = U;
    fn len(&self) -> usize {
        self.dataset.len()
    }
    fn get(&self, index: usize) -> Result<U, DataError> {
        self.dataset.get(index).map(&self.f)
    }
}

/// Tensors whose first dim indexes samples: a tensor, or a tuple or `Vec` of them with the
/// same first dim ([`TensorDataset`]'s contents).
pub trait TensorRows: Send + Sync {
    /// One sample: each tensor's row (and, stacked, a batch of the same form).
    type Row: Stack<Batch = Self::Row>;
    /// The first dim of every tensor, checked equal.
    fn rows(&self) -> Result<usize, DataError>;
    /// Row `i` of each tensor.
    fn row(&self, i: usize) -> Self::Row;
    /// The rows at int64 `index` of each tensor, as a batch.
    fn batch(&self, index: &Tensor) -> Self::Row;
}

/// `t.index_select(0, index)` with the index moved to `t`'s device.
fn rows_at(t: &Tensor, index: &Tensor) -> Tensor {
    let index = index
        .to_device(&t.device())
        .expect("the tensor's own device is usable");
    t.index_select(0, &index)
}

fn first_dim(t: &Tensor) -> Result<usize, DataError> {
    t.shape().first().copied().ok_or_else(|| {
        DataError::Invalid("TensorDataset: a 0-d tensor has no samples to index".into())
    })
}

fn same_rows(counts: &[usize]) -> Result<usize, DataError> {
    match counts.first() {
        Some(&n) if counts.iter().all(|&c| c == n) => Ok(n),
        Some(_) => Err(DataError::Invalid(format!(
            "TensorDataset: size mismatch between tensors: first dims {counts:?}"
        ))),
        None => Err(DataError::Invalid("TensorDataset: no tensors".into())),
    }
}

impl TensorRows for Tensor {
    type Row = Tensor;
    fn rows(&self) -> Result<usize, DataError> {
        first_dim(self)
    }
    fn row(&self, i: usize) -> Tensor {
        self.select(0, i)
    }
    fn batch(&self, index: &Tensor) -> Tensor {
        rows_at(self, index)
    }
}

impl TensorRows for Vec<Tensor> {
    type Row = Vec<Tensor>;
    fn rows(&self) -> Result<usize, DataError> {
        same_rows(&self.iter().map(first_dim).collect::<Result<Vec<_>, _>>()?)
    }
    fn row(&self, i: usize) -> Vec<Tensor> {
        self.iter().map(|t| t.select(0, i)).collect()
    }
    fn batch(&self, index: &Tensor) -> Vec<Tensor> {
        self.iter().map(|t| rows_at(t, index)).collect()
    }
}

macro_rules! tensor_rows_tuple {
    ($($t:ident $i:tt),+) => {
        impl TensorRows for ($($t,)+) {
            type Row = ($($t,)+);
            fn rows(&self) -> Result<usize, DataError> {
                same_rows(&[$(first_dim(&self.$i)?),+])
            }
            fn row(&self, i: usize) -> Self::Row {
                ($(self.$i.select(0, i),)+)
            }
            fn batch(&self, index: &Tensor) -> Self::Row {
                ($(rows_at(&self.$i, index),)+)
            }
        }
    };
}
#[allow(non_camel_case_types)]
type T = Tensor;
tensor_rows_tuple!(T 0, T 1);
tensor_rows_tuple!(T 0, T 1, T 2);
tensor_rows_tuple!(T 0, T 1, T 2, T 3);

/// Samples are rows of tensors with a common first dim (`TensorDataset(x, y)`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{Dataset, TensorDataset};
/// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[3, 2]);
/// let y = Tensor::from_vec(vec![0i64, 1, 0], &[3]);
/// let d = TensorDataset::new((x, y));
/// let (xi, yi) = d.get(1).unwrap();
/// assert_eq!((xi.to_vec::<f32>(), yi.item::<i64>()), (vec![2.0, 3.0], 1));
/// ```
#[derive(Clone)]
pub struct TensorDataset<R: TensorRows> {
    tensors: R,
    len: usize,
}

impl<R: TensorRows> std::fmt::Debug for TensorDataset<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorDataset")
            .field("len", &self.len)
            .finish()
    }
}

impl<R: TensorRows> TensorDataset<R> {
    /// The data set over `tensors`; panics if their first dims differ (use
    /// [`TensorDataset::try_new`] to get an error instead).
    #[track_caller]
    pub fn new(tensors: R) -> Self {
        Self::try_new(tensors).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The data set over `tensors`, or an error if their first dims differ.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::TensorDataset;
    /// let a = Tensor::zeros(&[3, 2], DType::F32, &Device::Cpu);
    /// let b = Tensor::zeros(&[4], DType::F32, &Device::Cpu);
    /// assert!(TensorDataset::try_new((a, b)).is_err());
    /// ```
    pub fn try_new(tensors: R) -> Result<Self, DataError> {
        let len = tensors.rows()?;
        Ok(TensorDataset { tensors, len })
    }

    /// The tensors.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::TensorDataset;
    /// let d = TensorDataset::new(Tensor::zeros(&[3, 2], DType::F32, &Device::Cpu));
    /// assert_eq!(d.tensors().shape(), &[3, 2]);
    /// ```
    pub fn tensors(&self) -> &R {
        &self.tensors
    }
}

impl<R: TensorRows> Dataset for TensorDataset<R> {
    type Item = R::Row;
    fn len(&self) -> usize {
        self.len
    }
    fn get(&self, index: usize) -> Result<R::Row, DataError> {
        if index >= self.len {
            return Err(DataError::IndexOutOfRange {
                index,
                len: self.len,
            });
        }
        Ok(self.tensors.row(index))
    }
    fn get_stacked(&self, indices: &[usize]) -> Option<Result<R::Row, DataError>> {
        if let Some(&index) = indices.iter().find(|&&i| i >= self.len) {
            return Some(Err(DataError::IndexOutOfRange {
                index,
                len: self.len,
            }));
        }
        let index = Tensor::from_vec(
            indices.iter().map(|&i| i as i64).collect::<Vec<i64>>(),
            &[indices.len()],
        );
        Some(Ok(self.tensors.batch(&index)))
    }
}

/// The samples of `dataset` at `indices` (`torch.utils.data.Subset`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{Dataset, Subset, TensorDataset};
/// let d = TensorDataset::new(Tensor::arange(0.0, 5.0, 1.0, DType::F32, &Device::Cpu));
/// let s = Subset::new(d, vec![4, 0]);
/// assert_eq!((s.len(), s.get(0).unwrap().item::<f32>()), (2, 4.0));
/// ```
pub struct Subset<D> {
    dataset: D,
    indices: Vec<usize>,
}

impl<D: Dataset> Subset<D> {
    /// The samples of `dataset` at `indices`, in that order.
    pub fn new(dataset: D, indices: Vec<usize>) -> Self {
        Subset { dataset, indices }
    }

    /// The indices into the underlying data set.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::{Subset, TensorDataset};
    /// let d = TensorDataset::new(Tensor::zeros(&[5], DType::F32, &Device::Cpu));
    /// assert_eq!(Subset::new(d, vec![1, 3]).indices(), &[1, 3]);
    /// ```
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

impl<D: Dataset> Dataset for Subset<D> {
    type Item = D::Item;
    fn len(&self) -> usize {
        self.indices.len()
    }
    fn get(&self, index: usize) -> Result<D::Item, DataError> {
        let inner = *self.indices.get(index).ok_or(DataError::IndexOutOfRange {
            index,
            len: self.indices.len(),
        })?;
        self.dataset.get(inner)
    }
}

/// Several data sets one after another (`torch.utils.data.ConcatDataset`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{ConcatDataset, Dataset, TensorDataset};
/// let a = TensorDataset::new(Tensor::zeros(&[2], DType::F32, &Device::Cpu));
/// let b = TensorDataset::new(Tensor::ones(&[3], DType::F32, &Device::Cpu));
/// let c = ConcatDataset::new(vec![a, b]);
/// assert_eq!((c.len(), c.get(2).unwrap().item::<f32>()), (5, 1.0));
/// ```
pub struct ConcatDataset<D> {
    datasets: Vec<D>,
    /// Cumulative sizes: `ends[i]` is one past the last index of data set `i`.
    ends: Vec<usize>,
}

impl<D: Dataset> ConcatDataset<D> {
    /// The concatenation of `datasets`.
    pub fn new(datasets: Vec<D>) -> Self {
        let ends = datasets
            .iter()
            .scan(0, |acc, d| {
                *acc += d.len();
                Some(*acc)
            })
            .collect();
        ConcatDataset { datasets, ends }
    }
}

impl<D: Dataset> Dataset for ConcatDataset<D> {
    type Item = D::Item;
    fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }
    fn get(&self, index: usize) -> Result<D::Item, DataError> {
        let which = self.ends.partition_point(|&end| end <= index);
        let start = if which == 0 { 0 } else { self.ends[which - 1] };
        match self.datasets.get(which) {
            Some(d) => d.get(index - start),
            None => Err(DataError::IndexOutOfRange {
                index,
                len: self.len(),
            }),
        }
    }
}

/// Splits `dataset` at random into non-overlapping subsets of the given `lengths`
/// (`torch.utils.data.random_split`): sample counts, or fractions summing to 1 (the
/// remainder spread round-robin, as PyTorch). The permutation comes from `generator`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::{random_split, Dataset, TensorDataset};
/// let d = std::sync::Arc::new(TensorDataset::new(Tensor::zeros(&[10], DType::F32, &Device::Cpu)));
/// let parts = random_split(d, &[0.8, 0.2], &mut Generator::new(0)).unwrap();
/// assert_eq!((parts[0].len(), parts[1].len()), (8, 2));
/// ```
pub fn random_split<D: Dataset + Clone>(
    dataset: D,
    lengths: &[f64],
    generator: &mut Generator,
) -> Result<Vec<Subset<D>>, DataError> {
    let n = dataset.len();
    // PyTorch's rule: lengths summing to 1 are fractions.
    let total: f64 = lengths.iter().sum();
    let fractions = (total - 1.0).abs() < 1e-9 && lengths.iter().all(|&l| (0.0..=1.0).contains(&l));
    let sizes: Vec<usize> = if fractions {
        let mut sizes: Vec<usize> = lengths
            .iter()
            .map(|f| (f * n as f64).floor() as usize)
            .collect();
        let remainder = n - sizes.iter().sum::<usize>();
        let count = sizes.len();
        for i in 0..remainder {
            sizes[i % count] += 1;
        }
        sizes
    } else {
        if lengths.iter().any(|l| l.fract() != 0.0 || *l < 0.0) {
            return Err(DataError::Invalid(format!(
                "random_split: lengths must be sample counts or fractions summing to 1, got {lengths:?}"
            )));
        }
        lengths.iter().map(|&l| l as usize).collect()
    };
    if sizes.iter().sum::<usize>() != n {
        return Err(DataError::Invalid(format!(
            "random_split: sum of input lengths {sizes:?} does not equal the length of the input dataset ({n})"
        )));
    }
    let order = permutation(n, generator);
    let mut start = 0;
    Ok(sizes
        .into_iter()
        .map(|size| {
            let part = Subset::new(dataset.clone(), order[start..start + size].to_vec());
            start += size;
            part
        })
        .collect())
}
