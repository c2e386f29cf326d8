//! Declared shapes of `network!` types, so one network can use another as a layer and
//! have the shapes checked at compile time (by constant evaluation, as the two macro
//! invocations cannot see each other).

/// One dimension of a declared shape: a literal size or a symbol (`N`, a const generic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclaredDim {
    /// A literal size.
    Lit(usize),
    /// A named size.
    Sym(&'static str),
}

/// The input and output shapes a network declares. `network!` implements it, and
/// `#[derive(Module)]` does for a struct with `#[module(input = [..], output = [..])]`
/// (the parameter count summed from its children's, or given as `parameters = ..`);
/// with `new(&Device)` and `forward(&Tensor) -> Tensor` such a type is a layer of
/// `network!` whose shapes are checked at compile time. Any type with this trait — a
/// hand-written impl, a network of another crate, a generic type or a type alias —
/// joins as `field: Type => [output shape]`, checked by constant evaluation.
///
/// ```
/// use ferrograd_runtime::nn::{DeclaredDim, DeclaredShapes};
/// struct Block;
/// impl DeclaredShapes for Block {
///     const INPUT: &'static [DeclaredDim] = &[DeclaredDim::Sym("N"), DeclaredDim::Lit(64)];
///     const OUTPUT: &'static [DeclaredDim] = &[DeclaredDim::Sym("N"), DeclaredDim::Lit(64)];
///     const PARAMETERS: usize = 64 * 64 + 64;
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` declares no shapes (`nn::DeclaredShapes`), which a layer written `name: Type => [..]` and a summed parameter count need",
    note = "declare `{Self}` with `network!` or `#[module(input = [..], output = [..])]`, or implement `nn::DeclaredShapes` for it; for a parameter count alone, give the enclosing struct's as `#[module(parameters = ..)]`"
)]
pub trait DeclaredShapes {
    /// The declared input shape.
    const INPUT: &'static [DeclaredDim];
    /// The declared output shape.
    const OUTPUT: &'static [DeclaredDim];
    /// The number of trainable parameters (for the enclosing network's summary).
    const PARAMETERS: usize;
}

const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn same_dim(a: DeclaredDim, b: DeclaredDim) -> bool {
    match (a, b) {
        (DeclaredDim::Lit(x), DeclaredDim::Lit(y)) => x == y,
        (DeclaredDim::Sym(x), DeclaredDim::Sym(y)) => same_str(x, y),
        _ => false,
    }
}

/// Whether a value of shape `actual` fits `declared`: equal ranks, equal literal dims, and
/// every symbol of `declared` standing for one consistent dim of `actual`.
///
/// ```
/// use ferrograd_runtime::nn::{DeclaredDim::*, shapes_fit};
/// assert!(shapes_fit(&[Sym("N"), Lit(64)], &[Sym("B"), Lit(64)]));
/// assert!(!shapes_fit(&[Sym("N"), Lit(64)], &[Sym("B"), Lit(32)]));
/// assert!(!shapes_fit(&[Sym("N"), Sym("N")], &[Lit(2), Lit(3)]));
/// ```
pub const fn shapes_fit(declared: &[DeclaredDim], actual: &[DeclaredDim]) -> bool {
    if declared.len() != actual.len() {
        return false;
    }
    let mut i = 0;
    while i < declared.len() {
        match declared[i] {
            DeclaredDim::Lit(_) => {
                if !same_dim(declared[i], actual[i]) {
                    return false;
                }
            }
            DeclaredDim::Sym(_) => {
                let mut j = 0;
                while j < i {
                    if same_dim(declared[j], declared[i]) && !same_dim(actual[j], actual[i]) {
                        return false;
                    }
                    j += 1;
                }
            }
        }
        i += 1;
    }
    true
}

