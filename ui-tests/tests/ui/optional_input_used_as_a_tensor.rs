use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, T, 8], mask: Option<[N, T, 8]>) -> [N, T, 8] {
        x + mask
    }
}

fn main() {}
