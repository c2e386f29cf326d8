//! Symbolic dimensions: integer polynomials over the network's size names (`N`, `H`,
//! const generics, constructor parameters), closed under `+`, `-`, `*` and floor
//! division (by a literal, kept canonical, or by a size such as a `stride` parameter).
//!
//! A [`Dim`] is kept in a canonical form (a sum of terms, each an integer coefficient
//! times a sorted product of atoms; an atom is a name or `floor(d / k)` with `d`'s
//! coefficients reduced below `k`), so `(H - 1) / 2 + 1` and `(H + 1) / 2` are the same
//! value. Two dims that differ in form but agree for every size (`H / 2 / 2` and `H / 4`)
//! are recognised by evaluating both at many sizes ([`Dim::same`]).

use proc_macro2::TokenStream;
use quote::quote;
use std::collections::BTreeMap;
use std::fmt;

/// A factor of a term: a size name, the floor of a dim divided by a literal ≥ 2, or the
/// floor of a dim divided by a non-literal (positive) size.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Atom {
    Sym(String),
    Div(Box<Dim>, i64),
    DivBy(Box<Dim>, Box<Dim>),
}

/// A sorted product of atoms; the empty product is the constant term.
type Monomial = Vec<Atom>;

/// An integer polynomial over atoms, in canonical form (no zero coefficients).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Dim {
    terms: BTreeMap<Monomial, i64>,
}

impl Dim {
    /// A literal size.
    pub(crate) fn lit(v: i64) -> Dim {
        let mut terms = BTreeMap::new();
        if v != 0 {
            terms.insert(Vec::new(), v);
        }
        Dim { terms }
    }

    /// A size name.
    pub(crate) fn sym(name: &str) -> Dim {
        let mut terms = BTreeMap::new();
        terms.insert(vec![Atom::Sym(name.to_string())], 1);
        Dim { terms }
    }

