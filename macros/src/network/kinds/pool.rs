//! Pooling and resampling over `[N, C, H, W]`: `max_pool2d(k, stride = k, padding = 0)`,
//! `avg_pool2d(..)`, `adaptive_avg_pool2d(h, w)`, `upsample(scale_factor = s)` (nearest).

use super::{Built, Cx, Kind, Ty};
use crate::network::dim::Dim;
use quote::quote;

pub(crate) struct Pool;

impl Kind for Pool {
    fn names(&self) -> &'static [&'static str] {
        &["max_pool2d", "avg_pool2d"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["kernel", "stride", "padding"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let max = cx.kind() == "max_pool2d";
        let kernel = cx.int("kernel", true, None, 1);
        let stride = cx.int("stride", false, Some(kernel), 1);
        let pad_value = cx.value("padding", false);
        let pad_span = pad_value.as_ref().map(|v| v.span());
        let padding = cx.int_of(pad_value, "padding", Some(0), 0);
        cx.finish("`kernel` (first), `stride` and `padding`");
        let desc = cx.desc.clone();
        if padding * 2 > kernel {
            cx.arg_error(pad_span.unwrap_or(cx.args_span()), format!("`{desc}`: padding {padding} is more than half the kernel {kernel} (PyTorch's limit)"));
        }
        let x = cx.one_float(inputs, &[4], "[N, C, H, W]")?;
        let mut shape = x.shape[..2].to_vec();
        let mut too_small = Vec::new();
        for (axis, size) in x.shape[2..].iter().enumerate() {
            let o = size
                .add(&Dim::lit(2 * padding - kernel))
                .floor_div(stride)
                .add(&Dim::lit(1));
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
            let dims_text = super::conv::spatial_dims_text(&too_small, &origin);
            cx.error(cx.kind_span(), format!("`{desc}` produces a non-positive size: {dims_text}, smaller than the window {kernel} (input shape {shown})"));
        }
        let krate = cx.krate.clone();
        let (k, s, p) = (kernel as usize, stride as usize, padding as usize);
        Some(Built::op(
            Ty::float(shape),
            Box::new(move |x, _| {
                let x = &x[0];
                let f = if max {
                    quote!(max_pool2d_with)
                } else {
                    quote!(avg_pool2d_with)
                };
                quote!(#krate::nn::functional::#f(&#x, &#krate::nn::functional::Pool2dArgs { kernel: [#k; 2], stride: [#s; 2], padding: [#p; 2], dilation: [1; 2], ..#krate::nn::functional::Pool2dArgs::new(1) }))
            }),
        )
        .onnx(Box::new(move |x, _, _| {
            let x = &x[0];
            quote!(__g.pool2d(&#x, #max, #k, #s, #p))
        })))
    }
}

pub(crate) struct AdaptiveAvgPool;

impl Kind for AdaptiveAvgPool {
    fn names(&self) -> &'static [&'static str] {
        &["adaptive_avg_pool2d"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let h = cx.int("output_height", true, None, 1);
        let w = cx.int("output_width", true, Some(h), 1);
        cx.finish("the output height and width");
        let x = cx.one_float(inputs, &[4], "[N, C, H, W]")?;
        let shape = vec![
            x.shape[0].clone(),
            x.shape[1].clone(),
            Dim::lit(h),
            Dim::lit(w),
        ];
        let krate = cx.krate.clone();
        let (h, w) = (h as usize, w as usize);
        Some(
            Built::op(
                Ty::float(shape),
                Box::new(move |x, _| {
                    let x = &x[0];
                    quote!(#krate::nn::functional::adaptive_avg_pool2d(&#x, [#h, #w]))
                }),
            )
            .onnx(Box::new(move |x, _, _| {
                let x = &x[0];
                quote!(__g.adaptive_avg_pool2d(&#x, [#h, #w]))
            })),
        )
    }
}

pub(crate) struct Upsample;

impl Kind for Upsample {
    fn names(&self) -> &'static [&'static str] {
        &["upsample"]
    }
    fn has_params(&self) -> bool {
        false
    }
    fn keys(&self) -> &'static [&'static str] {
        &["scale_factor"]
    }
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built> {
        let s = cx.int("scale_factor", true, None, 1);
        cx.finish("an integer `scale_factor` (nearest-neighbour)");
        let x = cx.one_float(inputs, &[4], "[N, C, H, W]")?;
        let mut shape = x.shape[..2].to_vec();
        shape.extend(x.shape[2..].iter().map(|d| d.mul(&Dim::lit(s))));
        let krate = cx.krate.clone();
        let s = s as f64;
        Some(Built::op(
            Ty::float(shape),
            Box::new(move |x, _| {
                let x = &x[0];
                quote!(#krate::nn::functional::interpolate(&#x, &#krate::nn::functional::InterpolateSize::Scale(::std::vec![#s, #s]), #krate::nn::functional::InterpolateMode::Nearest))
            }),
        )
        .onnx(Box::new(move |x, _, _| {
            let x = &x[0];
            let s = s as usize;
            quote!(__g.upsample_nearest(&#x, #s))
        })))
    }
}
