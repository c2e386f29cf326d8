//! The adaptive optimizers beyond Adam: RMSprop, Adagrad, Adadelta, Adamax, NAdam and
//! RAdam, each one fused pass over a parameter, its gradient and its state per step, with
//! `torch.optim`'s single-tensor formulas. States are stored in the parameter's dtype and
//! read back from there, as the unfused PyTorch ops do; the math runs in the accumulator.

use super::{CHUNK, run_chunked};
use crate::{Element, FloatElement};
use num_traits::{Float, One, Zero};

/// Up to three state buffers of one parameter (the optimizer's order; `None` where the
/// options keep no such buffer).
pub type StateSlices<'a, T> = [Option<&'a mut [T]>; 3];

/// Runs `f` over matching chunks of `param`, `grad` and the state buffers, in parallel
/// above the threshold: the shared driver of the fused updates.
///
/// # Panics
/// If a gradient or state buffer's length differs from the parameter's.
#[track_caller]
pub fn for_each_chunk<'a, T: Send + Sync>(
    op: &str,
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'a, T>,
    f: impl Fn(&mut [T], &[T], StateSlices<'_, T>) + Sync,
) {
    let n = param.len();
    assert!(
        grad.len() == n && states.iter().flatten().all(|s| s.len() == n),
        "{op}: parameter, gradient and state lengths differ ({n} vs {} and {:?})",
        grad.len(),
        states.iter().flatten().map(|s| s.len()).collect::<Vec<_>>()
    );
    let chunks = n.div_ceil(CHUNK);
    fn split<T>(s: Option<&mut [T]>, chunks: usize) -> Vec<Option<&mut [T]>> {
        match s {
            Some(s) => s.chunks_mut(CHUNK).map(Some).collect(),
            None => (0..chunks).map(|_| None).collect(),
        }
    }
    let [a, b, c] = states;
    let pieces: Vec<_> = param
        .chunks_mut(CHUNK)
        .zip(grad.chunks(CHUNK))
        .zip(
            split(a, chunks)
                .into_iter()
                .zip(split(b, chunks))
                .zip(split(c, chunks)),
        )
        .map(|((p, g), ((a, b), c))| (p, g, [a, b, c]))
        .collect();
    run_chunked(n, pieces, |(p, g, s)| f(p, g, s));
}

/// The gradient as the update sees it: negated to maximise, plus the L2 term.
#[inline(always)]
fn effective_grad<A: Float>(g: A, p: A, maximize: bool, l2: A) -> A {
    let g = if maximize { A::zero() - g } else { g };
    if l2 != A::zero() { g + l2 * p } else { g }
}

/// `x` rounded through the parameter's dtype (a state buffer's store and reload).
#[inline(always)]
fn stored<T: FloatElement>(x: T::Acc) -> T::Acc {
    T::from_acc(x).to_acc()
}

/// The parameter's decay factor `1 - lr * wd` (decoupled weight decay, else 1) and the
/// L2 coefficient added to the gradient (coupled, else 0).
fn weight_decay<T: FloatElement>(decoupled: bool, lr: f64, wd: f64) -> (T::Acc, T::Acc) {
    if decoupled {
        (T::Acc::one() - acc::<T>(lr) * acc::<T>(wd), acc::<T>(0.0))
    } else {
        (T::Acc::one(), acc::<T>(wd))
    }
}

fn acc<T: FloatElement>(v: f64) -> T::Acc {
    <T::Acc as Element>::from_f64(v)
}

