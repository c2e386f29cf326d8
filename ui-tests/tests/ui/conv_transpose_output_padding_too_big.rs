use ferrograd::prelude::*;

network! {
    pub struct Net(x: [N, 8, 4, 4]) -> [N, 4, 9, 9] {
        up: ConvTranspose2d(8 -> 4, kernel = 2, stride = 2, output_padding = 2),
    }
}

fn main() {}