    /// The value when the dim is a constant.
    pub(crate) fn as_lit(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// The single name when the dim is exactly one size name (`N`).
    pub(crate) fn as_sym(&self) -> Option<&str> {
        match self.terms.iter().next() {
            Some((m, 1)) if self.terms.len() == 1 && m.len() == 1 => match &m[0] {
                Atom::Sym(s) => Some(s),
                Atom::Div(..) | Atom::DivBy(..) => None,
            },
            _ => None,
        }
    }

    /// `(c, name)` when the dim is `c * name` for a literal `c` (`4*H`).
    pub(crate) fn as_scaled_sym(&self) -> Option<(i64, &str)> {
        let (m, c) = self.terms.iter().next()?;
        match m.as_slice() {
            [Atom::Sym(s)] if self.terms.len() == 1 => Some((*c, s)),
            _ => None,
        }
    }

    fn add_term(&mut self, m: Monomial, c: i64) {
        let e = self.terms.entry(m).or_insert(0);
        *e += c;
        if *e == 0 {
            self.terms.retain(|_, c| *c != 0);
        }
    }

    pub(crate) fn add(&self, other: &Dim) -> Dim {
        let mut out = self.clone();
        for (m, c) in &other.terms {
            out.add_term(m.clone(), *c);
        }
        out.renormalise()
    }

    pub(crate) fn neg(&self) -> Dim {
        Dim {
            terms: self.terms.iter().map(|(m, c)| (m.clone(), -c)).collect(),
        }
    }

    pub(crate) fn sub(&self, other: &Dim) -> Dim {
        self.add(&other.neg())
    }

    pub(crate) fn mul(&self, other: &Dim) -> Dim {
        let mut out = Dim::default();
        for (a, ca) in &self.terms {
            for (b, cb) in &other.terms {
                let mut m: Monomial = a.iter().chain(b).cloned().collect();
                m.sort();
                out.add_term(m, ca * cb);
            }
        }
        out
    }

    /// `floor(self / k)` for a literal `k > 0`.
    pub(crate) fn floor_div(&self, k: i64) -> Dim {
        assert!(k > 0, "divisors are checked positive by the caller");
        if k == 1 {
            return self.clone();
        }
        // self = k q + r with every coefficient of r in [0, k): floor(self / k) = q + floor(r / k).
        let (mut q, mut r) = (Dim::default(), Dim::default());
        for (m, c) in &self.terms {
            q.add_term(m.clone(), c.div_euclid(k));
            r.add_term(m.clone(), c.rem_euclid(k));
        }
        match r.as_lit() {
            Some(v) => q.add(&Dim::lit(v.div_euclid(k))),
            None => {
                q.add_term(vec![Atom::Div(Box::new(r), k)], 1);
                q.renormalise()
            }
        }
    }

    /// `floor(self / d)` for a size `d` (positive for every assignment of the names):
    /// by a literal through [`Dim::floor_div`], otherwise kept as a division atom.
    pub(crate) fn floor_div_by(&self, d: &Dim) -> Dim {
        if let Some(k) = d.as_lit() {
            return self.floor_div(k.max(1));
        }
        if self.as_lit() == Some(0) {
            return Dim::lit(0);
        }
        if self.same(d) {
            return Dim::lit(1);
        }
        let mut terms = BTreeMap::new();
        terms.insert(
            vec![Atom::DivBy(Box::new(self.clone()), Box::new(d.clone()))],
            1,
        );
        Dim { terms }
    }

    /// Folds constants into a lone `floor(d / k)` term (`floor(d/k) + c` = `floor((d + ck)/k)`),
    /// so both spellings share one form.
    fn renormalise(self) -> Dim {
        let c = self.terms.get(&Vec::new()).copied().unwrap_or(0);
        if c == 0 || self.terms.len() != 2 {
            return self;
        }
        let Some((m, 1)) = self.terms.iter().find(|(m, _)| !m.is_empty()) else {
            return self;
        };
        let [Atom::Div(inner, k)] = m.as_slice() else {
            return self;
        };
        // Built directly (not through `floor_div`, which comes back here).
        let mut terms = BTreeMap::new();
        terms.insert(
            vec![Atom::Div(Box::new(inner.add(&Dim::lit(c * k))), *k)],
            1,
        );
        Dim { terms }
    }

    /// `self / other` when it divides exactly as polynomials (`N*T*C / (N*T)` = `C`).
    pub(crate) fn div_exact(&self, other: &Dim) -> Option<Dim> {
        if let (Some(a), Some(b)) = (self.as_lit(), other.as_lit()) {
            return (b != 0 && a % b == 0).then(|| Dim::lit(a / b));
        }
        if other.terms.len() != 1 {
            return (self == other).then(|| Dim::lit(1));
        }
        let (dm, dc) = other.terms.iter().next().expect("one term");
        let mut out = Dim::default();
        for (m, c) in &self.terms {
            if c % dc != 0 {
                return None;
            }
            let mut rest = m.clone();
            for a in dm {
                let i = rest.iter().position(|x| x == a)?;
                rest.remove(i);
            }
            out.add_term(rest, c / dc);
        }
        Some(out)
    }

    /// This dim with names replaced where `map` gives a dim (the others kept).
    pub(crate) fn subst(&self, map: &dyn Fn(&str) -> Option<Dim>) -> Dim {
        let mut out = Dim::default();
        for (m, c) in &self.terms {
            let mut term = Dim::lit(*c);
            for a in m {
                let factor = match a {
                    Atom::Sym(s) => map(s).unwrap_or_else(|| Dim::sym(s)),
                    Atom::Div(d, k) => d.subst(map).floor_div(*k),
                    Atom::DivBy(d, by) => d.subst(map).floor_div_by(&by.subst(map)),
                };
                term = term.mul(&factor);
            }
            out = out.add(&term);
        }
        out
    }

    /// The value at the sizes `env` gives each name (`None` on overflow).
    fn eval(&self, env: &dyn Fn(&str) -> i64) -> Option<i128> {
        let mut total: i128 = 0;
        for (m, c) in &self.terms {
            let mut v = *c as i128;
            for a in m {
                let x = match a {
                    Atom::Sym(s) => env(s) as i128,
                    Atom::Div(d, k) => d.eval(env)?.div_euclid(*k as i128),
                    Atom::DivBy(d, by) => {
                        let by = by.eval(env)?;
                        if by <= 0 {
                            return None;
                        }
                        d.eval(env)?.div_euclid(by)
                    }
                };
                v = v.checked_mul(x)?;
            }
            total = total.checked_add(v)?;
        }
        Some(total)
    }

    fn names(&self, out: &mut Vec<String>) {
        for m in self.terms.keys() {
            for a in m {
                match a {
                    Atom::Sym(s) => {
                        if !out.contains(s) {
                            out.push(s.clone());
                        }
                    }
                    Atom::Div(d, _) => d.names(out),
                    Atom::DivBy(d, by) => {
                        d.names(out);
                        by.names(out);
                    }
                }
            }
        }
    }

    /// The size names this dim mentions.
    pub(crate) fn symbols(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.names(&mut out);
        out
    }

    /// Whether the two dims are equal for every assignment of positive sizes: equal
    /// canonical forms, or equal values at 512 pseudo-random assignments (sizes in
    /// 1..=4096, so floor-division periods up to 4096 are covered many times over).
    pub(crate) fn same(&self, other: &Dim) -> bool {
        if self == other {
            return true;
        }
        let mut names = self.symbols();
        other.names(&mut names);
        if names.is_empty() {
            return false;
        }
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..512 {
            let values: Vec<i64> = names
                .iter()
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    ((state >> 33) % 4096) as i64 + 1
                })
                .collect();
            let env = |s: &str| values[names.iter().position(|n| n == s).expect("listed")];
            if self.eval(&env) != other.eval(&env) {
                return false;
            }
        }
        true
    }

    /// A Rust `usize` expression for this dim; `sym` renders each name (a const generic,
    /// or a variable bound from an input's shape).
    pub(crate) fn tokens(&self, sym: &dyn Fn(&str) -> TokenStream) -> TokenStream {
        if let Some(v) = self.as_lit() {
            let v = v.max(0) as usize;
            return quote!(#v);
        }
        if let Some(s) = self.as_sym() {
            return sym(s);
        }
        let terms = self.signed_terms(sym);
        quote!(((#(#terms)+*) as usize))
    }

    /// Each term as an `i64` expression.
    fn signed_terms(&self, sym: &dyn Fn(&str) -> TokenStream) -> Vec<TokenStream> {
        self.terms
            .iter()
            .map(|(m, c)| {
                let factors = m.iter().map(|a| match a {
                    Atom::Sym(s) => {
                        let s = sym(s);
                        quote!((#s as i64))
                    }
                    Atom::Div(d, k) => {
                        let inner = d.signed_terms(sym);
                        quote!(i64::div_euclid(0 #(+ #inner)*, #k))
                    }
                    Atom::DivBy(d, by) => {
                        let (inner, by) = (d.signed_terms(sym), by.signed_terms(sym));
                        quote!(i64::div_euclid(0 #(+ #inner)*, 0 #(+ #by)*))
                    }
                });
                quote!(#c #(* #factors)*)
            })
            .collect()
    }
}

/// A size name in generated code: an input size bound at run time is the local
/// `__dim_NAME` (set by `forward`'s input checks); a const parameter or const is itself.
pub(crate) fn symbol_tokens(name: &str, bound_at_run_time: bool) -> TokenStream {
    if bound_at_run_time {
        let i = quote::format_ident!("__dim_{}", name);
        quote!(#i)
    } else {
        let i = proc_macro2::Ident::new(name, proc_macro2::Span::call_site());
        quote!(#i)
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Sym(s) => write!(f, "{s}"),
            Atom::Div(d, k) if d.terms.len() == 1 && d.as_lit().is_none() => {
                write!(f, "{d} / {k}")
            }
            Atom::Div(d, k) => write!(f, "({d}) / {k}"),
            Atom::DivBy(d, by) => {
                let simple = |x: &Dim| x.terms.len() == 1 && x.as_sym().is_some();
                match (simple(d), simple(by)) {
                    (true, true) => write!(f, "{d} / {by}"),
                    (true, false) => write!(f, "{d} / ({by})"),
                    (false, true) => write!(f, "({d}) / {by}"),
                    (false, false) => write!(f, "({d}) / ({by})"),
                }
            }
        }
    }
}

impl fmt::Display for Dim {
    /// Names first, the constant last: `2*C`, `(H + 1) / 2`, `N*T`, `H - 4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return write!(f, "0");
        }
        let mut first = true;
        let ordered = self
            .terms
            .iter()
            .filter(|(m, _)| !m.is_empty())
            .chain(self.terms.iter().filter(|(m, _)| m.is_empty()));
        for (m, c) in ordered {
            let (sign, mag) = if *c < 0 { ("-", -c) } else { ("+", *c) };
            if first {
                if sign == "-" {
                    write!(f, "-")?;
                }
            } else {
                write!(f, " {sign} ")?;
            }
            first = false;
            let several = m.len() > 1 || mag != 1;
            let atoms: Vec<String> = m
                .iter()
                .map(|a| match a {
                    Atom::Div(..) | Atom::DivBy(..) if several => format!("({a})"),
                    _ => a.to_string(),
                })
                .collect();
            match (mag, atoms.is_empty()) {
                (_, true) => write!(f, "{mag}")?,
                (1, false) => write!(f, "{}", atoms.join("*"))?,
                _ => write!(f, "{mag}*{}", atoms.join("*"))?,
            }
        }
        Ok(())
    }
}

/// A dim as an `onnx::SymDim`: a literal or an expression of const and constructor
/// parameters is `Fixed`, an input size `Named`, an expression of input sizes `Expr`.
pub(crate) fn onnx_dim(d: &Dim, runtime: &[String], krate: &TokenStream) -> TokenStream {
    let syms = d.symbols();
    if let Some(s) = d.as_sym()
        && runtime.iter().any(|r| r == s)
    {
        return quote!(#krate::onnx::SymDim::Named(#s));
    }
    if syms.iter().any(|s| runtime.contains(s)) {
        let text = d.to_string();
        return quote!(#krate::onnx::SymDim::Expr(::std::string::String::from(#text)));
    }
    let n = d.tokens(&|s| symbol_tokens(s, false));
    quote!(#krate::onnx::SymDim::Fixed((#n) as usize))
}

/// A shape as a `&[onnx::SymDim]` expression.
pub(crate) fn onnx_shape(shape: &[Dim], runtime: &[String], krate: &TokenStream) -> TokenStream {
    let dims = shape.iter().map(|d| onnx_dim(d, runtime, krate));
    quote!(&[#(#dims),*])
}

#[cfg(test)]
mod tests {
    use super::Dim;

    fn h() -> Dim {
        Dim::sym("H")
    }

    #[test]
    fn canonical_forms_agree() {
        let a = h().sub(&Dim::lit(1)).floor_div(2).add(&Dim::lit(1));
        let b = h().add(&Dim::lit(1)).floor_div(2);
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "(H + 1) / 2");
        assert_eq!(Dim::lit(2).mul(&h()).floor_div(2), h());
        assert!(h().floor_div(2).floor_div(2).same(&h().floor_div(4)));
        assert!(!h().floor_div(2).same(&h().add(&Dim::lit(1)).floor_div(2)));
        assert_eq!(Dim::lit(2).mul(&Dim::sym("C")).to_string(), "2*C");
        assert_eq!(h().sub(&Dim::lit(4)).to_string(), "H - 4");
        let ntc = Dim::sym("N").mul(&Dim::sym("T")).mul(&Dim::lit(8));
        assert_eq!(
            ntc.div_exact(&Dim::sym("N").mul(&Dim::sym("T"))),
            Some(Dim::lit(8))
        );
        assert_eq!(ntc.to_string(), "8*N*T");
        assert_eq!(Dim::lit(12).div_exact(&Dim::lit(5)), None);
    }
}
