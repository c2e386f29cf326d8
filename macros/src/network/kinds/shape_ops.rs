//! Ops that rearrange a value: `flatten`, `reshape([..])` (one `-1` allowed),
//! `transpose(a, b)`, `permute(..)`, `unsqueeze(d)`, `squeeze(d)`, `select(d, i)`.

use super::{Built, Cx, Kind, Ty};
use crate::network::dim::{Dim, onnx_dim};
use crate::network::parse::{DimExpr, Value};
use quote::quote;

fn one(cx: &mut Cx, inputs: &[Ty]) -> bool {
    cx.arity(inputs, 1, "one value")
}

pub(crate) struct Flatten;

impl Kind for Flatten {
    fn names(&self) -> &'static [&'static str] {
        &["flatten"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        cx.finish("no arguments (it keeps dim 0 and flattens the rest)");
        if !one(cx, inputs) {
            return None;
        }
        let x = &inputs[0];
        if x.shape.len() < 2 {
            let (origin, shown, span) = (x.origin.clone(), x.show(), cx.kind_span());
            cx.error(
                span,
                format!("`flatten` needs rank >= 2, but {origin} yields {shown}"),
            );
            return None;
        }
        let rest = x.shape[1..].iter().fold(Dim::lit(1), |a, d| a.mul(d));
        let ty = Ty {
            shape: vec![x.shape[0].clone(), rest],
            ..x.clone()
        };
        Some(
            Built::op(
                ty,
                Box::new(|x, _| {
                    let x = &x[0];
                    quote!(#x.flatten(1, -1))
                }),
            )
            .onnx(Box::new(|x, _, _| {
                let x = &x[0];
                quote!(__g.flatten(&#x))
            })),
        )
    }
}

pub(crate) struct Reshape;

impl Kind for Reshape {
    fn names(&self) -> &'static [&'static str] {
        &["reshape"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let target = match cx.positional() {
            Some(Value::Shape(s)) => Some(s),
            _ => {
                let span = cx.args_span();
                cx.arg_error(span, "`reshape` needs a target shape, as `reshape([N, 16, 5, 5])` (one dim may be -1)");
                None
            }
        };
        cx.finish("one target shape");
        let target = target?;
        if !one(cx, inputs) {
            return None;
        }
        let x = &inputs[0];
        let count = x.shape.iter().fold(Dim::lit(1), |a, d| a.mul(d));
        let mut dims: Vec<Option<Dim>> = Vec::new();
        let mut infer = None;
        for d in &target.dims {
            if let DimExpr::Neg(inner, span) = d
                && matches!(**inner, DimExpr::Lit(1, _))
            {
                if infer.is_some() {
                    cx.arg_error(*span, "`reshape` infers one dim at most: only one `-1`");
                    return None;
                }
                infer = Some(dims.len());
                dims.push(None);
            } else {
                dims.push(Some(cx.dim(d)?));
            }
        }
        let known = dims.iter().flatten().fold(Dim::lit(1), |a, d| a.mul(d));
        let desc = cx.desc.clone();
        if let Some(i) = infer {
            match count.div_exact(&known) {
                Some(q) => dims[i] = Some(q),
                None => {
                    cx.error(target.span, format!("`{desc}`: cannot infer the -1: {} yields {} ({count} elements), which is not a multiple of {known}", x.origin, x.show()));
                    return None;
                }
            }
        }
        let shape: Vec<Dim> = dims.into_iter().map(|d| d.expect("filled")).collect();
        let total = shape.iter().fold(Dim::lit(1), |a, d| a.mul(d));
        if !total.same(&count) {
            cx.error(target.span, format!("`{desc}` changes the element count: {} yields {} ({count} elements) but the target {} has {total}", x.origin, x.show(), super::super::check::show(&shape)));
        }
        let sizes: Vec<_> = shape.iter().map(|d| cx.runtime_tokens(d)).collect();
        let krate = cx.krate.clone();
        // The `-1` the user wrote stays `-1` in the ONNX target.
        let target: Vec<_> = shape
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if infer == Some(i) {
                    quote!(#krate::onnx::SymDim::Expr(::std::string::String::from("-1")))
                } else {
                    onnx_dim(d, cx.runtime, &krate)
                }
            })
            .collect();
        let ty = Ty { shape, ..x.clone() };
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| {
                    let x = &x[0];
                    quote!(#x.reshape(&[#(#sizes),*]))
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.reshape(&#x, &[#(#target),*]))
            })),
        )
    }
}

pub(crate) struct Transpose;

impl Kind for Transpose {
    fn names(&self) -> &'static [&'static str] {
        &["transpose"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if !one(cx, inputs) {
            cx.finish("two dims");
            return None;
        }
        let x = &inputs[0];
        let rank = x.shape.len();
        let a = cx.axis("dim0", true, None, rank, x);
        let b = cx.axis("dim1", true, None, rank, x);
        cx.finish("two dims, as `transpose(1, 2)`");
        let (a, b) = (a?, b?);
        let mut shape = x.shape.clone();
        shape.swap(a, b);
        let ty = Ty { shape, ..x.clone() };
        let (a, b) = (a as isize, b as isize);
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| {
                    let x = &x[0];
                    quote!(#x.transpose(#a, #b))
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.transpose(&#x, #a as isize, #b as isize))
            })),
        )
    }
}

