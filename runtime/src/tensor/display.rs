//! `Display` and `Debug` in PyTorch's style, summarised for large tensors.

use super::Tensor;
use crate::{DType, Device};
use std::fmt;

/// Above this many elements only the edges of each dim are printed (PyTorch's threshold).
const SUMMARY_THRESHOLD: usize = 1000;
/// Items kept at each end of a summarised dim.
const EDGE_ITEMS: usize = 3;

fn format_values(values: &[f64], dtype: DType) -> Vec<String> {
    if !dtype.is_float() {
        return values
            .iter()
            .map(|v| {
                if dtype == DType::Bool {
                    if *v != 0.0 {
                        "True".into()
                    } else {
                        "False".into()
                    }
                } else {
                    format!("{}", *v as i64)
                }
            })
            .collect();
    }
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let integral = finite.iter().all(|v| v.fract() == 0.0);
    let max_abs = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let min_abs = finite
        .iter()
        .filter(|v| **v != 0.0)
        .fold(f64::INFINITY, |m, v| m.min(v.abs()));
    let scientific = max_abs >= 1e8
        || (min_abs < 1e-4 && min_abs.is_finite())
        || (max_abs / min_abs > 1000.0 && !integral);
    values
        .iter()
        .map(|&v| {
            if v.is_nan() {
                "nan".into()
            } else if v.is_infinite() {
                if v > 0.0 { "inf".into() } else { "-inf".into() }
            } else if integral && !scientific {
                format!("{v:.0}.")
            } else if scientific {
                format!("{v:.4e}")
            } else {
                format!("{v:.4}")
            }
        })
        .collect()
}

/// The indices printed along a dim of size `n`.
fn shown(n: usize, summarise: bool) -> Vec<Option<usize>> {
    if summarise && n > 2 * EDGE_ITEMS {
        let mut v: Vec<Option<usize>> = (0..EDGE_ITEMS).map(Some).collect();
        v.push(None);
        v.extend((n - EDGE_ITEMS..n).map(Some));
        v
    } else {
        (0..n).map(Some).collect()
    }
}

/// What stays fixed while the nested brackets are written.
struct Printer<'a> {
    cells: &'a [String],
    indent: usize,
    summarise: bool,
    width: usize,
}

impl Printer<'_> {
    fn write(
        &self,
        out: &mut String,
        shape: &[usize],
        strides: &[usize],
        base: usize,
        depth: usize,
    ) {
        if shape.is_empty() {
            out.push_str(&format!("{:>width$}", self.cells[base], width = self.width));
            return;
        }
        out.push('[');
        for (k, item) in shown(shape[0], self.summarise).iter().enumerate() {
            if k > 0 {
                if shape.len() == 1 {
                    out.push_str(", ");
                } else {
                    out.push(',');
                    out.push_str(&"\n".repeat(shape.len() - 1));
                    out.push_str(&" ".repeat(self.indent + depth + 1));
                }
            }
            match item {
                Some(i) => self.write(
                    out,
                    &shape[1..],
                    &strides[1..],
                    base + i * strides[0],
                    depth + 1,
                ),
                None => out.push_str("..."),
            }
        }
        out.push(']');
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.to_dtype(DType::F64).to_vec::<f64>();
        let summarise = values.len() > SUMMARY_THRESHOLD;
        let cells = format_values(&values, self.dtype());
        // Width from the cells actually printed.
        let layout = ferrograd_kernels::Layout::contiguous(self.shape());
        let width = cells.iter().map(|c| c.len()).max().unwrap_or(0);
        let mut body = String::new();
        let printer = Printer {
            cells: &cells,
            indent: "tensor(".len(),
            summarise,
            width,
        };
        printer.write(&mut body, self.shape(), layout.strides(), 0, 0);
        write!(f, "tensor({body}")?;
        if self.device() != Device::Cpu {
            write!(f, ", device='{}'", self.device())?;
        }
        if !matches!(self.dtype(), DType::F32 | DType::I64 | DType::Bool) {
            write!(f, ", dtype={}", self.dtype())?;
        }
        if let Some(name) = self.grad_fn() {
            write!(f, ", grad_fn=<{name}>")?;
        } else if self.requires_grad_flag() {
            write!(f, ", requires_grad=True")?;
        }
        write!(f, ")")
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={:?}, device={}) ",
            self.shape(),
            self.dtype(),
            self.device()
        )?;
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;

    #[test]
    fn prints_like_pytorch() {
        let t = Tensor::from_vec(vec![1.0f32, 2.5, -3.0, 4.0], &[2, 2]);
        assert_eq!(
            t.to_string(),
            "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]])"
        );
        let i = Tensor::from_vec(vec![1i64, 2, 3], &[3]);
        assert_eq!(i.to_string(), "tensor([1, 2, 3])");
        let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad(true);
        assert_eq!(
            w.to_string(),
            "tensor([1., 2.], dtype=torch.float64, requires_grad=True)"
        );
    }

    #[test]
    fn summarises_large_tensors() {
        let t = Tensor::arange(0.0, 2000.0, 1.0, DType::I64, &Device::Cpu);
        assert_eq!(
            t.to_string(),
            "tensor([   0,    1,    2, ..., 1997, 1998, 1999])"
        );
    }
}
