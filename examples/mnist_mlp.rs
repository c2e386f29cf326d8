//! Trains a two-layer perceptron on MNIST with ferrograd's tensors and autograd.
//!
//! ```text
//! cargo run --release --example mnist_mlp            # bundled 2,000-image subset
//! cargo run --release --example mnist_mlp -- --full  # full set from $FERROGRAD_DATA or ../shared/data
//! ```

use ferrograd::data::datasets::MNIST;
use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::prelude::*;

#[path = "common/mnist.rs"]
mod mnist;
use mnist::{accuracy, data_dir, epoch_bar};

/// PyTorch's default `nn.Linear` initialisation: U(-1/sqrt(in), 1/sqrt(in)).
fn linear_params(inputs: usize, outputs: usize) -> (Tensor, Tensor) {
    let bound = 1.0 / (inputs as f64).sqrt();
    let uniform = |shape: &[usize]| {
        (Tensor::rand(shape, DType::F32, &Device::Cpu) * (2.0 * bound) - bound).requires_grad(true)
    };
    (uniform(&[outputs, inputs]), uniform(&[outputs]))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let full = std::env::args().any(|a| a == "--full");
    let dir = data_dir(full);
    let (train_x, train_y) = MNIST::new(&dir, true)?.tensors();
    let (test_x, test_y) = MNIST::new(&dir, false)?.tensors();
    let (train_x, test_x) = (train_x.flatten(1, -1), test_x.flatten(1, -1));
    println!(
        "MNIST from {}: {} training and {} test images",
        dir.display(),
        train_x.size(0),
        test_x.size(0)
    );

    manual_seed(0);
    let (w1, b1) = linear_params(784, 128);
    let (w2, b2) = linear_params(128, 10);
    let params = [&w1, &b1, &w2, &b2];
    let forward = |x: &Tensor| F::linear(&F::linear(x, &w1, Some(&b1)).relu(), &w2, Some(&b2));

    let (epochs, lr) = (if full { 3 } else { 8 }, 0.1);
    let mut loader = DataLoader::builder(TensorDataset::new((train_x, train_y)))
        .batch_size(64)
        .shuffle(true)
        .seed(0)
        .build();
    let steps = loader.len();
    for epoch in 1..=epochs {
        let bar = epoch_bar(epoch, steps);
        let mut total = 0.0;
        for (step, batch) in loader.iter().enumerate() {
            let (x, y) = batch?;
            let loss = F::cross_entropy(&forward(&x), &y);
            loss.backward();
            no_grad(|| {
                for p in params {
                    p.add_scaled_(&p.grad().expect("every parameter is used"), -lr);
                    p.zero_grad();
                }
            });
            total += loss.item::<f32>() as f64;
            bar.set_message(format!("{:.4}", total / (step + 1) as f64));
            bar.inc(1);
        }
        bar.finish();
        let accuracy = accuracy(|| forward(&test_x), &test_y);
        println!(
            "epoch {epoch}: mean loss {:.4}, test accuracy {:.2}%",
            total / steps as f64,
            accuracy * 100.0
        );
    }
    Ok(())
}
