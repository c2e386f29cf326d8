//! Mistakes in tensor ops panic with a message that names the op and both shapes, like
//! PyTorch's exceptions.
//!
//! Out-of-bounds indices run on every device: on the CPU the op itself panics; on a GPU the
//! kernels check indices as they read them (no host wait per op) and the next read from
//! the device panics, as CUDA reports kernel errors. This binary holds the only GPU test
//! that makes a bad index on purpose: a bad index on a GPU is reported to whichever thread
//! next waits for the device, so it must not share a process with other GPU tests.

use ferrograd::prelude::*;
use ferrograd::testing::test_device;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32, &Device::Cpu)
}

/// The message of the panic `f` raises (fails if it returns).
fn panic_message<R>(f: impl FnOnce() -> R) -> String {
    let err = catch_unwind(AssertUnwindSafe(f))
        .map(|_| ())
        .expect_err("expected a panic");
    match err.downcast::<String>() {
        Ok(s) => *s,
        Err(e) => e
            .downcast::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(
            message.contains(p),
            "message {message:?} should mention {p:?}"
        );
    }
}

#[test]
fn broadcast_mismatch_names_op_shapes_and_dim() {
    let m = panic_message(|| {
        let _ = &t(&[2, 3]) + &t(&[4]);
    });
    assert_mentions(&m, &["add", "[2, 3]", "[4]", "dimension -1", "(3)", "(4)"]);
    let m = panic_message(|| {
        let _ = t(&[2, 3, 5]).mul(&t(&[4, 5]));
    });
    assert_mentions(&m, &["mul", "[2, 3, 5]", "[4, 5]", "dimension -2"]);
}

#[test]
fn matmul_inner_dim_mismatch() {
    let m = panic_message(|| {
        let _ = t(&[2, 3]).matmul(&t(&[4, 5]));
    });
    assert_mentions(&m, &["matmul", "2x3", "4x5", "[2, 3]", "[4, 5]"]);
}

#[test]
fn matmul_dtype_mismatch() {
    let m = panic_message(|| {
        let _ = t(&[2, 3]).matmul(&Tensor::zeros(&[3, 2], DType::F64, &Device::Cpu));
    });
    assert_mentions(&m, &["matmul", "F32", "F64", "[2, 3]", "[3, 2]"]);
}

#[test]
fn matmul_batch_mismatch() {
    let m = panic_message(|| {
        let _ = t(&[2, 3, 4]).matmul(&t(&[5, 4, 2]));
    });
    assert_mentions(&m, &["matmul", "[2, 3, 4]", "[5, 4, 2]", "batch"]);
}

#[test]
fn reshape_with_wrong_element_count() {
    let m = panic_message(|| {
        let _ = t(&[2, 3]).reshape(&[4, 2]);
    });
    assert_mentions(&m, &["reshape", "[4, 2]", "size 6", "[2, 3]"]);
}

#[test]
fn view_of_non_contiguous() {
    let m = panic_message(|| {
        let _ = t(&[2, 3]).t().view(&[6]);
    });
    assert_mentions(&m, &["view", "[3, 2]", "reshape"]);
}

#[test]
fn dim_out_of_range() {
    let m = panic_message(|| {
        let _ = t(&[2, 3]).sum(&[2], false);
    });
    assert_mentions(&m, &["sum", "dimension out of range", "got 2", "[2, 3]"]);
}

#[test]
fn cat_shape_mismatch() {
    let m = panic_message(|| {
        let _ = Tensor::cat(&[&t(&[2, 3]), &t(&[2, 4])], 0);
    });
    assert_mentions(&m, &["cat", "[2, 3]", "[2, 4]", "dimension 0"]);
}

#[test]
fn conv2d_channel_mismatch() {
    let m = panic_message(|| {
        let _ = F::conv2d(
            &t(&[1, 3, 8, 8]),
            &t(&[6, 1, 3, 3]),
            None,
            &F::Conv2dArgs::default(),
        );
    });
    assert_mentions(
        &m,
        &[
            "conv2d",
            "[1, 3, 8, 8]",
            "[6, 1, 3, 3]",
            "1 channels",
            "3 channels",
        ],
    );
}

#[test]
fn conv2d_kernel_larger_than_input() {
    let m = panic_message(|| {
        let _ = F::conv2d(
            &t(&[1, 1, 2, 2]),
            &t(&[1, 1, 3, 3]),
            None,
            &F::Conv2dArgs::default(),
        );
    });
    assert_mentions(
        &m,
        &["conv2d", "non-positive", "[1, 1, 2, 2]", "[1, 1, 3, 3]"],
    );
}

