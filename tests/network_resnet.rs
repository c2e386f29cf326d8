//! ResNet-18 written entirely in `network!` (blocks as sibling networks with const
//! parameters, repetition and sequences): the same state_dict keys and shapes as
//! torchvision's `resnet18`, the same parameter count, and the same forward as the
//! hand-written `ferrograd::models::vision::resnet` given the same weights.

mod common;

use ferrograd::nn::{Forward, Module};
use ferrograd::prelude::*;

network! {
    /// torchvision's BasicBlock without a downsample: channels and size kept.
    pub struct BasicBlock<const C: usize>(x: [N, C, H, W]) -> [N, C, H, W] {
        let y = x
            -> conv1: Conv2d(C -> C, kernel = 3, padding = 1, bias = false)
            -> bn1: BatchNorm2d(C)
            -> relu
            -> conv2: Conv2d(C -> C, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(C);
        relu(y + x)
    }

    /// The first block of a stage: stride 2 and a projection shortcut (`downsample`).
    pub struct DownBlock<const CIN: usize, const COUT: usize>(x: [N, CIN, H, W]) -> [N, COUT, (H + 1) / 2, (W + 1) / 2] {
        let y = x
            -> conv1: Conv2d(CIN -> COUT, kernel = 3, stride = 2, padding = 1, bias = false)
            -> bn1: BatchNorm2d(COUT)
            -> relu
            -> conv2: Conv2d(COUT -> COUT, kernel = 3, padding = 1, bias = false)
            -> bn2: BatchNorm2d(COUT);
        let short = x -> downsample: (Conv2d(CIN -> COUT, kernel = 1, stride = 2, bias = false), BatchNorm2d(COUT));
        relu(y + short)
    }

    /// ResNet-18 (torchvision's `resnet18(num_classes = 1000)`), any input size.
    pub struct ResNet18(x: [N, 3, H, W]) -> [N, 1000] {
        x
            -> conv1: Conv2d(3 -> 64, kernel = 7, stride = 2, padding = 3, bias = false)
            -> bn1: BatchNorm2d(64)
            -> relu
            -> max_pool2d(3, stride = 2, padding = 1)
            -> layer1: [BasicBlock<64>; 2]
            -> layer2: (DownBlock<64, 128>, BasicBlock<128>)
            -> layer3: (DownBlock<128, 256>, BasicBlock<256>)
            -> layer4: (DownBlock<256, 512>, BasicBlock<512>)
            -> adaptive_avg_pool2d(1, 1)
            -> flatten
            -> fc: Linear(512 -> 1000)
    }
}

#[test]
fn keys_shapes_and_count_equal_torchvisions() {
    let net = ResNet18::new(&Device::Cpu);
    let mut ours: Vec<(String, Vec<usize>)> = Vec::new();
    net.visit("", &mut |name, t, _| {
        ours.push((name.to_string(), t.shape().to_vec()))
    });
    let theirs: Vec<(String, Vec<usize>)> =
        include_str!("../models/tests/fixtures/torchvision/keys.txt")
            .lines()
            .filter(|l| l.starts_with("resnet18 "))
            .map(|l| {
                let parts: Vec<&str> = l.split(' ').collect();
                let shape = parts.get(3).map_or(Vec::new(), |s| {
                    s.split(',')
                        .filter(|x| !x.is_empty())
                        .map(|x| x.parse().expect("a size"))
                        .collect()
                });
                (parts[1].to_string(), shape)
            })
            .collect();
    let (mut a, mut b) = (ours.clone(), theirs.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b, "state_dict keys and shapes");
    assert_eq!(ResNet18::NUM_PARAMETERS, 11_689_512);
    assert_eq!(net.num_parameters(), 11_689_512);
}

#[test]
fn forward_equals_the_hand_written_port_and_trains() {
    manual_seed(11);
    let mut net = ResNet18::new(&Device::Cpu);
    let mut port = ferrograd::models::vision::resnet::resnet18(1000, &Device::Cpu);
    port.load_state_dict(&net.state_dict(), true)
        .expect("same keys");
    net.eval();
    port.eval();
    let x = Tensor::randn(&[2, 3, 45, 37], DType::F32, &Device::Cpu);
    let y = net.forward(&x);
    assert_eq!(y.shape(), &[2, 1000]);
    assert!(y.allclose(&port.forward(&x), 1e-5, 1e-5));
    net.train();
    let x = Tensor::randn(&[2, 3, 32, 32], DType::F32, &Device::Cpu);
    net.forward(&x).sum_all().backward();
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
}
