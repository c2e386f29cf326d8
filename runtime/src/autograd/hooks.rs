//! Hooks on leaf tensors: `register_post_accumulate_grad_hook`, run by backward once a
//! leaf's gradient for this pass is complete.

use super::{AutogradMeta, LeafSlot};
use crate::Tensor;
use crate::tensor::TensorImpl;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A post-accumulate-grad hook: called with the leaf whose `.grad` was just completed.
pub(crate) type PostAccumulateHook = Arc<dyn Fn(&Tensor) + Send + Sync>;

static NEXT_HOOK_ID: AtomicU64 = AtomicU64::new(1);

/// The hooks a leaf carries. The leaf is held weakly: a hook that captured its own
/// parameter would otherwise keep it alive forever.
#[derive(Default)]
pub(crate) struct LeafHooks {
    pub(crate) any: AtomicBool,
    list: Mutex<Vec<(u64, Weak<TensorImpl>, PostAccumulateHook)>>,
}

impl LeafHooks {
    /// Runs every hook on the leaf, in registration order. The list is copied first, so a
    /// hook may register or remove hooks.
    pub(crate) fn run(&self) {
        let hooks: Vec<_> = self
            .list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, leaf, f)| (leaf.clone(), f.clone()))
            .collect();
        for (leaf, f) in hooks {
            if let Some(leaf) = leaf.upgrade() {
                f(&Tensor(leaf));
            }
        }
    }
}

/// Removes the hook it was returned for (PyTorch's `RemovableHandle`). Dropping the handle
/// keeps the hook.
#[must_use = "dropping the handle keeps the hook; call `remove` to take it off"]
pub struct HookHandle {
    slot: Weak<LeafSlot>,
    id: u64,
}

impl HookHandle {
    /// Takes the hook off its tensor; later backward passes no longer call it.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
    /// let w = Tensor::ones(&[2], DType::F32, &Device::Cpu).requires_grad(true);
    /// let calls = Arc::new(AtomicUsize::new(0));
    /// let c = calls.clone();
    /// let handle = w.register_post_accumulate_grad_hook(move |_| {
    ///     c.fetch_add(1, Ordering::SeqCst);
    /// });
    /// w.sum_all().backward();
    /// handle.remove();
    /// w.sum_all().backward();
    /// assert_eq!(calls.load(Ordering::SeqCst), 1);
    /// ```
    pub fn remove(self) {
        if let Some(slot) = self.slot.upgrade() {
            let mut list = slot.hooks.list.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|(id, _, _)| *id != self.id);
            slot.hooks.any.store(!list.is_empty(), Ordering::Release);
        }
    }
}

impl Tensor {
    /// Registers `hook` to run after this leaf's gradient has been accumulated into
    /// `.grad` during a backward pass (`Tensor.register_post_accumulate_grad_hook`). The
    /// hook receives the leaf and reads `.grad()` from it; it runs once per backward pass,
    /// after every gradient of that pass has reached the leaf, and only if one did. This
    /// is where DistributedDataParallel starts a bucket's all-reduce while backward goes
    /// on, and where an optimizer can step a parameter as soon as its gradient is ready.
    ///
    /// Panics when this tensor is not a leaf that requires grad, as PyTorch does.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// use std::sync::{Arc, Mutex};
    /// let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).requires_grad(true);
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// let _handle = w.register_post_accumulate_grad_hook(move |leaf| {
    ///     s.lock().unwrap().push(leaf.grad().unwrap().to_vec::<f32>());
    /// });
    /// // `w` is used twice: the hook sees the summed gradient, once.
    /// (&w * 3.0 + &w).sum_all().backward();
    /// assert_eq!(*seen.lock().unwrap(), vec![vec![4.0, 4.0]]);
    /// ```
    #[track_caller]
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Tensor) + Send + Sync + 'static,
    ) -> HookHandle {
        let slot = match &self.0.autograd {
            Some(AutogradMeta::Leaf(slot)) => slot,
            Some(AutogradMeta::Interior(node)) => panic!(
                "register_post_accumulate_grad_hook: post accumulate grad hooks can only be \
                 registered on leaf tensors (this tensor is the output of {})",
                node.name
            ),
            None => panic!(
                "register_post_accumulate_grad_hook: cannot register a hook on a tensor that \
                 doesn't require gradient (shape {:?})",
                self.shape()
            ),
        };
        let id = NEXT_HOOK_ID.fetch_add(1, Ordering::Relaxed);
        let mut list = slot.hooks.list.lock().unwrap_or_else(|e| e.into_inner());
        list.push((id, Arc::downgrade(&self.0), Arc::new(hook)));
        slot.hooks.any.store(true, Ordering::Release);
        HookHandle {
            slot: Arc::downgrade(slot),
            id,
        }
    }
}
