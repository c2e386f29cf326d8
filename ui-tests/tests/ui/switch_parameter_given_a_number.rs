use ferrograd::prelude::*;

network! {
    pub struct Mlp[d, bias: bool](x: [N, d]) -> [N, d] {
        fc: Linear(d -> d, bias = bias),
    }

    pub struct Net(x: [N, 8]) -> [N, 8] {
        mlp: Mlp(8, bias = 1),
    }
}

fn main() {}
