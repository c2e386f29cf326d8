//! Fused optimizer updates: one pass over a parameter, its gradient and its state per
//! step, computed in the element type's accumulator (f32 for the half types), with
//! PyTorch's formulas (`torch.optim`'s SGD, Adam/AdamW, RMSprop, Adagrad, Adadelta,
//! Adamax, NAdam and RAdam, single-tensor variant).

use crate::FloatElement;
use crate::cpu::simd::{SimdKernel, with_simd};
use crate::cpu::{PARALLEL_THRESHOLD, run_tasks};
use crate::cuda::KernelModule;
use num_traits::{Float, One, Zero};
use std::sync::Mutex;

/// The CUDA kernels of multi-tensor optimizer steps (`optim.cu`, after the declarations of
/// [`AdamStep`] and [`SgdStep`]), compiled by NVRTC.
pub const CUDA_MODULE: KernelModule = KernelModule::with_prelude(
    "optim",
    &[
        AdamStep::CUDA_DECLARATION,
        SgdStep::CUDA_DECLARATION,
        RmspropStep::CUDA_DECLARATION,
        AdagradStep::CUDA_DECLARATION,
        AdadeltaStep::CUDA_DECLARATION,
        AdamaxStep::CUDA_DECLARATION,
        NadamStep::CUDA_DECLARATION,
        RadamStep::CUDA_DECLARATION,
    ],
    include_str!("optim.cu"),
);

/// The CUDA C++ type of a hyper-parameter field.
macro_rules! c_type {
    (f64) => {
        "double"
    };
    (bool) => {
        "bool"
    };
}

/// Declares an optimizer's hyper-parameters once: the `#[repr(C)]` struct the CPU step
/// reads and the CUDA kernels take by value, and its CUDA C++ declaration
/// (`CUDA_DECLARATION`, prepended to `optim.cu`), so the two cannot drift apart.
macro_rules! hyper_params {
    ($(#[$m:meta])* pub struct $name:ident { $( $(#[$fm:meta])* pub $field:ident: $ty:tt, )* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }

        impl $name {
            /// This struct as CUDA C++, field for field.
            pub const CUDA_DECLARATION: &'static str = concat!(
                "struct ", stringify!($name), " {",
                $( " ", c_type!($ty), " ", stringify!($field), ";", )*
                " };\n"
            );
        }

        // SAFETY: `repr(C)` plain data (f64 and bool fields, as `double` and `bool` in the
        // CUDA declaration generated from the same field list).
        #[cfg(feature = "cuda")]
        unsafe impl cudarc::driver::DeviceRepr for $name {}
    };
}

mod adaptive;
pub use adaptive::{
    AdadeltaStep, AdagradStep, AdamaxStep, NadamStep, RadamStep, RmspropStep, StateSlices,
    adadelta_step, adagrad_step, adamax_step, for_each_chunk, nadam_step, radam_step, rmsprop_step,
};

hyper_params! {
    /// The hyper-parameters of one Adam/AdamW update of one parameter.
    ///
    /// ```
    /// use ferrograd_kernels::fused::optim::AdamStep;
    /// let h = AdamStep::new(1e-3, (0.9, 0.999), 1e-8, 0.0, 1);
    /// assert!((h.step_size - 1e-2).abs() < 1e-12); // lr / (1 - 0.9)
    /// assert!(AdamStep::CUDA_DECLARATION.starts_with("struct AdamStep { double lr;"));
    /// ```
    pub struct AdamStep {
        /// Learning rate.
        pub lr: f64,
        /// Decay of the first moment average.
        pub beta1: f64,
        /// Decay of the second moment average.
        pub beta2: f64,
        /// Added to the denominator.
        pub eps: f64,
        /// L2 penalty (Adam: added to the gradient; AdamW: decays the parameter).
        pub weight_decay: f64,
        /// `lr / (1 - beta1^step)`.
        pub step_size: f64,
        /// `sqrt(1 - beta2^step)`.
        pub bias_correction2_sqrt: f64,
        /// AdamW's decoupled weight decay instead of Adam's L2 term.
        pub decoupled: bool,
        /// Keep the running maximum of the second moment (AMSGrad).
        pub amsgrad: bool,
        /// Ascend instead of descend.
        pub maximize: bool,
    }
}

