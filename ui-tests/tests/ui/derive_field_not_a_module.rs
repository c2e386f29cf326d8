use ferrograd::nn::{Linear, Module};

#[derive(Module)]
struct Net {
    fc: Linear,
    hidden: usize,
}

fn main() {}
