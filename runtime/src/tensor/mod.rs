//! The `Tensor` handle: shared storage, a strided layout, and autograd metadata.

mod convert;
pub(crate) use convert::tensor_from_view;
mod creation;
mod display;

use crate::autograd::{self, AutogradMeta, LeafSlot};
use crate::storage::{Storage, StorageCell};
use crate::{Device, Result};
use ferrograd_kernels::cpu::CpuStorage;
use ferrograd_kernels::{DType, Layout};
use std::sync::{Arc, RwLockReadGuard};

/// An N-dimensional array on a device, with optional gradient tracking.
///
/// A `Tensor` is a cheap handle (an `Arc`): `clone()` shares the same tensor, as a second
/// Python reference would. Views (`reshape`, `transpose`, `narrow`, ...) share storage
/// with their base. Arithmetic works on references: `&a + &b`, `&a * 2.0`.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
/// let b = a.t();
/// assert_eq!((&a + &b).to_vec::<f32>(), vec![2.0, 5.0, 5.0, 8.0]);
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorImpl>);

pub(crate) struct TensorImpl {
    pub(crate) storage: Arc<StorageCell>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
    pub(crate) autograd: Option<AutogradMeta>,
}

impl Tensor {
    // ---- construction from parts -------------------------------------------------------

    pub(crate) fn from_storage(storage: Storage, layout: Layout) -> Tensor {
        let (dtype, device) = (storage.dtype(), storage.device());
        Tensor(Arc::new(TensorImpl {
            storage: Arc::new(StorageCell::new(storage)),
            layout,
            dtype,
            device,
            autograd: None,
        }))
    }

    /// A contiguous CPU tensor owning `storage`.
    pub(crate) fn from_cpu(storage: CpuStorage, shape: &[usize]) -> Tensor {
        debug_assert_eq!(storage.len(), shape.iter().product::<usize>());
        Tensor::from_storage(Storage::Cpu(storage), Layout::contiguous(shape))
    }

    /// A view of the same storage with another layout, without autograd metadata.
    pub(crate) fn view_with_layout(&self, layout: Layout) -> Tensor {
        Tensor(Arc::new(TensorImpl {
            storage: self.0.storage.clone(),
            layout,
            dtype: self.0.dtype,
            device: self.0.device,
            autograd: None,
        }))
    }

    /// This tensor with the given autograd metadata (reusing the allocation when unshared).
    pub(crate) fn with_autograd(mut self, meta: AutogradMeta) -> Tensor {
        match Arc::get_mut(&mut self.0) {
            Some(inner) => {
                inner.autograd = Some(meta);
                self
            }
            None => Tensor(Arc::new(TensorImpl {
                storage: self.0.storage.clone(),
                layout: self.0.layout.clone(),
                dtype: self.0.dtype,
                device: self.0.device,
                autograd: Some(meta),
            })),
        }
    }

