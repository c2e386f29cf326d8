//! Loss modules (`nn.MSELoss`, `nn.CrossEntropyLoss`, ...): the functional losses with
//! their options held, so a training script can build the criterion once. Class weights
//! and `pos_weight` are buffers, as in PyTorch (they appear in `state_dict` and move with
//! `to_device`). Each takes `(input, target)` (three tensors for the pairwise losses).

use super::Forward;
use super::Module;
use super::functional::{self as F, CrossEntropyArgs, KlReduction, Reduction};
use crate::Tensor;

/// A loss module's struct: `reduction` (mean by default) and its own options.
macro_rules! loss_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty = $default:expr),* }) => {
        $(#[$m])*
        #[derive(Module, Debug, Clone)]
        #[module(crate = crate)]
        pub struct $name {
            /// How the elementwise losses are reduced.
            #[module(skip)]
            pub reduction: Reduction,
            $($(#[$fm])* #[module(skip)] pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { reduction: Reduction::Mean, $($field: $default,)* }
            }
        }
    };
}

/// A loss of `(input, target)`.
macro_rules! pair_loss {
    ($(#[$m:meta])* $name:ident { $($fields:tt)* } => |$s:ident, $x:ident, $t:ident| $body:expr) => {
        loss_struct! { $(#[$m])* $name { $($fields)* } }

        impl<'a> Forward<(&'a Tensor, &'a Tensor)> for $name {
            type Output = Tensor;
            #[track_caller]
            fn forward(&self, ($x, $t): (&'a Tensor, &'a Tensor)) -> Tensor {
                let $s = self;
                $body
            }
        }
    };
}

pair_loss! {
    /// Mean squared error (`nn.MSELoss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, MSELoss};
    /// let (a, b) = (Tensor::ones(&[2], DType::F32, &Device::Cpu), Tensor::zeros(&[2], DType::F32, &Device::Cpu));
    /// assert_eq!(MSELoss::default().forward((&a, &b)).item::<f32>(), 1.0);
    /// ```
    MSELoss {} => |s, x, t| F::mse_loss(x, t, s.reduction)
}
pair_loss! {
    /// Mean absolute error (`nn.L1Loss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, L1Loss};
    /// let (a, b) = (Tensor::ones(&[2], DType::F32, &Device::Cpu), Tensor::zeros(&[2], DType::F32, &Device::Cpu));
    /// assert_eq!(L1Loss::default().forward((&a, &b)).item::<f32>(), 1.0);
    /// ```
    L1Loss {} => |s, x, t| F::l1_loss(x, t, s.reduction)
}
pair_loss! {
    /// Smooth L1 (`nn.SmoothL1Loss`, `beta = 1`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, SmoothL1Loss};
    /// let (a, b) = (Tensor::full(&[1], 0.5, DType::F32, &Device::Cpu), Tensor::zeros(&[1], DType::F32, &Device::Cpu));
    /// assert_eq!(SmoothL1Loss::default().forward((&a, &b)).item::<f32>(), 0.125);
    /// ```
    SmoothL1Loss {
        /// Where the loss turns from quadratic to linear.
        beta: f64 = 1.0
    } => |s, x, t| F::smooth_l1_loss(x, t, s.reduction, s.beta)
}
pair_loss! {
    /// Huber loss (`nn.HuberLoss`, `delta = 1`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, HuberLoss};
    /// let (a, b) = (Tensor::full(&[1], 3.0, DType::F32, &Device::Cpu), Tensor::zeros(&[1], DType::F32, &Device::Cpu));
    /// assert_eq!(HuberLoss::default().forward((&a, &b)).item::<f32>(), 2.5);
    /// ```
    HuberLoss {
        /// Where the loss turns from quadratic to linear.
        delta: f64 = 1.0
    } => |s, x, t| F::huber_loss(x, t, s.reduction, s.delta)
}
pair_loss! {
    /// Binary cross-entropy of probabilities (`nn.BCELoss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{BCELoss, Forward};
    /// let (p, t) = (Tensor::full(&[1], 0.5, DType::F64, &Device::Cpu), Tensor::ones(&[1], DType::F64, &Device::Cpu));
    /// assert!((BCELoss::default().forward((&p, &t)).item::<f64>() - 2f64.ln()).abs() < 1e-12);
    /// ```
    BCELoss {
        /// Elementwise weights, broadcast to the input.
        weight: Option<Tensor> = None
    } => |s, x, t| F::binary_cross_entropy(x, t, s.weight.as_ref(), s.reduction)
}
pair_loss! {
    /// KL divergence of log-probabilities from target probabilities (`nn.KLDivLoss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, KLDivLoss};
    /// use ferrograd_runtime::nn::functional::KlReduction;
    /// let loss = KLDivLoss { kl_reduction: KlReduction::BatchMean, ..Default::default() };
    /// let logq = Tensor::full(&[1, 2], 0.5f64.ln(), DType::F64, &Device::Cpu);
    /// let p = Tensor::full(&[1, 2], 0.5, DType::F64, &Device::Cpu);
    /// assert!(loss.forward((&logq, &p)).item::<f64>().abs() < 1e-12);
    /// ```
    KLDivLoss {
        /// How the divergence is reduced (takes the place of `reduction`).
        kl_reduction: KlReduction = KlReduction::Mean,
        /// The target holds log-probabilities.
        log_target: bool = false
    } => |s, x, t| F::kl_div(x, t, s.kl_reduction, s.log_target)
}
pair_loss! {
    /// `x` for `y = 1`, `max(0, margin - x)` for `y = -1` (`nn.HingeEmbeddingLoss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, HingeEmbeddingLoss};
    /// let (x, y) = (Tensor::zeros(&[1], DType::F32, &Device::Cpu), Tensor::full(&[1], -1.0, DType::F32, &Device::Cpu));
    /// assert_eq!(HingeEmbeddingLoss::default().forward((&x, &y)).item::<f32>(), 1.0);
    /// ```
    HingeEmbeddingLoss {
        /// The margin for `y = -1`.
        margin: f64 = 1.0
    } => |s, x, t| F::hinge_embedding_loss(x, t, s.margin, s.reduction)
}

/// A loss over class targets with class weights (a buffer, as PyTorch's `weight`) and
/// the other [`CrossEntropyArgs`].
macro_rules! class_loss {
    ($(#[$m:meta])* $name:ident => $functional:path) => {
        $(#[$m])*
        #[derive(Module, Debug, Clone, Default)]
        #[module(crate = crate)]
        pub struct $name {
            /// Per-class weights `[C]`.
            #[buffer]
            pub weight: Option<Tensor>,
            /// `ignore_index` (-100 by default), reduction and label smoothing.
            #[module(skip)]
            pub args: CrossEntropyArgs,
        }

        impl<'a> Forward<(&'a Tensor, &'a Tensor)> for $name {
            type Output = Tensor;
            #[track_caller]
            fn forward(&self, (x, t): (&'a Tensor, &'a Tensor)) -> Tensor {
                let args = CrossEntropyArgs {
                    weight: self.weight.clone(),
                    ..self.args.clone()
                };
                $functional(x, t, &args)
            }
        }
    };
}

class_loss! {
    /// Cross-entropy of logits against class indices or probabilities
    /// (`nn.CrossEntropyLoss`), with class weights, `ignore_index` and label smoothing.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{CrossEntropyLoss, Forward};
    /// let logits = Tensor::zeros(&[1, 2], DType::F64, &Device::Cpu);
    /// let target = Tensor::from_vec(vec![1i64], &[1]);
    /// assert!((CrossEntropyLoss::default().forward((&logits, &target)).item::<f64>() - 2f64.ln()).abs() < 1e-12);
    /// ```
    CrossEntropyLoss => F::cross_entropy_with
}

class_loss! {
    /// Negative log-likelihood of log-probabilities (`nn.NLLLoss`), with class weights and
    /// `ignore_index`.
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, NLLLoss};
    /// let logp = Tensor::from_vec(vec![-0.5f32, -1.5], &[1, 2]);
    /// let target = Tensor::from_vec(vec![1i64], &[1]);
    /// assert_eq!(NLLLoss::default().forward((&logp, &target)).item::<f32>(), 1.5);
    /// ```
    NLLLoss => F::nll_loss_with
}

/// Binary cross-entropy on logits (`nn.BCEWithLogitsLoss`), with elementwise `weight`
/// and per-class `pos_weight` (both buffers).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::nn::{BCEWithLogitsLoss, Forward};
/// let (x, t) = (Tensor::zeros(&[1], DType::F64, &Device::Cpu), Tensor::ones(&[1], DType::F64, &Device::Cpu));
/// assert!((BCEWithLogitsLoss::default().forward((&x, &t)).item::<f64>() - 2f64.ln()).abs() < 1e-12);
/// ```
#[derive(Module, Debug, Clone, Default)]
#[module(crate = crate)]
pub struct BCEWithLogitsLoss {
    /// Elementwise weights, broadcast to the input.
    #[buffer]
    pub weight: Option<Tensor>,
    /// Weight of positive examples per class (the last dim).
    #[buffer]
    pub pos_weight: Option<Tensor>,
    /// How the elementwise losses are reduced.
    #[module(skip)]
    pub reduction: Reduction,
}

impl<'a> Forward<(&'a Tensor, &'a Tensor)> for BCEWithLogitsLoss {
    type Output = Tensor;
    #[track_caller]
    fn forward(&self, (x, t): (&'a Tensor, &'a Tensor)) -> Tensor {
        F::binary_cross_entropy_with_logits_weighted(
            x,
            t,
            self.weight.as_ref(),
            self.pos_weight.as_ref(),
            self.reduction,
        )
    }
}

/// A loss of three tensors.
macro_rules! triple_loss {
    ($(#[$m:meta])* $name:ident { $($fields:tt)* } => |$s:ident, $a:ident, $b:ident, $c:ident| $body:expr) => {
        loss_struct! { $(#[$m])* $name { $($fields)* } }

        impl<'a> Forward<(&'a Tensor, &'a Tensor, &'a Tensor)> for $name {
            type Output = Tensor;
            #[track_caller]
            fn forward(&self, ($a, $b, $c): (&'a Tensor, &'a Tensor, &'a Tensor)) -> Tensor {
                let $s = self;
                $body
            }
        }
    };
}

triple_loss! {
    /// `max(0, -y (x1 - x2) + margin)` on `(x1, x2, y)` (`nn.MarginRankingLoss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, MarginRankingLoss};
    /// let (a, b) = (Tensor::ones(&[1], DType::F32, &Device::Cpu), Tensor::zeros(&[1], DType::F32, &Device::Cpu));
    /// let y = Tensor::full(&[1], -1.0, DType::F32, &Device::Cpu);
    /// assert_eq!(MarginRankingLoss::default().forward((&a, &b, &y)).item::<f32>(), 1.0);
    /// ```
    MarginRankingLoss {
        /// The margin.
        margin: f64 = 0.0
    } => |s, a, b, y| F::margin_ranking_loss(a, b, y, s.margin, s.reduction)
}
triple_loss! {
    /// Cosine embedding loss on `(x1, x2, y)` (`nn.CosineEmbeddingLoss`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{CosineEmbeddingLoss, Forward};
    /// let a = Tensor::ones(&[1, 3], DType::F64, &Device::Cpu);
    /// let y = Tensor::ones(&[1], DType::F64, &Device::Cpu);
    /// assert!(CosineEmbeddingLoss::default().forward((&a, &a, &y)).item::<f64>().abs() < 1e-9);
    /// ```
    CosineEmbeddingLoss {
        /// The margin for `y = -1`.
        margin: f64 = 0.0
    } => |s, a, b, y| F::cosine_embedding_loss(a, b, y, s.margin, s.reduction)
}
triple_loss! {
    /// Triplet margin loss on `(anchor, positive, negative)` (`nn.TripletMarginLoss`:
    /// margin 1, p 2, eps 1e-6, no swap).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::nn::{Forward, TripletMarginLoss};
    /// let a = Tensor::zeros(&[1, 2], DType::F64, &Device::Cpu);
    /// let l = TripletMarginLoss::default().forward((&a, &a, &a));
    /// assert!((l.item::<f64>() - 1.0).abs() < 1e-9);
    /// ```
    TripletMarginLoss {
        /// The margin.
        margin: f64 = 1.0,
        /// The norm's p.
        p: f64 = 2.0,
        /// Added to the differences.
        eps: f64 = 1e-6,
        /// Use the closer of the anchor's and the positive's distance to the negative.
        swap: bool = false
    } => |s, a, p, n| F::triplet_margin_loss(a, p, n, s.margin, s.p, s.eps, s.swap, s.reduction)
}
