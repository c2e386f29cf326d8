//! The MNIST MLP and LeNet-5 the benchmarks train, as the examples define them, and
//! their training epoch.

use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::optim::Optimizer;
use ferrograd::prelude::*;

network! {
    pub struct Mlp(x: [N, 1, 28, 28]) -> [N, 10] {
        flatten,
        fc1: Linear(784 -> 128), relu,
        fc2: Linear(128 -> 10),
    }
}

network! {
    pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2), relu, max_pool2d(2),
        conv2: Conv2d(6 -> 16, kernel = 5), relu, max_pool2d(2),
        flatten,
        fc1: Linear(400 -> 120), relu,
        fc2: Linear(120 -> 84), relu,
        fc3: Linear(84 -> 10),
    }
}

/// One epoch of `forward` over `loader` with `opt`.
pub fn epoch(
    loader: &mut DataLoader<TensorDataset<(Tensor, Tensor)>>,
    opt: &mut dyn Optimizer,
    forward: &dyn Fn(&Tensor) -> Tensor,
) -> f32 {
    let mut last = 0.0;
    for batch in loader.iter() {
        let (x, y) = batch.unwrap();
        opt.zero_grad();
        let loss = F::cross_entropy(&forward(&x), &y);
        loss.backward();
        opt.step();
        last = loss.item::<f32>();
    }
    last
}
