//! The syntax tree of the `network!` DSL and its parser: a faithful mirror of this
//! grammar (the book, `docs/src/dsl.md`):
//!
//! ```text
//! network  := attrs vis "struct" Ident generics? ctor? "(" input ("," input)* ")" "->" outputs "{" body "}"
//! ctor     := "[" (Ident "->" Ident ","?)? (Ident ("=" LitInt)?),* "]"   (constructor sizes)
//! input    := Ident ":" shape (":" dtype)?            dtype := "f32" | "i64" | "bool" | ...
//! outputs  := shape | "(" shape ("," shape)* ")"
//! shape    := "[" dim ("," dim)* "]"
//! dim      := dim ("+" | "-" | "*" | "/") dim | "(" dim ")" | LitInt | Ident
//!
//! body     := chain | graph                           (a graph has a `;` or a `->` outside parentheses,
//!                                                      or is one expression that is no chain)
//! chain    := step ("," step)* ","?                   (applied in turn to the first input)
//! step     := call ("=>" shape)? | "let" Ident | "+" Ident
//! graph    := ("let" pattern "=" expr ";")* expr      (the last expression is the output)
//! pattern  := Ident | "_" | "(" pattern ("," pattern)* ")"
//! expr     := arith ("=>" shape)? ("->" call ("=>" shape)?)*
//! arith    := arith ("+" | "-" | "*" | "/") arith | primary
//! primary  := call "(" expr ("," expr)* ")"           (a layer or op applied to values)
//!           | Ident                                   (a named value)
//!           | "(" expr ("," expr)* ")"                (grouping, or a tuple)
//!           | LitFloat | LitInt                       (a scalar)
//! call     := (Ident ":")? Ident generics? ("(" arg ("," arg)* ")")?
//! arg      := dim "->" dim | Ident "=" value | value
//! value    := dim | "-" dim | LitFloat | LitStr | LitBool | shape
//! ```
//!
//! In an expression a call's last parenthesised group holds the values it is applied to:
//! `relu(x)`, `fc: Linear(4 -> 2)(x)`, `softmax(dim = 1)(scores)`.

mod expr;
mod terms;

pub(crate) use expr::{Expr, Pattern, Stmt};
pub(crate) use terms::{Arg, Call, DimExpr, ShapeExpr, Step, Value};

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Generics, Ident, Token, Visibility, parenthesized};

/// A network's body.
pub(crate) enum Body {
    /// The short form: steps applied in turn to the first input.
    Chain(Vec<Step>),
    /// Statements and the output expression.
    Graph(Vec<Stmt>, Box<Expr>),
}

/// The element type of a declared input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DKind {
    Float,
    Int,
    Bool,
}

impl DKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            DKind::Float => "float",
            DKind::Int => "integer",
            DKind::Bool => "bool",
        }
    }
}

/// A declared input `x: [N, 784]` or `ids: [N, T]: i64`.
#[derive(Clone)]
pub(crate) struct Input {
    pub(crate) name: Ident,
    pub(crate) shape: ShapeExpr,
    /// The declared dtype (`f32` when not written) and its token.
    pub(crate) dtype: (Ident, DKind),
    /// `mask: Option<[N, 1, 1, T]: bool>`: `forward` takes `Option<&Tensor>`, and the
    /// value may only be handed on to a layer that takes it optionally too.
    pub(crate) optional: bool,
}

/// A constructor parameter `stride = 1` of `struct Block[cin -> cout, stride = 1](..)`:
/// a size given to `new` at run time, a symbol to the checker.
#[derive(Clone)]
pub(crate) struct CtorParam {
    pub(crate) name: Ident,
    pub(crate) default: Option<i64>,
    /// Not a size: a number or an activation (see [`ValueParam`]).
    pub(crate) value: Option<ValueParam>,
}

