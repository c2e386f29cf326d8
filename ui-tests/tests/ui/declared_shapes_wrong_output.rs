// A hand-written module joining through `declared_shapes!` is checked by constant
// evaluation: its annotated output is not the one it declares.
use ferrograd::nn::{DeclaredDim, DeclaredShapes};
use ferrograd::prelude::*;

pub struct Scale(ferrograd::nn::Linear);

impl Scale {
    pub fn new(device: &Device) -> Self {
        Scale(ferrograd::nn::Linear::new(8, 8, device))
    }
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.0.forward(x)
    }
}

impl ferrograd::nn::Module for Scale {
    fn visit(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor, ferrograd::nn::TensorKind)) {
        self.0.visit(prefix, f)
    }
    fn visit_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor, ferrograd::nn::TensorKind),
    ) {
        self.0.visit_mut(prefix, f)
    }
    fn set_training(&mut self, _training: bool) {}
}

impl DeclaredShapes for Scale {
    const INPUT: &'static [DeclaredDim] = &[DeclaredDim::Sym("N"), DeclaredDim::Lit(8)];
    const OUTPUT: &'static [DeclaredDim] = &[DeclaredDim::Sym("N"), DeclaredDim::Lit(8)];
    const PARAMETERS: usize = 72;
}

ferrograd::declared_shapes!(Scale);

network! {
    pub struct Net(x: [B, 8]) -> [B, 16] {
        scale: Scale => [B, 16],
    }
}

fn main() {}
