//! `Dropout(p)`: identity in eval, zeroes with probability `p` in training.

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::dim::Dim;
use quote::quote;

pub(crate) struct Dropout;

impl Kind for Dropout {
    fn names(&self) -> &'static [&'static str] {
        &["Dropout"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn why_a_field(&self) -> &'static str {
        "has no parameters but keeps train/eval state (`train()` turns it on, `eval()` off)"
    }
    fn keys(&self) -> &'static [&'static str] {
        &["p"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        // p = 1 zeroes everything in training, as `nn.Dropout(1.0)` does.
        let (_, p) = cx.float_arg("p", true, None, (0.0, 1.0, true));
        cx.finish("the probability `p`");
        if !cx.arity(inputs, 1, "one value") {
            return None;
        }
        cx.need_float(&inputs[0]);
        let krate = &cx.krate;
        Some(Built {
            out: Out::One(Ty::float(inputs[0].shape.clone())),
            field: Some((
                quote!(#krate::nn::Dropout),
                quote!(#krate::nn::Dropout::new(#p)),
            )),
            params: Dim::lit(0),
            forward: Box::new(|x, f| {
                let x = &x[0];
                quote!(#f.forward(&#x))
            }),
            onnx: None,
        })
    }
}
