//! `einsum`: Einstein summation over any number of operands, reduced to sums, permutes
//! and batched matrix products (one GEMM per pairwise contraction), so it is as fast as
//! the matmul it becomes and differentiable through those ops.

use crate::Tensor;
use std::collections::BTreeMap;

/// Characters standing for the dims an ellipsis covers (never valid subscripts).
const ELLIPSIS_DIMS: &str = "0123456789";

/// One operand's subscripts with `...` expanded to `rank - letters` placeholder dims
/// (right-aligned, as PyTorch broadcasts them).
#[track_caller]
fn expand_ellipsis(spec: &str, rank: usize, ellipsis_rank: usize) -> Vec<char> {
    match spec.find("...") {
        None => spec.chars().collect(),
        Some(at) => {
            let letters = spec.len() - 3;
            assert!(
                rank >= letters,
                "einsum: operand subscripts {spec:?} need at least {letters} dims, got rank {rank}"
            );
            let covered = rank - letters;
            let skip = ellipsis_rank - covered;
            let mut out: Vec<char> = spec[..at].chars().collect();
            out.extend(ELLIPSIS_DIMS.chars().skip(skip).take(covered));
            out.extend(spec[at + 3..].chars());
            out
        }
    }
}

/// Sums `t` over the dims of `idx` not in `keep`, returning the remaining subscripts.
fn sum_out(t: Tensor, idx: Vec<char>, keep: &[char]) -> (Tensor, Vec<char>) {
    let drop: Vec<isize> = idx
        .iter()
        .enumerate()
        .filter(|(_, c)| !keep.contains(c))
        .map(|(i, _)| i as isize)
        .collect();
    if drop.is_empty() {
        return (t, idx);
    }
    let rest = idx.into_iter().filter(|c| keep.contains(c)).collect();
    (t.sum(&drop, false), rest)
}

/// `t` permuted so its subscripts are `order` (a permutation of `idx`).
fn arrange(t: &Tensor, idx: &[char], order: &[char]) -> Tensor {
    let perm: Vec<isize> = order
        .iter()
        .map(|c| idx.iter().position(|i| i == c).expect("subscript present") as isize)
        .collect();
    if perm.iter().enumerate().all(|(i, &p)| i as isize == p) {
        t.clone()
    } else {
        t.permute(&perm)
    }
}

/// Contracts two operands, keeping the subscripts in `keep`: one batched GEMM over
/// `[batch, left, contracted] @ [batch, contracted, right]`.
fn contract(
    a: (Tensor, Vec<char>),
    b: (Tensor, Vec<char>),
    keep: &[char],
    sizes: &BTreeMap<char, usize>,
) -> (Tensor, Vec<char>) {
    let b_idx = b.1.clone();
    let a_idx = a.1.clone();
    let keep_a: Vec<char> = keep.iter().chain(&b_idx).copied().collect();
    let keep_b: Vec<char> = keep.iter().chain(&a_idx).copied().collect();
    let (a, ai) = sum_out(a.0, a.1, &keep_a);
    let (b, bi) = sum_out(b.0, b.1, &keep_b);
    let batch: Vec<char> = ai
        .iter()
        .filter(|c| bi.contains(c) && keep.contains(c))
        .copied()
        .collect();
    let contracted: Vec<char> = ai
        .iter()
        .filter(|c| bi.contains(c) && !keep.contains(c))
        .copied()
        .collect();
    let left: Vec<char> = ai.iter().filter(|c| !bi.contains(c)).copied().collect();
    let right: Vec<char> = bi.iter().filter(|c| !ai.contains(c)).copied().collect();
    let size = |cs: &[char]| cs.iter().map(|c| sizes[c]).product::<usize>();
    let (nb, nl, nk, nr) = (size(&batch), size(&left), size(&contracted), size(&right));
    let a_order: Vec<char> = batch
        .iter()
        .chain(&left)
        .chain(&contracted)
        .copied()
        .collect();
    let b_order: Vec<char> = batch
        .iter()
        .chain(&contracted)
        .chain(&right)
        .copied()
        .collect();
    let a = arrange(&a, &ai, &a_order)
        .broadcast_to(&dims(&a_order, sizes))
        .reshape(&[nb, nl, nk]);
    let b = arrange(&b, &bi, &b_order)
        .broadcast_to(&dims(&b_order, sizes))
        .reshape(&[nb, nk, nr]);
    let out_idx: Vec<char> = batch.iter().chain(&left).chain(&right).copied().collect();
    let out = a.matmul(&b).reshape(&dims(&out_idx, sizes));
    (out, out_idx)
}

