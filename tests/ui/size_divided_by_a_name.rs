use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, C]) -> [N, C / N] {
        x -> relu
    }
}

fn main() {}
