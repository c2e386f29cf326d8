use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        let y = x -> relu;
    }
}

fn main() {}
