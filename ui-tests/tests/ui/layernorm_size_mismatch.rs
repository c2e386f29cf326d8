use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 512]) -> [N, 512] {
        ln: LayerNorm(256),
    }
}

fn main() {}
