//! `Embedding(num -> dim, padding_idx = i)`: integer ids `[*]` → `[*, dim]`.

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::parse::DKind;
use quote::quote;

pub(crate) struct Embedding;

impl Kind for Embedding {
    fn names(&self) -> &'static [&'static str] {
        &["Embedding"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &["padding_idx"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let arrow = Some(cx.arrow("num_embeddings -> embedding_dim")?);
        let padding = cx.value("padding_idx", false);
        cx.finish("`num -> dim` and `padding_idx`");
        let (num, dim) = arrow?;
        let (n, d) = (cx.dim(&num)?, cx.dim(&dim)?);
        let padding = match padding {
            None => None,
            Some(v) => {
                let (p, span) = cx.dim_of(&v, "padding_idx")?;
                match (p.as_lit(), n.as_lit()) {
                    (Some(p), Some(n)) if p >= n || p < -n => {
                        cx.arg_error(span, format!("`padding_idx` {p} is out of range for {n} embeddings (valid: {} to {})", -n, n - 1));
                        None
                    }
                    (Some(p), Some(n)) => Some(if p < 0 { p + n } else { p }),
                    (Some(p), None) if p >= 0 => Some(p),
                    _ => {
                        cx.arg_error(span, "`padding_idx` must be an integer literal (negative ones need a literal `num_embeddings`)");
                        None
                    }
                }
            }
        };
        if !cx.arity(inputs, 1, "one value (the ids)") {
            return None;
        }
        let x = &inputs[0];
        if x.dtype != DKind::Int {
            let (desc, span) = (cx.desc.clone(), cx.kind_span());
            // Only a declared input can be declared as integers; a layer's float output
            // cannot be turned into ids.
            let message = match x.origin.strip_prefix("the input ") {
                Some(input) => format!(
                    "`{desc}` looks up integer ids, but {} is {} ({}): declare the input as integers, as `{}: {}: i64`",
                    x.origin,
                    x.dtype.name(),
                    x.show(),
                    input.trim_matches('`'),
                    x.show()
                ),
                None => format!(
                    "`{desc}` looks up integer ids (an Embedding takes token or class indices), but this value is a {} output of {} ({})",
                    x.dtype.name(),
                    x.origin
                        .strip_prefix("the previous layer ")
                        .unwrap_or(&x.origin)
                        .trim_matches(|c| c == '(' || c == ')'),
                    x.show()
                ),
            };
            cx.error(span, message);
        }
        let mut shape = x.shape.clone();
        shape.push(d.clone());
        let (nt, dt) = (
            cx.const_tokens(&n, num.span()),
            cx.const_tokens(&d, dim.span()),
        );
        let krate = &cx.krate;
        let init = match padding {
            Some(p) => quote!(#krate::nn::Embedding::new(#nt, #dt, device).padding_idx(#p)),
            None => quote!(#krate::nn::Embedding::new(#nt, #dt, device)),
        };
        Some(Built {
            out: Out::One(Ty::float(shape)),
            field: Some((quote!(#krate::nn::Embedding), init)),
            params: n.mul(&d),
            forward: Box::new(|x, f| {
                let x = &x[0];
                quote!(#f.forward(&#x))
            }),
            onnx: None,
        })
    }
}
