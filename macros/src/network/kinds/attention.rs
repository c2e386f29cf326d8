//! `MultiheadAttention(embed_dim, num_heads, batch_first = false, dropout = 0.0,
//! bias = true, kdim = E, vdim = E, need_weights = false, is_causal = false)` applied to
//! `x` (self-attention) or `(query, key, value)`; with `need_weights`, yields
//! `(out, weights)` (weights averaged over heads, `[N, L, S]`).
//! `TransformerEncoderLayer(d_model, nhead, dim_feedforward = 2048, dropout = 0.1,
//! activation = "relu", layer_norm_eps = 1e-5, batch_first = false, norm_first = false,
//! bias = true)`: same shape out.

use super::{Built, Cx, Kind, OnnxFn, Out, Ty};
use crate::network::dim::Dim;
use crate::network::parse::Value;
use quote::quote;

/// `[L, N, E]` / `[N, L, E]`: (sequence, batch) of a rank-3 value.
fn seq_batch(t: &Ty, batch_first: bool) -> (Dim, Dim) {
    if batch_first {
        (t.shape[1].clone(), t.shape[0].clone())
    } else {
        (t.shape[0].clone(), t.shape[1].clone())
    }
}

/// An optional size (`kdim`, `vdim`) defaulting to `default`.
fn optional_size(
    cx: &mut Cx,
    key: &str,
    default: &Dim,
    default_span: proc_macro2::Span,
) -> (Dim, proc_macro2::Span) {
    if cx.has_arg(key) {
        cx.size(key, false, None, 1)
    } else {
        (default.clone(), default_span)
    }
}

/// Reports a width that does not split into `heads` heads, when both are known.
fn check_heads(cx: &mut Cx, desc: &str, what: &str, e: &Dim, heads: &Dim) {
    if let (Some(e), Some(h)) = (e.as_lit(), heads.as_lit())
        && e % h != 0
    {
        cx.arg_error(
            cx.args_span(),
            format!("`{desc}`: {what} {e} does not split into {h} heads"),
        );
    }
}

pub(crate) struct MultiheadAttention;

