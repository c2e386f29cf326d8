//! Generated code is hygienic: inputs and layers may be named like the macro's own
//! locals and parameters (`device`, `shape`, `x`, `self_`, `dim_N`, `__value`).
use ferrograd::prelude::*;

network! {
    pub struct Hygiene(device: [N, 4], shape: [N, 4], self_: [N, 4], x: [N, 4], dim_N: [N, 4]) -> [N, 4] {
        let __value = device + shape;
        let b = self_ * x - dim_N;
        __value + b -> shape2: Linear(4 -> 4) -> device_layer: Linear(4 -> 4)
    }
}

network! {
    pub struct Layers(x: [N, 4]) -> [N, 4] {
        shape: Linear(4 -> 4),
        device: Linear(4 -> 4),
    }
}

fn main() {
    let t = Tensor::ones(&[2, 4], DType::F32, &Device::Cpu);
    let y = Hygiene::new(&Device::Cpu).forward(&t, &t, &t, &t, &t);
    assert_eq!(y.shape(), &[2, 4]);
    assert_eq!(Layers::new(&Device::Cpu).forward(&t).shape(), &[2, 4]);
}
