//! Collation: turning a list of samples into a batch. [`DefaultCollate`] stacks tensors
//! along a new first dim, turns numbers into 1-D tensors, and recurses into tuples,
//! `Vec`s and maps, as PyTorch's `default_collate`; any
//! `Fn(Vec<Item>) -> Result<Batch, DataError>` is a custom collate function.

use super::{DataError, Dataset};
use crate::Tensor;
use std::collections::{BTreeMap, HashMap};

/// Batches a list of samples (`collate_fn`).
///
/// ```
/// use ferrograd_runtime::data::{Collate, DataError, DefaultCollate};
/// let batch = DefaultCollate.collate(vec![(1i64, 0.5f32), (2, 1.5)]).unwrap();
/// assert_eq!(batch.0.to_vec::<i64>(), vec![1, 2]);
/// let sum = |items: Vec<i64>| -> Result<i64, DataError> { Ok(items.iter().sum()) };
/// assert_eq!(sum.collate(vec![1, 2, 3]).unwrap(), 6);
/// ```
pub trait Collate<I>: Send + Sync + 'static {
    /// The batch.
    type Batch: Send + 'static;
    /// Batches `items` (never empty inside a loader).
    fn collate(&self, items: Vec<I>) -> Result<Self::Batch, DataError>;

    /// The batch of `indices` fetched from `dataset` in one step, or `None` to load
    /// the samples one by one and [`collate`](Self::collate) them (the default).
    fn collate_from<D: Dataset<Item = I> + ?Sized>(
        &self,
        dataset: &D,
        indices: &[usize],
    ) -> Option<Result<Self::Batch, DataError>> {
        let _ = (dataset, indices);
        None
    }
}

/// PyTorch's `default_collate` (see [`Stack`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultCollate;

impl<I: Stack> Collate<I> for DefaultCollate {
    type Batch = I::Batch;
    fn collate(&self, items: Vec<I>) -> Result<I::Batch, DataError> {
        I::stack_samples(items)
    }
    /// Asks the data set for the stacked batch ([`Dataset::get_stacked`]).
    fn collate_from<D: Dataset<Item = I> + ?Sized>(
        &self,
        dataset: &D,
        indices: &[usize],
    ) -> Option<Result<I::Batch, DataError>> {
        dataset.get_stacked(indices)
    }
}

impl<I, B, F> Collate<I> for F
where
    F: Fn(Vec<I>) -> Result<B, DataError> + Send + Sync + 'static,
    B: Send + 'static,
{
    type Batch = B;
    fn collate(&self, items: Vec<I>) -> Result<B, DataError> {
        self(items)
    }
}

/// A sample type [`DefaultCollate`] can batch: tensors (stacked into a new first dim, so
/// all must share a shape and dtype), numbers (a 1-D tensor: i64, f32, f64, u8, bool),
/// and tuples, `Vec`s and maps of these (batched element-wise / key-wise).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::Stack;
/// let a = Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu);
/// assert_eq!(Tensor::stack_samples(vec![a.clone(), a]).unwrap().shape(), &[2, 2, 3]);
/// ```
pub trait Stack: Sized + Send + 'static {
    /// The batched form.
    type Batch: Send + 'static;
    /// Batches `items`.
    fn stack_samples(items: Vec<Self>) -> Result<Self::Batch, DataError>;
}

impl Stack for Tensor {
    type Batch = Tensor;
    fn stack_samples(items: Vec<Tensor>) -> Result<Tensor, DataError> {
        let Some(first) = items.first() else {
            return Err(DataError::Collate("no samples to batch".into()));
        };
        if let Some((i, t)) = items
            .iter()
            .enumerate()
            .find(|(_, t)| t.shape() != first.shape() || t.dtype() != first.dtype())
        {
            return Err(DataError::Collate(format!(
                "stack expects each tensor to be equal size and dtype, but got {:?} ({:?}) at entry 0 and {:?} ({:?}) at entry {i}",
                first.shape(),
                first.dtype(),
                t.shape(),
                t.dtype()
            )));
        }
        let refs: Vec<&Tensor> = items.iter().collect();
        Ok(Tensor::stack(&refs, 0))
    }
}

macro_rules! stack_scalar {
    ($($t:ty),*) => {$(
        impl Stack for $t {
            type Batch = Tensor;
            fn stack_samples(items: Vec<$t>) -> Result<Tensor, DataError> {
                let n = items.len();
                Ok(Tensor::from_vec(items, &[n]))
            }
        }
    )*};
}
stack_scalar!(i64, f32, f64, u8, bool);

impl Stack for usize {
    type Batch = Tensor;
    /// Indices and counts batch as int64.
    fn stack_samples(items: Vec<usize>) -> Result<Tensor, DataError> {
        i64::stack_samples(items.into_iter().map(|v| v as i64).collect())
    }
}

macro_rules! stack_tuple {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Stack),+> Stack for ($($name,)+) {
            type Batch = ($($name::Batch,)+);
            #[allow(non_snake_case)]
            fn stack_samples(items: Vec<Self>) -> Result<Self::Batch, DataError> {
                $(let mut $name = Vec::with_capacity(items.len());)+
                for item in items {
                    $($name.push(item.$idx);)+
                }
                Ok(($($name::stack_samples($name)?,)+))
            }
        }
    };
}
stack_tuple!(A 0);
stack_tuple!(A 0, B 1);
stack_tuple!(A 0, B 1, C 2);
stack_tuple!(A 0, B 1, C 2, D 3);

impl<T: Stack> Stack for Vec<T> {
    type Batch = Vec<T::Batch>;
    fn stack_samples(items: Vec<Vec<T>>) -> Result<Vec<T::Batch>, DataError> {
        let width = items.first().map_or(0, Vec::len);
        if items.iter().any(|v| v.len() != width) {
            return Err(DataError::Collate(
                "each element in the list of samples should be of equal size".into(),
            ));
        }
        let mut columns: Vec<Vec<T>> = (0..width)
            .map(|_| Vec::with_capacity(items.len()))
            .collect();
        for item in items {
            for (column, v) in columns.iter_mut().zip(item) {
                column.push(v);
            }
        }
        columns.into_iter().map(T::stack_samples).collect()
    }
}

fn keyed<T: Stack, M>(
    items: Vec<M>,
    keys: impl Fn(&M) -> Vec<String>,
    mut take: impl FnMut(&mut M, &str) -> Option<T>,
) -> Result<Vec<(String, T::Batch)>, DataError> {
    let Some(first) = items.first() else {
        return Ok(Vec::new());
    };
    let names = keys(first);
    let mut items = items;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let column = items
            .iter_mut()
            .map(|m| take(m, &name))
            .collect::<Option<Vec<T>>>()
            .ok_or_else(|| {
                DataError::Collate(format!("key {name:?} is missing from some samples"))
            })?;
        out.push((name, T::stack_samples(column)?));
    }
    Ok(out)
}

impl<T: Stack> Stack for BTreeMap<String, T> {
    type Batch = BTreeMap<String, T::Batch>;
    fn stack_samples(items: Vec<Self>) -> Result<Self::Batch, DataError> {
        Ok(
            keyed(items, |m| m.keys().cloned().collect(), |m, k| m.remove(k))?
                .into_iter()
                .collect(),
        )
    }
}

impl<T: Stack> Stack for HashMap<String, T> {
    type Batch = HashMap<String, T::Batch>;
    fn stack_samples(items: Vec<Self>) -> Result<Self::Batch, DataError> {
        Ok(
            keyed(items, |m| m.keys().cloned().collect(), |m, k| m.remove(k))?
                .into_iter()
                .collect(),
        )
    }
}