#[test]
fn index_out_of_bounds() {
    let m = panic_message(|| {
        let _ = t(&[3, 2]).index_select(0, &Tensor::from_vec(vec![0i64, 3], &[2]));
    });
    assert_mentions(&m, &["index_select", "index 3", "size 3", "[3, 2]"]);
}

#[test]
fn cross_entropy_target_shape_and_range() {
    let m = panic_message(|| {
        let _ = F::cross_entropy(&t(&[4, 10]), &Tensor::from_vec(vec![1i64, 2, 3], &[3]));
    });
    assert_mentions(&m, &["cross_entropy", "[4]", "[4, 10]", "[3]"]);
    let m = panic_message(|| {
        let _ = F::cross_entropy(&t(&[2, 10]), &Tensor::from_vec(vec![1i64, 10], &[2]));
    });
    assert_mentions(&m, &["cross_entropy", "target 10", "10 classes"]);
}

#[test]
fn layer_norm_wrong_normalized_shape() {
    let m = panic_message(|| {
        let _ = F::layer_norm(&t(&[2, 5]), &[4], None, None, 1e-5);
    });
    assert_mentions(&m, &["layer_norm", "[4]", "[2, 5]"]);
}

#[test]
fn expand_incompatible() {
    let m = panic_message(|| {
        let _ = t(&[2, 3]).expand(&[2, 4]);
    });
    assert_mentions(&m, &["expand", "(4)", "(3)", "[2, 3]"]);
}

#[test]
fn to_vec_with_the_wrong_type() {
    let m = panic_message(|| {
        let _ = t(&[2]).to_vec::<f64>();
    });
    assert_mentions(&m, &["to_vec", "F32", "F64"]);
}

#[test]
fn item_of_many_elements() {
    let m = panic_message(|| {
        let _ = t(&[2, 2]).item::<f32>();
    });
    assert_mentions(&m, &["item", "4 elements", "[2, 2]"]);
}

#[test]
fn backward_from_non_scalar() {
    let m = panic_message(|| t(&[3]).requires_grad(true).exp().backward());
    assert_mentions(&m, &["backward", "scalar", "[3]"]);
}

#[test]
fn cuda_device_without_support_is_an_error_not_a_panic() {
    let result = t(&[2]).to_device(&Device::Cuda(0));
    if cfg!(feature = "cuda") {
        // With the feature and no GPU or driver, it is still a typed error.
        if let Err(e) = result {
            assert!(e.to_string().contains("CUDA"), "{e}");
        }
    } else {
        assert!(matches!(result, Err(ferrograd::Error::CudaNotCompiled)));
    }
}

/// Out-of-bounds indices and class targets, on every device (see the module docs).
fn bad_indices_panic_with_the_ops_message(dev: &Device) {
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, dev).reshape(&[3, 2]);
    let idx = |v: Vec<i64>, shape: &[usize]| Tensor::from_vec(v, shape).to_device(dev).unwrap();

    let m = panic_message(|| x.index_select(0, &idx(vec![0, 3], &[2])).to_vec::<f32>());
    assert_mentions(&m, &["index_select", "index 3", "size 3", "[3, 2]"]);

    let m = panic_message(|| x.gather(1, &idx(vec![0, 2, 1], &[3, 1])).to_vec::<f32>());
    assert_mentions(&m, &["gather", "index 2", "dimension 1", "size 2"]);

    let m = panic_message(|| {
        x.scatter_add(0, &idx(vec![-1, 0], &[1, 2]), &x)
            .to_vec::<f32>()
    });
    assert_mentions(&m, &["scatter_add", "index -1", "size 3"]);

    let m = panic_message(|| F::embedding(&idx(vec![1, 7], &[2]), &x).to_vec::<f32>());
    assert_mentions(&m, &["index 7", "size 3"]);

    let m = panic_message(|| idx(vec![0, 4], &[2]).one_hot(4).to_vec::<i64>());
    assert_mentions(&m, &["one_hot", "index 4", "size 4"]);

    let logits = Tensor::randn(&[2, 10], DType::F32, &Device::Cpu)
        .to_device(dev)
        .unwrap();
    let m = panic_message(|| F::cross_entropy(&logits, &idx(vec![1, 10], &[2])).item::<f32>());
    assert_mentions(&m, &["cross_entropy", "target 10", "10 classes", "[2, 10]"]);

    let m = panic_message(|| {
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

/// Without the `nccl` feature the NCCL backend is an error that says how to get it (and
/// starts nothing).
#[cfg(not(feature = "nccl"))]
#[test]
fn the_nccl_backend_without_its_feature_says_how_to_enable_it() {
    use ferrograd::distributed::{self, Backend, DistError};
    match distributed::init_process_group(Backend::Nccl) {
        Err(DistError::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "nccl");
            assert!(reason.contains("`nccl` feature"), "{reason}");
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
    assert!(!distributed::is_initialized());
}
