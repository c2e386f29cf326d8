//! `matmul(a, b)`: `[.., n, k] x [.., k, m]` → `[.., n, m]`, batch dims broadcast.

use super::{Built, Cx, Kind, Ty};
use crate::network::check::broadcast;
use quote::quote;

pub(crate) struct Matmul;

impl Kind for Matmul {
    fn names(&self) -> &'static [&'static str] {
        &["matmul"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        cx.finish("no arguments: apply it to two values, as `matmul(q, k)`");
        if !cx.arity(inputs, 2, "two values") {
            return None;
        }
        let (a, b) = (&inputs[0], &inputs[1]);
        cx.need_float(a);
        cx.need_float(b);
        let desc = cx.desc.clone();
        if a.shape.len() < 2 || b.shape.len() < 2 {
            let span = cx.kind_span();
            cx.error(
                span,
                format!(
                    "`{desc}` multiplies matrices (rank >= 2), but {} yields {} and {} yields {}",
                    a.origin,
                    a.show(),
                    b.origin,
                    b.show()
                ),
            );
            return None;
        }
        let (ra, rb) = (a.shape.len(), b.shape.len());
        if !a.shape[ra - 1].same(&b.shape[rb - 2]) {
            let span = cx.kind_span();
            cx.error(span, format!("`{desc}`: the inner sizes differ: {} yields {} (last dim {}) and {} yields {} (dim -2 is {})", a.origin, a.show(), a.shape[ra - 1], b.origin, b.show(), b.shape[rb - 2]));
            return None;
        }
        let Some(mut shape) = broadcast(&a.shape[..ra - 2], &b.shape[..rb - 2]) else {
            let span = cx.kind_span();
            cx.error(
                span,
                format!(
                    "`{desc}`: the batch dims of {} and {} do not broadcast",
                    a.show(),
                    b.show()
                ),
            );
            return None;
        };
        shape.push(a.shape[ra - 2].clone());
        shape.push(b.shape[rb - 1].clone());
        Some(
            Built::op(
                Ty::float(shape),
                Box::new(|x, _| {
                    let (a, b) = (&x[0], &x[1]);
                    quote!(#a.matmul(&#b))
                }),
            )
            .onnx(Box::new(|x, _, _| {
                let (a, b) = (&x[0], &x[1]);
                quote!(__g.matmul(&#a, &#b))
            })),
        )
    }
}
