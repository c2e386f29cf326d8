use ferrograd::prelude::*;

network! {
    pub struct Block[c](x: [N, c]) -> [N, c] {
        fc: Linear(c -> c),
    }

    pub struct Net(x: [N, C]) -> [N, C] {
        block: Block(C),
    }
}

fn main() {}
