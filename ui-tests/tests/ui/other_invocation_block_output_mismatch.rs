use ferrograd::prelude::*;

network! {
    pub struct Down<const CIN: usize, const COUT: usize>(x: [N, CIN, H, W])
        -> [N, COUT, (H + 1) / 2, (W + 1) / 2] {
        conv: Conv2d(CIN -> COUT, kernel = 3, stride = 2, padding = 1),
        relu,
    }
}

network! {
    pub struct Encoder(x: [N, 3, 32, 32]) -> [N, 16, 16, 16] {
        d1: Down<3, 8>,
        d2: Down<8, 16>,
    }
}

fn main() {}
