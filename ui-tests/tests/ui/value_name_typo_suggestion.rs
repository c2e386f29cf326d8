use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8]) -> [N, 8] {
        let hidden = x -> fc: Linear(8 -> 8);
        relu(hiden)
    }
}

fn main() {}