fn dims(idx: &[char], sizes: &BTreeMap<char, usize>) -> Vec<usize> {
    idx.iter().map(|c| sizes[c]).collect()
}

impl Tensor {
    /// Einstein summation (`torch.einsum`): `"ij,jk->ik"`, `"bhqd,bhkd->bhqk"`,
    /// `"...ij,...jk->...ik"`, `"i,j->ij"`, `"ij->ji"`, `"ij->"`; without `->` the output
    /// holds the subscripts that appear once, in alphabetical order. Subscripts repeated
    /// within one operand (diagonals) are not supported.
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &Device::Cpu).reshape(&[2, 3]);
    /// let b = Tensor::ones(&[3, 2], DType::F32, &Device::Cpu);
    /// assert_eq!(Tensor::einsum("ij,jk->ik", &[&a, &b]).to_vec::<f32>(), a.matmul(&b).to_vec::<f32>());
    /// assert_eq!(Tensor::einsum("ij->j", &[&a]).to_vec::<f32>(), vec![3.0, 5.0, 7.0]);
    /// assert_eq!(Tensor::einsum("ij,ij", &[&a, &a]).item::<f32>(), 55.0);
    /// ```
    #[track_caller]
    pub fn einsum(equation: &str, operands: &[&Tensor]) -> Tensor {
        let _profiled = crate::dispatch::opaque("einsum", operands);
        let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l.to_string(), Some(r.to_string())),
            None => (eq.clone(), None),
        };
        let specs: Vec<&str> = lhs.split(',').collect();
        assert!(
            specs.len() == operands.len() && !operands.is_empty(),
            "einsum: equation {equation:?} has {} operands, but {} were given",
            specs.len(),
            operands.len()
        );
        for spec in specs.iter().chain(rhs.as_deref().iter()) {
            assert!(
                spec.replace("...", "")
                    .chars()
                    .all(|c| c.is_ascii_alphabetic()),
                "einsum: subscripts must be letters (and one `...`), got {spec:?} in {equation:?}"
            );
        }
        let ellipsis_rank = specs
            .iter()
            .zip(operands)
            .filter(|(s, _)| s.contains("..."))
            .map(|(s, t)| t.dim().saturating_sub(s.len() - 3))
            .max()
            .unwrap_or(0);
        let idx: Vec<Vec<char>> = specs
            .iter()
            .zip(operands)
            .map(|(s, t)| expand_ellipsis(s, t.dim(), ellipsis_rank))
            .collect();
        let mut sizes: BTreeMap<char, usize> = BTreeMap::new();
        for (k, (ix, t)) in idx.iter().zip(operands).enumerate() {
            assert!(
                ix.len() == t.dim(),
                "einsum: operand {k} has subscripts {:?} but shape {:?}",
                specs[k],
                t.shape()
            );
            for (i, (&c, &n)) in ix.iter().zip(t.shape()).enumerate() {
                assert!(
                    !ix[..i].contains(&c),
                    "einsum: subscript {c:?} repeats within operand {k} ({:?}); diagonals are not supported",
                    specs[k]
                );
                let ellipsis = ELLIPSIS_DIMS.contains(c);
                match sizes.get(&c) {
                    Some(&m) if m != n && !(ellipsis && (m == 1 || n == 1)) => panic!(
                        "einsum: subscript {c:?} has size {m} in one operand and {n} in operand {k} (shape {:?})",
                        t.shape()
                    ),
                    Some(&m) if m >= n => {}
                    _ => {
                        sizes.insert(c, n);
                    }
                }
            }
        }
        let output: Vec<char> = match &rhs {
            Some(r) => {
                let out = expand_ellipsis(
                    r,
                    r.len().saturating_sub(3) + if r.contains("...") { ellipsis_rank } else { 0 },
                    ellipsis_rank,
                );
                for c in &out {
                    assert!(
                        sizes.contains_key(c),
                        "einsum: output subscript {c:?} does not appear in the inputs of {equation:?}"
                    );
                }
                out
            }
            None => {
                let mut once: Vec<char> = sizes
                    .keys()
                    .filter(|c| !ELLIPSIS_DIMS.contains(**c))
                    .filter(|c| idx.iter().flatten().filter(|x| x == c).count() == 1)
                    .copied()
                    .collect();
                once.sort_unstable();
                ELLIPSIS_DIMS
                    .chars()
                    .filter(|c| sizes.contains_key(c))
                    .chain(once)
                    .collect()
            }
        };
        let mut operands_left: Vec<(Tensor, Vec<char>)> = operands
            .iter()
            .zip(idx)
            .map(|(t, ix)| ((*t).clone(), ix))
            .collect();
        let mut acc = operands_left.remove(0);
        while !operands_left.is_empty() {
            let next = operands_left.remove(0);
            let keep: Vec<char> = output
                .iter()
                .chain(operands_left.iter().flat_map(|(_, ix)| ix.iter()))
                .copied()
                .collect();
            acc = contract(acc, next, &keep, &sizes);
        }
        let (t, ix) = sum_out(acc.0, acc.1, &output);
        arrange(&t, &ix, &output)
            .broadcast_to(&dims(&output, &sizes))
            .contiguous()
    }

    /// The outer product of two 1-D tensors, `[n, m]` (`torch.outer`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    /// let b = Tensor::from_vec(vec![3.0f32, 4.0, 5.0], &[3]);
    /// assert_eq!(a.outer(&b).to_vec::<f32>(), vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
    /// ```
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Tensor {
        let _profiled = crate::dispatch::opaque("outer", &[self]);
        assert!(
            self.dim() == 1 && other.dim() == 1,
            "outer: expected two 1D tensors, got shapes {:?} and {:?}",
            self.shape(),
            other.shape()
        );
        self.unsqueeze(1).mul(&other.unsqueeze(0))
    }

    /// `beta * self + alpha * (batch1 @ batch2)` over `[B, n, m]` and `[B, m, p]`
    /// (`torch.baddbmm`; `self` broadcasts to `[B, n, p]`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let bias = Tensor::ones(&[1, 2, 2], DType::F32, &Device::Cpu);
    /// let a = Tensor::ones(&[3, 2, 4], DType::F32, &Device::Cpu);
    /// let b = Tensor::ones(&[3, 4, 2], DType::F32, &Device::Cpu);
    /// let y = bias.baddbmm(&a, &b, 0.5, 2.0);
    /// assert_eq!((y.shape(), y.to_vec::<f32>()[0]), (&[3, 2, 2][..], 8.5));
    /// ```
    #[track_caller]
    pub fn baddbmm(&self, batch1: &Tensor, batch2: &Tensor, beta: f64, alpha: f64) -> Tensor {
        let _profiled = crate::dispatch::opaque("baddbmm", &[self]);
        let prod = batch1.bmm(batch2);
        let prod = if alpha == 1.0 {
            prod
        } else {
            prod.mul_scalar(alpha)
        };
        if beta == 0.0 {
            // PyTorch ignores `self` (NaN included) when beta is 0.
            crate::ops::broadcast_shape("baddbmm", self, &prod);
            return prod;
        }
        self.mul_scalar(beta).add(&prod)
    }

    /// `beta * self + alpha * (mat1 @ mat2)` (`torch.addmm`).
    ///
    /// ```
    /// # use ferrograd_runtime::prelude::*;
    /// let bias = Tensor::ones(&[2], DType::F32, &Device::Cpu);
    /// let a = Tensor::ones(&[3, 4], DType::F32, &Device::Cpu);
    /// let b = Tensor::ones(&[4, 2], DType::F32, &Device::Cpu);
    /// assert_eq!(bias.addmm(&a, &b, 1.0, 1.0).to_vec::<f32>(), vec![5.0; 6]);
    /// ```
    #[track_caller]
    pub fn addmm(&self, mat1: &Tensor, mat2: &Tensor, beta: f64, alpha: f64) -> Tensor {
        let _profiled = crate::dispatch::opaque("addmm", &[self]);
        let prod = mat1.matmul(mat2);
        let prod = if alpha == 1.0 {
            prod
        } else {
            prod.mul_scalar(alpha)
        };
        if beta == 0.0 {
            return prod;
        }
        self.mul_scalar(beta).add(&prod)
    }
}
