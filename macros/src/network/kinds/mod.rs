//! The layer kinds of `network!`: one file per kind (or per family sharing one rule),
//! each implementing [`Kind`]: its arguments, shape rule, parameter count, construction
//! and forward. Adding a kind is one file and one line in [`KINDS`].

mod activation;
mod attention;
mod cat;
mod conv;
mod cx;
mod dropout;
mod embedding;
mod linear;
mod matmul;
mod norm;
mod pool;
mod recurrent;
mod reduce;
mod shape_ops;
mod softmax;

use super::check::show;
pub(crate) use cx::{Cx, unknown_size};

use super::dim::Dim;
use super::parse::DKind;
use proc_macro2::TokenStream;

/// A tensor value's type: its shape, element kind and where it came from (for messages:
/// "the previous layer (`fc1: Linear(400 -> 120)`)", "`short`", "the input `x`").
#[derive(Clone, Debug)]
pub(crate) struct Ty {
    pub(crate) shape: Vec<Dim>,
    pub(crate) dtype: DKind,
    pub(crate) origin: String,
}

impl Ty {
    pub(crate) fn float(shape: Vec<Dim>) -> Ty {
        Ty {
            shape,
            dtype: DKind::Float,
            origin: String::new(),
        }
    }

    pub(crate) fn show(&self) -> String {
        show(&self.shape)
    }

    /// How the user wrote this value, when it is a named one (an input or a `let`):
    /// `x`, `skip`.
    pub(crate) fn name(&self) -> Option<&str> {
        let quoted = self
            .origin
            .strip_prefix("the input ")
            .unwrap_or(&self.origin);
        quoted
            .strip_prefix('`')
            .and_then(|q| q.strip_suffix('`'))
            .filter(|n| n.chars().all(|c| c.is_alphanumeric() || c == '_'))
    }
}

/// What a call yields: one tensor or a (nested) tuple of them.
#[derive(Clone, Debug)]
pub(crate) enum Out {
    One(Ty),
    Tuple(Vec<Out>),
}

/// The forward expression of a call from its inputs' tokens and its field (`self.name`).
pub(crate) type ForwardFn = Box<dyn Fn(&[TokenStream], &TokenStream) -> TokenStream>;

/// The ONNX export of a call from its inputs' tokens (`onnx::Value`s), its field and its
/// state-dict path (a `&str` expression): an expression yielding the call's value(s) and
/// writing nodes through `__g: &mut onnx::GraphWriter`.
pub(crate) type OnnxFn = Box<dyn Fn(&[TokenStream], &TokenStream, &TokenStream) -> TokenStream>;

/// A checked call: its result type, field, parameter count and forward code.
pub(crate) struct Built {
    pub(crate) out: Out,
    /// The field's type and constructor, for layers with parameters.
    pub(crate) field: Option<(TokenStream, TokenStream)>,
    /// Trainable parameters.
    pub(crate) params: Dim,
    pub(crate) forward: ForwardFn,
    /// How an op without a field exports to ONNX (`None`: a layer exports through
    /// `onnx::ExportLayer`; an op without it records an unsupported-op error).
    pub(crate) onnx: Option<OnnxFn>,
}

impl Built {
    /// A parameter-free op yielding one tensor.
    pub(crate) fn op(ty: Ty, forward: ForwardFn) -> Built {
        Built {
            out: Out::One(ty),
            field: None,
            params: Dim::lit(0),
            forward,
            onnx: None,
        }
    }

    /// With its ONNX export.
    pub(crate) fn onnx(mut self, f: OnnxFn) -> Built {
        self.onnx = Some(f);
        self
    }
}

/// A layer kind.
pub(crate) trait Kind: Sync {
    /// The names users write (`Conv2d`; `max_pool2d`).
    fn names(&self) -> &'static [&'static str];
    /// Whether it owns parameters or state, and so takes a field name.
    fn has_params(&self) -> bool;
    /// Why it takes a field name, for the message when it has none.
    fn why_a_field(&self) -> &'static str {
        "has parameters"
    }
    /// Its argument keys, for typo suggestions.
    fn keys(&self) -> &'static [&'static str] {
        &[]
    }
    /// Checks the call against its inputs; `None` when its output cannot be known (the
    /// error is already reported).
    fn check(&self, cx: &mut Cx, inputs: &[Ty]) -> Option<Built>;
}

/// Every built-in kind.
pub(crate) static KINDS: &[&dyn Kind] = &[
    &linear::Linear,
    &conv::Conv,
    &norm::BatchNorm,
    &norm::LayerNorm,
    &norm::GroupNorm,
    &dropout::Dropout,
    &embedding::Embedding,
    &activation::Activation,
    &softmax::Softmax,
    &shape_ops::Flatten,
    &shape_ops::Reshape,
    &shape_ops::Transpose,
    &shape_ops::Permute,
    &shape_ops::Unsqueeze,
    &shape_ops::Squeeze,
    &shape_ops::Select,
    &pool::Pool,
    &pool::AdaptiveAvgPool,
    &pool::Upsample,
    &cat::Cat,
    &cat::Chunk,
    &matmul::Matmul,
    &reduce::Reduce,
    &recurrent::Recurrent,
    &attention::MultiheadAttention,
    &attention::EncoderLayer,
];

/// The kind called `name`.
pub(crate) fn find(name: &str) -> Option<&'static dyn Kind> {
    KINDS.iter().copied().find(|k| k.names().contains(&name))
}

/// Every kind name.
pub(crate) fn all_names() -> impl Iterator<Item = &'static str> {
    KINDS.iter().flat_map(|k| k.names().iter().copied())
}

/// PyTorch's parameter-free `nn` module classes, whose names users carry over
/// (`self.act = nn.ReLU()`).
const TORCH_MODULE_CLASSES: &[&str] = &[
    "ReLU",
    "ReLU6",
    "GELU",
    "SiLU",
    "ELU",
    "LeakyReLU",
    "Hardtanh",
    "Hardswish",
    "Hardsigmoid",
    "Softplus",
    "Mish",
    "Tanh",
    "Sigmoid",
    "Softmax",
    "LogSoftmax",
    "Flatten",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "Upsample",
];

/// The built-in op (a kind without parameters) that `name`, one of PyTorch's module
/// classes, is here: `ReLU` → `relu`, `GELU` → `gelu`, `MaxPool2d` → `max_pool2d`. Only
/// PyTorch's spellings: a user's own type `Split` is not the op `split`.
pub(crate) fn op_named_like_a_module(name: &str) -> Option<&'static str> {
    if !TORCH_MODULE_CLASSES.contains(&name) {
        return None;
    }
    let squash = |s: &str| s.to_lowercase().replace('_', "");
    let wanted = squash(name);
    KINDS
        .iter()
        .filter(|k| !k.has_params())
        .flat_map(|k| k.names().iter().copied())
        .find(|k| *k != name && squash(k) == wanted)
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
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

/// The known name closest to `name` (case-insensitive first: `Conv2D` → `Conv2d`,
/// `ReLU` → `relu`, `MaxPool2d` → `max_pool2d`), if close enough.
pub(crate) fn suggest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let squash = |s: &str| s.to_lowercase().replace('_', "");
    let wanted = squash(name);
    let mut best: Option<(usize, &str)> = None;
    for k in known {
        let d = if squash(k) == wanted {
            0
        } else {
            edit_distance(&wanted, &squash(k)).max(1)
        };
        if d <= 2 && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}