impl AdamStep {
    /// The update of step `step` (counted from 1) with the bias corrections filled in;
    /// Adam's coupled weight decay, no AMSGrad, minimising.
    pub fn new(lr: f64, betas: (f64, f64), eps: f64, weight_decay: f64, step: u64) -> Self {
        AdamStep {
            lr,
            beta1: betas.0,
            beta2: betas.1,
            eps,
            weight_decay,
            decoupled: false,
            amsgrad: false,
            maximize: false,
            step_size: 0.0,
            bias_correction2_sqrt: 0.0,
        }
        .at_step(step)
    }

    /// The same update at step `step` (counted from 1): the bias corrections recomputed.
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::AdamStep::new(1e-3, (0.9, 0.999), 1e-8, 0.0, 1).at_step(2);
    /// assert!((h.step_size - 1e-3 / (1.0 - 0.81)).abs() < 1e-15);
    /// ```
    pub fn at_step(self, step: u64) -> Self {
        let step = step as f64;
        AdamStep {
            step_size: self.lr / (1.0 - self.beta1.powf(step)),
            bias_correction2_sqrt: (1.0 - self.beta2.powf(step)).sqrt(),
            ..self
        }
    }
}

hyper_params! {
    /// The hyper-parameters of one SGD update.
    ///
    /// ```
    /// let h = ferrograd_kernels::fused::optim::SgdStep { lr: 0.1, momentum: 0.9, dampening: 0.0,
    ///     weight_decay: 0.0, nesterov: false, maximize: false, first: true };
    /// assert_eq!(h.momentum, 0.9);
    /// ```
    pub struct SgdStep {
        /// Learning rate.
        pub lr: f64,
        /// Momentum factor (0: plain SGD, no buffer).
        pub momentum: f64,
        /// Dampening of the momentum's gradient term.
        pub dampening: f64,
        /// L2 penalty added to the gradient.
        pub weight_decay: f64,
        /// Nesterov momentum.
        pub nesterov: bool,
        /// Ascend instead of descend.
        pub maximize: bool,
        /// This parameter's first update: the momentum buffer starts as the gradient (the
        /// multi-tensor CUDA kernel reads this per parameter from its slot instead).
        pub first: bool,
    }
}

/// Elements per parallel task.
const CHUNK: usize = 1 << 14;

/// Splits the update of `n` elements into tasks of [`CHUNK`] elements, one pass each;
/// serial below the parallel threshold. `pieces[i]` holds the i-th chunk of every slice.
fn run_chunked<P: Send>(n: usize, pieces: Vec<P>, f: impl Fn(P) + Sync) {
    if n < PARALLEL_THRESHOLD {
        pieces.into_iter().for_each(f);
        return;
    }
    let slots: Vec<Mutex<Option<P>>> = pieces.into_iter().map(|p| Mutex::new(Some(p))).collect();
    run_tasks(slots.len(), |i| {
        let piece = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(piece) = piece {
            f(piece);
        }
    });
}

