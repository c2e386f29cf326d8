//! Ops that rearrange elements without arithmetic: `flip`, `roll`, `repeat`,
//! `repeat_interleave`. Each is built on differentiable views and `index_select`, so its
//! gradient is the matching gather/scatter and it runs on every device.

use crate::Tensor;
use ferrograd_kernels::Dims;

/// `dim` wrapped into `0..rank`, or a panic naming the op.
#[track_caller]
pub(crate) fn wrap_dim(op: &str, dim: isize, shape: &[usize]) -> usize {
    let rank = shape.len() as isize;
    let d = if dim < 0 { dim + rank } else { dim };
    assert!(
        (0..rank.max(1)).contains(&d),
        "{op}: dimension out of range (expected to be in range of [{}, {}], but got {dim}) for shape {shape:?}",
        -rank.max(1),
        rank.max(1) - 1
    );
    d as usize
}

/// A 1-D int64 index tensor on `t`'s device.
pub(crate) fn index_on(t: &Tensor, values: Vec<i64>) -> Tensor {
    let n = values.len();
    Tensor::from_vec(values, &[n])
        .to_device(&t.device())
        .expect("the tensor's own device is usable")
}

impl Tensor {
    /// Reverses the order of elements along each of `dims` (`torch.flip`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[2, 3]);
    /// assert_eq!(t.flip(&[1]).to_vec::<f32>(), vec![2.0, 1.0, 0.0, 5.0, 4.0, 3.0]);
    /// assert_eq!(t.flip(&[0, -1]).to_vec::<f32>(), vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn flip(&self, dims: &[isize]) -> Tensor {
        let _profiled = crate::dispatch::opaque("flip", &[self]);
        let mut seen = Vec::with_capacity(dims.len());
        let mut out = self.clone();
        for &dim in dims {
            let d = wrap_dim("flip", dim, self.shape());
            assert!(
                !seen.contains(&d),
                "flip: dim {d} appears multiple times in the list of dims {dims:?}"
            );
            seen.push(d);
            let n = self.shape()[d] as i64;
            out = out.index_select(d as isize, &index_on(self, (0..n).rev().collect()));
        }
        out
    }

    /// Shifts elements along `dims` by `shifts`, wrapping around (`torch.roll`); with no
    /// dims, the tensor is rolled as if flattened and keeps its shape.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::arange(0.0, 5.0, 1.0, DType::F32, &Device::Cpu);
    /// assert_eq!(t.roll(&[2], &[0]).to_vec::<f32>(), vec![3.0, 4.0, 0.0, 1.0, 2.0]);
    /// let m = t.narrow(0, 0, 4).reshape(&[2, 2]);
    /// assert_eq!(m.roll(&[1], &[]).to_vec::<f32>(), vec![3.0, 0.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn roll(&self, shifts: &[isize], dims: &[isize]) -> Tensor {
        let _profiled = crate::dispatch::opaque("roll", &[self]);
        if dims.is_empty() {
            assert!(
                shifts.len() == 1,
                "roll: with no dims, expects exactly one shift, got {shifts:?} for shape {:?}",
                self.shape()
            );
            return self
                .reshape(&[self.numel()])
                .roll(shifts, &[0])
                .reshape(self.shape());
        }
        assert!(
            shifts.len() == dims.len(),
            "roll: shifts and dimensions must align, got shifts {shifts:?} and dims {dims:?} for shape {:?}",
            self.shape()
        );
        let mut out = self.clone();
        for (&shift, &dim) in shifts.iter().zip(dims) {
            let d = wrap_dim("roll", dim, self.shape());
            let n = self.shape()[d] as i64;
            if n == 0 {
                continue;
            }
            let idx = (0..n).map(|j| (j - shift as i64).rem_euclid(n)).collect();
            out = out.index_select(d as isize, &index_on(self, idx));
        }
        out
    }

    /// Tiles the tensor `repeats[i]` times along dim `i` (`Tensor.repeat`); `repeats` may be
    /// longer than the rank, adding leading dims.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// assert_eq!(t.repeat(&[2]).to_vec::<f32>(), vec![1.0, 2.0, 1.0, 2.0]);
    /// assert_eq!(t.repeat(&[2, 1]).shape(), &[2, 2]);
    /// ```
    #[track_caller]
    pub fn repeat(&self, repeats: &[usize]) -> Tensor {
        let _profiled = crate::dispatch::opaque("repeat", &[self]);
        assert!(
            repeats.len() >= self.dim(),
            "repeat: number of dimensions of repeat dims ({}) can not be smaller than number of dimensions of tensor (shape {:?})",
            repeats.len(),
            self.shape()
        );
        let lead = repeats.len() - self.dim();
        let shape: Vec<usize> = std::iter::repeat_n(1, lead)
            .chain(self.shape().iter().copied())
            .collect();
        // [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then merged pairwise.
        let mut interleaved = Dims::new();
        let mut expanded = Dims::new();
        let mut out = Dims::new();
        for (&s, &r) in shape.iter().zip(repeats) {
            interleaved.extend([1, s]);
            expanded.extend([r, s]);
            out.push(r * s);
        }
        self.reshape(&interleaved)
            .broadcast_to(&expanded)
            .contiguous()
            .reshape(&out)
    }

    /// Repeats each element `repeats` times along `dim`, next to itself
    /// (`torch.repeat_interleave(x, repeats, dim)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// assert_eq!(t.repeat_interleave(2, 0).to_vec::<f32>(), vec![1.0, 1.0, 2.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn repeat_interleave(&self, repeats: usize, dim: isize) -> Tensor {
        let _profiled = crate::dispatch::opaque("repeat_interleave", &[self]);
        let d = wrap_dim("repeat_interleave", dim, self.shape());
        let mut inserted = Dims::from_slice(self.shape());
        inserted.insert(d + 1, 1);
        let mut expanded = inserted.clone();
        expanded[d + 1] = repeats;
        let mut out = Dims::from_slice(self.shape());
        out[d] *= repeats;
        self.reshape(&inserted)
            .broadcast_to(&expanded)
            .contiguous()
            .reshape(&out)
    }

    /// Repeats element `i` along `dim` `counts[i]` times (`torch.repeat_interleave` with a
    /// tensor of repeats; `counts` is 1-D int64 with one entry per element of `dim`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]);
    /// let counts = Tensor::from_vec(vec![2i64, 0, 1], &[3]);
    /// assert_eq!(t.repeat_interleave_counts(&counts, 0).to_vec::<f32>(), vec![1.0, 1.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn repeat_interleave_counts(&self, counts: &Tensor, dim: isize) -> Tensor {
        let _profiled = crate::dispatch::opaque("repeat_interleave_counts", &[self]);
        let d = wrap_dim("repeat_interleave", dim, self.shape());
        assert!(
            counts.dim() == 1 && counts.numel() == self.shape()[d],
            "repeat_interleave: repeats must have the same size as input along dim {d}: repeats shape {:?}, input shape {:?}",
            counts.shape(),
            self.shape()
        );
        let counts = counts.to_dtype(crate::DType::I64).to_vec::<i64>();
        assert!(
            counts.iter().all(|&c| c >= 0),
            "repeat_interleave: repeats can not be negative, got {counts:?}"
        );
        let idx = counts
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| std::iter::repeat_n(i as i64, c as usize))
            .collect();
        self.index_select(d as isize, &index_on(self, idx))
    }
}
