//! On a GPU, the training steps of an MLP and a LeNet-style network run entirely on device
//! kernels: no op goes through the host fallback (`cuda::host_fallbacks` stays empty), and
//! the results agree with the CPU. Its own test binary, so that no other test's ops are
//! counted. Without a GPU it skips and says so.

use ferrograd::cuda;
use ferrograd::prelude::*;
use ferrograd::testing::{assert_close, cuda_test_device};

/// One SGD step of `forward` on `dev`: the loss, then every parameter after the update.
fn sgd_step(
    dev: &Device,
    params: &[Tensor],
    forward: impl Fn(&[Tensor]) -> Tensor,
) -> (Tensor, Vec<Tensor>) {
    let p: Vec<Tensor> = params
        .iter()
        .map(|t| t.to_device(dev).unwrap().requires_grad(true))
        .collect();
    let loss = forward(&p);
    loss.backward();
    no_grad(|| {
        for t in &p {
            t.add_scaled_(&t.grad().unwrap(), -0.1);
        }
    });
    (loss.detach(), p.iter().map(|t| t.detach()).collect())
}

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(shape, DType::F32, &Device::Cpu).mul_scalar(0.3)
}

#[test]
fn training_steps_run_on_device_kernels_only() {
    let dev = match cuda_test_device() {
        Ok(d) => d,
        Err(why) => {
            println!("skipped training_steps_run_on_device_kernels_only: {why}");
            return;
        }
    };
    manual_seed(7);
    let x = Tensor::randn(&[32, 1, 12, 12], DType::F32, &Device::Cpu);
    let y = Tensor::randint(0, 10, &[32], &Device::Cpu);
    let mlp = [
        randn(&[64, 144]),
        randn(&[64]),
        randn(&[10, 64]),
        randn(&[10]),
    ];
    let lenet = [
        randn(&[4, 1, 3, 3]),
        randn(&[4]),
        randn(&[10, 100]),
        randn(&[10]),
    ];
    let on = |dev: &Device| (x.to_device(dev).unwrap(), y.to_device(dev).unwrap());
    let mlp_forward = |dev: &Device| {
        let (x, y) = on(dev);
        move |p: &[Tensor]| {
            let h = F::linear(&x.flatten(1, -1), &p[0], Some(&p[1])).relu();
            F::cross_entropy(&F::linear(&h, &p[2], Some(&p[3])), &y)
        }
    };
    let lenet_forward = |dev: &Device| {
        let (x, y) = on(dev);
        move |p: &[Tensor]| {
            let h = F::conv2d(&x, &p[0], Some(&p[1]), &Default::default()).relu();
            let h = F::max_pool2d(&h, 2).flatten(1, -1);
            F::cross_entropy(&F::linear(&h, &p[2], Some(&p[3])), &y)
        }
    };
    let mlp_cpu = sgd_step(&Device::Cpu, &mlp, mlp_forward(&Device::Cpu));
    let lenet_cpu = sgd_step(&Device::Cpu, &lenet, lenet_forward(&Device::Cpu));

    cuda::clear_host_fallbacks();
    let mlp_dev = sgd_step(&dev, &mlp, mlp_forward(&dev));
    let lenet_dev = sgd_step(&dev, &lenet, lenet_forward(&dev));
    let fallbacks = cuda::host_fallbacks();
    assert!(
        fallbacks.is_empty(),
        "ops that ran through the host: {fallbacks:?}"
    );

    for ((loss_dev, p_dev), (loss_cpu, p_cpu)) in [(mlp_dev, mlp_cpu), (lenet_dev, lenet_cpu)] {
        assert_eq!(loss_dev.device(), dev);
        assert_close(&loss_dev, &loss_cpu, DType::F32);
        for (d, c) in p_dev.iter().zip(&p_cpu) {
            assert_close(d, c, DType::F32);
        }
    }
}