/// One Adam/AdamW step in place: `param`, `exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq`
/// with AMSGrad) are updated from `grad`; all slices have the same length. With `eps > 0`
/// a moment that falls below the smallest normal value is stored as zero (arithmetic on
/// subnormals is ~10x slower on x86): PyTorch keeps the subnormal, which no parameter can
/// tell at f32 precision.
///
/// ```
/// use ferrograd_kernels::fused::optim::{adam_step, AdamStep};
/// let (mut p, g, mut m, mut v) = (vec![1.0f64], vec![0.5], vec![0.0], vec![0.0]);
/// adam_step(&mut p, &g, &mut m, &mut v, None, &AdamStep::new(0.1, (0.9, 0.999), 1e-8, 0.0, 1));
/// assert!((p[0] - 0.9).abs() < 1e-6); // the first step moves by lr in the gradient's sign
/// ```
pub fn adam_step<T: FloatElement>(
    param: &mut [T],
    grad: &[T],
    exp_avg: &mut [T],
    exp_avg_sq: &mut [T],
    max_exp_avg_sq: Option<&mut [T]>,
    h: &AdamStep,
) {
    let n = param.len();
    assert!(
        grad.len() == n && exp_avg.len() == n && exp_avg_sq.len() == n,
        "adam_step: parameter, gradient and state lengths differ"
    );
    let acc = |v: f64| <T::Acc as crate::Element>::from_f64(v);
    let l2 = !h.decoupled && h.weight_decay != 0.0;
    let k = AdamConsts {
        // Negating by a multiply and decaying by 1 are exact, so these need no branch.
        sign: acc(if h.maximize { -1.0 } else { 1.0 }),
        wd: acc(h.weight_decay),
        decay: if h.decoupled && h.weight_decay != 0.0 {
            T::Acc::one() - acc(h.lr) * acc(h.weight_decay)
        } else {
            T::Acc::one()
        },
        one_b1: acc(1.0 - h.beta1),
        b2: acc(h.beta2),
        one_b2: acc(1.0 - h.beta2),
        step_size: acc(h.step_size),
        bc2: acc(h.bias_correction2_sqrt),
        eps: acc(h.eps),
        tiny: if h.eps > 0.0 {
            <T::Acc as Float>::min_positive_value()
        } else {
            T::Acc::zero()
        },
    };
    let update = |p: &mut [T], g: &[T], m: &mut [T], v: &mut [T], vmax: Option<&mut [T]>| {
        if l2 {
            with_simd(AdamChunk::<_, true> {
                p,
                g,
                m,
                v,
                vmax,
                k: &k,
            })
        } else {
            with_simd(AdamChunk::<_, false> {
                p,
                g,
                m,
                v,
                vmax,
                k: &k,
            })
        }
    };
    let chunks = n.div_ceil(CHUNK);
    let mut vmax_chunks: Vec<Option<&mut [T]>> = match max_exp_avg_sq {
        Some(s) => {
            assert!(s.len() == n, "adam_step: max_exp_avg_sq length differs");
            s.chunks_mut(CHUNK).map(Some).collect()
        }
        None => (0..chunks).map(|_| None).collect(),
    };
    let pieces: Vec<_> = param
        .chunks_mut(CHUNK)
        .zip(grad.chunks(CHUNK))
        .zip(exp_avg.chunks_mut(CHUNK))
        .zip(exp_avg_sq.chunks_mut(CHUNK))
        .zip(vmax_chunks.drain(..))
        .map(|((((p, g), m), v), x)| (p, g, m, v, x))
        .collect();
    run_chunked(n, pieces, |(p, g, m, v, x)| update(p, g, m, v, x));
}

/// One Adam update's constants in the accumulator type.
struct AdamConsts<A> {
    /// -1 to maximise, else 1.
    sign: A,
    /// Adam's L2 coefficient (used when the chunk is instantiated with `L2`).
    wd: A,
    /// AdamW's decay factor `1 - lr * weight_decay` (1 for Adam).
    decay: A,
    one_b1: A,
    b2: A,
    one_b2: A,
    step_size: A,
    bc2: A,
    eps: A,
    /// Moments below this magnitude are stored as zero ([`flush`]): the smallest normal
    /// value when `eps > 0`, else 0 (no flushing).
    tiny: A,
}

/// `x`, or zero when its magnitude is below `tiny`: an optimizer's state that has decayed
/// into the subnormal range (a moment of a gradient that stays 0, such as a weight
/// from an always-black MNIST pixel, shrinks by `beta` every step) is stored as zero. Every
/// multiply that reads or writes a subnormal takes a microcode assist on x86 CPUs, about
/// ten times the cost of the whole update (measured: an AdamW step over 100k such
/// moments, 73 us normal vs 787 us subnormal); zero stays zero for free. The parameter
/// cannot tell: such a moment contributes below `1e-38 / eps` to its update.
#[inline(always)]
fn flush<A: crate::dtype::Real>(x: A, tiny: A) -> A {
    if Float::abs(x) < tiny { A::zero() } else { x }
}

