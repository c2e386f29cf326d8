//! `softmax(dim = -1)`, `log_softmax(dim = -1)`.

use super::{Built, Cx, Kind, Ty};
use quote::quote;

pub(crate) struct Softmax;

impl Kind for Softmax {
    fn names(&self) -> &'static [&'static str] {
        &["softmax", "log_softmax"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["dim"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if !cx.arity(inputs, 1, "one value") {
            cx.finish("`dim` (default -1)");
            return None;
        }
        let x = &inputs[0];
        let dim = cx.axis("dim", true, Some(-1), x.shape.len(), x);
        cx.finish("`dim` (default -1)");
        cx.need_float(x);
        let dim = dim? as isize;
        let log = cx.kind() == "log_softmax";
        Some(
            Built::op(
                Ty::float(x.shape.clone()),
                Box::new(move |x, _| {
                    let x = &x[0];
                    if log {
                        quote!(#x.log_softmax(#dim))
                    } else {
                        quote!(#x.softmax(#dim))
                    }
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.softmax(&#x, #dim, #log))
            })),
        )
    }
}