    pub(crate) fn autograd_meta(&self) -> Option<&AutogradMeta> {
        self.0.autograd.as_ref()
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    pub(crate) fn storage_version(&self) -> u64 {
        self.0.storage.version()
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn storage_cell(&self) -> &Arc<StorageCell> {
        &self.0.storage
    }

    pub(crate) fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// Whether nothing else (no view, no other tensor) refers to this storage and the
    /// layout covers all of it contiguously.
    pub(crate) fn owns_storage_exclusively(&self) -> bool {
        Arc::strong_count(&self.0.storage) == 1
            && self.0.layout.is_contiguous()
            && self.0.layout.offset() == 0
            && self.storage_len() == self.numel()
    }

    fn storage_len(&self) -> usize {
        match &*self.0.storage.read() {
            Storage::Cpu(s) => s.len(),
            Storage::Cuda(s) => s.len(),
        }
    }

    /// Runs `f` on the CPU elements of this tensor. A tensor on another device is read
    /// whole into host memory first (the host fallback for ops without a device kernel:
    /// it waits for the device, and is counted in `cuda::host_fallbacks`); the layout stays
    /// valid because the whole buffer is copied.
    #[track_caller]
    pub(crate) fn with_cpu<R>(&self, op: &str, f: impl FnOnce(&CpuStorage, &Layout) -> R) -> R {
        let guard = self.0.storage.read();
        match &*guard {
            Storage::Cpu(s) => f(s, &self.0.layout),
            Storage::Cuda(s) => {
                crate::storage::note_host_fallback(op);
                let host = s
                    .download()
                    .unwrap_or_else(|e| panic!("{op}: reading from {} failed: {e}", self.device()));
                f(&host, &self.0.layout)
            }
        }
    }

    /// Runs `f` on this tensor's elements for writing; on a device, through a host copy of
    /// the whole buffer that is written back afterwards (the host fallback).
    #[track_caller]
    pub(crate) fn with_cpu_mut<R>(
        &self,
        op: &str,
        f: impl FnOnce(&mut CpuStorage, &Layout) -> R,
    ) -> R {
        let mut guard = self.0.storage.write();
        match &mut *guard {
            Storage::Cpu(s) => f(s, &self.0.layout),
            Storage::Cuda(s) => {
                crate::storage::note_host_fallback(op);
                let device = self.0.device;
                let fail = |e: crate::Error| -> ! { panic!("{op}: on {device} failed: {e}") };
                let mut host = s.download().unwrap_or_else(|e| fail(e));
                let out = f(&mut host, &self.0.layout);
                s.upload(&host).unwrap_or_else(|e| fail(e));
                out
            }
        }
    }

    /// A contiguous tensor of `shape` holding `storage` (computed on the host), placed on
    /// `device`: the end of a host-fallback op on a device tensor.
    #[track_caller]
    pub(crate) fn from_cpu_on(storage: CpuStorage, shape: &[usize], device: Device) -> Tensor {
        let t = Tensor::from_cpu(storage, shape);
        if device == Device::Cpu {
            return t;
        }
        t.to_device(&device)
            .unwrap_or_else(|e| panic!("writing a result to {device} failed: {e}"))
    }

    pub(crate) fn read_storage(&self) -> RwLockReadGuard<'_, Storage> {
        self.0.storage.read()
    }

    /// The contiguous tensor of `shape` holding the result of a backend op, or a panic
    /// naming `op` when it failed on its device.
    #[track_caller]
    pub(crate) fn from_backend(op: &str, shape: &[usize], result: Result<Storage>) -> Tensor {
        let storage = result.unwrap_or_else(|e| backend_failed(op, e));
        Tensor::from_storage(storage, Layout::contiguous(shape))
    }

    /// Runs the in-place backend op `f` on this tensor's storage (write-locked, which bumps
    /// its version), panicking with `op` when it failed on its device.
    #[track_caller]
    pub(crate) fn backend_write(
        &self,
        op: &str,
        f: impl FnOnce(&mut Storage, &Layout) -> Result<()>,
    ) {
        let mut guard = self.0.storage.write();
        f(&mut guard, &self.0.layout).unwrap_or_else(|e| backend_failed(op, e));
    }

    // ---- metadata ------------------------------------------------------------------------

    /// The size of each dim (`tensor.shape`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).shape(), &[2, 3]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }

    /// The size of dim `dim` (negative counts from the end), as `tensor.size(dim)`.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).size(-1), 3);
    /// ```
    #[track_caller]
    pub fn size(&self, dim: isize) -> usize {
        self.shape()[self.normalize_dim("size", dim)]
    }

    /// The number of dims.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).dim(), 2);
    /// ```
    pub fn dim(&self) -> usize {
        self.0.layout.rank()
    }

    /// The number of elements.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).numel(), 6);
    /// ```
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// The strides, in elements.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu).t().stride(), &[1, 3]);
    /// ```
    pub fn stride(&self) -> &[usize] {
        self.0.layout.strides()
    }

    /// Whether the elements are row-major without gaps.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let t = Tensor::zeros(&[2, 3], DType::F32, &Device::Cpu);
    /// assert!(t.is_contiguous() && !t.t().is_contiguous());
    /// ```
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// The element type.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[1], DType::BF16, &Device::Cpu).dtype(), DType::BF16);
    /// ```
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// The device holding the elements.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert_eq!(Tensor::zeros(&[1], DType::F32, &Device::Cpu).device(), Device::Cpu);
    /// ```
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// Normalises a possibly negative dim against this tensor's rank, naming `op` if it is
    /// out of range.
    #[track_caller]
    pub(crate) fn normalize_dim(&self, op: &str, dim: isize) -> usize {
        normalize_dim(op, dim, self.dim(), self.shape())
    }

    // ---- autograd ----------------------------------------------------------------------------

    /// Marks this tensor as a leaf that accumulates gradients (`requires_grad_(True)`), or
    /// stops tracking (`false`). Only floating-point tensors can require grad.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::zeros(&[3], DType::F32, &Device::Cpu).requires_grad(true);
    /// assert!(w.requires_grad_flag() && w.is_leaf());
    /// ```
    #[track_caller]
    pub fn requires_grad(self, requires_grad: bool) -> Tensor {
        match (requires_grad, self.autograd_meta()) {
            (true, Some(AutogradMeta::Leaf(_))) | (false, None) => self,
            (true, Some(AutogradMeta::Interior(node))) => panic!(
                "requires_grad: you can only change requires_grad flags of leaf variables (this tensor \
                 is the output of {}); use `.detach().requires_grad(true)` for a new leaf",
                node.name
            ),
            (true, None) => {
                assert!(
                    self.dtype().is_float(),
                    "requires_grad: only tensors of floating point dtype can require gradients, got {:?}",
                    self.dtype()
                );
                let detached = self.detach();
                detached.with_autograd(AutogradMeta::Leaf(Arc::new(LeafSlot::default())))
            }
            (false, Some(AutogradMeta::Interior(node))) => panic!(
                "requires_grad: you can only change requires_grad flags of leaf variables (this tensor \
                 is the output of {}); use `.detach()` instead",
                node.name
            ),
            (false, Some(AutogradMeta::Leaf(_))) => self.detach(),
        }
    }

    /// Whether gradients flow to or through this tensor (`tensor.requires_grad`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// assert!(!Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad_flag());
    /// ```
    #[inline]
    pub fn requires_grad_flag(&self) -> bool {
        self.0.autograd.is_some()
    }

    /// Whether this is a leaf of the graph: not produced by a recorded op.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    /// assert!(w.is_leaf() && !(&w * 2.0).is_leaf());
    /// ```
    pub fn is_leaf(&self) -> bool {
        !matches!(self.0.autograd, Some(AutogradMeta::Interior(_)))
    }

    /// The name of the op that produced this tensor (`tensor.grad_fn`), if recorded.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::zeros(&[1], DType::F32, &Device::Cpu).requires_grad(true);
    /// assert_eq!(w.exp().grad_fn(), Some("exp"));
    /// ```
    pub fn grad_fn(&self) -> Option<&'static str> {
        match &self.0.autograd {
            Some(AutogradMeta::Interior(node)) => Some(node.name),
            _ => None,
        }
    }