/// A constructor parameter that is not a size.
#[derive(Clone)]
pub(crate) enum ValueParam {
    /// `p: f64` (with its default, `p: f64 = 0.1`): a number for a layer's argument
    /// (`Dropout(p)`, `LayerNorm(D, eps = eps)`).
    Number(Option<f64>),
    /// `act: Activation`: an `nn::Activation` chosen by the caller, applied as `-> act`.
    Activation,
    /// `bias: bool` (`bias: bool = false`): a switch for a layer's `bias = ..`
    /// (`Linear(d -> h, bias = bias)`); the parameter count depends on it.
    Bool(Option<bool>),
}

/// A whole `network!` invocation.
pub(crate) struct Network {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) name: Ident,
    pub(crate) generics: Generics,
    /// Constructor parameters, in order; `ctor_arrow`: the first two were written
    /// `a -> b` (and are given so: `Block(64 -> 128, stride = 2)`).
    pub(crate) ctor: Vec<CtorParam>,
    pub(crate) ctor_arrow: bool,
    pub(crate) inputs: Vec<Input>,
    pub(crate) outputs: Vec<ShapeExpr>,
    /// Whether the outputs were written as a tuple.
    pub(crate) tuple_output: bool,
    pub(crate) body: Body,
    /// `struct Name<generics>(inputs) -> outputs {}` as written: the declaration other
    /// invocations fetch (see `declare`).
    pub(crate) header: proc_macro2::TokenStream,
}

/// Whether a body is the graph form: a `;`, or a `->` outside any group, at its top level.
fn is_graph(body: ParseStream) -> bool {
    let fork = body.fork();
    let mut previous_minus = false;
    while !fork.is_empty() {
        let Ok(tt) = fork.parse::<proc_macro2::TokenTree>() else {
            return false;
        };
        if let proc_macro2::TokenTree::Punct(p) = &tt {
            if p.as_char() == ';' || (previous_minus && p.as_char() == '>') {
                return true;
            }
            previous_minus = p.as_char() == '-' && p.spacing() == proc_macro2::Spacing::Joint;
        } else {
            previous_minus = false;
        }
    }
    false
}

