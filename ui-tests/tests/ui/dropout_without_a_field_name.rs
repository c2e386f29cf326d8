use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        Dropout(0.5),
    }
}

fn main() {}
