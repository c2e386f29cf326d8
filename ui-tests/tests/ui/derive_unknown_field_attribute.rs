use ferrograd::nn::{Linear, Module};

#[derive(Module)]
struct Net {
    #[module(frozen)]
    fc: Linear,
}

fn main() {}
