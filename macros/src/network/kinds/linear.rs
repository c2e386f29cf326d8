//! `Linear(in -> out, bias = true)`: `[*, in]` → `[*, out]`.

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::dim::Dim;
use quote::quote;

pub(crate) struct Linear;

impl Kind for Linear {
    fn names(&self) -> &'static [&'static str] {
        &["Linear"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &["bias"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let (inp, out) = cx.arrow("in_features -> out_features")?;
        let (bias, has_bias) = cx.bool_arg("bias", true);
        cx.finish("`in -> out` and `bias`");
        let (i, o) = (cx.dim(&inp)?, cx.dim(&out)?);
        if !cx.arity(inputs, 1, "one value") {
            return None;
        }
        let x = &inputs[0];
        cx.need_float(x);
        let Some(last) = x.shape.last() else {
            let (desc, span) = (cx.desc.clone(), cx.kind_span());
            cx.error(
                span,
                format!(
                    "`{desc}` needs an input of rank >= 1, but {} yields a scalar",
                    x.origin
                ),
            );
            return None;
        };
        if !last.same(&i) {
            // After a conv or pool the usual mistake is a missing `flatten`.
            let flat = x.shape[1..].iter().fold(Dim::lit(1), |a, d| a.mul(d));
            let (desc, origin, shown) = (cx.desc.clone(), x.origin.clone(), x.show());
            if x.shape.len() > 2 && flat.same(&i) {
                let rank = x.shape.len();
                cx.error(cx.kind_span(), format!("`{desc}` expects a rank-2 input [N, {i}], but {origin} yields rank {rank} {shown}: add `flatten` before it"));
                return None;
            } else {
                cx.error(inp.span(), format!("`{desc}` expects input features {i}, but {origin} yields {last} (shape {shown})"));
            }
        }
        let mut shape = x.shape.clone();
        *shape.last_mut().expect("rank >= 1") = o.clone();
        let params = i.mul(&o).add(&o.mul(&has_bias));
        let (it, ot) = (
            cx.const_tokens(&i, inp.span()),
            cx.const_tokens(&o, out.span()),
        );
        let krate = &cx.krate;
        Some(Built {
            out: Out::One(Ty::float(shape)),
            field: Some((
                quote!(#krate::nn::Linear),
                quote!(#krate::nn::Linear::with_bias(#it, #ot, #bias, device)),
            )),
            params,
            forward: Box::new(|x, f| {
                let x = &x[0];
                quote!(#f.forward(&#x))
            }),
            onnx: None,
        })
    }
}
