use ferrograd::prelude::*;

network! {
    pub struct Fusion(image: [N, 16], text: [N, 8]) -> [N, 24] {
        let joined = cat(dim = 0)(image, text);
        joined
    }
}

fn main() {}