/// One chunk of an Adam update, with Adam's L2 term (`L2`) or without, as a
/// [`SimdKernel`] (compiled for AVX-512 / AVX2 too).
struct AdamChunk<'a, T: FloatElement, const L2: bool> {
    p: &'a mut [T],
    g: &'a [T],
    m: &'a mut [T],
    v: &'a mut [T],
    vmax: Option<&'a mut [T]>,
    k: &'a AdamConsts<T::Acc>,
}

impl<T: FloatElement, const L2: bool> SimdKernel for AdamChunk<'_, T, L2> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        adam_chunk::<T, L2>(self.p, self.g, self.m, self.v, self.vmax, self.k)
    }
}

/// The Adam update of one chunk: a branch-free loop over zipped slices (the options are
/// constants or the const `L2`; AMSGrad picks one of two loops), so it vectorises.
#[inline(always)]
fn adam_chunk<T: FloatElement, const L2: bool>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    vmax: Option<&mut [T]>,
    k: &AdamConsts<T::Acc>,
) {
    // The decayed parameter and the new moments, stored in the parameter's dtype and read
    // back from there as the unfused ops do; `lerp(m, g, 1 - beta1)` as PyTorch's lerp_
    // computes it for weights below 0.5.
    let moments = |pi: &T, gi: T, mi: &mut T, vi: &mut T| {
        let pa = pi.to_acc();
        let mut ga = gi.to_acc() * k.sign;
        if L2 {
            ga = ga + k.wd * pa;
        }
        let ma = mi.to_acc();
        *mi = T::from_acc(flush(ma + k.one_b1 * (ga - ma), k.tiny));
        *vi = T::from_acc(flush(vi.to_acc() * k.b2 + k.one_b2 * ga * ga, k.tiny));
        (pa * k.decay, mi.to_acc(), vi.to_acc())
    };
    let step = |pa: T::Acc, ma: T::Acc, second: T::Acc| {
        T::from_acc(pa - k.step_size * (ma / (Float::sqrt(second) / k.bc2 + k.eps)))
    };
    let slots = p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut());
    match vmax {
        None => {
            for (((pi, &gi), mi), vi) in slots {
                let (pa, ma, va) = moments(pi, gi, mi, vi);
                *pi = step(pa, ma, va);
            }
        }
        Some(vmax) => {
            for ((((pi, &gi), mi), vi), xi) in slots.zip(vmax.iter_mut()) {
                let (pa, ma, va) = moments(pi, gi, mi, vi);
                let top = Float::max(xi.to_acc(), va);
                *xi = T::from_acc(top);
                *pi = step(pa, ma, top);
            }
        }
    }
}

/// One SGD step in place: `param` (and the momentum buffer `buf`, when momentum is not 0)
/// from `grad`. A momentum that decays below the smallest normal value is stored as zero
/// (arithmetic on subnormals is ~10x slower on x86).
///
/// ```
/// use ferrograd_kernels::fused::optim::{sgd_step, SgdStep};
/// let (mut p, g) = (vec![1.0f32, 2.0], vec![1.0, -1.0]);
/// let h = SgdStep { lr: 0.5, momentum: 0.0, dampening: 0.0, weight_decay: 0.0,
///     nesterov: false, maximize: false, first: true };
/// sgd_step(&mut p, &g, None, &h);
/// assert_eq!(p, vec![0.5, 2.5]);
/// ```
pub fn sgd_step<T: FloatElement>(param: &mut [T], grad: &[T], buf: Option<&mut [T]>, h: &SgdStep) {
    let n = param.len();
    assert!(
        grad.len() == n,
        "sgd_step: parameter and gradient lengths differ"
    );
    let acc = |v: f64| <T::Acc as crate::Element>::from_f64(v);
    let k = SgdConsts {
        lr: acc(h.lr),
        mom: acc(h.momentum),
        damp: acc(1.0 - h.dampening),
        wd: acc(h.weight_decay),
        h,
        tiny: <T::Acc as Float>::min_positive_value(),
    };
    let update = |p: &mut [T], g: &[T], b: Option<&mut [T]>| with_simd(SgdChunk { p, g, b, k: &k });
    let chunks = n.div_ceil(CHUNK);
    let buf_chunks: Vec<Option<&mut [T]>> = match buf {
        Some(b) => {
            assert!(b.len() == n, "sgd_step: momentum buffer length differs");
            b.chunks_mut(CHUNK).map(Some).collect()
        }
        None => (0..chunks).map(|_| None).collect(),
    };
    let pieces: Vec<_> = param
        .chunks_mut(CHUNK)
        .zip(grad.chunks(CHUNK))
        .zip(buf_chunks)
        .map(|((p, g), b)| (p, g, b))
        .collect();
    run_chunked(n, pieces, |(p, g, b)| update(p, g, b));
}

