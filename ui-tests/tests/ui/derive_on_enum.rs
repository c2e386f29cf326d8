use ferrograd::nn::Module;

#[derive(Module)]
enum Head {
    Small,
    Large,
}

fn main() {}
