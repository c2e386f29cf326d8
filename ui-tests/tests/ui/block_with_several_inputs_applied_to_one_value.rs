use ferrograd::prelude::*;

network! {
    pub struct Fuse(a: [N, 8], b: [N, 8]) -> [N, 8] {
        a + b
    }

    pub struct Net(x: [N, 8]) -> [N, 8] {
        let y = fuse: Fuse(x);
        y
    }
}

fn main() {}
