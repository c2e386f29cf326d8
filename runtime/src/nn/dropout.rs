//! Dropout layers: [`Dropout`], [`Dropout2d`] (whole channels) and [`AlphaDropout`] (keeps
//! SELU's mean and variance). Each is active in training mode only.

use super::Module;
use super::functional as F;
use crate::Tensor;

macro_rules! dropout_layer {
    ($name:ident, $functional:path, $doc:literal) => {
        #[doc = $doc]
        #[derive(Module, Debug, Clone)]
        #[module(crate = crate)]
        pub struct $name {
            /// Probability of dropping.
            #[module(skip)]
            pub p: f64,
            /// Whether dropout is active.
            #[module(training)]
            pub training: bool,
        }

        impl $name {
            /// Dropout with probability `p`, in training mode.
            ///
            /// ```
            /// use ferrograd_runtime::prelude::*;
            /// use ferrograd_runtime::nn::{AlphaDropout, Dropout, Dropout2d};
            /// assert_eq!((Dropout::new(0.3).p, Dropout2d::new(0.3).training, AlphaDropout::new(0.1).p), (0.3, true, 0.1));
            /// ```
            #[track_caller]
            pub fn new(p: f64) -> Self {
                assert!(
                    (0.0..=1.0).contains(&p),
                    "{}: dropout probability has to be between 0 and 1, but got {p}",
                    stringify!($name)
                );
                $name { p, training: true }
            }

            /// Applies dropout when training; the identity in eval mode.
            ///
            /// ```
            /// use ferrograd_runtime::prelude::*;
            /// use ferrograd_runtime::nn::{AlphaDropout, Dropout, Dropout2d};
            /// let y = Dropout::new(0.0).forward(&Tensor::ones(&[3], DType::F32, &Device::Cpu));
            /// assert_eq!(y.to_vec::<f32>(), vec![1.0; 3]);
            /// ```
            #[track_caller]
            pub fn forward(&self, x: &Tensor) -> Tensor {
                $functional(x, self.p, self.training)
            }
        }
    };
}

dropout_layer!(
    Dropout,
    F::dropout,
    "Dropout (`nn.Dropout`): zeroes elements with probability `p` and scales the rest by `1 / (1 - p)`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::{Dropout, Module};\nlet mut d = Dropout::new(0.5);\nd.eval();\nlet x = Tensor::ones(&[4], DType::F32, &Device::Cpu);\nassert_eq!(d.forward(&x).to_vec::<f32>(), vec![1.0; 4]);\n```"
);
dropout_layer!(
    Dropout2d,
    F::dropout2d,
    "Channel dropout (`nn.Dropout2d`): zeroes whole channels of `[N, C, H, W]` with probability `p`.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::Dropout2d;\nlet y = Dropout2d::new(0.5).forward(&Tensor::ones(&[4, 8, 3, 3], DType::F32, &Device::Cpu));\nlet per_channel = y.sum(&[2, 3], false).to_vec::<f32>();\nassert!(per_channel.iter().all(|&s| s == 0.0 || s == 18.0));\n```"
);
dropout_layer!(
    AlphaDropout,
    F::alpha_dropout,
    "Alpha dropout (`nn.AlphaDropout`): dropped elements take SELU's negative saturation value and an affine correction keeps the mean and variance of self-normalising activations.\n\n```\nuse ferrograd_runtime::prelude::*;\nuse ferrograd_runtime::nn::AlphaDropout;\nlet x = Tensor::randn(&[20000], DType::F64, &Device::Cpu);\nlet y = AlphaDropout::new(0.2).forward(&x);\nassert!(y.mean_all().item::<f64>().abs() < 0.05);\nassert!((y.std(&[0], true, false).item::<f64>() - 1.0).abs() < 0.05);\n```"
);
