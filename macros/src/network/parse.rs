//! The syntax tree of the `network!` DSL and its parser.
//!
//! ```text
//! network     := attrs vis "struct" Ident generics? "(" input ("," input)* ")" "->" shape "{" step,* "}"
//! input       := Ident ":" shape
//! shape       := "[" dim ("," dim)* "]"
//! dim         := Ident | LitInt
//! step        := (Ident ":")? Ident ("(" arg,* ")")? ("=>" shape)?
//!              | "let" Ident            (names the current value)
//!              | "+" Ident              (adds a named value: a residual connection)
//! arg         := dim "->" dim | Ident "=" value | value | shape
//! ```

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Generics, Ident, LitInt, Token, Visibility, bracketed, parenthesized};

/// One dimension as written: a literal size or a symbol (`N`, or a const generic).
#[derive(Clone, Debug)]
pub(crate) enum DimExpr {
    Lit(usize, Span),
    Sym(Ident),
}

impl DimExpr {
    pub(crate) fn span(&self) -> Span {
        match self {
            DimExpr::Lit(_, s) => *s,
            DimExpr::Sym(i) => i.span(),
        }
    }
}

impl Parse for DimExpr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(LitInt) {
            let lit: LitInt = input.parse()?;
            Ok(DimExpr::Lit(lit.base10_parse()?, lit.span()))
        } else if input.peek(Ident) {
            Ok(DimExpr::Sym(input.parse()?))
        } else {
            Err(input.error("expected a dimension: an integer literal or a name such as `N`"))
        }
    }
}

/// A written shape `[N, 1, 28, 28]`.
#[derive(Clone, Debug)]
pub(crate) struct ShapeExpr {
    pub(crate) dims: Vec<DimExpr>,
    pub(crate) span: Span,
}

impl Parse for ShapeExpr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let content;
        let bracket = bracketed!(content in input);
        let dims = Punctuated::<DimExpr, Token![,]>::parse_terminated(&content)?;
        Ok(ShapeExpr {
            dims: dims.into_iter().collect(),
            span: bracket.span.join(),
        })
    }
}

/// An argument of a step.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    /// `in -> out`
    Arrow(DimExpr, DimExpr),
    /// `key = value`
    Named(Ident, DimExpr),
    /// `value`
    Positional(DimExpr),
    /// `[dims]` (reshape)
    Shape(ShapeExpr),
    /// A float such as a dropout probability.
    Float(syn::LitFloat),
}

impl Arg {
    pub(crate) fn span(&self) -> Span {
        match self {
            Arg::Arrow(a, b) => a.span().join(b.span()).unwrap_or(a.span()),
            Arg::Named(k, _) => k.span(),
            Arg::Positional(d) => d.span(),
            Arg::Shape(s) => s.span,
            Arg::Float(f) => f.span(),
        }
    }
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(syn::token::Bracket) {
            return Ok(Arg::Shape(input.parse()?));
        }
        if input.peek(syn::LitFloat) {
            return Ok(Arg::Float(input.parse()?));
        }
        if input.peek(Ident) && input.peek2(Token![=]) && !input.peek2(Token![=>]) {
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            return Ok(Arg::Named(key, input.parse()?));
        }
        let first: DimExpr = input.parse()?;
        if input.peek(Token![->]) {
            input.parse::<Token![->]>()?;
            return Ok(Arg::Arrow(first, input.parse()?));
        }
        Ok(Arg::Positional(first))
    }
}

/// What kind of step this is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Form {
    /// A layer or op applied to the current value.
    Apply,
    /// `let h`: remembers the current value as `h`.
    Save,
    /// `+ h`: adds the named value `h` to the current value.
    Add,
}

/// One step of the network: a named layer, an unnamed op, `let h` or `+ h`, with an
/// optional checked shape annotation.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) form: Form,
    pub(crate) name: Option<Ident>,
    pub(crate) kind: Ident,
    pub(crate) args: Vec<Arg>,
    pub(crate) args_span: Option<Span>,
    pub(crate) annotation: Option<ShapeExpr>,
}