pub(crate) struct Permute;

impl Kind for Permute {
    fn names(&self) -> &'static [&'static str] {
        &["permute"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if !one(cx, inputs) {
            cx.finish("the new order of the dims");
            return None;
        }
        let x = &inputs[0];
        let rank = x.shape.len();
        let mut order = Vec::new();
        for _ in 0..rank {
            order.push(cx.axis("dims", true, None, rank, x)?);
        }
        cx.finish(&format!("exactly {rank} dims, one per dim of {}", x.show()));
        let mut seen = order.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != rank {
            let (desc, span) = (cx.desc.clone(), cx.args_span());
            cx.arg_error(
                span,
                format!("`{desc}` is not a permutation of 0..{rank}: each dim appears once"),
            );
            return None;
        }
        let shape = order.iter().map(|&i| x.shape[i].clone()).collect();
        let ty = Ty { shape, ..x.clone() };
        let onnx_order = order.clone();
        let order: Vec<isize> = order.into_iter().map(|i| i as isize).collect();
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| {
                    let x = &x[0];
                    quote!(#x.permute(&[#(#order),*]))
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.permute(&#x, &[#(#onnx_order),*]))
            })),
        )
    }
}

pub(crate) struct Unsqueeze;

impl Kind for Unsqueeze {
    fn names(&self) -> &'static [&'static str] {
        &["unsqueeze"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if !one(cx, inputs) {
            cx.finish("a dim");
            return None;
        }
        let x = &inputs[0];
        let d = cx.axis("dim", true, None, x.shape.len() + 1, x);
        cx.finish("a dim");
        let d = d?;
        let mut shape = x.shape.clone();
        shape.insert(d, Dim::lit(1));
        let ty = Ty { shape, ..x.clone() };
        let d = d as isize;
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| {
                    let x = &x[0];
                    quote!(#x.unsqueeze(#d))
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.unsqueeze(&#x, #d))
            })),
        )
    }
}

pub(crate) struct Squeeze;

impl Kind for Squeeze {
    fn names(&self) -> &'static [&'static str] {
        &["squeeze"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        if !one(cx, inputs) {
            cx.finish("a dim");
            return None;
        }
        let x = &inputs[0];
        let d = cx.axis("dim", true, None, x.shape.len(), x);
        cx.finish("a dim");
        let d = d?;
        if x.shape[d].as_lit() != Some(1) {
            let (desc, span) = (cx.desc.clone(), cx.args_span());
            cx.arg_error(
                span,
                format!(
                    "`{desc}`: dim {d} of {} is {}, not 1 (shape {})",
                    x.origin,
                    x.shape[d],
                    x.show()
                ),
            );
        }
        let mut shape = x.shape.clone();
        shape.remove(d);
        let ty = Ty { shape, ..x.clone() };
        let d = d as isize;
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| {
                    let x = &x[0];
                    quote!(#x.squeeze(#d))
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.squeeze(&#x, #d))
            })),
        )
    }
}

/// `select(dim, index)`: the slice at `index` of `dim`, which goes away (`x[:, 0]`, the
/// [CLS] token; a negative index counts from the end, `x[:, -1]` the last step).
pub(crate) struct Select;

impl Kind for Select {
    fn names(&self) -> &'static [&'static str] {
        &["select"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["dim", "index"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let what = "`dim` and `index` (a negative index counts from the end, as `x[:, -1]`)";
        if !one(cx, inputs) {
            cx.finish(what);
            return None;
        }
        let x = &inputs[0];
        let rank = x.shape.len();
        let d = cx.axis_spanned("dim", true, None, rank.max(1), x);
        let index = cx.value("index", true);
        let index_span = index.as_ref().map_or(cx.args_span(), Value::span);
        let index = cx.int_of(index, "index", None, i64::MIN);
        cx.finish(what);
        let (d, _) = d?;
        let desc = cx.desc.clone();
        if rank == 0 {
            let (origin, span) = (x.origin.clone(), cx.kind_span());
            cx.error(
                span,
                format!("`{desc}` needs rank >= 1, but {origin} is a scalar"),
            );
            return None;
        }
        if let Some(n) = x.shape[d].as_lit()
            && (index >= n || index < -n)
        {
            cx.arg_error(index_span, format!("`{desc}`: index {index} is out of range for dim {d} of {} (size {n}: valid {} to {})", x.origin, -n, n - 1));
            return None;
        }
        let mut shape = x.shape.clone();
        shape.remove(d);
        let ty = Ty { shape, ..x.clone() };
        let dim = d as isize;
        Some(
            Built::op(
                ty,
                Box::new(move |x, _| {
                    let x = &x[0];
                    if index >= 0 {
                        let i = index as usize;
                        quote!(#x.select(#dim, #i))
                    } else {
                        quote!({
                            let __size = #x.shape()[#d] as i64;
                            #x.select(#dim, (__size + #index) as usize)
                        })
                    }
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.select(&#x, #dim, #index))
            })),
        )
    }
}
