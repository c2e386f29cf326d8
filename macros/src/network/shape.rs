//! Symbolic shape inference: the rule of each built-in layer, checked at compile time.
//!
//! Dims are literal sizes or symbols (`N`, const generics). Two dims agree when both are
//! the same literal or the same symbol. A mismatch is an error spanned on the user's
//! token; inference then continues with the shape the layer would produce, so
//! independent mistakes are all reported in one compile.

use super::parse::{Arg, DimExpr, Form, Network, ShapeExpr, Step, dim_text};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use std::collections::HashMap;
use std::fmt;

/// A dimension after inference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dim {
    Lit(usize),
    Sym(String),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Lit(v) => write!(f, "{v}"),
            Dim::Sym(s) => write!(f, "{s}"),
        }
    }
}

impl From<&DimExpr> for Dim {
    fn from(d: &DimExpr) -> Self {
        match d {
            DimExpr::Lit(v, _) => Dim::Lit(*v),
            DimExpr::Sym(i) => Dim::Sym(i.to_string()),
        }
    }
}

pub(crate) type Shape = Vec<Dim>;

fn join_dims(shape: &[Dim], separator: &str) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(separator)
}

/// A shape as users write it: `[N, 16, 5, 5]`.
pub(crate) fn show(shape: &[Dim]) -> String {
    format!("[{}]", join_dims(shape, ", "))
}

pub(crate) fn shape_of(expr: &ShapeExpr) -> Shape {
    expr.dims.iter().map(Dim::from).collect()
}

