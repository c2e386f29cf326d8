//! `cat(dim = d)(a, b, ..)` joins values along a dim (the chain form's `cat(h, dim = d)`
//! joins the current value and `h`); `chunk(n, dim = d)` splits one into a tuple.

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::dim::Dim;
use quote::{format_ident, quote};

pub(crate) struct Cat;

impl Kind for Cat {
    fn names(&self) -> &'static [&'static str] {
        &["cat"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["dim"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if inputs.len() < 2 {
            cx.arity(inputs, 2, "two or more values");
            cx.finish("`dim = d`");
            return None;
        }
        let first = &inputs[0];
        let rank = first.shape.len();
        let d = cx.axis_spanned("dim", false, None, rank, first);
        cx.finish("`dim = d`");
        let (d, dim_span) = d?;
        // The call with the values it joins as written (`cat(image, text, dim = 0)`):
        // the chain form's values among its arguments, else the values it is applied to
        // when they are named.
        let written = &cx.call.written_values;
        let names: Option<Vec<&str>> = if written.is_empty() {
            inputs.iter().map(Ty::name).collect()
        } else {
            Some(written.iter().map(String::as_str).collect())
        };
        let desc = match names {
            Some(names) => format!("cat({}, dim = {d})", names.join(", ")),
            None => cx.desc.clone(),
        };
        let mut total = Dim::lit(0);
        for other in inputs {
            if other.shape.len() != rank {
                let span = cx.kind_span();
                cx.error(
                    span,
                    format!(
                        "`{desc}` needs values of one rank, but {} yields {} and {} yields {}",
                        first.origin,
                        first.show(),
                        other.origin,
                        other.show()
                    ),
                );
                return None;
            }
            let differ: Vec<usize> = (0..rank)
                .filter(|&i| i != d && !first.shape[i].same(&other.shape[i]))
                .collect();
            if let Some(&i) = differ.first() {
                let (a, b) = (&first.shape[i], &other.shape[i]);
                // Only one other dim differs and the cat dim agrees: the values were
                // meant to be joined along that one.
                let hint = if differ.len() == 1 && first.shape[d].same(&other.shape[d]) {
                    format!(": did you mean `dim = {i}`?")
                } else {
                    String::new()
                };
                cx.error(dim_span, format!("`{desc}` needs equal sizes outside dim {d}, but {} yields {} and {} yields {} (dim {i}: {a} vs {b}){hint}", first.origin, first.show(), other.origin, other.show()));
                return None;
            }
            total = total.add(&other.shape[d]);
        }
        let mut shape = first.shape.clone();
        shape[d] = total;
        let ty = Ty {
            shape,
            ..first.clone()
        };
        let krate = cx.krate.clone();
        let d = d as isize;
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| quote!(#krate::Tensor::cat(&[#(&#x),*], #d))),
            )
            .onnx(Box::new(move |x, _, _| quote!(__g.cat(&[#(&#x),*], #d)))),
        )
    }
}

pub(crate) struct Chunk;

impl Kind for Chunk {
    fn names(&self) -> &'static [&'static str] {
        &["chunk", "split"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["chunks", "split_size", "dim"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let split = cx.kind() == "split";
        let (key, what) = if split {
            ("split_size", "the size of each part and `dim = d`")
        } else {
            ("chunks", "the number of chunks and `dim = d`")
        };
        let k = cx.int(key, true, None, 1);
        if !cx.arity(inputs, 1, "one value") {
            cx.finish(what);
            return None;
        }
        let x = &inputs[0];
        let d = cx.axis("dim", false, Some(0), x.shape.len(), x);
        cx.finish(what);
        let d = d?;
        let desc = cx.desc.clone();
        // `chunk(n)`: n equal parts; `split(size)`: parts of `size`, the dim a multiple of
        // it (so every part has one shape and their number is known).
        let (part, n) = match (split, x.shape[d].div_exact(&Dim::lit(k))) {
            (false, Some(part)) => (part, k),
            (true, Some(count)) => match count.as_lit() {
                Some(c) => (Dim::lit(k), c),
                None => {
                    let span = cx.args_span();
                    cx.arg_error(span, format!("`{desc}`: dim {d} of {} is {}, so the number of parts is not known at compile time; use `chunk`", x.origin, x.shape[d]));
                    return None;
                }
            },
            (false, None) => {
                let span = cx.args_span();
                cx.arg_error(span, format!("`{desc}`: dim {d} of {} is {}, which does not split into {k} equal chunks (shape {})", x.origin, x.shape[d], x.show()));
                return None;
            }
            (true, None) => {
                let span = cx.args_span();
                cx.arg_error(span, format!("`{desc}`: dim {d} of {} is {}, not a multiple of {k}: the parts would differ in size (shape {})", x.origin, x.shape[d], x.show()));
                return None;
            }
        };
        let mut shape = x.shape.clone();
        shape[d] = part;
        let one = Ty { shape, ..x.clone() };
        let di = d as isize;
        let (n, k) = (n as usize, k as usize);
        let vars: Vec<_> = (0..n).map(|i| format_ident!("__part{}", i)).collect();
        let onnx_vars = vars.clone();
        Some(Built {
            out: Out::Tuple(vec![Out::One(one); n]),
            field: None,
            params: Dim::lit(0),
            forward: Box::new(move |x, _| {
                let x = &x[0];
                let vars = &vars;
                let parts = if split {
                    quote!(#x.split(#k, #di))
                } else {
                    quote!(#x.chunk(#n, #di))
                };
                quote!({
                    let mut __parts = #parts.into_iter();
                    #(let #vars = __parts.next().expect("the part count is checked at compile time");)*
                    (#(#vars),*)
                })
            }),
            // Equal parts either way: ONNX `Split` into `n` outputs.
            onnx: Some(Box::new(move |x, _, _| {
                let x = &x[0];
                let vars = &onnx_vars;
                let index = 0..n;
                quote!({
                    let __parts = __g.chunk(&#x, #n, #di);
                    #(let #vars = __g.nth(&__parts, #index);)*
                    (#(#vars),*)
                })
            })),
        })
    }
}
