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

network! {
    pub struct Mlp<const H: usize>(x: [B, 784]) -> [B, 10] {
        fc1: Linear(784 -> H),
        relu,
        bn: BatchNorm1d(H),
        fc2: Linear(H -> 10),
    }
}

network! {
    struct Tiny(x: [N, 3, 16, 16]) -> [N, 4] {
        conv: Conv2d(3 -> 8, kernel = 3, stride = 2, padding = 1, dilation = 1, groups = 1) => [N, 8, 8, 8],
        bn: BatchNorm2d(8),
        silu,
        adaptive_avg_pool2d(1, 1),
        reshape([N, 8]),
        drop: Dropout(0.25),
        head: Linear(8 -> 4),
        softmax,
    }
}

fn main() {
    let lenet = LeNet::new(&Device::Cpu);
    assert_eq!(lenet.forward(&Tensor::zeros(&[2, 1, 28, 28], DType::F32, &Device::Cpu)).shape(), &[2, 10]);
    let mlp = Mlp::<64>::new(&Device::Cpu);
    assert_eq!(mlp.num_parameters(), Mlp::<64>::NUM_PARAMETERS);
    let mut tiny = Tiny::new(&Device::Cpu);
    tiny.eval();
    assert_eq!(tiny.forward(&Tensor::zeros(&[5, 3, 16, 16], DType::F32, &Device::Cpu)).shape(), &[5, 4]);
}