impl Step {
    /// How the step reads in source, for messages: `fc1: Linear(401 -> 120)`.
    pub(crate) fn describe(&self) -> String {
        match self.form {
            Form::Save => return format!("let {}", self.kind),
            Form::Add => return format!("+ {}", self.kind),
            Form::Apply => {}
        }
        let args = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Arrow(x, y) => format!("{} -> {}", dim_text(x), dim_text(y)),
                Arg::Named(k, v) => format!("{k} = {}", dim_text(v)),
                Arg::Positional(v) => dim_text(v),
                Arg::Shape(s) => format!(
                    "[{}]",
                    s.dims.iter().map(dim_text).collect::<Vec<_>>().join(", ")
                ),
                Arg::Float(f) => f.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let call = if self.args_span.is_some() {
            format!("{}({args})", self.kind)
        } else {
            self.kind.to_string()
        };
        match &self.name {
            Some(n) => format!("{n}: {call}"),
            None => call,
        }
    }
}

pub(crate) fn dim_text(d: &DimExpr) -> String {
    match d {
        DimExpr::Lit(v, _) => v.to_string(),
        DimExpr::Sym(i) => i.to_string(),
    }
}

impl Parse for Step {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        for (form, present) in [
            (Form::Save, input.peek(Token![let])),
            (Form::Add, input.peek(Token![+])),
        ] {
            if present {
                if form == Form::Save {
                    input.parse::<Token![let]>()?;
                } else {
                    input.parse::<Token![+]>()?;
                }
                let value: Ident = input.parse()?;
                let annotation = if input.peek(Token![=>]) {
                    input.parse::<Token![=>]>()?;
                    Some(input.parse()?)
                } else {
                    None
                };
                return Ok(Step {
                    form,
                    name: None,
                    kind: value,
                    args: Vec::new(),
                    args_span: None,
                    annotation,
                });
            }
        }
        let first: Ident = input.parse()?;
        let (name, kind) = if input.peek(Token![:]) && !input.peek(Token![::]) {
            input.parse::<Token![:]>()?;
            (Some(first), input.parse::<Ident>()?)
        } else {
            (None, first)
        };
        let (args, args_span) = if input.peek(syn::token::Paren) {
            let content;
            let paren = parenthesized!(content in input);
            let args = Punctuated::<Arg, Token![,]>::parse_terminated(&content)?;
            (args.into_iter().collect(), Some(paren.span.join()))
        } else {
            (Vec::new(), None)
        };
        let annotation = if input.peek(Token![=>]) {
            input.parse::<Token![=>]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(Step {
            form: Form::Apply,
            name,
            kind,
            args,
            args_span,
            annotation,
        })
    }
}

/// A declared input `x: [N, 784]`.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    pub(crate) name: Ident,
    pub(crate) shape: ShapeExpr,
}

/// A whole `network!` invocation.
pub(crate) struct Network {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) name: Ident,
    pub(crate) generics: Generics,
    pub(crate) inputs: Vec<Input>,
    pub(crate) output: ShapeExpr,
    pub(crate) steps: Vec<Step>,
}

impl Parse for Network {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![struct]>()?;
        let name: Ident = input.parse()?;
        let generics: Generics = input.parse()?;
        let content;
        parenthesized!(content in input);
        let inputs = Punctuated::<Input, Token![,]>::parse_terminated_with(&content, |p| {
            let name: Ident = p.parse()?;
            p.parse::<Token![:]>()?;
            Ok(Input {
                name,
                shape: p.parse()?,
            })
        })?;
        if inputs.is_empty() {
            return Err(syn::Error::new(
                name.span(),
                "a network declares at least one input, as `(x: [N, 784])`",
            ));
        }
        input.parse::<Token![->]>()?;
        let output: ShapeExpr = input.parse()?;
        let body;
        syn::braced!(body in input);
        let steps = Punctuated::<Step, Token![,]>::parse_terminated(&body)?;
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the network body"));
        }
        Ok(Network {
            attrs,
            vis,
            name,
            generics,
            inputs: inputs.into_iter().collect(),
            output,
            steps: steps.into_iter().collect(),
        })
    }
}