/// Whether `claimed` is the output a network declaring `input -> output` produces for an
/// input of shape `actual` (its symbols replaced by what they bound to).
///
/// ```
/// use ferrograd_runtime::nn::{DeclaredDim::*, output_is};
/// assert!(output_is(&[Sym("N"), Lit(64)], &[Sym("N"), Lit(10)], &[Sym("B"), Lit(64)], &[Sym("B"), Lit(10)]));
/// assert!(!output_is(&[Sym("N"), Lit(64)], &[Sym("N"), Lit(10)], &[Sym("B"), Lit(64)], &[Sym("B"), Lit(12)]));
/// ```
pub const fn output_is(
    input: &[DeclaredDim],
    output: &[DeclaredDim],
    actual: &[DeclaredDim],
    claimed: &[DeclaredDim],
) -> bool {
    if output.len() != claimed.len() {
        return false;
    }
    let mut i = 0;
    while i < output.len() {
        let expected = match output[i] {
            DeclaredDim::Lit(_) => output[i],
            DeclaredDim::Sym(_) => {
                // The symbol's binding in the input, or itself if the input lacks it.
                let mut bound = output[i];
                let mut j = 0;
                while j < input.len() {
                    if same_dim(input[j], output[i]) && j < actual.len() {
                        bound = actual[j];
                        break;
                    }
                    j += 1;
                }
                bound
            }
        };
        if !same_dim(expected, claimed[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// A message built at compile time, for `network!`'s constant-evaluation checks of
/// layers known only through [`DeclaredShapes`]: `prefix`, the declared shape `dims`
/// (as `[N, 64]`), then `suffix`, cut at 480 bytes.
///
/// ```
/// use ferrograd_runtime::nn::{DeclaredDim::*, ShapeMessage};
/// const M: ShapeMessage = ShapeMessage::new("takes ", &[Sym("N"), Lit(64)], ".");
/// assert_eq!(M.as_str(), "takes [N, 64].");
/// let long = "é".repeat(300);
/// assert!(ShapeMessage::new(&long, &[], "").as_str().len() <= 480);
/// ```
#[doc(hidden)]
pub struct ShapeMessage {
    buf: [u8; 480],
    len: usize,
}

impl ShapeMessage {
    /// Renders `prefix`, `dims`, `suffix`.
    pub const fn new(prefix: &str, dims: &[DeclaredDim], suffix: &str) -> ShapeMessage {
        let mut m = ShapeMessage {
            buf: [0; 480],
            len: 0,
        };
        m = m.push(prefix.as_bytes());
        m = m.push(b"[");
        let mut i = 0;
        while i < dims.len() {
            if i > 0 {
                m = m.push(b", ");
            }
            match dims[i] {
                DeclaredDim::Sym(s) => m = m.push(s.as_bytes()),
                DeclaredDim::Lit(mut v) => {
                    let mut digits = [0u8; 20];
                    let mut n = 0;
                    loop {
                        digits[19 - n] = b'0' + (v % 10) as u8;
                        n += 1;
                        v /= 10;
                        if v == 0 {
                            break;
                        }
                    }
                    m = m.push(digits.split_at(20 - n).1);
                }
            }
            i += 1;
        }
        m = m.push(b"]");
        m.push(suffix.as_bytes())
    }

    const fn push(mut self, bytes: &[u8]) -> ShapeMessage {
        let mut i = 0;
        while i < bytes.len() && self.len < self.buf.len() {
            self.buf[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        // Cut at a character boundary: drop the start of a character that did not fit.
        while i > 0 && i < bytes.len() && (bytes[i] & 0xC0) == 0x80 {
            self.len -= 1;
            i -= 1;
        }
        self
    }

    /// The message.
    pub const fn as_str(&self) -> &str {
        match core::str::from_utf8(self.buf.split_at(self.len).0) {
            Ok(s) => s,
            Err(_) => "(message cut)",
        }
    }
}

/// The run-time checks of a `network!`'s inputs, out of line so that each network's
/// `forward` holds calls instead of formatted panics (less code for every user crate to
/// compile). Each panics at the caller of `forward` with the network, the input and the
/// declared shape.
#[doc(hidden)]
pub mod input_checks {
    use crate::{DType, Device, Tensor};

    /// The dtype family an input declares.
    #[derive(Clone, Copy, Debug)]
    pub enum Kind {
        /// `f32` and the other floats.
        Float,
        /// `i64`, `u8`.
        Int,
        /// `bool`.
        Bool,
    }

    /// Rank and dtype of input `input` of `net` (declared `declared`, dtype named `dtype`).
    #[track_caller]
    pub fn rank_and_dtype(
        net: &str,
        input: &str,
        x: &Tensor,
        declared: &str,
        rank: usize,
        kind: Kind,
        dtype: &str,
    ) {
        if x.dim() != rank {
            panic!(
                "{net}.forward: input `{input}` must have rank {rank} (declared {declared}), got shape {:?}",
                x.shape()
            );
        }
        let d = x.dtype();
        let ok = match kind {
            Kind::Float => d.is_float(),
            Kind::Int => !d.is_float() && d != DType::Bool,
            Kind::Bool => d == DType::Bool,
        };
        if !ok {
            panic!("{net}.forward: input `{input}` must be {dtype} (declared), got {d:?}");
        }
    }

    /// Dim `i` of the input is `want`, the size written `text`; `elsewhere`: a size name
    /// bound by an earlier dim.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn dim(
        net: &str,
        input: &str,
        x: &Tensor,
        declared: &str,
        i: usize,
        want: usize,
        text: &str,
        elsewhere: bool,
    ) {
        let got = x.shape()[i];
        if got == want {
            return;
        }
        if elsewhere {
            panic!(
                "{net}.forward: input `{input}` has {got} at dim {i} but `{text}` is {want} elsewhere (declared {declared}), got shape {:?}",
                x.shape()
            );
        }
        panic!(
            "{net}.forward: input `{input}` must have size {text} = {want} at dim {i} (declared {declared}), got shape {:?}",
            x.shape()
        );
    }

    /// The input sits on the network's device (`None`: a network without tensors).
    #[track_caller]
    pub fn device(net: &str, input: &str, x: &Tensor, network: Option<Device>) {
        if let Some(d) = network
            && x.device() != d
        {
            panic!(
                "{net}.forward: input `{input}` is on {} but the network is on {d}; move one with `to_device`",
                x.device()
            );
        }
    }
}