    /// The accumulated gradient of a leaf (`tensor.grad`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
    /// (&w * 3.0).sum_all().backward();
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![3.0, 3.0]);
    /// ```
    pub fn grad(&self) -> Option<Tensor> {
        match &self.0.autograd {
            Some(AutogradMeta::Leaf(slot)) => {
                slot.grad.lock().unwrap_or_else(|e| e.into_inner()).clone()
            }
            _ => None,
        }
    }

    /// Replaces a leaf's gradient (`tensor.grad = g`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
    /// w.set_grad(Some(Tensor::zeros(&[2], DType::F32, &Device::Cpu)));
    /// assert!(w.grad().is_some());
    /// ```
    #[track_caller]
    pub fn set_grad(&self, grad: Option<Tensor>) {
        if let Some(g) = &grad {
            assert!(
                g.shape() == self.shape(),
                "set_grad: gradient shape {:?} does not match tensor shape {:?}",
                g.shape(),
                self.shape()
            );
        }
        match &self.0.autograd {
            Some(AutogradMeta::Leaf(slot)) => {
                *slot.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad
            }
            _ => panic!("set_grad: only leaf tensors that require grad hold a gradient"),
        }
    }

    /// Clears a leaf's gradient (PyTorch's `zero_grad(set_to_none=True)`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
    /// w.sum_all().backward();
    /// w.zero_grad();
    /// assert!(w.grad().is_none());
    /// ```
    pub fn zero_grad(&self) {
        if let Some(AutogradMeta::Leaf(slot)) = &self.0.autograd {
            *slot.grad.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// A tensor sharing this one's data but cut from the graph.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
    /// assert!(!(&w * 2.0).detach().requires_grad_flag());
    /// ```
    #[track_caller]
    pub fn detach(&self) -> Tensor {
        let entered = crate::dispatch::enter();
        let out = self.detach_untraced();
        crate::dispatch::finish(entered, &[self], || crate::dispatch::Op::Identity, out)
    }

    #[track_caller]
    fn detach_untraced(&self) -> Tensor {
        self.view_with_layout(self.0.layout.clone())
    }

    /// Backpropagates from this scalar, accumulating into the leaves' `.grad`; frees the
    /// graph afterwards.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![2.0f32], &[1]).requires_grad(true);
    /// (&x * &x).sum_all().backward();
    /// assert_eq!(x.grad().unwrap().item::<f32>(), 4.0);
    /// ```
    #[track_caller]
    pub fn backward(&self) {
        let roots = autograd::engine_roots(&[self], None);
        autograd::run_backward(&roots, false, false, &[]);
    }

    /// Backpropagates with an explicit gradient for this (any-shaped) output.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad(true);
    /// (&x * 2.0).backward_with(&Tensor::from_vec(vec![1.0f32, 10.0], &[2]));
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>(), vec![2.0, 20.0]);
    /// ```
    #[track_caller]
    pub fn backward_with(&self, grad: &Tensor) {
        self.backward_with_options(Some(grad), false, false);
    }

    /// Backward with PyTorch's options: `retain_graph` keeps the graph for another
    /// backward; `create_graph` records the backward itself, for higher-order gradients.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32], &[1]).requires_grad(true);
    /// let y = (&x * 2.0).sum_all();
    /// y.backward_with_options(None, true, false);
    /// y.backward();
    /// assert_eq!(x.grad().unwrap().item::<f32>(), 4.0);
    /// ```
    #[track_caller]
    pub fn backward_with_options(
        &self,
        grad: Option<&Tensor>,
        retain_graph: bool,
        create_graph: bool,
    ) {
        let grads = grad.map(|g| vec![g.clone()]);
        let roots = autograd::engine_roots(&[self], grads.as_deref());
        autograd::run_backward(&roots, retain_graph || create_graph, create_graph, &[]);
    }

    // ---- data access ---------------------------------------------------------------------------
}

/// Panics with a backend op's error, prefixed by the op (a bad index's message, under
/// `CUDA_LAUNCH_BLOCKING=1`, names its op already), as PyTorch raises: tensor ops return
/// tensors, not `Result`s.
#[track_caller]
pub(crate) fn backend_failed(op: &str, e: crate::Error) -> ! {
    match e {
        crate::Error::IndexOutOfBounds { .. } => panic!("{e}"),
        e => panic!("{op}: {e}"),
    }
}

/// Normalises a possibly negative `dim` for a tensor of rank `rank`.
#[track_caller]
pub(crate) fn normalize_dim(op: &str, dim: isize, rank: usize, shape: &[usize]) -> usize {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r.max(1) || (rank == 0 && d != 0) {
        panic!(
            "{op}: dimension out of range (expected to be in range of [{}, {}], but got {dim}) for tensor of shape {shape:?}",
            -r.max(1),
            r.max(1) - 1
        );
    }
    d as usize
}