/// A dim as a Rust `usize` expression (a literal or a const generic's name).
pub(crate) fn dim_tokens(d: &DimExpr) -> TokenStream {
    match d {
        DimExpr::Lit(v, _) => quote!(#v),
        DimExpr::Sym(i) => quote!(#i),
    }
}

/// What a step does, with its validated arguments.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Linear {
        inp: DimExpr,
        out: DimExpr,
    },
    Conv {
        dims: usize,
        inp: DimExpr,
        out: DimExpr,
        kernel: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        groups: usize,
    },
    BatchNorm {
        dims: usize,
        channels: DimExpr,
    },
    LayerNorm {
        size: DimExpr,
    },
    Dropout {
        p: f64,
    },
    Embedding {
        num: DimExpr,
        dim: DimExpr,
    },
    Activation(&'static str),
    Softmax {
        log: bool,
    },
    Flatten,
    Reshape(Vec<DimExpr>),
    Pool {
        max: bool,
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    AdaptiveAvgPool {
        out: [usize; 2],
    },
    /// `let h`
    Save(syn::Ident),
    /// `+ h`
    Add(syn::Ident),
    /// `cat(h, dim = d)`
    Cat {
        value: syn::Ident,
        dim: usize,
    },
    /// `name: Type => [shape]`: another network used as a layer; its shapes are checked
    /// against its declaration by constant evaluation.
    User {
        ty: syn::Ident,
        input: Shape,
    },
}

/// A step after inference.
pub(crate) struct Layer {
    pub(crate) step: Step,
    pub(crate) op: Op,
    pub(crate) output: Shape,
}

/// The layer kinds that own parameters (and so need a field name).
const MODULE_KINDS: [&str; 8] = [
    "Linear",
    "Conv1d",
    "Conv2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "LayerNorm",
    "Dropout",
    "Embedding",
];
const OP_KINDS: [&str; 14] = [
    "cat",
    "relu",
    "gelu",
    "gelu_tanh",
    "tanh",
    "sigmoid",
    "silu",
    "softmax",
    "log_softmax",
    "flatten",
    "reshape",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
];

/// Error collection that keeps every independent mistake.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl fmt::Display) {
        let e = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// Validates a step's arguments: each accessor takes what it reads; leftovers are errors.
struct Args<'a> {
    step: &'a Step,
    args: Vec<Option<Arg>>,
}

/// Levenshtein distance, for "did you mean" suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

impl<'a> Args<'a> {
    /// Takes the step's arguments; a misspelt key close to one of `keys` is reported with
    /// a suggestion and then read as the key it resembles, so one typo is one error.
    fn new(step: &'a Step, keys: &[&str], errors: &mut Errors) -> Self {
        let args = step
            .args
            .iter()
            .map(|arg| match arg {
                Arg::Named(k, v) if !keys.contains(&k.to_string().as_str()) => {
                    match keys
                        .iter()
                        .find(|key| edit_distance(&k.to_string(), key) <= 2)
                    {
                        Some(key) => {
                            errors.push(
                                k.span(),
                                format!(
                                    "unknown argument `{k}` for `{}`: did you mean `{key}`?",
                                    step.kind
                                ),
                            );
                            Some(Arg::Named(syn::Ident::new(key, k.span()), v.clone()))
                        }
                        None => Some(arg.clone()),
                    }
                }
                _ => Some(arg.clone()),
            })
            .collect();
        Args { step, args }
    }

    fn take(&mut self, pick: impl Fn(&Arg) -> bool) -> Option<Arg> {
        let slot = self
            .args
            .iter_mut()
            .find(|a| a.as_ref().is_some_and(&pick))?;
        slot.take()
    }

    fn arrow(&mut self, errors: &mut Errors, what: &str) -> Option<(DimExpr, DimExpr)> {
        match self.take(|a| matches!(a, Arg::Arrow(..))) {
            Some(Arg::Arrow(a, b)) => Some((a, b)),
            _ => {
                errors.push(
                    self.step.args_span.unwrap_or(self.step.kind.span()),
                    format!(
                        "`{}` needs `{what}` as its first argument, as `{}({what}, ..)`",
                        self.step.kind, self.step.kind
                    ),
                );
                None
            }
        }
    }

    fn named(&mut self, key: &str) -> Option<DimExpr> {
        match self.take(|a| matches!(a, Arg::Named(k, _) if k == key)) {
            Some(Arg::Named(_, v)) => Some(v),
            _ => None,
        }
    }

    fn positional(&mut self) -> Option<DimExpr> {
        match self.take(|a| matches!(a, Arg::Positional(_))) {
            Some(Arg::Positional(v)) => Some(v),
            _ => None,
        }
    }

    /// A literal size (or the default), for arguments that shape arithmetic needs.
    fn literal(&mut self, key: &str, default: Option<usize>, errors: &mut Errors) -> usize {
        let value = self.named(key).or_else(|| {
            if key == "kernel" {
                self.positional()
            } else {
                None
            }
        });
        match (value, default) {
            (Some(DimExpr::Lit(v, _)), _) => v,
            (Some(DimExpr::Sym(i)), d) => {
                errors.push(i.span(), format!("`{key}` must be an integer literal here: shapes are computed at compile time"));
                d.unwrap_or(1)
            }
            (None, Some(d)) => d,
            (None, None) => {
                errors.push(
                    self.step.args_span.unwrap_or(self.step.kind.span()),
                    format!("`{}` needs `{key} = ..`", self.step.kind),
                );
                1
            }
        }
    }

    fn finish(self, errors: &mut Errors, allowed: &str) {
        for arg in self.args.iter().flatten() {
            let what = match arg {
                Arg::Named(k, _) => format!("unknown argument `{k}`"),
                _ => "unexpected argument".to_string(),
            };
            errors.push(
                arg.span(),
                format!("{what} for `{}`: it takes {allowed}", self.step.kind),
            );
        }
    }
}

fn agree(a: &Dim, b: &Dim) -> bool {
    a == b
}

/// `(size + 2p - d(k-1) - 1) / s + 1`, or `None` when the window does not fit.
fn window_out(
    size: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
) -> Option<usize> {
    let span = dilation * (kernel.max(1) - 1) + 1;
    let padded = size + 2 * padding;
    (padded >= span && stride > 0).then(|| (padded - span) / stride + 1)
}

/// Infers every step's output shape from the network's input.
pub(crate) fn infer(net: &Network, errors: &mut Errors) -> Vec<Layer> {
    // Named values: every input, then each `let h`.
    let mut values: HashMap<String, Shape> = HashMap::new();
    for input in &net.inputs {
        if values
            .insert(input.name.to_string(), shape_of(&input.shape))
            .is_some()
        {
            errors.push(
                input.name.span(),
                format!("duplicate input name `{}`", input.name),
            );
        }
    }
    // `None` once a step's output cannot be known (an unknown kind, a malformed step):
    // later steps are then only checked for names and kinds, so one mistake gives one
    // error rather than a cascade.
    let mut shape: Option<Shape> = Some(shape_of(&net.inputs[0].shape));
    let mut layers = Vec::new();
    let mut names: Vec<&syn::Ident> = Vec::new();
    let mut previous = format!("the input `{}`", net.inputs[0].name);
    for step in &net.steps {
        if step.form != Form::Apply {
            let value = &step.kind;
            let Some(current) = shape.clone() else {
                continue;
            };
            let output = if step.form == Form::Save {
                if values.contains_key(&value.to_string()) {
                    errors.push(
                        value.span(),
                        format!(
                            "`{value}` already names a value of this network: pick another name"
                        ),
                    );
                }
                values.insert(value.to_string(), current.clone());
                current
            } else {
                match values.get(&value.to_string()) {
                    None => {
                        errors.push(value.span(), format!("no value named `{value}`: name the current value with `let {value}` before adding it, or declare an input `{value}`"));
                        shape = None;
                        continue;
                    }
                    Some(saved) if *saved != current => {
                        errors.push(
                            value.span(),
                            format!("residual add of mismatched shapes: {previous} yields {} but `{value}` is {}", show(&current), show(saved)),
                        );
                        current
                    }
                    Some(_) => current,
                }
            };
            check_annotation(step, &output, errors);
            let op = if step.form == Form::Save {
                Op::Save(value.clone())
            } else {
                Op::Add(value.clone())
            };
            previous = format!("the previous step (`{}`)", step.describe());
            shape = Some(output.clone());
            layers.push(Layer {
                step: step.clone(),
                op,
                output,
            });
            continue;
        }
        if let Some(name) = &step.name {
            if let Some(first) = names.iter().find(|n| *n == &name) {
                errors.push(name.span(), format!("duplicate layer name `{name}`: `{first}` is already a layer of this network"));
            }
            names.push(name);
        }
        let kind = step.kind.to_string();
        let is_module = MODULE_KINDS.contains(&kind.as_str());
        if !is_module && !OP_KINDS.contains(&kind.as_str()) {
            let known = MODULE_KINDS.iter().chain(OP_KINDS.iter());
            let close = known.clone().find(|k| edit_distance(&kind, k) <= 2);
            // `name: Type => [shape]` (no arguments): another network used as a layer.
            if close.is_none() && step.name.is_some() && step.args_span.is_none() {
                let Some(input) = shape.clone() else { continue };
                let Some(annotation) = &step.annotation else {
                    errors.push(
                        step.kind.span(),
                        format!("`{}` uses the network `{kind}` as a layer: write its output shape after it, as `{} => [..]`, and it is checked against `{kind}`'s declaration", step.describe(), step.describe()),
                    );
                    shape = None;
                    continue;
                };
                let output = shape_of(annotation);
                previous = format!("the previous layer (`{}`)", step.describe());
                shape = Some(output.clone());
                layers.push(Layer {
                    step: step.clone(),
                    op: Op::User {
                        ty: step.kind.clone(),
                        input,
                    },
                    output,
                });
                continue;
            }
            let message = match close {
                Some(close) => format!("unknown layer kind `{kind}`: did you mean `{close}`?"),
                None => format!(
                    "unknown layer kind `{kind}`: expected one of {} (layers with parameters, written `name: Kind(..)`), {} (ops), or a network type written `name: Type => [output shape]`",
                    MODULE_KINDS.join(", "),
                    OP_KINDS.join(", ")
                ),
            };
            errors.push(step.kind.span(), message);
            shape = None;
            continue;
        }
        if is_module && step.name.is_none() {
            errors.push(
                step.kind.span(),
                format!(
                    "`{kind}` has parameters, so it needs a field name: write `name: {}`",
                    step.describe()
                ),
            );
        }
        if !is_module && let Some(name) = &step.name {
            errors.push(
                name.span(),
                format!(
                    "`{kind}` has no parameters and takes no field name: write `{}`",
                    step.describe()
                        .split_once(": ")
                        .map_or(kind.clone(), |(_, r)| r.to_string())
                ),
            );
        }
        let Some(input) = &shape else { continue };
        let Some((op, output)) = rule(step, input, &previous, &values, errors) else {
            shape = None;
            continue;
        };
        check_annotation(step, &output, errors);
        previous = format!("the previous layer (`{}`)", step.describe());
        shape = Some(output.clone());
        layers.push(Layer {
            step: step.clone(),
            op,
            output,
        });
    }
    if let Some(shape) = &shape {
        check_shape(shape, &net.output, errors, "the declared output");
    }
    layers
}

/// Checks a step's optional `=> [shape]` against what it produces.
fn check_annotation(step: &Step, output: &[Dim], errors: &mut Errors) {
    if let Some(annotation) = &step.annotation {
        check_shape(
            output,
            annotation,
            errors,
            &format!("the annotation after `{}`", step.describe()),
        );
    }
}

/// Compares an inferred shape with a written one, erroring on the first disagreeing dim.
fn check_shape(inferred: &[Dim], written: &ShapeExpr, errors: &mut Errors, what: &str) {
    let expected = shape_of(written);
    if expected.len() != inferred.len() {
        errors.push(
            written.span,
            format!(
                "{what} has rank {} ({}) but the network produces rank {} ({})",
                expected.len(),
                show(&expected),
                inferred.len(),
                show(inferred)
            ),
        );
        return;
    }
    for (i, (d, w)) in inferred.iter().zip(&written.dims).enumerate() {
        if !agree(d, &Dim::from(w)) {
            errors.push(
                w.span(),
                format!(
                    "{what} says dim {i} is {} but the network produces {} there (shape {})",
                    dim_text(w),
                    d,
                    show(inferred)
                ),
            );
        }
    }
}

/// The rule of one step: its validated op and output shape.
fn rule(
    step: &Step,
    input: &[Dim],
    previous: &str,
    values: &HashMap<String, Shape>,
    errors: &mut Errors,
) -> Option<(Op, Shape)> {
    let keys: &[&str] = match step.kind.to_string().as_str() {
        "Conv1d" | "Conv2d" => &["kernel", "stride", "padding", "dilation", "groups"],
        "max_pool2d" | "avg_pool2d" => &["kernel", "stride", "padding"],
        "cat" => &["dim"],
        _ => &[],
    };
    let mut args = Args::new(step, keys, errors);
    let kind = step.kind.to_string();
    let desc = step.describe();
    let need_rank = |errors: &mut Errors, ranks: &[usize], layout: &str| -> bool {
        if ranks.contains(&input.len()) {
            return true;
        }
        errors.push(
            step.kind.span(),
            format!(
                "`{desc}` expects a rank-{} input {layout}, but {previous} yields rank {} {}{}",
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(" or rank-"),
                input.len(),
                show(input),
                if ranks.contains(&2) && input.len() > 2 {
                    ": add `flatten` before it"
                } else {
                    ""
                }
            ),
        );
        false
    };
    let mismatch = |errors: &mut Errors, token: &DimExpr, what: &str, got: &Dim| {
        errors.push(
            token.span(),
            format!(
                "`{desc}` expects {what} {}, but {previous} yields {got} (shape {})",
                dim_text(token),
                show(input)
            ),
        );
    };
    match kind.as_str() {
        "Linear" => {
            let (inp, out) = args.arrow(errors, "in_features -> out_features")?;
            args.finish(errors, "only `in -> out`");
            let Some(last) = input.last() else {
                errors.push(
                    step.kind.span(),
                    format!("`{desc}` needs an input of rank >= 1, but {previous} yields a scalar"),
                );
                return None;
            };
            let mut output = input.to_vec();
            if !agree(last, &Dim::from(&inp)) {
                // After a conv or pool the usual mistake is a missing `flatten`.
                let flat: Option<usize> = input[1..]
                    .iter()
                    .map(|d| if let Dim::Lit(v) = d { Some(*v) } else { None })
                    .product();
                if input.len() > 2 && flat.is_some_and(|f| Dim::Lit(f) == Dim::from(&inp)) {
                    errors.push(
                        step.kind.span(),
                        format!(
                            "`{desc}` expects a rank-2 input [N, {}], but {previous} yields rank {} {}: add `flatten` before it",
                            dim_text(&inp),
                            input.len(),
                            show(input)
                        ),
                    );
                    return Some((
                        Op::Linear {
                            inp,
                            out: out.clone(),
                        },
                        vec![input[0].clone(), Dim::from(&out)],
                    ));
                }
                let hint = if input.len() > 2 {
                    " (a rank > 2 input is mapped over its last dim; did you mean to `flatten` first?)"
                } else {
                    ""
                };
                errors.push(
                    inp.span(),
                    format!("`{desc}` expects input features {}, but {previous} yields {last} (shape {}){hint}", dim_text(&inp), show(input)),
                );
            }
            *output.last_mut().expect("rank >= 1") = Dim::from(&out);
            Some((Op::Linear { inp, out }, output))
        }
        "Conv1d" | "Conv2d" => {
            let dims = if kind == "Conv1d" { 1 } else { 2 };
            let (inp, out) = args.arrow(errors, "in_channels -> out_channels")?;
            let kernel = args.literal("kernel", None, errors);
            let stride = args.literal("stride", Some(1), errors);
            let padding = args.literal("padding", Some(0), errors);
            let dilation = args.literal("dilation", Some(1), errors);
            let groups = args.literal("groups", Some(1), errors);
            args.finish(
                errors,
                "`in -> out`, `kernel`, `stride`, `padding`, `dilation` and `groups`",
            );
            let op = Op::Conv {
                dims,
                inp: inp.clone(),
                out: out.clone(),
                kernel,
                stride,
                padding,
                dilation,
                groups,
            };
            let layout = if dims == 1 {
                "[N, C, L]"
            } else {
                "[N, C, H, W]"
            };
            if !need_rank(errors, &[dims + 2], layout) {
                return None;
            }
            if !agree(&input[1], &Dim::from(&inp)) {
                mismatch(errors, &inp, "input channels", &input[1]);
            }
            let mut output = vec![input[0].clone(), Dim::from(&out)];
            for (axis, d) in input[2..].iter().enumerate() {
                output.push(match d {
                    Dim::Lit(size) => match window_out(*size, kernel, stride, padding, dilation) {
                        Some(o) => Dim::Lit(o),
                        None => {
                            errors.push(
                                step.kind.span(),
                                format!("`{desc}` produces a non-positive size: spatial dim {axis} of {previous} is {size}, smaller than the kernel span {} after padding {padding} (input shape {})", dilation * (kernel - 1) + 1, show(input)),
                            );
                            Dim::Lit(1)
                        }
                    },
                    Dim::Sym(s) if kernel == 1 && stride == 1 && padding == 0 => Dim::Sym(s.clone()),
                    Dim::Sym(s) => {
                        errors.push(step.kind.span(), format!("`{desc}` needs a literal spatial size to compute its output, but {previous} yields `{s}` (shape {})", show(input)));
                        Dim::Sym(s.clone())
                    }
                });
            }
            Some((op, output))
        }
        "BatchNorm1d" | "BatchNorm2d" => {
            let dims = if kind == "BatchNorm1d" { 1 } else { 2 };
            let channels = args.positional();
            args.finish(errors, "the number of channels");
            let Some(channels) = channels else {
                errors.push(
                    step.args_span.unwrap_or(step.kind.span()),
                    format!("`{kind}` needs the number of channels, as `{kind}(16)`"),
                );
                return None;
            };
            let ranks: &[usize] = if dims == 1 { &[2, 3] } else { &[4] };
            if need_rank(
                errors,
                ranks,
                if dims == 1 {
                    "[N, C] or [N, C, L]"
                } else {
                    "[N, C, H, W]"
                },
            ) && !agree(&input[1], &Dim::from(&channels))
            {
                mismatch(errors, &channels, "channels", &input[1]);
            }
            Some((Op::BatchNorm { dims, channels }, input.to_vec()))
        }
        "LayerNorm" => {
            let size = args.positional();
            args.finish(errors, "the normalised size");
            let Some(size) = size else {
                errors.push(
                    step.args_span.unwrap_or(step.kind.span()),
                    "`LayerNorm` needs the size of the last dim, as `LayerNorm(512)`",
                );
                return None;
            };
            match input.last() {
                Some(last) if !agree(last, &Dim::from(&size)) => {
                    mismatch(errors, &size, "a last dim of", last)
                }
                None => errors.push(
                    step.kind.span(),
                    format!("`{desc}` needs an input of rank >= 1"),
                ),
                _ => {}
            }
            Some((Op::LayerNorm { size }, input.to_vec()))
        }
        "Dropout" => {
            let p = match args.take(|a| matches!(a, Arg::Float(_))) {
                Some(Arg::Float(f)) => f.base10_parse::<f64>().unwrap_or(0.5),
                _ => {
                    errors.push(
                        step.args_span.unwrap_or(step.kind.span()),
                        "`Dropout` needs its probability, as `Dropout(0.5)`",
                    );
                    0.5
                }
            };
            args.finish(errors, "the probability");
            Some((Op::Dropout { p }, input.to_vec()))
        }
        "Embedding" => {
            let (num, dim) = args.arrow(errors, "num_embeddings -> embedding_dim")?;
            args.finish(errors, "only `num -> dim`");
            let mut output = input.to_vec();
            output.push(Dim::from(&dim));
            Some((Op::Embedding { num, dim }, output))
        }
        "relu" | "gelu" | "gelu_tanh" | "tanh" | "sigmoid" | "silu" => {
            args.finish(errors, "no arguments");
            let name = ["relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "silu"]
                .into_iter()
                .find(|k| *k == kind)
                .expect("listed");
            Some((Op::Activation(name), input.to_vec()))
        }
        "softmax" | "log_softmax" => {
            args.finish(errors, "no arguments (it normalises the last dim)");
            Some((
                Op::Softmax {
                    log: kind == "log_softmax",
                },
                input.to_vec(),
            ))
        }
        "flatten" => {
            args.finish(
                errors,
                "no arguments (it keeps dim 0 and flattens the rest)",
            );
            if input.len() < 2 {
                errors.push(
                    step.kind.span(),
                    format!(
                        "`flatten` needs rank >= 2, but {previous} yields {}",
                        show(input)
                    ),
                );
                return None;
            }
            let mut product = 1usize;
            for d in &input[1..] {
                match d {
                    Dim::Lit(v) => product *= v,
                    Dim::Sym(sym) => {
                        errors.push(step.kind.span(), format!("`flatten` needs literal sizes after dim 0, but {previous} yields `{sym}` (shape {})", show(input)));
                        return None;
                    }
                }
            }
            Some((Op::Flatten, vec![input[0].clone(), Dim::Lit(product)]))
        }
        "reshape" => {
            let target = match args.take(|a| matches!(a, Arg::Shape(_))) {
                Some(Arg::Shape(s)) => s,
                _ => {
                    errors.push(
                        step.args_span.unwrap_or(step.kind.span()),
                        "`reshape` needs a target shape, as `reshape([N, 16, 5, 5])`",
                    );
                    return None;
                }
            };
            args.finish(errors, "one target shape");
            let count = |dims: &[Dim]| -> (usize, Vec<String>) {
                let mut lits = 1;
                let mut syms: Vec<String> = Vec::new();
                for d in dims {
                    match d {
                        Dim::Lit(v) => lits *= v,
                        Dim::Sym(s) => syms.push(s.clone()),
                    }
                }
                syms.sort();
                (lits, syms)
            };
            let output = shape_of(&target);
            if count(input) != count(&output) {
                errors.push(
                    target.span,
                    format!("`{desc}` changes the element count: {previous} yields {} ({} elements) but the target {} has {}", show(input), elements(input), show(&output), elements(&output)),
                );
            }
            Some((Op::Reshape(target.dims.clone()), output))
        }
        "max_pool2d" | "avg_pool2d" => {
            let kernel = args.literal("kernel", None, errors);
            let stride = args.literal("stride", Some(kernel), errors);
            let padding = args.literal("padding", Some(0), errors);
            args.finish(errors, "`kernel` (first), `stride` and `padding`");
            let op = Op::Pool {
                max: kind == "max_pool2d",
                kernel,
                stride,
                padding,
            };
            if !need_rank(errors, &[4], "[N, C, H, W]") {
                return None;
            }
            let mut output = input[..2].to_vec();
            for (axis, d) in input[2..].iter().enumerate() {
                output.push(match d {
                    Dim::Lit(size) => match window_out(*size, kernel, stride, padding, 1) {
                        Some(o) => Dim::Lit(o),
                        None => {
                            errors.push(step.kind.span(), format!("`{desc}` produces a non-positive size: spatial dim {axis} of {previous} is {size}, smaller than the window {kernel} (input shape {})", show(input)));
                            Dim::Lit(1)
                        }
                    },
                    Dim::Sym(s) => {
                        errors.push(step.kind.span(), format!("`{desc}` needs a literal spatial size, but {previous} yields `{s}`"));
                        Dim::Sym(s.clone())
                    }
                });
            }
            Some((op, output))
        }
        "adaptive_avg_pool2d" => {
            let oh = args.positional();
            let ow = args.positional();
            args.finish(errors, "the output height and width");
            let lit = |d: Option<DimExpr>, errors: &mut Errors| match d {
                Some(DimExpr::Lit(v, _)) => v,
                Some(DimExpr::Sym(i)) => {
                    errors.push(
                        i.span(),
                        "adaptive_avg_pool2d sizes must be integer literals",
                    );
                    1
                }
                None => {
                    errors.push(step.args_span.unwrap_or(step.kind.span()), "`adaptive_avg_pool2d` needs an output size, as `adaptive_avg_pool2d(1, 1)`");
                    1
                }
            };
            let out = [lit(oh, errors), lit(ow, errors)];
            if !need_rank(errors, &[4], "[N, C, H, W]") {
                return None;
            }
            let output = vec![
                input[0].clone(),
                input[1].clone(),
                Dim::Lit(out[0]),
                Dim::Lit(out[1]),
            ];
            Some((Op::AdaptiveAvgPool { out }, output))
        }
        "cat" => {
            let other = args.positional();
            let dim = args.named("dim");
            args.finish(errors, "a named value and `dim = d`");
            let Some(DimExpr::Sym(value)) = other else {
                errors.push(
                    step.args_span.unwrap_or(step.kind.span()),
                    "`cat` needs a named value and a dim, as `cat(skip, dim = 1)`",
                );
                return None;
            };
            let Some(saved) = values.get(&value.to_string()) else {
                errors.push(value.span(), format!("no value named `{value}`: name a value with `let {value}` before concatenating it"));
                return None;
            };
            let d = match dim {
                Some(DimExpr::Lit(d, _)) => d,
                Some(DimExpr::Sym(i)) => {
                    errors.push(i.span(), "`dim` must be an integer literal");
                    return None;
                }
                None => {
                    errors.push(
                        step.args_span.unwrap_or(step.kind.span()),
                        "`cat` needs `dim = d`",
                    );
                    return None;
                }
            };
            if saved.len() != input.len() || d >= input.len() {
                errors.push(value.span(), format!("`{desc}` needs two values of the same rank above {d}, but {previous} yields {} and `{value}` is {}", show(input), show(saved)));
                return None;
            }
            let mut output = input.to_vec();
            for (i, (a, b)) in input.iter().zip(saved).enumerate() {
                if i == d {
                    output[i] = match (a, b) {
                        (Dim::Lit(x), Dim::Lit(y)) => Dim::Lit(x + y),
                        _ => {
                            errors.push(value.span(), format!("`{desc}` needs literal sizes along dim {d}, but got {a} and {b}"));
                            return None;
                        }
                    };
                } else if a != b {
                    errors.push(
                        value.span(),
                        format!("`{desc}` needs equal sizes outside dim {d}, but {previous} yields {} and `{value}` is {} (dim {i}: {a} vs {b})", show(input), show(saved)),
                    );
                    break;
                }
            }
            Some((Op::Cat { value, dim: d }, output))
        }
        _ => unreachable!("kinds were checked by the caller"),
    }
}

/// An element count as a product: `N*16*5*5`.
fn elements(shape: &[Dim]) -> String {
    join_dims(shape, "*")
}

/// The number of parameters of a layer, as a `usize` expression.
pub(crate) fn param_count(op: &Op) -> TokenStream {
    match op {
        Op::Linear { inp, out } => {
            let (i, o) = (dim_tokens(inp), dim_tokens(out));
            quote!(#i * #o + #o)
        }
        Op::Conv {
            dims,
            inp,
            out,
            kernel,
            groups,
            ..
        } => {
            let (i, o) = (dim_tokens(inp), dim_tokens(out));
            let k = kernel.pow(*dims as u32);
            quote!(#o * (#i / #groups) * #k + #o)
        }
        Op::BatchNorm { channels, .. } => {
            let c = dim_tokens(channels);
            quote!(2 * #c)
        }
        Op::LayerNorm { size } => {
            let s = dim_tokens(size);
            quote!(2 * #s)
        }
        Op::Embedding { num, dim } => {
            let (n, d) = (dim_tokens(num), dim_tokens(dim));
            quote!(#n * #d)
        }
        Op::User { ty, .. } => quote!(<#ty as ::ferrograd::nn::DeclaredShapes>::PARAMETERS),
        _ => quote!(0usize),
    }
}
