use ferrograd::prelude::*;

network! {
    pub struct Block[hidden](x: [N, 8, H, W]) -> [N, 8, H, W] {
        x -> conv: (
            (Conv2d(8 -> hidden, kernel = 1, bias = false), BatchNorm2d(hidden), relu6),
            (Conv2d(8 -> hidden, kernel = 3, padding = 1, groups = hidden), BatchNorm2d(hidden), relu6),
            Conv2d(hidden -> 8, kernel = 1),
        )
    }
}

fn main() {}
