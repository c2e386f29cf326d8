//! RMSprop, Adagrad, Adadelta, Adamax, NAdam and RAdam (`torch.optim`), with PyTorch's
//! defaults, over the fused kernels of `ferrograd_kernels::fused::optim`.
//!
//! `rms.rs` holds the running-square family (RMSprop, Adagrad, Adadelta), `adam_family.rs`
//! the Adam variants (Adamax, NAdam, RAdam); both declare their options with the macros here.

/// Declares an options struct with PyTorch's defaults and one setter per field.
macro_rules! config {
    ($(#[$m:meta])* $name:ident { $( $(#[$fm:meta])* $field:ident: $ty:ty = $default:expr, )* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }

        impl $name {
            setters! {
                $( $(#[$fm])* $field: $ty; )*
            }
        }
    };
}

/// The `set_hyper` of plain fields: numbers and flags under their own names, `betas`
/// as a pair.
macro_rules! hyper_fields {
    ($c:ident, $key:ident, $v:ident; floats: $($f:ident),*; bools: $($b:ident),*; $(betas: $betas:ident)?) => {
        match ($key, $v) {
            $( (stringify!($f), _) => set_f64(&mut $c.$f, $v), )*
            $( (stringify!($b), _) => set_bool(&mut $c.$b, $v), )*
            $( ("betas", Hyper::Pair(a, b)) => { $c.$betas = (*a, *b); true } )?
            _ => false,
        }
    };
}

mod adam_family;
mod rms;

pub use adam_family::{Adamax, AdamaxConfig, NAdam, NAdamConfig, RAdam, RAdamConfig};
pub use rms::{Adadelta, AdadeltaConfig, Adagrad, AdagradConfig, RMSprop, RMSpropConfig};