impl Parse for Network {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![struct]>()?;
        let name: Ident = input.parse()?;
        let generics: Generics = input.parse()?;
        let (mut ctor, mut ctor_arrow, mut ctor_group) = (Vec::new(), false, None);
        if input.peek(syn::token::Bracket) {
            ctor_group = Some(input.fork().parse::<proc_macro2::TokenTree>()?);
            let content;
            syn::bracketed!(content in input);
            if content.peek(Ident) && content.peek2(Token![->]) {
                for k in 0..2 {
                    ctor.push(CtorParam {
                        name: content.parse()?,
                        default: None,
                        value: None,
                    });
                    if k == 0 {
                        content.parse::<Token![->]>()?;
                    }
                }
                ctor_arrow = true;
                if !content.is_empty() {
                    content.parse::<Token![,]>()?;
                }
            }
            let rest = Punctuated::<CtorParam, Token![,]>::parse_terminated_with(&content, |p| {
                let name: Ident = p.parse()?;
                if p.peek(Token![:]) {
                    p.parse::<Token![:]>()?;
                    let ty: Ident = p.parse()?;
                    if ty == "Activation" {
                        return Ok(CtorParam {
                            name,
                            default: None,
                            value: Some(ValueParam::Activation),
                        });
                    }
                    if ty == "bool" {
                        let default = if p.peek(Token![=]) {
                            p.parse::<Token![=]>()?;
                            Some(p.parse::<syn::LitBool>()?.value)
                        } else {
                            None
                        };
                        return Ok(CtorParam {
                            name,
                            default: None,
                            value: Some(ValueParam::Bool(default)),
                        });
                    }
                    if ty != "f64" {
                        return Err(syn::Error::new(
                            ty.span(),
                            format!(
                                "a constructor parameter is a size (`{name}`, `{name} = 1`), a number (`{name}: f64`, `{name}: f64 = 0.1`), a switch (`{name}: bool`, `{name}: bool = false`) or an activation (`{name}: Activation`), not `{ty}`"
                            ),
                        ));
                    }
                    let default = if p.peek(Token![=]) {
                        p.parse::<Token![=]>()?;
                        let lit: syn::Lit = p.parse()?;
                        Some(match &lit {
                            syn::Lit::Float(f) => f.base10_parse()?,
                            syn::Lit::Int(i) => i.base10_parse::<i64>()? as f64,
                            _ => {
                                return Err(syn::Error::new(
                                    lit.span(),
                                    "the default of an `f64` parameter is a number",
                                ));
                            }
                        })
                    } else {
                        None
                    };
                    return Ok(CtorParam {
                        name,
                        default: None,
                        value: Some(ValueParam::Number(default)),
                    });
                }
                let default = if p.peek(Token![=]) {
                    p.parse::<Token![=]>()?;
                    Some(p.parse::<syn::LitInt>()?.base10_parse()?)
                } else {
                    None
                };
                Ok(CtorParam {
                    name,
                    default,
                    value: None,
                })
            })?;
            ctor.extend(rest);
            // `new(device, sizes.., others..)`: numbers and activations come last, as
            // written.
            if let Some(k) = ctor.iter().position(|c| c.value.is_some())
                && let Some(size) = ctor[k..].iter().find(|c| c.value.is_none())
            {
                let what = match ctor[k].value {
                    Some(ValueParam::Activation) => "activation",
                    Some(ValueParam::Bool(_)) => "switch",
                    _ => "number",
                };
                return Err(syn::Error::new(
                    size.name.span(),
                    format!(
                        "size parameter `{}` after the {what} `{}`: list the sizes first, then the `f64`, `bool` and `Activation` parameters",
                        size.name, ctor[k].name
                    ),
                ));
            }
            if ctor.is_empty() {
                return Err(syn::Error::new(
                    name.span(),
                    "empty constructor parameters: leave out the `[]`, or list sizes as `[cin -> cout, stride = 1]`",
                ));
            }
        }
        let inputs_group: proc_macro2::TokenTree = input.fork().parse()?;
        let content;
        parenthesized!(content in input);
        let inputs = Punctuated::<Input, Token![,]>::parse_terminated_with(&content, |p| {
            let name: Ident = p.parse()?;
            p.parse::<Token![:]>()?;
            let optional = p.peek(Ident) && p.peek2(Token![<]) && {
                let fork = p.fork();
                fork.parse::<Ident>().is_ok_and(|i| i == "Option")
            };
            let outer = p;
            let inner;
            let p = if optional {
                outer.parse::<Ident>()?;
                outer.parse::<Token![<]>()?;
                // Up to the closing `>`: a shape and an optional dtype.
                let mut tokens = proc_macro2::TokenStream::new();
                while !outer.is_empty() && !outer.peek(Token![>]) {
                    tokens.extend([outer.parse::<proc_macro2::TokenTree>()?]);
                }
                outer.parse::<Token![>]>()?;
                inner = tokens;
                None
            } else {
                inner = proc_macro2::TokenStream::new();
                Some(outer)
            };
            let parse_rest = |p: ParseStream| -> syn::Result<(ShapeExpr, (Ident, DKind))> {
                let shape = p.parse()?;
                let dtype = if p.peek(Token![:]) {
                    p.parse::<Token![:]>()?;
                    let t: Ident = p.parse()?;
                    let kind = match t.to_string().as_str() {
                        "f16" | "bf16" | "f32" | "f64" => DKind::Float,
                        "i64" | "u8" => DKind::Int,
                        "bool" => DKind::Bool,
                        other => {
                            return Err(syn::Error::new(
                                t.span(),
                                format!(
                                    "unknown dtype `{other}`: expected f16, bf16, f32, f64, i64, u8 or bool"
                                ),
                            ));
                        }
                    };
                    (t, kind)
                } else {
                    (Ident::new("f32", name.span()), DKind::Float)
                };
                Ok((shape, dtype))
            };
            let (shape, dtype) = match p {
                Some(p) => parse_rest(p)?,
                None => syn::parse::Parser::parse2(
                    |p: ParseStream| {
                        let r = parse_rest(p)?;
                        if !p.is_empty() {
                            return Err(p.error("expected `>` after the optional input's shape and dtype, as `Option<[N, T]: bool>`"));
                        }
                        Ok(r)
                    },
                    inner,
                )?,
            };
            Ok(Input {
                name,
                shape,
                dtype,
                optional,
            })
        })?;
        if inputs.is_empty() {
            return Err(syn::Error::new(
                name.span(),
                "a network declares at least one input, as `(x: [N, 784])`",
            ));
        }
        input.parse::<Token![->]>()?;
        let outputs_group: proc_macro2::TokenTree = input.fork().parse()?;
        let (outputs, tuple_output) = if input.peek(syn::token::Paren) {
            let content;
            parenthesized!(content in input);
            let shapes = Punctuated::<ShapeExpr, Token![,]>::parse_terminated(&content)?;
            (shapes.into_iter().collect(), true)
        } else {
            (vec![input.parse::<ShapeExpr>()?], false)
        };
        let body_tokens;
        syn::braced!(body_tokens in input);
        let body = if is_graph(&body_tokens) {
            let mut stmts = Vec::new();
            loop {
                if body_tokens.peek(Token![let]) {
                    body_tokens.parse::<Token![let]>()?;
                    let pattern = body_tokens.parse()?;
                    body_tokens.parse::<Token![=]>()?;
                    let expr = body_tokens.parse()?;
                    body_tokens.parse::<Token![;]>()?;
                    stmts.push(Stmt { pattern, expr });
                    continue;
                }
                if body_tokens.is_empty() {
                    return Err(syn::Error::new(
                        body_tokens.span(),
                        "the network body ends without its output: finish it with the expression to return, without a `;`",
                    ));
                }
                let output: Expr = body_tokens.parse()?;
                if !body_tokens.is_empty() {
                    return Err(body_tokens.error(
                        "expected the end of the body: only the last expression (the output) goes without `let`",
                    ));
                }
                break Body::Graph(stmts, Box::new(output));
            }
        } else {
            // A chain, or a graph of one expression (`a: Embedding(..)(ids) + pos`, no
            // `let`): the chain's error stands when neither reads the whole body.
            use syn::parse::discouraged::Speculative;
            let chain = body_tokens.fork();
            match Punctuated::<Step, Token![,]>::parse_terminated(&chain) {
                Ok(steps) => {
                    body_tokens.advance_to(&chain);
                    Body::Chain(steps.into_iter().collect())
                }
                Err(chain_error) => {
                    let graph = body_tokens.fork();
                    match graph.parse::<Expr>() {
                        Ok(output) if graph.is_empty() => {
                            body_tokens.advance_to(&graph);
                            Body::Graph(Vec::new(), Box::new(output))
                        }
                        _ => return Err(chain_error),
                    }
                }
            }
        };
        let header =
            quote::quote!(struct #name #generics #ctor_group #inputs_group -> #outputs_group {});
        Ok(Network {
            header,
            attrs,
            vis,
            name,
            generics,
            ctor,
            ctor_arrow,
            inputs: inputs.into_iter().collect(),
            outputs,
            tuple_output,
            body,
        })
    }
}

/// Every network of one `network!` invocation: they may use each other as layers, with
/// their shapes (and const parameters) checked without annotations. In front, the
/// declarations fetched from other invocations (`@declared { header }`, see `declare`).
pub(crate) struct Networks {
    pub(crate) declared: Vec<Network>,
    pub(crate) nets: Vec<Network>,
}

impl Parse for Networks {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut declared = Vec::new();
        while input.peek(Token![@]) {
            input.parse::<Token![@]>()?;
            let tag: Ident = input.parse()?;
            if tag != "declared" {
                return Err(syn::Error::new(tag.span(), "expected `@declared`"));
            }
            let content;
            syn::braced!(content in input);
            declared.push(content.parse::<Network>()?);
        }
        let mut nets = vec![input.parse::<Network>()?];
        while !input.is_empty() {
            nets.push(input.parse()?);
        }
        Ok(Networks { declared, nets })
    }
}
