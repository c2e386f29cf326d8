//! Finite-difference gradient checking, like `torch.autograd.gradcheck`.

use crate::{DType, Tensor};

/// A disagreement between the analytical and the numerical Jacobian.
#[derive(Debug, Clone, PartialEq)]
pub struct GradcheckError {
    /// Which input (among all inputs) the entry belongs to.
    pub input: usize,
    /// Flat index into that input.
    pub input_index: usize,
    /// Flat index into the output.
    pub output_index: usize,
    /// d output / d input from backward.
    pub analytical: f64,
    /// The same by central differences.
    pub numerical: f64,
}

impl std::fmt::Display for GradcheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Jacobian mismatch for input {} (element {}) and output element {}: analytical {} vs numerical {}",
            self.input, self.input_index, self.output_index, self.analytical, self.numerical
        )
    }
}

impl std::error::Error for GradcheckError {}

/// Checks the gradients of `f` at `inputs` against central differences, with PyTorch's
/// defaults (`eps = 1e-6`, `atol = 1e-5`, `rtol = 1e-3`). Inputs that require grad are
/// differentiated and must be f64.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::autograd::gradcheck;
/// let x = Tensor::randn(&[3, 4], DType::F64, &Device::Cpu).requires_grad(true);
/// gradcheck(|xs| xs[0].tanh() * &xs[0], &[x]).unwrap();
/// ```
pub fn gradcheck(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor]) -> Result<(), GradcheckError> {
    gradcheck_with(f, inputs, 1e-6, 1e-5, 1e-3)
}

/// [`gradcheck`] with explicit step and tolerances: an entry passes when
/// `|analytical - numerical| <= atol + rtol * |numerical|`.
pub fn gradcheck_with(
    f: impl Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
    eps: f64,
    atol: f64,
    rtol: f64,
) -> Result<(), GradcheckError> {
    for (i, t) in inputs.iter().enumerate() {
        assert!(
            !t.requires_grad_flag() || t.dtype() == DType::F64,
            "gradcheck: input {i} requires grad but is {:?}; gradcheck needs float64 inputs",
            t.dtype()
        );
    }
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if t.requires_grad_flag() {
                t.detach().requires_grad(true)
            } else {
                t.detach()
            }
        })
        .collect();
    let differentiated: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].requires_grad_flag())
        .collect();
    let out = f(&leaves);
    let out_n = out.numel();
    let out_shape = out.shape().to_vec();

    // Analytical Jacobian, one backward per output element.
    let mut analytical: Vec<Vec<f64>> = differentiated
        .iter()
        .map(|&i| vec![0.0; inputs[i].numel() * out_n])
        .collect();
    if out.requires_grad_flag() {
        let refs: Vec<&Tensor> = differentiated.iter().map(|&i| &leaves[i]).collect();
        for j in 0..out_n {
            let mut onehot = vec![0.0f64; out_n];
            onehot[j] = 1.0;
            let g = Tensor::from_vec(onehot, &out_shape)
                .to_dtype(out.dtype())
                .to_device(&out.device())
                .expect("the output's own device is usable");
            let grads = super::grad_with(&[&out], &refs, Some(&[g]), true, false);
            for (k, grad) in grads.into_iter().enumerate() {
                if let Some(grad) = grad {
                    for (e, v) in grad
                        .to_dtype(DType::F64)
                        .to_vec::<f64>()
                        .into_iter()
                        .enumerate()
                    {
                        analytical[k][e * out_n + j] = v;
                    }
                }
            }
        }
    }

    // Numerical Jacobian by central differences.
    let eval = |which: usize, e: usize, delta: f64| -> Vec<f64> {
        let mut args: Vec<Tensor> = leaves.iter().map(|t| t.detach()).collect();
        let mut data = args[which].to_dtype(DType::F64).to_vec::<f64>();
        data[e] += delta;
        args[which] = Tensor::from_vec(data, inputs[which].shape())
            .to_dtype(inputs[which].dtype())
            .to_device(&inputs[which].device())
            .expect("the input's own device is usable");
        crate::autograd::no_grad(|| f(&args))
            .to_dtype(DType::F64)
            .to_vec::<f64>()
    };
    for (k, &i) in differentiated.iter().enumerate() {
        for e in 0..inputs[i].numel() {
            let plus = eval(i, e, eps);
            let minus = eval(i, e, -eps);
            for j in 0..out_n {
                let numerical = (plus[j] - minus[j]) / (2.0 * eps);
                let a = analytical[k][e * out_n + j];
                if (a - numerical).abs() > atol + rtol * numerical.abs()
                    || a.is_nan() != numerical.is_nan()
                {
                    return Err(GradcheckError {
                        input: i,
                        input_index: e,
                        output_index: j,
                        analytical: a,
                        numerical,
                    });
                }
            }
        }
    }
    Ok(())
}
