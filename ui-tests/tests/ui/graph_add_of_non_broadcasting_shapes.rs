use ferrograd::prelude::*;

network! {
    pub struct Net(a: [N, 8], b: [N, 6]) -> [N, 8] {
        let s = a * b;
        s
    }
}

fn main() {}