impl Kind for MultiheadAttention {
    fn names(&self) -> &'static [&'static str] {
        &["MultiheadAttention"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &[
            "embed_dim",
            "num_heads",
            "batch_first",
            "dropout",
            "bias",
            "kdim",
            "vdim",
            "need_weights",
            "is_causal",
        ]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        // Sizes may be const or constructor parameters (`MultiheadAttention(D, HEADS)`).
        let (e, e_span) = cx.size("embed_dim", true, None, 1);
        let (heads, heads_span) = cx.size("num_heads", true, None, 1);
        let batch_first = cx.bool("batch_first", false);
        let (dropout_lit, dropout) = cx.float_arg("dropout", false, Some(0.0), (0.0, 1.0, false));
        let bias = cx.bool("bias", true);
        let (kdim, kdim_span) = optional_size(cx, "kdim", &e, e_span);
        let (vdim, vdim_span) = optional_size(cx, "vdim", &e, e_span);
        let need_weights = cx.bool("need_weights", false);
        let is_causal = cx.bool("is_causal", false);
        cx.finish("`embed_dim`, `num_heads`, `batch_first`, `dropout`, `bias`, `kdim`, `vdim`, `need_weights` and `is_causal`");
        let desc = cx.desc.clone();
        check_heads(cx, &desc, "embed_dim", &e, &heads);
        let (q, k, v) = match inputs.len() {
            1 => (&inputs[0], &inputs[0], &inputs[0]),
            3 => (&inputs[0], &inputs[1], &inputs[2]),
            _ => {
                cx.arity(inputs, 3, "`x` (self-attention) or `query, key, value`");
                return None;
            }
        };
        let layout = if batch_first {
            "[N, L, E]"
        } else {
            "[L, N, E]"
        };
        for t in [q, k, v] {
            cx.need_float(t);
            if !cx.need_rank(t, &[3], layout) {
                return None;
            }
        }
        let span = cx.kind_span();
        cx.expect_dim(&q.shape[2], &e, span, "a query width (embed_dim) of", q);
        cx.expect_dim(&k.shape[2], &kdim, span, "a key width (kdim) of", k);
        cx.expect_dim(&v.shape[2], &vdim, span, "a value width (vdim) of", v);
        let ((l, n), (s, nk)) = (seq_batch(q, batch_first), seq_batch(k, batch_first));
        cx.expect_dim(&nk, &n, span, "keys with the batch size of the query,", k);
        cx.expect_dim(
            &seq_batch(v, batch_first).0,
            &s,
            span,
            "values as long as the keys,",
            v,
        );
        let packed = kdim.same(&e) && vdim.same(&e);
        let b = if bias {
            e.mul(&Dim::lit(4))
        } else {
            Dim::lit(0)
        };
        let params = e
            .mul(&e)
            .add(&e.mul(&kdim))
            .add(&e.mul(&vdim))
            .add(&e.mul(&e))
            .add(&b);
        let (eu, hu, ku, vu) = (
            cx.const_tokens(&e, e_span),
            cx.const_tokens(&heads, heads_span),
            cx.const_tokens(&kdim, kdim_span),
            cx.const_tokens(&vdim, vdim_span),
        );
        let krate = cx.krate.clone();
        let init = if packed && dropout_lit == Some(0.0) && bias {
            quote!(#krate::nn::MultiheadAttention::new(#eu, #hu, device).batch_first(#batch_first))
        } else {
            quote!(#krate::nn::MultiheadAttention::with_options(#eu, #hu, #dropout, #bias, ::core::option::Option::Some(#ku), ::core::option::Option::Some(#vu), device).batch_first(#batch_first))
        };
        let out_ty = Ty::float(q.shape.clone());
        let out = if need_weights {
            Out::Tuple(vec![Out::One(out_ty), Out::One(Ty::float(vec![n, l, s]))])
        } else {
            Out::One(out_ty)
        };
        Some(Built {
            out,
            field: Some((quote!(#krate::nn::MultiheadAttention), init)),
            params,
            forward: Box::new(move |x, f| {
                let (q, k, v) = if x.len() == 1 {
                    (&x[0], &x[0], &x[0])
                } else {
                    (&x[0], &x[1], &x[2])
                };
                let args = quote!(#krate::nn::MhaArgs { need_weights: #need_weights, average_attn_weights: true, is_causal: #is_causal, ..::core::default::Default::default() });
                if need_weights {
                    quote!({
                        let (__o, __w) = #f.forward_with(&#q, &#k, &#v, &#args);
                        (__o, __w.expect("need_weights returns the weights"))
                    })
                } else {
                    quote!(#f.forward_with(&#q, &#k, &#v, &#args).0)
                }
            }),
            // With the weights it yields a tuple: that stays a traced export.
            onnx: (!need_weights).then(|| -> OnnxFn {
                Box::new(move |x, f, label| {
                    let (q, k, v) = if x.len() == 1 {
                        (&x[0], &x[0], &x[0])
                    } else {
                        (&x[0], &x[1], &x[2])
                    };
                    quote!(__g.multihead_attention(&#f, #label, &#q, &#k, &#v, #is_causal))
                })
            }),
        })
    }
}

pub(crate) struct EncoderLayer;

impl Kind for EncoderLayer {
    fn names(&self) -> &'static [&'static str] {
        &["TransformerEncoderLayer"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &[
            "d_model",
            "nhead",
            "dim_feedforward",
            "dropout",
            "activation",
            "layer_norm_eps",
            "batch_first",
            "norm_first",
            "bias",
        ]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let (e, e_span) = cx.size("d_model", true, None, 1);
        let (heads, heads_span) = cx.size("nhead", true, None, 1);
        let (ff, ff_span) = cx.size("dim_feedforward", false, Some(2048), 1);
        let (_, dropout) = cx.float_arg("dropout", false, Some(0.1), (0.0, 1.0, false));
        let gelu = match cx.value("activation", false) {
            None => false,
            Some(Value::Str(s)) if s.value() == "relu" => false,
            Some(Value::Str(s)) if s.value() == "gelu" => true,
            Some(other) => {
                cx.arg_error(other.span(), "`activation` is \"relu\" or \"gelu\"");
                false
            }
        };
        let (_, eps) = cx.float_arg("layer_norm_eps", false, Some(1e-5), (0.0, f64::MAX, true));
        let batch_first = cx.bool("batch_first", false);
        let norm_first = cx.bool("norm_first", false);
        let bias = cx.bool("bias", true);
        cx.finish("`d_model`, `nhead`, `dim_feedforward`, `dropout`, `activation`, `layer_norm_eps`, `batch_first`, `norm_first` and `bias`");
        let desc = cx.desc.clone();
        check_heads(cx, &desc, "d_model", &e, &heads);
        let layout = if batch_first {
            "[N, L, E]"
        } else {
            "[L, N, E]"
        };
        let x = cx.one_float(inputs, &[3], layout)?;
        let span = cx.kind_span();
        cx.expect_dim(&x.shape[2], &e, span, "a width (d_model) of", x);
        let b = |n: Dim| if bias { n } else { Dim::lit(0) };
        let lit = Dim::lit;
        // 4 e² + b(4 e) + 2 e ff + b(ff + e) + 2 (e + b(e))
        let params = lit(4)
            .mul(&e)
            .mul(&e)
            .add(&b(lit(4).mul(&e)))
            .add(&lit(2).mul(&e).mul(&ff))
            .add(&b(ff.add(&e)))
            .add(&lit(2).mul(&e.add(&b(e.clone()))));
        let krate = cx.krate.clone();
        let (eu, hu, fu) = (
            cx.const_tokens(&e, e_span),
            cx.const_tokens(&heads, heads_span),
            cx.const_tokens(&ff, ff_span),
        );
        let act = if gelu { quote!(Gelu) } else { quote!(Relu) };
        let init = quote!(#krate::nn::TransformerEncoderLayer::new(#krate::nn::TransformerConfig {
            dim_feedforward: #fu, dropout: #dropout, activation: #krate::nn::Activation::#act, layer_norm_eps: #eps,
            batch_first: #batch_first, norm_first: #norm_first, bias: #bias, ..#krate::nn::TransformerConfig::new(#eu, #hu)
        }, device));
        Some(Built {
            out: Out::One(Ty::float(x.shape.clone())),
            field: Some((quote!(#krate::nn::TransformerEncoderLayer), init)),
            params,
            forward: Box::new(|x, f| {
                let x = &x[0];
                quote!(#f.forward(&#x))
            }),
            onnx: None,
        })
    }
}
