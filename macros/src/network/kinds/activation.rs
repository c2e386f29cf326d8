//! Elementwise activations: `relu`, `relu6`, `gelu`, `gelu_tanh`, `tanh`, `sigmoid`, `silu`,
//! `leaky_relu(slope)`; the shape is unchanged.

use super::{Built, Cx, Kind, Ty};
use quote::{format_ident, quote};

pub(crate) struct Activation;

impl Kind for Activation {
    fn names(&self) -> &'static [&'static str] {
        &[
            "relu",
            "relu6",
            "gelu",
            "gelu_tanh",
            "tanh",
            "sigmoid",
            "silu",
            "leaky_relu",
        ]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["negative_slope"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let kind = cx.kind();
        let slope = (kind == "leaky_relu")
            .then(|| cx.float("negative_slope", true, Some(0.01), f64::MIN, f64::MAX, true));
        cx.finish(if slope.is_some() {
            "`negative_slope`"
        } else {
            "no arguments"
        });
        if !cx.arity(inputs, 1, "one value") {
            return None;
        }
        cx.need_float(&inputs[0]);
        let method = format_ident!("{}", kind);
        Some(
            Built::op(
                Ty::float(inputs[0].shape.clone()),
                Box::new(move |x, _| {
                    let x = &x[0];
                    match slope {
                        Some(s) => quote!(#x.leaky_relu(#s)),
                        None => quote!(#x.#method()),
                    }
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                let s = slope.unwrap_or(0.0);
                quote!(__g.activation(#kind, &#x, #s))
            })),
        )
    }
}
