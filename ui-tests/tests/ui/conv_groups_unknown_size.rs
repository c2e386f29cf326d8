use ferrograd::prelude::*;

network! {
    pub struct Depthwise[channels](x: [N, channels, H, W]) -> [N, channels, H, W] {
        conv: Conv2d(channels -> channels, kernel = 3, padding = 1, groups = chanels),
    }
}

fn main() {}
