//! User-defined differentiable ops and activation checkpointing.

use super::{SavedTensor, enable_grad, no_grad, record, run_backward};
use crate::Tensor;

/// A differentiable op with a hand-written backward (`torch.autograd.Function`).
///
/// `forward` runs without graph recording on detached inputs and may save tensors for
/// backward; `backward` gets the output's gradient and returns one optional gradient per
/// input. Write `backward` with tensor ops and second derivatives work too.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::autograd::{apply, Function, FunctionCtx, SavedTensors};
///
/// /// y = x^3 with a hand-written derivative 3x^2.
/// struct Cube;
/// impl Function for Cube {
///     fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Tensor {
///         ctx.save_for_backward(&inputs[0]);
///         &(&inputs[0] * &inputs[0]) * &inputs[0]
///     }
///     fn backward(&self, saved: &SavedTensors, grad: &Tensor) -> Vec<Option<Tensor>> {
///         let x = saved.get(0);
///         vec![Some(grad * &(&(&x * &x) * 3.0))]
///     }
/// }
/// let x = Tensor::from_vec(vec![2.0f64], &[1]).requires_grad(true);
/// apply(Cube, &[&x]).sum_all().backward();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![12.0]);
/// ```
pub trait Function: Send + Sync + 'static {
    /// Computes the output from detached inputs.
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Tensor;
    /// Maps the output's gradient to one gradient (or `None`) per input.
    fn backward(&self, saved: &SavedTensors, grad_output: &Tensor) -> Vec<Option<Tensor>>;
}

/// Collects what `forward` saves for `backward`.
#[derive(Default)]
pub struct FunctionCtx {
    saved: Vec<SavedTensor>,
}

impl FunctionCtx {
    /// Saves a tensor; modifying it in place before backward is then an error.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// # use ferrograd_runtime::autograd::FunctionCtx;
    /// let mut ctx = FunctionCtx::default();
    /// ctx.save_for_backward(&Tensor::zeros(&[2], DType::F32, &Device::Cpu));
    /// ```
    pub fn save_for_backward(&mut self, tensor: &Tensor) {
        self.saved.push(SavedTensor::new(tensor));
    }
}

/// The tensors a [`Function`] saved, in order.
pub struct SavedTensors {
    saved: Vec<SavedTensor>,
    name: &'static str,
}

impl SavedTensors {
    /// The `i`-th saved tensor.
    ///
    /// # Panics
    /// If it was modified in place since it was saved, or `i` is out of range.
    #[track_caller]
    pub fn get(&self, i: usize) -> Tensor {
        self.saved[i].get(self.name)
    }

    /// How many tensors were saved.
    pub fn len(&self) -> usize {
        self.saved.len()
    }

    /// Whether nothing was saved.
    pub fn is_empty(&self) -> bool {
        self.saved.is_empty()
    }
}

/// Applies a [`Function`] to `inputs`, recording it in the graph.
#[track_caller]
pub fn apply<F: Function>(function: F, inputs: &[&Tensor]) -> Tensor {
    let detached: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
    let mut ctx = FunctionCtx::default();
    let out = no_grad(|| function.forward(&mut ctx, &detached));
    let name = std::any::type_name::<F>();
    let n_inputs = inputs.len();
    record(out, name, inputs, move || {
        let saved = SavedTensors {
            saved: ctx.saved,
            name,
        };
        move |_, g: &Tensor| {
            let grads = function.backward(&saved, g);
            assert_eq!(
                grads.len(),
                n_inputs,
                "{name}: backward returned {} gradients for {n_inputs} inputs",
                grads.len()
            );
            grads
        }
    })
}

/// Activation checkpointing (`torch.utils.checkpoint`): runs `f` without keeping its
/// intermediate activations, and recomputes them during backward. Parameters that `f`
/// uses get their gradients during that recomputation. The global random generator is
/// restored for the recomputation, so dropout masks match.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// let x = Tensor::from_vec(vec![0.5f64, -1.0], &[2]).requires_grad(true);
/// let y = checkpoint(|xs: &[Tensor]| xs[0].tanh().exp(), &[&x]);
/// y.sum_all().backward();
/// let expected = x.detach().tanh().exp() * (1.0 - x.detach().tanh().pow_scalar(2.0));
/// assert!(x.grad().unwrap().allclose(&expected, 1e-12, 1e-12));
/// ```
#[track_caller]
pub fn checkpoint<F>(f: F, inputs: &[&Tensor]) -> Tensor
where
    F: Fn(&[Tensor]) -> Tensor + Send + Sync + 'static,
{
    let detached: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
    let rng_state = crate::random::global_state();
    let out = no_grad(|| f(&detached));
    record(out, "checkpoint", inputs, move || {
        let saved: Vec<SavedTensor> = detached.iter().map(SavedTensor::new).collect();
        move |ctx, g: &Tensor| {
            let leaves: Vec<Tensor> = saved
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let t = s.get("checkpoint").detach();
                    if ctx.needs(i) {
                        t.requires_grad(true)
                    } else {
                        t
                    }
                })
                .collect();
            let current_rng = crate::random::global_state();
            crate::random::set_global_state(rng_state.clone());
            let recomputed = enable_grad(|| f(&leaves));
            crate::random::set_global_state(current_rng);
            if recomputed.requires_grad_flag() {
                run_backward(&[(recomputed, g.clone())], false, false, &[]);
            }
            leaves.iter().map(|l| l.grad()).collect()
        }
    })
}
