//! `mean(dim = d, keepdim = false)`, `sum(..)` over one dim.

use super::{Built, Cx, Kind, Ty};
use crate::network::dim::Dim;
use quote::quote;

pub(crate) struct Reduce;

impl Kind for Reduce {
    fn names(&self) -> &'static [&'static str] {
        &["mean", "sum"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["dim", "keepdim"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if !cx.arity(inputs, 1, "one value") {
            cx.finish("`dim` and `keepdim`");
            return None;
        }
        let x = &inputs[0];
        let d = cx.axis("dim", true, None, x.shape.len(), x);
        let keep = cx.bool("keepdim", false);
        cx.finish("`dim` and `keepdim`");
        let d = d?;
        cx.need_float(x);
        let mut shape = x.shape.clone();
        if keep {
            shape[d] = Dim::lit(1);
        } else {
            shape.remove(d);
        }
        let mean = cx.kind() == "mean";
        let di = d as isize;
        Some(
            Built::op(
                Ty::float(shape),
                Box::new(move |x, _| {
                    let x = &x[0];
                    if mean {
                        quote!(#x.mean(&[#di], #keep))
                    } else {
                        quote!(#x.sum(&[#di], #keep))
                    }
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.reduce(&#x, #di, #keep, #mean))
            })),
        )
    }
}
