//! `Conv1d`, `Conv2d`, `ConvTranspose1d`, `ConvTranspose2d`
//! `(in -> out, kernel = k, stride = 1, padding = 0 | "same", dilation = 1, groups = 1,
//! bias = true, output_padding = 0)` over `[N, C, L]` / `[N, C, H, W]`, spatial sizes
//! literal or symbolic.

use super::{Built, Cx, Kind, Out, Ty};
use crate::network::check::{Errors, eval_dim};
use crate::network::dim::Dim;
use crate::network::parse::Value;
use quote::{format_ident, quote};

pub(crate) struct Conv;

impl Kind for Conv {
    fn names(&self) -> &'static [&'static str] {
        &["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]
    }
    fn has_params(&self) -> bool {
        true
    }
    fn keys(&self) -> &'static [&'static str] {
        &[
            "kernel",
            "stride",
            "padding",
            "dilation",
            "groups",
            "bias",
            "output_padding",
        ]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let kind = cx.kind();
        let transpose = kind.starts_with("ConvTranspose");
        let dims = if kind.ends_with("1d") { 1 } else { 2 };
        let arrow = Some(cx.arrow("in_channels -> out_channels")?);
        // Kernel, stride, padding, dilation and groups are literals or sizes of const and
        // constructor parameters (`stride = S`, a depthwise `groups = C`); output padding
        // is a literal.
        let (kernel, kernel_span) = cx.size("kernel", true, None, 1);
        let (stride, stride_span) = cx.size("stride", false, Some(1), 1);
        let (same, (padding, padding_span)) = match cx.value("padding", false) {
            Some(Value::Str(s)) if s.value() == "same" => (true, (Dim::lit(0), s.span())),
            Some(Value::Str(s)) => {
                cx.arg_error(
                    s.span(),
                    format!(
                        "padding {:?} is not known: write an integer or \"same\"",
                        s.value()
                    ),
                );
                (false, (Dim::lit(0), s.span()))
            }
            Some(Value::Dim(d))
                if eval_dim(&d, &mut Errors::default()).is_some_and(|x| x.as_lit().is_none()) =>
            {
                let span = d.span();
                (false, (cx.dim(&d).unwrap_or_else(|| Dim::lit(0)), span))
            }
            v => {
                let span = v.as_ref().map_or(cx.args_span(), Value::span);
                (false, (Dim::lit(cx.int_of(v, "padding", Some(0), 0)), span))
            }
        };
        let (dilation, dilation_span) = cx.size("dilation", false, Some(1), 1);
        let (groups, groups_span) = cx.size("groups", false, Some(1), 1);
        let bias = cx.bool("bias", true);
        let output_padding = if transpose {
            cx.int("output_padding", false, Some(0), 0)
        } else {
            0
        };
        cx.finish(if transpose {
            "`in -> out`, `kernel`, `stride`, `padding`, `output_padding`, `dilation`, `groups` and `bias`"
        } else {
            "`in -> out`, `kernel`, `stride`, `padding` (an integer or \"same\"), `dilation`, `groups` and `bias`"
        });
        let (inp, out) = arrow?;
        let (ci, co) = (cx.dim(&inp)?, cx.dim(&out)?);
        let desc = cx.desc.clone();
        if same && (stride.as_lit() != Some(1) || transpose) {
            cx.arg_error(cx.args_span(), format!("`{desc}`: padding = \"same\" needs stride 1 (PyTorch's rule), and convolutions only"));
        }
        for (d, tok, what) in [(&ci, &inp, "in_channels"), (&co, &out, "out_channels")] {
            if let Some(v) = d.as_lit()
                && (v <= 0 || groups.as_lit().is_some_and(|g| v % g != 0))
            {
                cx.arg_error(
                    tok.span(),
                    format!("`{desc}`: {what} {v} is not a positive multiple of groups = {groups}"),
                );
            }
        }
        if transpose
            && let (Some(s), Some(d)) = (stride.as_lit(), dilation.as_lit())
            && output_padding >= s.max(d)
        {
            cx.arg_error(cx.args_span(), format!("`{desc}`: output_padding {output_padding} must be smaller than stride or dilation ({})", s.max(d)));
        }
        let layout = if dims == 1 {
            "[N, C, L]"
        } else {
            "[N, C, H, W]"
        };
        let x = cx.one_float(inputs, &[dims + 2], layout)?;
        if !x.shape[1].same(&ci) && x.shape[dims + 1].same(&ci) {
            // Channels last (`[N, H, W, C]`, as images and sequences often come): the
            // spatial sizes would be read from the wrong dims, so the output stays unknown.
            let fix = if dims == 1 {
                "`transpose(1, 2)` first"
            } else {
                "`permute([0, 3, 1, 2])` first"
            };
            let (origin, shown) = (x.origin.clone(), x.show());
            cx.error(inp.span(), format!("`{desc}` expects input channels {ci} in dim 1 ({layout}), but {origin} yields {shown}, channels last: make it channels-first, with {fix}"));
            return None;
        }
        cx.expect_dim(&x.shape[1], &ci, inp.span(), "input channels", x);
        let mut shape = vec![x.shape[0].clone(), co.clone()];
        let one = Dim::lit(1);
        // dilation * (kernel - 1) + 1
        let span = dilation.mul(&kernel.sub(&one)).add(&one);
        let two_p = padding.mul(&Dim::lit(2));
        let mut too_small = Vec::new();
        for (axis, size) in x.shape[2..].iter().enumerate() {
            let o = if transpose {
                size.sub(&one)
                    .mul(&stride)
                    .add(&span)
                    .sub(&two_p)
                    .add(&Dim::lit(output_padding))
            } else if same {
                size.clone()
            } else {
                size.add(&two_p).sub(&span).floor_div_by(&stride).add(&one)
            };
            if let Some(v) = o.as_lit()
                && v <= 0
            {
                too_small.push(format!("{axis} is {size}"));
                shape.push(Dim::lit(1));
            } else {
                shape.push(o);
            }
        }
        if !too_small.is_empty() {
            // One error for every spatial dim that is too small.
            let (origin, shown) = (x.origin.clone(), x.show());
            let dims_text = spatial_dims_text(&too_small, &origin);
            cx.error(cx.kind_span(), format!("`{desc}` produces a non-positive size: {dims_text}, smaller than the kernel span {span} after padding {padding} (input shape {shown})"));
        }
        let mut k = Dim::lit(1);
        for _ in 0..dims {
            k = k.mul(&kernel);
        }
        let params = co.mul(&ci.floor_div_by(&groups)).mul(&k).add(&if bias {
            co.clone()
        } else {
            Dim::lit(0)
        });
        let (it, ot) = (
            cx.const_tokens(&ci, inp.span()),
            cx.const_tokens(&co, out.span()),
        );
        let ty = format_ident!("{}", kind);
        let (kernel, stride, padding, dilation) = (
            cx.const_tokens(&kernel, kernel_span),
            cx.const_tokens(&stride, stride_span),
            cx.const_tokens(&padding, padding_span),
            cx.const_tokens(&dilation, dilation_span),
        );
        let groups = cx.const_tokens(&groups, groups_span);
        let output_padding = output_padding as usize;
        let krate = &cx.krate;
        let options = if transpose {
            quote!(#krate::nn::ConvTransposeOptions::default().stride(#stride).padding(#padding).output_padding(#output_padding).dilation(#dilation).groups(#groups).bias(#bias))
        } else if same {
            quote!(#krate::nn::ConvOptions::default().padding_same().dilation(#dilation).groups(#groups).bias(#bias))
        } else {
            quote!(#krate::nn::ConvOptions::default().stride(#stride).padding(#padding).dilation(#dilation).groups(#groups).bias(#bias))
        };
        Some(Built {
            out: Out::One(Ty::float(shape)),
            field: Some((
                quote!(#krate::nn::#ty),
                quote!(#krate::nn::#ty::new(#it, #ot, #kernel, #options, device)),
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

/// "spatial dim 0 of `origin` is 5" or "spatial dims 0 and 1 of `origin` are 5 and 5",
/// from `["0 is 5", ..]`.
pub(crate) fn spatial_dims_text(items: &[String], origin: &str) -> String {
    let (axes, sizes): (Vec<&str>, Vec<&str>) = items
        .iter()
        .map(|i| i.split_once(" is ").expect("`axis is size`"))
        .unzip();
    if let ([axis], [size]) = (&axes[..], &sizes[..]) {
        return format!("spatial dim {axis} of {origin} is {size}");
    }
    format!(
        "spatial dims {} of {origin} are {}",
        join_and(&axes),
        join_and(&sizes)
    )
}

fn join_and(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}
