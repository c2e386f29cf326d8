//! Out-of-bounds indices and class targets panic with the op's message on every device.
//! On the CPU the op itself panics. On a GPU the kernels check indices as they read them
//! (no host wait per op) and the next read from the device panics, as CUDA reports kernel
//! errors; nothing is read out of bounds, and the device works on afterwards.
//!
//! A test binary of its own: a bad index on a GPU is reported to whichever thread next
//! waits for the device, so these tests must not share a process with other GPU tests.

use ferrograd::prelude::*;
use ferrograd::testing::test_device;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The message of the panic `f` raises (fails if it does not panic).
fn panic_message<R>(what: &str, f: impl FnOnce() -> R) -> String {
    let err = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("{what}: expected a panic"),
        Err(e) => e,
    };
    match err.downcast::<String>() {
        Ok(s) => *s,
        Err(e) => e
            .downcast::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}

#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(
            message.contains(p),
            "message {message:?} should mention {p:?}"
        );
    }
}

fn bad_indices_panic_with_the_ops_message(dev: &Device) {
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, dev).reshape(&[3, 2]);
    let idx = |v: Vec<i64>, shape: &[usize]| Tensor::from_vec(v, shape).to_device(dev).unwrap();

    let m = panic_message("index_select", || {
        x.index_select(0, &idx(vec![0, 3], &[2])).to_vec::<f32>()
    });
    assert_mentions(&m, &["index_select", "index 3", "size 3", "[3, 2]"]);

    let m = panic_message("gather", || {
        x.gather(1, &idx(vec![0, 2, 1], &[3, 1])).to_vec::<f32>()
    });
    assert_mentions(&m, &["gather", "index 2", "dimension 1", "size 2"]);

    let m = panic_message("scatter_add", || {
        x.scatter_add(0, &idx(vec![-1, 0], &[1, 2]), &x)
            .to_vec::<f32>()
    });
    assert_mentions(&m, &["scatter_add", "index -1", "size 3"]);

    let m = panic_message("embedding", || {
        F::embedding(&idx(vec![1, 7], &[2]), &x).to_vec::<f32>()
    });
    assert_mentions(&m, &["index 7", "size 3"]);

    let m = panic_message("one_hot", || {
        idx(vec![0, 4], &[2]).one_hot(4).to_vec::<i64>()
    });
    assert_mentions(&m, &["one_hot", "index 4", "size 4"]);

    let logits = Tensor::randn(&[2, 10], DType::F32, &Device::Cpu)
        .to_device(dev)
        .unwrap();
    let m = panic_message("cross_entropy", || {
        F::cross_entropy(&logits, &idx(vec![1, 10], &[2])).item::<f32>()
    });
    assert_mentions(&m, &["cross_entropy", "target 10", "10 classes", "[2, 10]"]);

    let m = panic_message("nll_loss", || {
        F::nll_loss(&logits.log_softmax(1), &idx(vec![-3, 0], &[2])).item::<f32>()
    });
    assert_mentions(&m, &["nll_loss", "target -3", "10 classes"]);

    // The ignore index is not out of bounds.
    let args = F::CrossEntropyArgs {
        ignore_index: -100,
        ..Default::default()
    };
    let loss = F::cross_entropy_with(&logits, &idx(vec![-100, 3], &[2]), &args);
    let host = logits.to_device(&Device::Cpu).unwrap();
    let expected = F::cross_entropy_with(&host, &Tensor::from_vec(vec![-100i64, 3], &[2]), &args);
    assert!((loss.item::<f32>() - expected.item::<f32>()).abs() < 1e-5);

    // After the failures the device works on: nothing is left to report.
    let good = x.index_select(0, &idx(vec![2, 0], &[2]));
    assert_eq!(good.to_vec::<f32>(), vec![4.0, 5.0, 0.0, 1.0]);
    let g = x.gather(1, &idx(vec![1, 0, 1], &[3, 1]));
    assert_eq!(g.to_vec::<f32>(), vec![1.0, 2.0, 5.0]);
}
test_device!(bad_indices_panic_with_the_ops_message);
