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
    // `to_device` onto the tensor's own device returns the same storage (as PyTorch's
    // `.to`), and the update below is in place: copy, so that `params` stay as they are
    // for the run on the other device.
    let p: Vec<Tensor> = params
        .iter()
        .map(|t| t.deep_copy().to_device(dev).unwrap().requires_grad(true))
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

/// The tensors one forward stage reads: the input, the targets and both nets' parameters.
struct Inputs {
    x: Tensor,
    y: Tensor,
    mlp: Vec<Tensor>,
    lenet: Vec<Tensor>,
}

/// Each stage of the MLP's and LeNet's forward run on both devices from the same CPU
/// tensors: the stages whose outputs differ, with their largest difference. Put into the
/// failure message, it names the op to look at.
fn stages_that_disagree(dev: &Device, cpu: &Inputs) -> Vec<String> {
    let d = |t: &Tensor| t.to_device(dev).unwrap();
    let on_dev = Inputs {
        x: d(&cpu.x),
        y: d(&cpu.y),
        mlp: cpu.mlp.iter().map(d).collect(),
        lenet: cpu.lenet.iter().map(d).collect(),
    };
    type Stage = (&'static str, fn(&Inputs) -> Tensor);
    let stages: [Stage; 9] = [
        ("flatten", |i| i.x.flatten(1, -1)),
        ("matmul [32, 144] x [144, 64]", |i| {
            i.x.flatten(1, -1).matmul(&i.mlp[0].t())
        }),
        ("linear 144 -> 64", |i| {
            F::linear(&i.x.flatten(1, -1), &i.mlp[0], Some(&i.mlp[1]))
        }),
        ("linear, relu, linear", |i| {
            let h = F::linear(&i.x.flatten(1, -1), &i.mlp[0], Some(&i.mlp[1])).relu();
            F::linear(&h, &i.mlp[2], Some(&i.mlp[3]))
        }),
        ("conv2d", |i| {
            F::conv2d(&i.x, &i.lenet[0], Some(&i.lenet[1]), &Default::default())
        }),
        ("conv2d, relu, max_pool2d", |i| {
            let h = F::conv2d(&i.x, &i.lenet[0], Some(&i.lenet[1]), &Default::default());
            F::max_pool2d(&h.relu(), 2)
        }),
        ("log_softmax of [32, 144]", |i| {
            i.x.flatten(1, -1).log_softmax(1)
        }),
        ("cross_entropy of [32, 10]", |i| {
            F::cross_entropy(&i.x.flatten(1, -1).narrow(1, 0, 10), &i.y)
        }),
        ("mean_all", |i| i.x.mean_all()),
    ];
    let mut out = Vec::new();
    for (name, f) in stages {
        let c = f(cpu).to_vec::<f32>();
        let g = f(&on_dev).to_device(&Device::Cpu).unwrap().to_vec::<f32>();
        let worst = c
            .iter()
            .zip(&g)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        if c.len() != g.len() || worst.is_nan() || worst > 1e-3 {
            out.push(format!(
                "{name}: max |cpu - {dev}| = {worst} over {} values",
                c.len()
            ));
        }
    }
    out
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

    let inputs = Inputs {
        x: x.clone(),
        y: y.clone(),
        mlp: mlp.to_vec(),
        lenet: lenet.to_vec(),
    };
    let disagree = stages_that_disagree(&dev, &inputs);
    assert!(
        disagree.is_empty(),
        "forward stages that disagree with the CPU:\n{}",
        disagree.join("\n")
    );
    for ((loss_dev, p_dev), (loss_cpu, p_cpu)) in [(mlp_dev, mlp_cpu), (lenet_dev, lenet_cpu)] {
        assert_eq!(loss_dev.device(), dev);
        assert_close(&loss_dev, &loss_cpu, DType::F32);
        for (d, c) in p_dev.iter().zip(&p_cpu) {
            assert_close(d, c, DType::F32);
        }
    }
}
