//! Mistakes in tensor ops panic with a message that names the op and both shapes, like
//! PyTorch's exceptions.

use ferrograd::prelude::*;

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32, &Device::Cpu)
}

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(f).expect_err("expected a panic");
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
