//! Tensor factories: from data, constants, ranges and random draws.

use super::Tensor;
use crate::random::{Generator, with_global};
use crate::storage::Storage;
use crate::{DType, Device};
use ferrograd_kernels::cpu::{CpuStorage, HostBuffer};
use ferrograd_kernels::{Element, Layout, with_dtype};

impl Tensor {
    /// Puts a CPU tensor on `device`, panicking with the device error (factories return
    /// tensors like PyTorch's; use `Device::cuda_if_available` to pick a usable device).
    #[track_caller]
    fn placed(self, device: &Device) -> Tensor {
        if *device == Device::Cpu {
            return self;
        }
        self.to_device(device)
            .unwrap_or_else(|e| panic!("cannot create a tensor on {device}: {e}"))
    }

    /// A tensor of `data`'s values with shape `shape` (`torch.tensor(data).reshape(shape)`):
    /// like PyTorch, the values are copied, here into the CPU caching allocator's memory.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]);
    /// assert_eq!((t.shape(), t.dtype()), (&[2usize, 3][..], DType::I64));
    /// ```
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Tensor {
        Tensor::from_slice(&data, shape)
    }

    /// A tensor copied from a slice.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::from_slice(&[1.0f32, 2.0], &[2]).to_vec::<f32>(), vec![1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Tensor {
        Tensor::from_host(HostBuffer::from_slice(data), shape)
    }

    /// A tensor owning the pooled buffer `data` (no copy).
    #[track_caller]
    pub(crate) fn from_host<T: Element>(data: HostBuffer<T>, shape: &[usize]) -> Tensor {
        let numel: usize = shape.iter().product();
        assert!(
            data.len() == numel,
            "from_vec: shape {shape:?} has {numel} elements but {} values were given",
            data.len()
        );
        Tensor::from_cpu(T::into_storage(data), shape)
    }

    /// A 0-dimensional tensor holding `value`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let s = Tensor::scalar(2.0, DType::F32);
    /// assert_eq!((s.dim(), s.item::<f32>()), (0, 2.0));
    /// ```
    pub fn scalar(value: f64, dtype: DType) -> Tensor {
        Tensor::from_cpu(CpuStorage::full(dtype, 1, value), &[])
    }

    /// A tensor filled with `value`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::full(&[2], 7.0, DType::I64, &Device::Cpu).to_vec::<i64>(), vec![7, 7]);
    /// ```
    #[track_caller]
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: &Device) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = Self::full_untraced(shape, value, dtype, device);
        crate::dispatch::finish(
            entered,
            &[],
            || crate::dispatch::Op::Fill { value, dtype },
            out,
        )
    }

    #[track_caller]
    fn full_untraced(shape: &[usize], value: f64, dtype: DType, device: &Device) -> Tensor {
        let storage = Storage::full(*device, dtype, shape.iter().product(), value)
            .unwrap_or_else(|e| panic!("cannot create a tensor on {device}: {e}"));
        Tensor::from_storage(storage, Layout::contiguous(shape))
    }

    /// A tensor of zeros.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2], DType::F32, &Device::Cpu).to_vec::<f32>(), vec![0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType, device: &Device) -> Tensor {
        Tensor::full(shape, 0.0, dtype, device)
    }

    /// A tensor of ones.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::ones(&[2], DType::U8, &Device::Cpu).to_vec::<u8>(), vec![1, 1]);
    /// ```
    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType, device: &Device) -> Tensor {
        Tensor::full(shape, 1.0, dtype, device)
    }

    /// Zeros with the shape, dtype and device of `other`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::ones(&[2, 2], DType::F64, &Device::Cpu);
    /// assert_eq!(Tensor::zeros_like(&t).sum_all().item::<f64>(), 0.0);
    /// ```
    pub fn zeros_like(other: &Tensor) -> Tensor {
        Tensor::full(other.shape(), 0.0, other.dtype(), &other.device())
    }

    /// Ones with the shape, dtype and device of `other`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 2], DType::F64, &Device::Cpu);
    /// assert_eq!(Tensor::ones_like(&t).sum_all().item::<f64>(), 4.0);
    /// ```
    pub fn ones_like(other: &Tensor) -> Tensor {
        Tensor::full(other.shape(), 1.0, other.dtype(), &other.device())
    }

    /// `value` everywhere, with the shape, dtype and device of `other`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2], DType::F32, &Device::Cpu);
    /// assert_eq!(Tensor::full_like(&t, 3.0).to_vec::<f32>(), vec![3.0, 3.0]);
    /// ```
    pub fn full_like(other: &Tensor, value: f64) -> Tensor {
        Tensor::full(other.shape(), value, other.dtype(), &other.device())
    }

    /// Values from `start` up to (not including) `end` in steps of `step` (`torch.arange`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::arange(0.0, 1.0, 0.25, DType::F32, &Device::Cpu).to_vec::<f32>(), vec![0.0, 0.25, 0.5, 0.75]);
    /// ```
    #[track_caller]
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType, device: &Device) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = Self::arange_untraced(start, end, step, dtype, device);
        crate::dispatch::finish(
            entered,
            &[],
            || crate::dispatch::Op::Arange {
                start,
                end,
                step,
                dtype,
            },
            out,
        )
    }

    #[track_caller]
    fn arange_untraced(start: f64, end: f64, step: f64, dtype: DType, device: &Device) -> Tensor {
        assert!(step != 0.0, "arange: step must be nonzero");
        assert!(
            (end - start) / step >= 0.0,
            "arange: upper bound and larger bound inconsistent with step sign (start {start}, end {end}, step {step})"
        );
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let storage = with_dtype!(dtype, T => T::into_storage((0..n).map(|i| T::from_f64(start + i as f64 * step)).collect()));
        Tensor::from_cpu(storage, &[n]).placed(device)
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive (`torch.linspace`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::linspace(0.0, 1.0, 3, DType::F64, &Device::Cpu).to_vec::<f64>(), vec![0.0, 0.5, 1.0]);
    /// assert_eq!(Tensor::linspace(-1.0, 1.0, 1, DType::F64, &Device::Cpu).to_vec::<f64>(), vec![-1.0]);
    /// ```
    pub fn linspace(start: f64, end: f64, steps: usize, dtype: DType, device: &Device) -> Tensor {
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        let storage = with_dtype!(dtype, T => T::into_storage((0..steps).map(|i| {
            // Fill from both ends, as PyTorch does, so `end` is exact.
            let v = if steps == 1 || i < steps / 2 { start + step * i as f64 } else { end - step * (steps - 1 - i) as f64 };
            T::from_f64(v)
        }).collect()));
        Tensor::from_cpu(storage, &[steps]).placed(device)
    }

    /// The `n x n` identity matrix (`torch.eye`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::eye(2, DType::I64, &Device::Cpu).to_vec::<i64>(), vec![1, 0, 0, 1]);
    /// ```
    pub fn eye(n: usize, dtype: DType, device: &Device) -> Tensor {
        let storage = with_dtype!(dtype, T => T::into_storage((0..n * n).map(|i| T::from_f64(if i % (n + 1) == 0 { 1.0 } else { 0.0 })).collect()));
        Tensor::from_cpu(storage, &[n, n]).placed(device)
    }

    #[track_caller]
    fn sample(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        op: &str,
        generator: &mut Generator,
        draw: fn(&mut Generator) -> f64,
    ) -> Tensor {
        assert!(
            dtype.is_float(),
            "{op}: expected a floating point dtype, got {dtype:?}"
        );
        let n: usize = shape.iter().product();
        let storage = with_dtype!(dtype, T => T::into_storage((0..n).map(|_| T::from_f64(draw(generator))).collect()));
        Tensor::from_cpu(storage, shape).placed(device)
    }

    /// Uniform samples in `[0, 1)` from the global generator (`torch.rand`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::rand(&[100], DType::F32, &Device::Cpu);
    /// assert!(t.to_vec::<f32>().iter().all(|&v| (0.0..1.0).contains(&v)));
    /// ```
    #[track_caller]
    pub fn rand(shape: &[usize], dtype: DType, device: &Device) -> Tensor {
        with_global(|g| Tensor::rand_with(shape, dtype, device, g))
    }

    /// Uniform samples in `[0, 1)` from `gen`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::rand_with(&[3], DType::F64, &Device::Cpu, &mut Generator::new(1));
    /// assert_eq!(t.numel(), 3);
    /// ```
    #[track_caller]
    pub fn rand_with(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        generator: &mut Generator,
    ) -> Tensor {
        Tensor::sample(shape, dtype, device, "rand", generator, Generator::uniform)
    }

    /// Standard normal samples from the global generator (`torch.randn`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::randn(&[10000], DType::F64, &Device::Cpu);
    /// assert!(t.mean_all().item::<f64>().abs() < 0.05);
    /// ```
    #[track_caller]
    pub fn randn(shape: &[usize], dtype: DType, device: &Device) -> Tensor {
        with_global(|g| Tensor::randn_with(shape, dtype, device, g))
    }

    /// Standard normal samples from `gen`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::randn_with(&[3], DType::F32, &Device::Cpu, &mut Generator::new(1));
    /// assert_eq!(t.shape(), &[3]);
    /// ```
    #[track_caller]
    pub fn randn_with(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        generator: &mut Generator,
    ) -> Tensor {
        Tensor::sample(shape, dtype, device, "randn", generator, Generator::normal)
    }

    /// Uniform random integers in `[low, high)` as int64 (`torch.randint`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::randint(0, 10, &[50], &Device::Cpu);
    /// assert!(t.to_vec::<i64>().iter().all(|&v| (0..10).contains(&v)));
    /// ```
    #[track_caller]
    pub fn randint(low: i64, high: i64, shape: &[usize], device: &Device) -> Tensor {
        with_global(|g| Tensor::randint_with(low, high, shape, device, g))
    }

    /// Uniform random integers in `[low, high)` from `gen`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::randint_with(5, 6, &[2], &Device::Cpu, &mut Generator::new(0));
    /// assert_eq!(t.to_vec::<i64>(), vec![5, 5]);
    /// ```
    #[track_caller]
    pub fn randint_with(
        low: i64,
        high: i64,
        shape: &[usize],
        device: &Device,
        generator: &mut Generator,
    ) -> Tensor {
        assert!(
            low < high,
            "randint: expected low < high, got low {low} and high {high}"
        );
        let n: usize = shape.iter().product();
        let data: Vec<i64> = (0..n).map(|_| generator.int_in(low, high)).collect();
        Tensor::from_vec(data, shape).placed(device)
    }

    /// A random permutation of `0..n` as int64 (`torch.randperm`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let mut p = Tensor::randperm(5, &Device::Cpu).to_vec::<i64>();
    /// p.sort();
    /// assert_eq!(p, vec![0, 1, 2, 3, 4]);
    /// ```
    pub fn randperm(n: usize, device: &Device) -> Tensor {
        let mut data: Vec<i64> = (0..n as i64).collect();
        with_global(|g| {
            for i in (1..n).rev() {
                let j = g.int_in(0, i as i64 + 1) as usize;
                data.swap(i, j);
            }
        });
        Tensor::from_vec(data, &[n]).placed(device)
    }
}
