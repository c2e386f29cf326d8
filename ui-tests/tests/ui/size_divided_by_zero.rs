use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, C]) -> [N, C / 0] {
        x -> relu
    }
}

fn main() {}
