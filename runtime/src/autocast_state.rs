//! The per-thread autocast state, below everything that reads it: the ops (through
//! `crate::amp`) and the backward engine, which runs with autocast off. `crate::amp`
//! re-exports the public functions.

use crate::DType;
use std::cell::Cell;

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Restores the previous autocast state when dropped (also on panic).
struct Restore(Option<DType>);

impl Drop for Restore {
    fn drop(&mut self) {
        AUTOCAST.with(|a| a.set(self.0));
    }
}

fn with_state<R>(state: Option<DType>, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(AUTOCAST.with(|a| a.replace(state)));
    f()
}

/// Runs `f` with autocast to `dtype` (`DType::BF16` or `DType::F16`) on this thread;
/// scopes nest, the innermost wins.
///
/// # Panics
/// When `dtype` is not a 16-bit float type.
#[track_caller]
pub fn autocast<R>(dtype: DType, f: impl FnOnce() -> R) -> R {
    assert!(
        dtype.is_half(),
        "autocast: expected DType::BF16 or DType::F16, got {dtype:?}"
    );
    with_state(Some(dtype), f)
}

/// Runs `f` with autocast off, inside an autocast scope (`autocast(enabled=False)`).
///
/// ```
/// # use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::amp::{autocast, autocast_dtype, autocast_disabled};
/// autocast(DType::F16, || {
///     assert_eq!(autocast_dtype(), Some(DType::F16));
///     autocast_disabled(|| assert_eq!(autocast_dtype(), None));
/// });
/// ```
pub fn autocast_disabled<R>(f: impl FnOnce() -> R) -> R {
    with_state(None, f)
}

/// The dtype autocast casts to on this thread, or `None` outside [`autocast`].
///
/// ```
/// assert_eq!(ferrograd_runtime::amp::autocast_dtype(), None);
/// ```
pub fn autocast_dtype() -> Option<DType> {
    AUTOCAST.with(|a| a.get())
}