hyper_params! {
    /// The hyper-parameters of one RMSprop update (`torch.optim.RMSprop`).
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::RmspropStep { lr: 0.01, alpha: 0.99,
    ///     eps: 1e-8, weight_decay: 0.0, momentum: 0.0, centered: false, maximize: false };
    /// assert!(ferrograd_kernels::fused::optim::RmspropStep::CUDA_DECLARATION.contains("double alpha;"));
    /// # let _ = h;
    /// ```
    pub struct RmspropStep {
        /// Learning rate.
        pub lr: f64,
        /// Smoothing constant of the squared-gradient average.
        pub alpha: f64,
        /// Added to the denominator.
        pub eps: f64,
        /// L2 penalty added to the gradient.
        pub weight_decay: f64,
        /// Momentum factor (0: no buffer).
        pub momentum: f64,
        /// Normalise by the centred second moment (keeps a gradient average).
        pub centered: bool,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

/// One RMSprop step in place. `states`: square_avg, then the momentum buffer (momentum
/// > 0) and the gradient average (centered).
///
/// ```
/// use ferrograd_kernels::fused::optim::{rmsprop_step, RmspropStep};
/// let h = RmspropStep { lr: 0.01, alpha: 0.99, eps: 0.0, weight_decay: 0.0, momentum: 0.0,
///     centered: false, maximize: false };
/// let (mut p, g, mut sq) = (vec![1.0f64], vec![2.0], vec![0.0]);
/// rmsprop_step(&mut p, &g, [Some(&mut sq), None, None], &h);
/// assert!((sq[0] - 0.04).abs() < 1e-15 && (p[0] - (1.0 - 0.01 * 2.0 / 0.2)).abs() < 1e-15);
/// ```
pub fn rmsprop_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'_, T>,
    h: &RmspropStep,
) {
    assert!(states[0].is_some(), "rmsprop_step: square_avg is required");
    let (lr, alpha, one_alpha, eps, wd, mom) = (
        acc::<T>(h.lr),
        acc::<T>(h.alpha),
        acc::<T>(1.0 - h.alpha),
        acc::<T>(h.eps),
        acc::<T>(h.weight_decay),
        acc::<T>(h.momentum),
    );
    for_each_chunk(
        "rmsprop_step",
        param,
        grad,
        states,
        |p, g, [sq, mut buf, mut gavg]| {
            let sq = sq.expect("square_avg");
            for i in 0..p.len() {
                let pi = p[i].to_acc();
                let gi = effective_grad(g[i].to_acc(), pi, h.maximize, wd);
                let s = stored::<T>(sq[i].to_acc() * alpha + one_alpha * gi * gi);
                sq[i] = T::from_acc(s);
                let mut avg = match gavg.as_deref_mut() {
                    Some(ga) => {
                        let a = ga[i].to_acc();
                        let a = stored::<T>(a + one_alpha * (gi - a));
                        ga[i] = T::from_acc(a);
                        // The centred variance, floored at 0: in half precision the stored
                        // square average can underflow below the squared mean (PyTorch then
                        // takes the root of a negative number and the parameter becomes NaN).
                        Float::sqrt(Float::max(s - a * a, T::Acc::zero()))
                    }
                    None => Float::sqrt(s),
                };
                avg = avg + eps;
                p[i] = T::from_acc(match buf.as_deref_mut() {
                    Some(b) => {
                        let bi = stored::<T>(b[i].to_acc() * mom + gi / avg);
                        b[i] = T::from_acc(bi);
                        pi - lr * bi
                    }
                    None => pi - lr * (gi / avg),
                });
            }
        },
    );
}

hyper_params! {
    /// The hyper-parameters of one Adagrad update (`torch.optim.Adagrad`).
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::AdagradStep { lr: 0.1, lr_decay: 0.0,
    ///     weight_decay: 0.0, eps: 1e-10, clr: 0.1, maximize: false };
    /// assert_eq!(h.clr, 0.1);
    /// ```
    pub struct AdagradStep {
        /// Learning rate.
        pub lr: f64,
        /// Learning-rate decay per step.
        pub lr_decay: f64,
        /// L2 penalty added to the gradient.
        pub weight_decay: f64,
        /// Added to the denominator.
        pub eps: f64,
        /// This step's rate, `lr / (1 + (step - 1) * lr_decay)` (per parameter on CUDA).
        pub clr: f64,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

/// One Adagrad step in place. `states`: the running sum of squared gradients.
///
/// ```
/// use ferrograd_kernels::fused::optim::{adagrad_step, AdagradStep};
/// let h = AdagradStep { lr: 0.5, lr_decay: 0.0, weight_decay: 0.0, eps: 0.0, clr: 0.5, maximize: false };
/// let (mut p, g, mut sum) = (vec![1.0f64], vec![2.0], vec![0.0]);
/// adagrad_step(&mut p, &g, [Some(&mut sum), None, None], &h);
/// assert_eq!((p[0], sum[0]), (0.5, 4.0));
/// ```
pub fn adagrad_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'_, T>,
    h: &AdagradStep,
) {
    assert!(states[0].is_some(), "adagrad_step: sum is required");
    let (clr, eps, wd) = (acc::<T>(h.clr), acc::<T>(h.eps), acc::<T>(h.weight_decay));
    for_each_chunk("adagrad_step", param, grad, states, |p, g, [sum, ..]| {
        let sum = sum.expect("sum");
        for i in 0..p.len() {
            let pi = p[i].to_acc();
            let gi = effective_grad(g[i].to_acc(), pi, h.maximize, wd);
            let s = stored::<T>(sum[i].to_acc() + gi * gi);
            sum[i] = T::from_acc(s);
            p[i] = T::from_acc(pi - clr * (gi / (Float::sqrt(s) + eps)));
        }
    });
}

hyper_params! {
    /// The hyper-parameters of one Adadelta update (`torch.optim.Adadelta`).
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::AdadeltaStep { lr: 1.0, rho: 0.9, eps: 1e-6,
    ///     weight_decay: 0.0, maximize: false };
    /// assert_eq!(h.rho, 0.9);
    /// ```
    pub struct AdadeltaStep {
        /// Scale of the delta.
        pub lr: f64,
        /// Decay of the running averages.
        pub rho: f64,
        /// Added inside the square roots.
        pub eps: f64,
        /// L2 penalty added to the gradient.
        pub weight_decay: f64,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

/// One Adadelta step in place. `states`: square_avg, acc_delta.
///
/// ```
/// use ferrograd_kernels::fused::optim::{adadelta_step, AdadeltaStep};
/// let h = AdadeltaStep { lr: 1.0, rho: 0.0, eps: 0.0, weight_decay: 0.0, maximize: false };
/// let (mut p, g, mut sq, mut ad) = (vec![1.0f64], vec![2.0], vec![0.0], vec![1.0]);
/// adadelta_step(&mut p, &g, [Some(&mut sq), Some(&mut ad), None], &h);
/// assert_eq!((p[0], sq[0], ad[0]), (0.0, 4.0, 1.0)); // delta = sqrt(1) / sqrt(4) * 2
/// ```
pub fn adadelta_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'_, T>,
    h: &AdadeltaStep,
) {
    assert!(
        states[0].is_some() && states[1].is_some(),
        "adadelta_step: square_avg and acc_delta are required"
    );
    let (lr, rho, one_rho, eps, wd) = (
        acc::<T>(h.lr),
        acc::<T>(h.rho),
        acc::<T>(1.0 - h.rho),
        acc::<T>(h.eps),
        acc::<T>(h.weight_decay),
    );
    for_each_chunk("adadelta_step", param, grad, states, |p, g, [sq, ad, _]| {
        let (sq, ad) = (sq.expect("square_avg"), ad.expect("acc_delta"));
        for i in 0..p.len() {
            let pi = p[i].to_acc();
            let gi = effective_grad(g[i].to_acc(), pi, h.maximize, wd);
            let s = stored::<T>(sq[i].to_acc() * rho + one_rho * gi * gi);
            sq[i] = T::from_acc(s);
            let std = Float::sqrt(s + eps);
            let delta = stored::<T>(Float::sqrt(ad[i].to_acc() + eps) / std * gi);
            ad[i] = T::from_acc(ad[i].to_acc() * rho + one_rho * delta * delta);
            p[i] = T::from_acc(pi - lr * delta);
        }
    });
}

hyper_params! {
    /// The hyper-parameters of one Adamax update (`torch.optim.Adamax`).
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::AdamaxStep { lr: 2e-3, beta1: 0.9, beta2: 0.999,
    ///     eps: 1e-8, weight_decay: 0.0, clr: 2e-2, maximize: false };
    /// assert_eq!(h.clr, 2e-2);
    /// ```
    pub struct AdamaxStep {
        /// Learning rate.
        pub lr: f64,
        /// Decay of the first moment average.
        pub beta1: f64,
        /// Decay of the infinity norm.
        pub beta2: f64,
        /// Added to the gradient's magnitude.
        pub eps: f64,
        /// L2 penalty added to the gradient.
        pub weight_decay: f64,
        /// This step's rate, `lr / (1 - beta1^step)` (per parameter on CUDA).
        pub clr: f64,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

/// One Adamax step in place. `states`: exp_avg, exp_inf.
///
/// ```
/// use ferrograd_kernels::fused::optim::{adamax_step, AdamaxStep};
/// let h = AdamaxStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 0.0, weight_decay: 0.0,
///     clr: 0.1 / (1.0 - 0.9), maximize: false };
/// let (mut p, g, mut m, mut u) = (vec![1.0f64], vec![-2.0], vec![0.0], vec![0.0]);
/// adamax_step(&mut p, &g, [Some(&mut m), Some(&mut u), None], &h);
/// assert!((p[0] - 1.1).abs() < 1e-12 && u[0] == 2.0); // first step: lr in the descent direction
/// ```
pub fn adamax_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'_, T>,
    h: &AdamaxStep,
) {
    assert!(
        states[0].is_some() && states[1].is_some(),
        "adamax_step: exp_avg and exp_inf are required"
    );
    let (clr, one_b1, b2, eps, wd) = (
        acc::<T>(h.clr),
        acc::<T>(1.0 - h.beta1),
        acc::<T>(h.beta2),
        acc::<T>(h.eps),
        acc::<T>(h.weight_decay),
    );
    for_each_chunk("adamax_step", param, grad, states, |p, g, [m, u, _]| {
        let (m, u) = (m.expect("exp_avg"), u.expect("exp_inf"));
        for i in 0..p.len() {
            let pi = p[i].to_acc();
            let gi = effective_grad(g[i].to_acc(), pi, h.maximize, wd);
            let mi = m[i].to_acc();
            let mi = stored::<T>(mi + one_b1 * (gi - mi));
            m[i] = T::from_acc(mi);
            let ui = stored::<T>(Float::max(
                stored::<T>(u[i].to_acc() * b2),
                Float::abs(gi) + eps,
            ));
            u[i] = T::from_acc(ui);
            p[i] = T::from_acc(pi - clr * (mi / ui));
        }
    });
}

hyper_params! {
    /// The hyper-parameters of one NAdam update (`torch.optim.NAdam`), with this step's
    /// coefficients (per parameter on CUDA, where each parameter keeps its own step).
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::NadamStep { lr: 2e-3, beta1: 0.9, beta2: 0.999,
    ///     eps: 1e-8, weight_decay: 0.0, bias_correction2: 1e-3, grad_coef: -1e-3,
    ///     avg_coef: -1e-3, decoupled: false, maximize: false };
    /// assert!(!h.decoupled);
    /// ```
    pub struct NadamStep {
        /// Learning rate.
        pub lr: f64,
        /// Decay of the first moment average.
        pub beta1: f64,
        /// Decay of the second moment average.
        pub beta2: f64,
        /// Added to the denominator.
        pub eps: f64,
        /// Weight decay (L2 term, or decoupled).
        pub weight_decay: f64,
        /// `1 - beta2^step`.
        pub bias_correction2: f64,
        /// `-lr * (1 - mu) / (1 - mu_product)`: the gradient's coefficient.
        pub grad_coef: f64,
        /// `-lr * mu_next / (1 - mu_product * mu_next)`: the first moment's coefficient.
        pub avg_coef: f64,
        /// Decoupled weight decay (NAdamW).
        pub decoupled: bool,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

/// One NAdam step in place. `states`: exp_avg, exp_avg_sq.
///
/// ```
/// use ferrograd_kernels::fused::optim::{nadam_step, NadamStep};
/// let h = NadamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 0.0, weight_decay: 0.0,
///     bias_correction2: 1.0 - 0.999, grad_coef: -0.05, avg_coef: -0.05, decoupled: false, maximize: false };
/// let (mut p, g, mut m, mut v) = (vec![0.0f64], vec![1.0], vec![0.0], vec![0.0]);
/// nadam_step(&mut p, &g, [Some(&mut m), Some(&mut v), None], &h);
/// assert!((p[0] - (-0.05 - 0.05 * 0.1)).abs() < 1e-12); // denom = |g| = 1
/// ```
pub fn nadam_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'_, T>,
    h: &NadamStep,
) {
    assert!(
        states[0].is_some() && states[1].is_some(),
        "nadam_step: exp_avg and exp_avg_sq are required"
    );
    let (decay, l2) = weight_decay::<T>(h.decoupled, h.lr, h.weight_decay);
    let (one_b1, b2, one_b2, bc2, eps, cg, cm) = (
        acc::<T>(1.0 - h.beta1),
        acc::<T>(h.beta2),
        acc::<T>(1.0 - h.beta2),
        acc::<T>(h.bias_correction2),
        acc::<T>(h.eps),
        acc::<T>(h.grad_coef),
        acc::<T>(h.avg_coef),
    );
    for_each_chunk("nadam_step", param, grad, states, |p, g, [m, v, _]| {
        let (m, v) = (m.expect("exp_avg"), v.expect("exp_avg_sq"));
        for i in 0..p.len() {
            let pi = stored::<T>(p[i].to_acc() * decay);
            let gi = effective_grad(g[i].to_acc(), pi, h.maximize, l2);
            let mi = m[i].to_acc();
            let mi = stored::<T>(mi + one_b1 * (gi - mi));
            m[i] = T::from_acc(mi);
            let vi = stored::<T>(v[i].to_acc() * b2 + one_b2 * gi * gi);
            v[i] = T::from_acc(vi);
            let denom = Float::sqrt(vi / bc2) + eps;
            let pi = stored::<T>(pi + cg * (gi / denom));
            p[i] = T::from_acc(pi + cm * (mi / denom));
        }
    });
}

hyper_params! {
    /// The hyper-parameters of one RAdam update (`torch.optim.RAdam`), with this step's
    /// bias corrections and rectification (per parameter on CUDA).
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::RadamStep { lr: 1e-3, beta1: 0.9, beta2: 0.999,
    ///     eps: 1e-8, weight_decay: 0.0, bias_correction1: 0.1, bias_correction2_sqrt: 0.03,
    ///     rect: 0.0, rectified: false, decoupled: false, maximize: false };
    /// assert!(!h.rectified);
    /// ```
    pub struct RadamStep {
        /// Learning rate.
        pub lr: f64,
        /// Decay of the first moment average.
        pub beta1: f64,
        /// Decay of the second moment average.
        pub beta2: f64,
        /// Added to the denominator.
        pub eps: f64,
        /// Weight decay (L2 term, or decoupled).
        pub weight_decay: f64,
        /// `1 - beta1^step`.
        pub bias_correction1: f64,
        /// `sqrt(1 - beta2^step)`.
        pub bias_correction2_sqrt: f64,
        /// The variance rectification term (used when `rectified`).
        pub rect: f64,
        /// `rho_t > 5`: the adaptive, rectified update; otherwise plain momentum.
        pub rectified: bool,
        /// Decoupled weight decay (RAdamW).
        pub decoupled: bool,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

impl RadamStep {
    /// `(bias_correction1, sqrt(bias_correction2), rect, rectified)` at step `step`
    /// (counted from 1), as `torch.optim.RAdam` computes them.
    ///
    /// ```
    /// let (bc1, _, _, rectified) = ferrograd_kernels::fused::optim::RadamStep::corrections(0.9, 0.999, 1);
    /// assert!((bc1 - 0.1).abs() < 1e-15 && !rectified); // rho_1 = 1: not rectified yet
    /// ```
    pub fn corrections(beta1: f64, beta2: f64, step: u64) -> (f64, f64, f64, bool) {
        let s = step as f64;
        let bc1 = 1.0 - beta1.powf(s);
        let bc2 = 1.0 - beta2.powf(s);
        let rho_inf = 2.0 / (1.0 - beta2) - 1.0;
        let rho_t = rho_inf - 2.0 * s * beta2.powf(s) / bc2;
        let rectified = rho_t > 5.0;
        let rect = if rectified {
            ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                .sqrt()
        } else {
            0.0
        };
        (bc1, bc2.sqrt(), rect, rectified)
    }
}

/// One RAdam step in place. `states`: exp_avg, exp_avg_sq.
///
/// ```
/// use ferrograd_kernels::fused::optim::{radam_step, RadamStep};
/// let (bc1, bc2, rect, rectified) = RadamStep::corrections(0.9, 0.999, 1);
/// let h = RadamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
///     bias_correction1: bc1, bias_correction2_sqrt: bc2, rect, rectified, decoupled: false, maximize: false };
/// let (mut p, g, mut m, mut v) = (vec![0.0f64], vec![3.0], vec![0.0], vec![0.0]);
/// radam_step(&mut p, &g, [Some(&mut m), Some(&mut v), None], &h);
/// assert!((p[0] + 0.3).abs() < 1e-12); // unrectified: p -= lr * m / bc1 = lr * g
/// ```
pub fn radam_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    states: StateSlices<'_, T>,
    h: &RadamStep,
) {
    assert!(
        states[0].is_some() && states[1].is_some(),
        "radam_step: exp_avg and exp_avg_sq are required"
    );
    let (decay, l2) = weight_decay::<T>(h.decoupled, h.lr, h.weight_decay);
    let (lr, one_b1, b2, one_b2, bc1, bc2, eps, rect) = (
        acc::<T>(h.lr),
        acc::<T>(1.0 - h.beta1),
        acc::<T>(h.beta2),
        acc::<T>(1.0 - h.beta2),
        acc::<T>(h.bias_correction1),
        acc::<T>(h.bias_correction2_sqrt),
        acc::<T>(h.eps),
        acc::<T>(h.rect),
    );
    for_each_chunk("radam_step", param, grad, states, |p, g, [m, v, _]| {
        let (m, v) = (m.expect("exp_avg"), v.expect("exp_avg_sq"));
        for i in 0..p.len() {
            let pi = stored::<T>(p[i].to_acc() * decay);
            let gi = effective_grad(g[i].to_acc(), pi, h.maximize, l2);
            let mi = m[i].to_acc();
            let mi = stored::<T>(mi + one_b1 * (gi - mi));
            m[i] = T::from_acc(mi);
            let vi = stored::<T>(v[i].to_acc() * b2 + one_b2 * gi * gi);
            v[i] = T::from_acc(vi);
            let corrected = mi / bc1;
            let update = if h.rectified {
                corrected * lr * (bc2 / (Float::sqrt(vi) + eps)) * rect
            } else {
                corrected * lr
            };
            p[i] = T::from_acc(pi - update);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parallel_path_matches_the_serial_one() {
        let n = crate::cpu::PARALLEL_THRESHOLD * 2 + 3;
        let h = RmspropStep {
            lr: 0.01,
            alpha: 0.9,
            eps: 1e-8,
            weight_decay: 0.1,
            momentum: 0.5,
            centered: true,
            maximize: false,
        };
        let p0: Vec<f64> = (0..n).map(|i| (i as f64 * 0.3).sin()).collect();
        let g: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).cos()).collect();
        let run = |p: &mut [f64], g: &[f64]| {
            let (mut sq, mut b, mut ga) =
                (vec![0.1; p.len()], vec![0.0; p.len()], vec![0.0; p.len()]);
            rmsprop_step(p, g, [Some(&mut sq), Some(&mut b), Some(&mut ga)], &h);
        };
        let mut whole = p0.clone();
        run(&mut whole, &g);
        let mut pieces = p0.clone();
        for (p, g) in pieces.chunks_mut(1000).zip(g.chunks(1000)) {
            run(p, g);
        }
        assert_eq!(whole, pieces);
    }

    #[test]
    #[should_panic(expected = "adagrad_step: parameter, gradient and state lengths differ")]
    fn mismatched_lengths_are_refused() {
        let h = AdagradStep {
            lr: 0.1,
            lr_decay: 0.0,
            weight_decay: 0.0,
            eps: 1e-10,
            clr: 0.1,
            maximize: false,
        };
        adagrad_step(
            &mut [0.0f32; 2],
            &[0.0; 2],
            [Some(&mut [0.0; 3]), None, None],
            &h,
        );
    }
}
