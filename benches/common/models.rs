//! The MNIST MLP and LeNet-5 the benchmarks train, as the examples define them.

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
