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
        let d = cx.axis("dim", false, None, rank, first);
        cx.finish("`dim = d`");
        let d = d?;
        let desc = cx.desc.clone();
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
            for (i, (a, b)) in first.shape.iter().zip(&other.shape).enumerate() {
                if i != d && !a.same(b) {
                    let span = cx.kind_span();
                    cx.error(span, format!("`{desc}` needs equal sizes outside dim {d}, but {} yields {} and {} yields {} (dim {i}: {a} vs {b})", first.origin, first.show(), other.origin, other.show()));
                    return None;
                }
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
        Some(Built::op(
            ty,
            Box::new(move |x, _| quote!(#krate::Tensor::cat(&[#(&#x),*], #d))),
        ))
    }
}

pub(crate) struct Chunk;

impl Kind for Chunk {
    fn names(&self) -> &'static [&'static str] {
        &["chunk"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["chunks", "dim"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let n = cx.int("chunks", true, None, 1);
        if !cx.arity(inputs, 1, "one value") {
            cx.finish("the number of chunks and `dim = d`");
            return None;
        }
        let x = &inputs[0];
        let d = cx.axis("dim", false, Some(0), x.shape.len(), x);
        cx.finish("the number of chunks and `dim = d`");
        let d = d?;
        let Some(part) = x.shape[d].div_exact(&Dim::lit(n)) else {
            let (desc, span) = (cx.desc.clone(), cx.args_span());
            cx.error(span, format!("`{desc}`: dim {d} of {} is {}, which does not split into {n} equal chunks (shape {})", x.origin, x.shape[d], x.show()));
            return None;
        };
        let mut shape = x.shape.clone();
        shape[d] = part;
        let one = Ty { shape, ..x.clone() };
        let di = d as isize;
        let n = n as usize;
        let vars: Vec<_> = (0..n).map(|i| format_ident!("__chunk{}", i)).collect();
        Some(Built {
            out: Out::Tuple(vec![Out::One(one); n]),
            field: None,
            params: Dim::lit(0),
            forward: Box::new(move |x, _| {
                let x = &x[0];
                let vars = &vars;
                quote!({
                    let mut __parts = #x.chunk(#n, #di).into_iter();
                    #(let #vars = __parts.next().expect("chunk count checked at compile time");)*
                    (#(#vars),*)
                })
            }),
        })
    }
}
