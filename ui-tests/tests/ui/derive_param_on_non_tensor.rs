use ferrograd::nn::Module;

#[derive(Module)]
struct Net {
    #[param]
    scale: f32,
}

fn main() {}
