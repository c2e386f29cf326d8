// A network of two inputs used as a layer through an annotation: it takes 2 values.
use ferrograd::prelude::*;

network! {
    pub struct Fuse(a: [N, 16], b: [N, 16]) -> [N, 16] {
        a + b
    }

    pub struct Net(x: [B, 16]) -> [B, 16] {
        fc: Linear(16 -> 16),
        fuse: Fuse => [B, 16],
    }
}

fn main() {}
