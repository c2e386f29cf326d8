use ferrograd::nn::Module;
use ferrograd::Tensor;

#[derive(Module)]
struct Net {
    #[param]
    #[buffer]
    w: Tensor,
}

fn main() {}