/// One SGD update's constants in the accumulator type.
struct SgdConsts<'a, A> {
    lr: A,
    mom: A,
    /// `1 - dampening`.
    damp: A,
    wd: A,
    h: &'a SgdStep,
    /// Momentum below this magnitude is stored as zero ([`flush`]).
    tiny: A,
}

/// One chunk of an SGD update, as a [`SimdKernel`].
struct SgdChunk<'a, T: FloatElement> {
    p: &'a mut [T],
    g: &'a [T],
    b: Option<&'a mut [T]>,
    k: &'a SgdConsts<'a, T::Acc>,
}

impl<T: FloatElement> SimdKernel for SgdChunk<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let SgdChunk { p, g, mut b, k } = self;
        let h = k.h;
        for i in 0..p.len() {
            let pi = p[i].to_acc();
            let mut gi = g[i].to_acc();
            if h.maximize {
                gi = T::Acc::zero() - gi;
            }
            if h.weight_decay != 0.0 {
                gi = gi + k.wd * pi;
            }
            if let Some(b) = b.as_deref_mut() {
                let bi = if h.first {
                    gi
                } else {
                    flush(b[i].to_acc() * k.mom + k.damp * gi, k.tiny)
                };
                // The buffer is stored in the parameter's dtype and read back from there.
                b[i] = T::from_acc(bi);
                let bi = b[i].to_acc();
                gi = if h.nesterov { gi + k.mom * bi } else { bi };
            }
            p[i] = T::from_acc(pi - k.lr * gi);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unfused PyTorch sequence in f64, for one element.
    fn reference(p: f64, g: f64, m: f64, v: f64, h: &AdamStep) -> (f64, f64, f64) {
        let g = if h.weight_decay != 0.0 && !h.decoupled {
            g + h.weight_decay * p
        } else {
            g
        };
        let p = if h.decoupled {
            p * (1.0 - h.lr * h.weight_decay)
        } else {
            p
        };
        let m = m + (1.0 - h.beta1) * (g - m);
        let v = v * h.beta2 + (1.0 - h.beta2) * g * g;
        let denom = v.sqrt() / h.bias_correction2_sqrt + h.eps;
        (p - h.step_size * m / denom, m, v)
    }

    #[test]
    fn adam_matches_the_unfused_formula_serial_and_parallel() {
        for n in [5, PARALLEL_THRESHOLD * 3 + 7] {
            for decoupled in [false, true] {
                let mut h = AdamStep::new(0.01, (0.9, 0.99), 1e-8, 0.1, 3);
                h.decoupled = decoupled;
                let p0: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
                let g: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
                let m0: Vec<f64> = (0..n).map(|i| (i % 7) as f64 * 0.01).collect();
                let v0: Vec<f64> = (0..n).map(|i| (i % 5) as f64 * 0.02).collect();
                let (mut p, mut m, mut v) = (p0.clone(), m0.clone(), v0.clone());
                adam_step(&mut p, &g, &mut m, &mut v, None, &h);
                for i in [0, n / 2, n - 1] {
                    let (pe, me, ve) = reference(p0[i], g[i], m0[i], v0[i], &h);
                    assert!((p[i] - pe).abs() < 1e-14, "{i}: {} vs {pe}", p[i]);
                    assert!((m[i] - me).abs() < 1e-15 && (v[i] - ve).abs() < 1e-15);
                }
            }
        }
    }

    #[test]
    fn amsgrad_keeps_the_running_maximum() {
        let mut h = AdamStep::new(0.1, (0.9, 0.999), 1e-8, 0.0, 2);
        h.amsgrad = true;
        let (mut p, g, mut m, mut v, mut vmax) = (
            vec![0.0f32; 2],
            vec![0.0f32; 2],
            vec![0.0; 2],
            vec![1.0, 0.0],
            vec![0.5, 2.0],
        );
        adam_step(&mut p, &g, &mut m, &mut v, Some(&mut vmax), &h);
        assert_eq!(vmax, vec![0.999, 2.0]);
        assert_eq!(v, vec![0.999, 0.0]);
    }

    #[test]
    fn sgd_momentum_nesterov_and_maximize() {
        let h = SgdStep {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.5,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
            first: true,
        };
        let (mut p, g, mut b) = (vec![1.0f64], vec![2.0], vec![0.0]);
        sgd_step(&mut p, &g, Some(&mut b), &h);
        assert_eq!((p[0], b[0]), (0.8, 2.0)); // first step: buf = g, no dampening
        sgd_step(&mut p, &g, Some(&mut b), &SgdStep { first: false, ..h });
        assert!((b[0] - 2.8).abs() < 1e-15 && (p[0] - 0.52).abs() < 1e-15);
        let nesterov = SgdStep {
            nesterov: true,
            dampening: 0.0,
            maximize: true,
            ..h
        };
        let (mut p, mut b) = (vec![1.0f64], vec![0.0]);
        sgd_step(&mut p, &g, Some(&mut b), &nesterov);
        // g = -2, buf = -2, step = g + 0.9 * buf = -3.8
        assert!((p[0] - 1.38).abs() < 1e-15 && b[0] == -2.0);
    }

    /// A moment that decays below the normal range is stored as zero (f32: where the
    /// gradient stays 0), a normal one is untouched, and the parameter moves exactly as
    /// without the flush; with `eps == 0` nothing is flushed (a zero second moment would
    /// divide by zero).
    #[test]
    fn subnormal_moments_are_stored_as_zero() {
        let tiny = f32::MIN_POSITIVE;
        // Element 0 decays into the subnormal range this step, element 1 stays normal.
        let (m0, v0) = (vec![tiny * 1.05, 1e-3], vec![tiny * 1.0005, 1e-3]);
        let g = vec![0.0f32, 0.0];
        let h = AdamStep::new(1e-3, (0.9, 0.999), 1e-8, 0.0, 5);
        let (mut p, mut m, mut v) = (vec![0.5f32, 0.5], m0.clone(), v0.clone());
        adam_step(&mut p, &g, &mut m, &mut v, None, &h);
        assert_eq!((m[0], v[0]), (0.0, 0.0));
        assert!(m[1] > 0.0 && v[1] > 0.0);
        assert_eq!(p[0], 0.5, "a subnormal moment does not move the parameter");
        // No flushing without eps.
        let h0 = AdamStep::new(1e-3, (0.9, 0.999), 0.0, 0.0, 5);
        let (mut p, mut m, mut v) = (vec![0.5f32, 0.5], m0.clone(), v0);
        adam_step(&mut p, &g, &mut m, &mut v, None, &h0);
        assert!(m[0] > 0.0 && m[0] < tiny && v[0] > 0.0 && v[0] < tiny);
        // SGD's momentum buffer.
        let s = SgdStep {
            lr: 0.1,
            momentum: 0.5,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
            first: false,
        };
        let (mut p, mut b) = (vec![0.5f32, 0.5], m0);
        sgd_step(&mut p, &g, Some(&mut b), &s);
        assert_eq!(b[0], 0.0);
        assert_eq!(b[1], 5e-4);
        assert_eq!(p[0], 0.5);
    }
}
