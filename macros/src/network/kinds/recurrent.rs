//! `LSTM`, `GRU`, `RNN` `(in -> hidden, num_layers = 1, bidirectional = false,
//! batch_first = false, dropout = 0.0, proj_size = 0, bias = true, nonlinearity = "tanh")`
//! applied to `x` (`[T, N, in]`, or `[N, T, in]` with `batch_first`), optionally with the
//! initial state (`h0`, and `c0` for an LSTM). Yields PyTorch's tuples: `(out, (h, c))`
//! for an LSTM, `(out, h)` otherwise.

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::dim::Dim;
use crate::network::parse::Value;
use quote::quote;

pub(crate) struct Recurrent;

impl Kind for Recurrent {
    fn names(&self) -> &'static [&'static str] {
        &["LSTM", "GRU", "RNN"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &[
            "num_layers",
            "bidirectional",
            "batch_first",
            "dropout",
            "proj_size",
            "bias",
            "nonlinearity",
        ]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let kind = cx.kind();
        let lstm = kind == "LSTM";
        let (inp, hid) = cx.arrow("input_size -> hidden_size")?;
        let layers = cx.int("num_layers", false, Some(1), 1);
        let bidirectional = cx.bool("bidirectional", false);
        let batch_first = cx.bool("batch_first", false);
        let dropout = cx.float("dropout", false, Some(0.0), 0.0, 1.0, false);
        let proj = if lstm {
            cx.int("proj_size", false, Some(0), 0)
        } else {
            0
        };
        let bias = cx.bool("bias", true);
        let relu = if kind == "RNN" {
            match cx.value("nonlinearity", false) {
                None => false,
                Some(Value::Str(s)) if s.value() == "tanh" => false,
                Some(Value::Str(s)) if s.value() == "relu" => true,
                Some(other) => {
                    cx.arg_error(other.span(), "`nonlinearity` is \"tanh\" or \"relu\"");
                    false
                }
            }
        } else {
            false
        };
        cx.finish("`in -> hidden`, `num_layers`, `bidirectional`, `batch_first`, `dropout`, `bias` (and `proj_size` for an LSTM, `nonlinearity` for an RNN)");
        let (i, h) = (cx.dim(&inp)?, cx.dim(&hid)?);
        let desc = cx.desc.clone();
        if let Some(hv) = h.as_lit()
            && proj >= hv
        {
            cx.arg_error(
                cx.args_span(),
                format!("`{desc}`: proj_size {proj} must be smaller than hidden_size {hv}"),
            );
        }
        let states = if lstm { 3 } else { 2 };
        if inputs.is_empty() || inputs.len() > states {
            let what = if lstm {
                "`x`, optionally with `h0` and `c0`"
            } else {
                "`x`, optionally with `h0`"
            };
            cx.arity(inputs, 1, what);
            return None;
        }
        if lstm && inputs.len() == 2 {
            let span = cx.kind_span();
            cx.error(
                span,
                format!("`{desc}` takes `x`, or `x`, `h0` and `c0`: an LSTM's state is both"),
            );
            return None;
        }
        let x = &inputs[0];
        cx.need_float(x);
        let layout = if batch_first {
            "[N, T, input]"
        } else {
            "[T, N, input]"
        };
        if !cx.need_rank(x, &[3], layout) {
            return None;
        }
        cx.expect_dim(&x.shape[2], &i, inp.span(), "input size", x);
        let d = if bidirectional { 2 } else { 1 };
        let h_out = if proj > 0 { Dim::lit(proj) } else { h.clone() };
        let (t, n) = if batch_first {
            (&x.shape[1], &x.shape[0])
        } else {
            (&x.shape[0], &x.shape[1])
        };
        let out_shape = if batch_first {
            vec![n.clone(), t.clone(), h_out.mul(&Dim::lit(d))]
        } else {
            vec![t.clone(), n.clone(), h_out.mul(&Dim::lit(d))]
        };
        let state = |size: &Dim| vec![Dim::lit(d * layers), n.clone(), size.clone()];
        for (k, (given, want)) in inputs[1..]
            .iter()
            .zip([state(&h_out), state(&h)])
            .enumerate()
        {
            if given.shape.len() != 3 || !given.shape.iter().zip(&want).all(|(a, b)| a.same(b)) {
                let name = if k == 0 { "h0" } else { "c0" };
                let span = cx.kind_span();
                cx.error(span, format!("`{desc}`: {name} must be {} (layers x directions, batch, size), but {} yields {}", super::super::check::show(&want), given.origin, given.show()));
            }
        }
        let gates = match kind.as_str() {
            "LSTM" => 4,
            "GRU" => 3,
            _ => 1,
        };
        let g = Dim::lit(gates).mul(&h);
        let mut params = Dim::lit(0);
        for layer in 0..layers {
            let in_l = if layer == 0 {
                i.clone()
            } else {
                h_out.mul(&Dim::lit(d))
            };
            let mut one = g.mul(&in_l).add(&g.mul(&h_out));
            if bias {
                one = one.add(&g.mul(&Dim::lit(2)));
            }
            if proj > 0 {
                one = one.add(&h.mul(&Dim::lit(proj)));
            }
            params = params.add(&one.mul(&Dim::lit(d)));
        }
        let (it, ht) = (
            cx.const_tokens(&i, inp.span()),
            cx.const_tokens(&h, hid.span()),
        );
        let krate = cx.krate.clone();
        let mode = match (kind.as_str(), relu) {
            ("LSTM", _) => quote!(Lstm),
            ("GRU", _) => quote!(Gru),
            (_, true) => quote!(Relu),
            _ => quote!(Tanh),
        };
        let (layers_u, proj_u) = (layers as usize, proj as usize);
        let init = quote!(#krate::nn::Recurrent::new(#krate::nn::RnnMode::#mode, #krate::nn::RnnConfig {
            input_size: #it, hidden_size: #ht, num_layers: #layers_u, bias: #bias, batch_first: #batch_first,
            dropout: #dropout, bidirectional: #bidirectional, proj_size: #proj_u,
        }, device));
        let out = Out::Tuple(vec![
            Out::One(Ty::float(out_shape)),
            if lstm {
                Out::Tuple(vec![
                    Out::One(Ty::float(state(&h_out))),
                    Out::One(Ty::float(state(&h))),
                ])
            } else {
                Out::One(Ty::float(state(&h_out)))
            },
        ]);
        Some(Built {
            out,
            field: Some((quote!(#krate::nn::Recurrent), init)),
            params,
            forward: Box::new(move |x, f| {
                let xs = &x[0];
                let state = match x.len() {
                    1 => quote!(::core::option::Option::None),
                    2 => {
                        let h0 = &x[1];
                        quote!(::core::option::Option::Some(&#krate::nn::RnnState { h: #h0.clone(), c: ::core::option::Option::None }))
                    }
                    _ => {
                        let (h0, c0) = (&x[1], &x[2]);
                        quote!(::core::option::Option::Some(&#krate::nn::RnnState { h: #h0.clone(), c: ::core::option::Option::Some(#c0.clone()) }))
                    }
                };
                if lstm {
                    quote!({
                        let (__y, __s) = #f.forward(&#xs, #state);
                        (__y, (__s.h, __s.c.expect("an LSTM returns its cell state")))
                    })
                } else {
                    quote!({
                        let (__y, __s) = #f.forward(&#xs, #state);
                        (__y, __s.h)
                    })
                }
            }),
            onnx: None,
        })
    }
}
