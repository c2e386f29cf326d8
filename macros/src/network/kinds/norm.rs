//! Normalisation layers: `BatchNorm1d(C)`, `BatchNorm2d(C)`, `LayerNorm(D, eps = 1e-5)`,
//! `GroupNorm(groups, C)`, `RMSNorm(D, eps = ..)`; the shape is unchanged. `eps` is a
//! literal or a number parameter of the network (`[D, eps: f64]`).

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::dim::Dim;
use quote::{format_ident, quote};

/// The size argument every norm takes first (`BatchNorm2d(16)`).
fn size(cx: &mut Cx, what: &str) -> Option<(Dim, proc_macro2::Span)> {
    let kind = cx.kind();
    match cx.positional() {
        Some(v) => cx.dim_of(&v, what),
        None => {
            let span = cx.args_span();
            cx.arg_error(span, format!("`{kind}` needs the {what}, as `{kind}(16)`"));
            None
        }
    }
}

fn forward() -> super::ForwardFn {
    Box::new(|x, f| {
        let x = &x[0];
        quote!(#f.forward(&#x))
    })
}

pub(crate) struct BatchNorm;

impl Kind for BatchNorm {
    fn names(&self) -> &'static [&'static str] {
        &["BatchNorm1d", "BatchNorm2d"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let kind = cx.kind();
        let c = size(cx, "number of channels");
        cx.finish("the number of channels");
        let (c, span) = c?;
        if !cx.arity(inputs, 1, "one value") {
            return None;
        }
        let x = &inputs[0];
        cx.need_float(x);
        let (ranks, layout): (&[usize], _) = if kind == "BatchNorm1d" {
            (&[2, 3], "[N, C] or [N, C, L]")
        } else {
            (&[4], "[N, C, H, W]")
        };
        if cx.need_rank(x, ranks, layout) {
            cx.expect_dim(&x.shape[1], &c, span, "channels", x);
        }
        let ct = cx.const_tokens(&c, span);
        let krate = &cx.krate;
        let ty = format_ident!("{}", kind);
        Some(Built {
            out: Out::One(Ty::float(x.shape.clone())),
            field: Some((
                quote!(#krate::nn::#ty),
                quote!(#krate::nn::#ty::new(#ct, device)),
            )),
            params: Dim::lit(2).mul(&c),
            forward: forward(),
            onnx: None,
        })
    }
}

pub(crate) struct LayerNorm;

impl Kind for LayerNorm {
    fn names(&self) -> &'static [&'static str] {
        &["LayerNorm", "RMSNorm"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &["eps"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let kind = cx.kind();
        let d = size(cx, "normalised size");
        let eps = cx
            .has_arg("eps")
            .then(|| cx.float_arg("eps", false, None, (0.0, f64::MAX, true)).1);
        cx.finish("the normalised size and `eps`");
        let (d, span) = d?;
        if !cx.arity(inputs, 1, "one value") {
            return None;
        }
        let x = &inputs[0];
        cx.need_float(x);
        match x.shape.last() {
            Some(last) => {
                let last = last.clone();
                cx.expect_dim(&last, &d, span, "a last dim of", x);
            }
            None => {
                let (desc, s) = (cx.desc.clone(), cx.kind_span());
                cx.error(s, format!("`{desc}` needs an input of rank >= 1"));
            }
        }
        let dt = cx.const_tokens(&d, span);
        let krate = &cx.krate;
        let (ty, init, params) = if kind == "LayerNorm" {
            (
                quote!(#krate::nn::LayerNorm),
                match &eps {
                    Some(eps) => {
                        quote!(#krate::nn::LayerNorm::with_options(&[#dt], #eps, true, true, device))
                    }
                    None => quote!(#krate::nn::LayerNorm::new(&[#dt], device)),
                },
                Dim::lit(2).mul(&d),
            )
        } else {
            (
                quote!(#krate::nn::RMSNorm),
                match &eps {
                    Some(eps) => {
                        quote!(#krate::nn::RMSNorm::new(&[#dt], ::core::option::Option::Some(#eps), device))
                    }
                    None => quote!(#krate::nn::RMSNorm::new(&[#dt], None, device)),
                },
                d.clone(),
            )
        };
        Some(Built {
            out: Out::One(Ty::float(x.shape.clone())),
            field: Some((ty, init)),
            params,
            forward: forward(),
            onnx: None,
        })
    }
}

pub(crate) struct GroupNorm;

impl Kind for GroupNorm {
    fn names(&self) -> &'static [&'static str] {
        &["GroupNorm"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let groups = cx.int("num_groups", true, None, 1);
        let c = size(cx, "number of channels");
        cx.finish("`num_groups` and the number of channels, as `GroupNorm(8, 64)`");
        let (c, span) = c?;
        let desc = cx.desc.clone();
        if let Some(v) = c.as_lit()
            && v % groups != 0
        {
            cx.arg_error(
                span,
                format!("`{desc}`: {v} channels do not split into {groups} groups"),
            );
        }
        if !cx.arity(inputs, 1, "one value") {
            return None;
        }
        let x = &inputs[0];
        cx.need_float(x);
        if cx.need_rank(x, &[2, 3, 4, 5], "[N, C, ..]") {
            cx.expect_dim(&x.shape[1], &c, span, "channels", x);
        }
        let ct = cx.const_tokens(&c, span);
        let krate = &cx.krate;
        let g = groups as usize;
        Some(Built {
            out: Out::One(Ty::float(x.shape.clone())),
            field: Some((
                quote!(#krate::nn::GroupNorm),
                quote!(#krate::nn::GroupNorm::new(#g, #ct, device)),
            )),
            params: Dim::lit(2).mul(&c),
            forward: forward(),
            onnx: None,
        })
    }
}
