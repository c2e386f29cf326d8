use ferrograd::prelude::*;

network! {
    pub struct Pair(x: [N, 8], y: [N, 8]) -> [N, 8] {
        x + y
    }

    pub struct Net(x: [N, 8], extra: Option<[N, 8]>) -> [N, 8] {
        let y = pair: Pair(x, extra);
        y
    }
}

fn main() {}
