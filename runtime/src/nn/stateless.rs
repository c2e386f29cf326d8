//! The `stateless!` macro: parameter-free modules (activations, reshapes, pooling)
//! declared as a struct, an empty `Module` and a `Forward` body.

/// The struct of a [`stateless!`] module: a unit struct, or one with public fields.
macro_rules! declare {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name;
    };
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty),* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            $($(#[$fm])* pub $field: $ty),*
        }
    };
}

/// Declares parameter-free modules: `Module` with nothing to visit, and `Forward` by the
/// given body.
macro_rules! stateless {
    ($(
        $(#[$m:meta])*
        $name:ident $({ $($(#[$fm:meta])* $field:ident: $ty:ty),* $(,)? })? => |$s:ident, $x:ident| $body:expr;
    )*) => {
        $(
            $crate::nn::stateless::declare! { $(#[$m])* $name $({ $($(#[$fm])* $field: $ty),* })? }

            impl $crate::nn::Module for $name {
                fn visit(&self, _: &str, _: &mut dyn FnMut(&str, &$crate::Tensor, $crate::nn::TensorKind)) {}
                fn visit_mut(&mut self, _: &str, _: &mut dyn FnMut(&str, &mut $crate::Tensor, $crate::nn::TensorKind)) {}
                fn set_training(&mut self, _: bool) {}
            }

            impl<'a> $crate::nn::Forward<&'a $crate::Tensor> for $name {
                type Output = $crate::Tensor;
                #[track_caller]
                fn forward(&self, $x: &'a $crate::Tensor) -> $crate::Tensor {
                    let $s = self;
                    $body
                }
            }
        )*
    };
}

pub(crate) use {declare, stateless};
