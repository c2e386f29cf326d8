//! LeNet-5 declared with `network!`, trained on MNIST with SGD and momentum.
//! The shapes in the declaration are checked when this file compiles.
//!
//! ```text
//! cargo run --release --example lenet_mnist            # bundled 2,000-image subset
//! cargo run --release --example lenet_mnist -- --full  # full set from $FERROGRAD_DATA or ../shared/data
//! ```

use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::Module;
use ferrograd::prelude::*;

network! {
    /// LeNet-5 for 28x28 digits.
    pub struct LeNet(x: [N, 1, 28, 28]) -> [N, 10] {
        conv1: Conv2d(1 -> 6, kernel = 5, padding = 2),
        relu,
        max_pool2d(2),
        conv2: Conv2d(6 -> 16, kernel = 5),
        relu,
        max_pool2d(2) => [N, 16, 5, 5],
        flatten,
        fc1: Linear(400 -> 120), relu,
        fc2: Linear(120 -> 84), relu,
        fc3: Linear(84 -> 10),
    }
}

#[path = "common/mnist.rs"]
mod mnist;
use mnist::{accuracy, epoch_bar};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let full = std::env::args().any(|a| a == "--full");
    let dir = mnist::data_dir(full);
    let (train_x, train_y) = MNIST::new(&dir, true)?.tensors();
    let (test_x, test_y) = MNIST::new(&dir, false)?.tensors();
    println!("{}", LeNet::summary());

    manual_seed(0);
    let mut net = LeNet::new(&Device::Cpu);
    let params = net.parameters();
    let velocity: Vec<Tensor> = params.iter().map(Tensor::zeros_like).collect();
    let (epochs, lr, momentum) = (if full { 2 } else { 6 }, 0.05, 0.9);
    let mut loader = DataLoader::builder(TensorDataset::new((train_x, train_y)))
        .batch_size(64)
        .shuffle(true)
        .seed(0)
        .build();
    let steps = loader.len();
    for epoch in 1..=epochs {
        net.train();
        let mut total = 0.0;
        let bar = epoch_bar(epoch, steps);
        for (step, batch) in loader.iter().enumerate() {
            let (x, y) = batch?;
            let loss = F::cross_entropy(&net.forward(&x), &y);
            loss.backward();
            no_grad(|| {
                for (p, v) in params.iter().zip(&velocity) {
                    v.mul_scalar_(momentum)
                        .add_(&p.grad().expect("every parameter is used"));
                    p.add_scaled_(v, -lr);
                }
            });
            net.zero_grad();
            total += loss.item::<f32>() as f64;
            bar.set_message(format!("{:.4}", total / (step + 1) as f64));
            bar.inc(1);
        }
        bar.finish();
        net.eval();
        let accuracy = accuracy(|| net.forward(&test_x), &test_y);
        println!(
            "epoch {epoch}: mean loss {:.4}, test accuracy {:.2}%",
            total / steps as f64,
            accuracy * 100.0
        );
    }
    Ok(())
}
