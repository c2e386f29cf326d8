use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 16]) -> [N, 16] {
        drop: Dropout(1.5),
    }
}

fn main() {}
