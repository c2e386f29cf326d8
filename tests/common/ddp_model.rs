//! The small MLP, batches and loss of the data-parallel checks, shared by
//! `tests/distributed.rs` (MPI, CPU) and `tests/nccl.rs` (NCCL, GPU).

#![allow(dead_code)]

use ferrograd::nn::{Forward, Linear, Module};
use ferrograd::prelude::*;

#[derive(Module)]
pub struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
    pub head: Linear,
}

impl Mlp {
    /// 6 → 32 → 16 → 3 on `dev`, initialised from `seed`.
    pub fn new(seed: u64, dev: &Device) -> Mlp {
        manual_seed(seed);
        Mlp {
            fc1: Linear::new(6, 32, dev),
            fc2: Linear::new(32, 16, dev),
            head: Linear::new(16, 3, dev),
        }
    }
}

impl Forward<&Tensor> for Mlp {
    type Output = Tensor;
    fn forward(&self, x: &Tensor) -> Tensor {
        self.head
            .forward(&self.fc2.forward(&self.fc1.forward(x).relu()).tanh())
    }
}

/// The whole batch of step `step` (the same on every rank) and its targets, on `dev`.
pub fn global_batch(step: usize, rows: usize, dev: &Device) -> (Tensor, Tensor) {
    let rng = &mut Generator::new(1000 + step as u64);
    let x = Tensor::randn_with(&[rows, 6], DType::F32, &Device::Cpu, rng);
    let y = Tensor::randn_with(&[rows, 3], DType::F32, &Device::Cpu, rng);
    (x.to_device(dev).unwrap(), y.to_device(dev).unwrap())
}

/// Mean squared error.
pub fn mse(pred: &Tensor, y: &Tensor) -> Tensor {
    let d = pred - y;
    (&d * &d).mean_all()
}
