//! Metrics computed incrementally over batches, as `torchmetrics` does: each is updated
//! with a batch's predictions and targets, and computes its value over everything seen
//! since the last [`reset`](Metric::reset). Values equal scikit-learn's
//! (`accuracy_score`, `top_k_accuracy_score`, `precision_recall_fscore_support` with
//! `zero_division=0`, `confusion_matrix`, `roc_auc_score`) and torchmetrics'
//! `Perplexity`.
//!
//! **Ties.** Where scores are equal, the lower class index ranks first, as `argmax` and
//! a stable descending sort have it: top-1 [`Accuracy`] is the accuracy of
//! `scores.argmax(1)` (torchmetrics' and `accuracy_score`'s on argmax predictions), and
//! top-k counts a sample when fewer than k classes rank before its own (larger scores,
//! or equal scores at lower indices). scikit-learn's `top_k_accuracy_score` ranks the
//! *higher* index first on ties, so on tied scores it equals ours with the classes
//! reversed; torchmetrics' top-k for k > 1 follows `torch.topk`, whose order among ties
//! is unspecified. Without ties every rule agrees.
//!
//! **Degenerate inputs.** Multiclass [`Auroc`] averages the classes that have both
//! positive and negative samples (torchmetrics counts a class without positives as 0),
//! and is NaN when none has (scikit-learn: undefined). With no samples at all, where
//! scikit-learn and torchmetrics raise, the ratios of nothing (accuracy, top-k, AUROC,
//! perplexity) are NaN, precision/recall/F1 are 0 (the `zero_division=0` rule) and the
//! confusion matrix is all zeros. `tests/train/metrics.rs` checks every metric on
//! random, tied and degenerate inputs against both references.

use crate::{DType, Tensor};

/// A metric accumulated over batches.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::train::metrics::{Accuracy, Metric};
/// let mut acc = Accuracy::new();
/// let logits = Tensor::from_vec(vec![2.0f32, 1.0, 0.0, 3.0], &[2, 2]);
/// acc.update(&logits, &Tensor::from_vec(vec![0i64, 0], &[2]));
/// acc.update(&logits, &Tensor::from_vec(vec![0i64, 1], &[2]));
/// assert_eq!(acc.compute(), 0.75);
/// ```
pub trait Metric: Send {
    /// Adds a batch: `preds` are scores (`[N, C]` logits or probabilities; `[N]` for
    /// binary metrics), `target` the classes (`[N]` integers).
    fn update(&mut self, preds: &Tensor, target: &Tensor);
    /// The value over every batch since the last reset.
    fn compute(&self) -> f64;
    /// Forgets every batch.
    fn reset(&mut self);
    /// The name it is logged under (`accuracy`, `f1_macro`, ...).
    fn name(&self) -> String;
    /// The counts that add up over data-parallel ranks (the Trainer sums them over
    /// the process group and loads the sums back); empty for a metric that cannot be
    /// summed (see [`gather_state`](Self::gather_state)).
    fn sync_state(&self) -> Vec<f64> {
        Vec::new()
    }
    /// Takes the sums of every rank's [`sync_state`](Self::sync_state).
    fn load_sync_state(&mut self, _summed: &[f64]) {}
    /// For a metric whose state does not add up but joins (AUROC keeps every score):
    /// its state as numbers, which the Trainer gathers from every rank and hands to
    /// [`load_gathered_state`](Self::load_gathered_state) in rank order; `None` (the
    /// default) for a metric that needs no gathering. Every rank answers alike.
    fn gather_state(&self) -> Option<Vec<f64>> {
        None
    }
    /// Replaces the state by the union of every rank's
    /// [`gather_state`](Self::gather_state) (`parts[r]` is rank `r`'s).
    fn load_gathered_state(&mut self, _parts: &[Vec<f64>]) {}
}

#[track_caller]
fn rows(op: &str, preds: &Tensor, target: &Tensor) -> (Vec<f64>, Vec<i64>, usize) {
    assert!(
        preds.dim() == 2 && target.dim() == 1 && preds.shape()[0] == target.shape()[0],
        "{op}: expected preds [N, C] and target [N], got {:?} and {:?}",
        preds.shape(),
        target.shape()
    );
    let c = preds.shape()[1];
    let p = preds.detach().to_dtype(DType::F64).to_vec::<f64>();
    let t = target.to_dtype(DType::I64).to_vec::<i64>();
    for &k in &t {
        assert!(
            (0..c as i64).contains(&k),
            "{op}: target class {k} is outside 0..{c} (preds {:?})",
            preds.shape()
        );
    }
    (p, t, c)
}

/// The class of largest score in each row (the first on ties, as `argmax`).
fn argmax_rows(p: &[f64], c: usize) -> impl Iterator<Item = usize> + '_ {
    p.chunks(c).map(|row| {
        row.iter()
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv { (i, v) } else { (bi, bv) }
            })
            .0
    })
}

/// The weighted running mean of a value (the loss per sample, say).
///
/// ```
/// use ferrograd_runtime::train::metrics::Mean;
/// let mut loss = Mean::new("loss");
/// loss.add(2.0, 10.0); // a batch of 10 with mean loss 2
/// loss.add(1.0, 30.0);
/// assert_eq!(loss.value(), 1.25);
/// ```
#[derive(Clone, Debug)]
pub struct Mean {
    name: String,
    sum: f64,
    weight: f64,
}

impl Mean {
    /// An empty mean logged as `name`.
    pub fn new(name: impl Into<String>) -> Mean {
        Mean {
            name: name.into(),
            sum: 0.0,
            weight: 0.0,
        }
    }
    /// Adds `value` with `weight` (a batch's mean loss and its size).
    pub fn add(&mut self, value: f64, weight: f64) {
        self.sum += value * weight;
        self.weight += weight;
    }
    /// The mean so far (NaN before anything was added).
    pub fn value(&self) -> f64 {
        self.sum / self.weight
    }
    /// The total weight added (the samples, for a per-sample loss).
    pub fn weight(&self) -> f64 {
        self.weight
    }
    /// Forgets everything added.
    pub fn clear(&mut self) {
        self.sum = 0.0;
        self.weight = 0.0;
    }
    /// The name it is logged under.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Top-k accuracy: the share of samples whose class is among the k largest scores (ties:
/// the lower class index first, see the [module docs](crate::train::metrics)).
#[derive(Clone, Debug)]
pub struct Accuracy {
    k: usize,
    correct: u64,
    total: u64,
}

impl Accuracy {
    /// Top-1 accuracy.
    pub fn new() -> Accuracy {
        Accuracy::top_k(1)
    }
    /// Top-k accuracy (`k >= 1`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::train::metrics::{Accuracy, Metric};
    /// let mut top2 = Accuracy::top_k(2);
    /// top2.update(&Tensor::from_vec(vec![0.1f32, 0.5, 0.4], &[1, 3]), &Tensor::from_vec(vec![2i64], &[1]));
    /// assert_eq!(top2.compute(), 1.0);
    /// ```
    pub fn top_k(k: usize) -> Accuracy {
        assert!(k >= 1, "Accuracy::top_k: k must be at least 1");
        Accuracy {
            k,
            correct: 0,
            total: 0,
        }
    }
}

impl Default for Accuracy {
    fn default() -> Self {
        Accuracy::new()
    }
}

impl Metric for Accuracy {
    fn update(&mut self, preds: &Tensor, target: &Tensor) {
        let (p, t, c) = rows("Accuracy::update", preds, target);
        for (row, &y) in p.chunks(c).zip(&t) {
            let mine = row[y as usize];
            // Classes ranked before `y`: larger scores, or equal scores at lower indices
            // (a stable descending sort; `argmax`'s choice among ties).
            let ahead = row
                .iter()
                .enumerate()
                .filter(|&(i, &v)| v > mine || (v == mine && i < y as usize))
                .count();
            self.correct += u64::from(ahead < self.k);
        }
        self.total += t.len() as u64;
    }
    fn compute(&self) -> f64 {
        self.correct as f64 / self.total as f64
    }
    fn reset(&mut self) {
        self.correct = 0;
        self.total = 0;
    }
    fn sync_state(&self) -> Vec<f64> {
        vec![self.correct as f64, self.total as f64]
    }
    fn load_sync_state(&mut self, summed: &[f64]) {
        self.correct = summed[0] as u64;
        self.total = summed[1] as u64;
    }
    fn name(&self) -> String {
        if self.k == 1 {
            "accuracy".into()
        } else {
            format!("top{}_accuracy", self.k)
        }
    }
}

/// Counts of (true class, predicted class): `matrix()[t][p]`, scikit-learn's layout.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::train::metrics::{ConfusionMatrix, Metric};
/// let mut cm = ConfusionMatrix::new(2);
/// cm.update(&Tensor::from_vec(vec![0.9f32, 0.1, 0.2, 0.8, 0.7, 0.3], &[3, 2]), &Tensor::from_vec(vec![0i64, 0, 1], &[3]));
/// assert_eq!(cm.matrix(), vec![vec![1, 1], vec![1, 0]]);
/// ```
#[derive(Clone, Debug)]
pub struct ConfusionMatrix {
    c: usize,
    counts: Vec<u64>,
}

impl ConfusionMatrix {
    /// An empty matrix over `num_classes` classes.
    pub fn new(num_classes: usize) -> ConfusionMatrix {
        ConfusionMatrix {
            c: num_classes,
            counts: vec![0; num_classes * num_classes],
        }
    }
    /// `[true class][predicted class]` counts.
    pub fn matrix(&self) -> Vec<Vec<u64>> {
        self.counts.chunks(self.c).map(<[u64]>::to_vec).collect()
    }
    /// Per class: (true positives, predicted count, true count).
    fn per_class(&self) -> Vec<(f64, f64, f64)> {
        (0..self.c)
            .map(|k| {
                let tp = self.counts[k * self.c + k] as f64;
                let predicted = (0..self.c)
                    .map(|t| self.counts[t * self.c + k])
                    .sum::<u64>();
                let actual = (0..self.c)
                    .map(|p| self.counts[k * self.c + p])
                    .sum::<u64>();
                (tp, predicted as f64, actual as f64)
            })
            .collect()
    }
}

impl Metric for ConfusionMatrix {
    fn update(&mut self, preds: &Tensor, target: &Tensor) {
        let (p, t, c) = rows("ConfusionMatrix::update", preds, target);
        assert_eq!(
            c, self.c,
            "ConfusionMatrix::update: preds have {c} classes, the matrix {}",
            self.c
        );
        for (pred, &y) in argmax_rows(&p, c).zip(&t) {
            self.counts[y as usize * c + pred] += 1;
        }
    }
    /// The trace over the total: accuracy.
    fn compute(&self) -> f64 {
        let total: u64 = self.counts.iter().sum();
        (0..self.c)
            .map(|k| self.counts[k * self.c + k])
            .sum::<u64>() as f64
            / total as f64
    }
    fn reset(&mut self) {
        self.counts.fill(0);
    }
    fn sync_state(&self) -> Vec<f64> {
        self.counts.iter().map(|&c| c as f64).collect()
    }
    fn load_sync_state(&mut self, summed: &[f64]) {
        for (c, &s) in self.counts.iter_mut().zip(summed) {
            *c = s as u64;
        }
    }
    fn name(&self) -> String {
        "confusion_matrix".into()
    }
}

/// How per-class scores combine (scikit-learn's `average`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Average {
    /// The unweighted mean over all classes.
    Macro,
    /// From the pooled counts of every class.
    Micro,
    /// The mean weighted by each class's number of true samples.
    Weighted,
}

/// Which score a [`PrecisionRecallF1`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Score {
    /// TP / (TP + FP).
    Precision,
    /// TP / (TP + FN).
    Recall,
    /// The harmonic mean of precision and recall.
    F1,
}

/// Precision, recall or F1 of the argmax predictions, averaged over classes; a ratio
/// with a zero denominator counts as 0 (scikit-learn's `zero_division=0`).
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::train::metrics::{Average, Metric, PrecisionRecallF1, Score};
/// let mut f1 = PrecisionRecallF1::new(Score::F1, Average::Macro, 2);
/// f1.update(&Tensor::from_vec(vec![0.9f32, 0.1, 0.2, 0.8], &[2, 2]), &Tensor::from_vec(vec![0i64, 1], &[2]));
/// assert_eq!(f1.compute(), 1.0);
/// assert_eq!(f1.name(), "f1_macro");
/// ```
#[derive(Clone, Debug)]
pub struct PrecisionRecallF1 {
    score: Score,
    average: Average,
    matrix: ConfusionMatrix,
}

impl PrecisionRecallF1 {
    /// `score` averaged by `average` over `num_classes` classes.
    pub fn new(score: Score, average: Average, num_classes: usize) -> PrecisionRecallF1 {
        PrecisionRecallF1 {
            score,
            average,
            matrix: ConfusionMatrix::new(num_classes),
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

fn score_of(score: Score, tp: f64, predicted: f64, actual: f64) -> f64 {
    let (p, r) = (ratio(tp, predicted), ratio(tp, actual));
    match score {
        Score::Precision => p,
        Score::Recall => r,
        Score::F1 => ratio(2.0 * tp, predicted + actual),
    }
}

impl Metric for PrecisionRecallF1 {
    fn update(&mut self, preds: &Tensor, target: &Tensor) {
        self.matrix.update(preds, target);
    }
    fn compute(&self) -> f64 {
        let per = self.matrix.per_class();
        match self.average {
            Average::Micro => {
                let (tp, pr, ac) = per.iter().fold((0.0, 0.0, 0.0), |(a, b, c), &(x, y, z)| {
                    (a + x, b + y, c + z)
                });
                score_of(self.score, tp, pr, ac)
            }
            Average::Macro => {
                per.iter()
                    .map(|&(tp, pr, ac)| score_of(self.score, tp, pr, ac))
                    .sum::<f64>()
                    / per.len() as f64
            }
            Average::Weighted => {
                let total: f64 = per.iter().map(|p| p.2).sum();
                if total == 0.0 {
                    // No samples: weights of nothing (`zero_division=0`).
                    return 0.0;
                }
                per.iter()
                    .map(|&(tp, pr, ac)| score_of(self.score, tp, pr, ac) * ac)
                    .sum::<f64>()
                    / total
            }
        }
    }
    fn reset(&mut self) {
        self.matrix.reset();
    }
    fn sync_state(&self) -> Vec<f64> {
        self.matrix.sync_state()
    }
    fn load_sync_state(&mut self, summed: &[f64]) {
        self.matrix.load_sync_state(summed);
    }
    fn name(&self) -> String {
        let s = match self.score {
            Score::Precision => "precision",
            Score::Recall => "recall",
            Score::F1 => "f1",
        };
        let a = match self.average {
            Average::Macro => "macro",
            Average::Micro => "micro",
            Average::Weighted => "weighted",
        };
        format!("{s}_{a}")
    }
}

/// The area under the ROC curve, exact (ties count half, as the trapezoidal rule on
/// scikit-learn's curve). Binary: `preds` `[N]` scores of the positive class and
/// `target` `[N]` of 0/1. Multiclass (`preds` `[N, C]`): one-vs-rest, the macro mean
/// over the classes with both positive and negative samples. It keeps every score, as
/// torchmetrics' exact AUROC does.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::train::metrics::{Auroc, Metric};
/// let mut auc = Auroc::new();
/// auc.update(&Tensor::from_vec(vec![0.1f32, 0.4, 0.35, 0.8], &[4]), &Tensor::from_vec(vec![0i64, 0, 1, 1], &[4]));
/// assert_eq!(auc.compute(), 0.75);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Auroc {
    scores: Vec<f64>,
    targets: Vec<i64>,
    classes: Option<usize>,
}

impl Auroc {
    /// An empty AUROC.
    pub fn new() -> Auroc {
        Auroc::default()
    }
}

/// Binary AUROC by the Mann-Whitney statistic with average ranks for ties.
fn binary_auroc(scores: &[f64], positive: impl Fn(usize) -> bool) -> Option<f64> {
    let n = scores.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let (mut rank_sum, mut pos) = (0.0, 0usize);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        for &o in &order[i..=j] {
            if positive(o) {
                rank_sum += avg_rank;
                pos += 1;
            }
        }
        i = j + 1;
    }
    let neg = n - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    let (p, q) = (pos as f64, neg as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * q))
}

impl Metric for Auroc {
    fn update(&mut self, preds: &Tensor, target: &Tensor) {
        let t = target.to_dtype(DType::I64).to_vec::<i64>();
        let c = match preds.dim() {
            1 => 1,
            2 => preds.shape()[1],
            _ => panic!(
                "Auroc::update: expected preds [N] or [N, C], got {:?}",
                preds.shape()
            ),
        };
        assert!(
            target.dim() == 1 && preds.shape()[0] == target.shape()[0],
            "Auroc::update: preds {:?} and target {:?} differ in samples",
            preds.shape(),
            target.shape()
        );
        match self.classes {
            None => self.classes = Some(c),
            Some(prev) => assert_eq!(
                prev, c,
                "Auroc::update: preds had {prev} columns before, now {c}"
            ),
        }
        self.scores
            .extend(preds.detach().to_dtype(DType::F64).to_vec::<f64>());
        self.targets.extend(t);
    }
    /// NaN when no class has both positive and negative samples.
    fn compute(&self) -> f64 {
        match self.classes {
            None => f64::NAN,
            Some(1) => binary_auroc(&self.scores, |i| self.targets[i] != 0).unwrap_or(f64::NAN),
            Some(c) => {
                let per: Vec<f64> = (0..c)
                    .filter_map(|k| {
                        let col: Vec<f64> =
                            self.scores.iter().skip(k).step_by(c).copied().collect();
                        binary_auroc(&col, |i| self.targets[i] == k as i64)
                    })
                    .collect();
                if per.is_empty() {
                    f64::NAN
                } else {
                    per.iter().sum::<f64>() / per.len() as f64
                }
            }
        }
    }
    fn reset(&mut self) {
        self.scores.clear();
        self.targets.clear();
        self.classes = None;
    }
    fn name(&self) -> String {
        "auroc".into()
    }
    /// `[columns, scores.., targets..]`, or nothing when no batch was seen.
    fn gather_state(&self) -> Option<Vec<f64>> {
        let Some(c) = self.classes else {
            return Some(Vec::new());
        };
        let mut state = Vec::with_capacity(1 + self.scores.len() + self.targets.len());
        state.push(c as f64);
        state.extend_from_slice(&self.scores);
        state.extend(self.targets.iter().map(|&t| t as f64));
        Some(state)
    }
    #[track_caller]
    fn load_gathered_state(&mut self, parts: &[Vec<f64>]) {
        self.reset();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let c = part[0] as usize;
            let n = (part.len() - 1) / (c + 1);
            assert_eq!(
                part.len(),
                1 + n * (c + 1),
                "Auroc::load_gathered_state: a part of {} numbers is not {c} scores and a target per sample",
                part.len()
            );
            match self.classes {
                None => self.classes = Some(c),
                Some(prev) => assert_eq!(
                    prev, c,
                    "Auroc::load_gathered_state: ranks saw {prev} and {c} columns"
                ),
            }
            self.scores.extend_from_slice(&part[1..1 + n * c]);
            self.targets
                .extend(part[1 + n * c..].iter().map(|&t| t as i64));
        }
    }
}

/// exp of the mean negative log-likelihood of the targets under the logits
/// (`[..., C]` logits, `[...]` targets); targets equal to `ignore_index` do not count.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::train::metrics::{Metric, Perplexity};
/// let mut ppl = Perplexity::new(None);
/// // Uniform logits over 4 tokens: perplexity 4.
/// ppl.update(&Tensor::zeros(&[2, 3, 4], DType::F32, &Device::Cpu), &Tensor::zeros(&[2, 3], DType::I64, &Device::Cpu));
/// assert!((ppl.compute() - 4.0).abs() < 1e-9);
/// ```
#[derive(Clone, Debug)]
pub struct Perplexity {
    ignore_index: Option<i64>,
    nll: f64,
    count: u64,
}

impl Perplexity {
    /// A perplexity skipping targets equal to `ignore_index`.
    pub fn new(ignore_index: Option<i64>) -> Perplexity {
        Perplexity {
            ignore_index,
            nll: 0.0,
            count: 0,
        }
    }
}

impl Metric for Perplexity {
    fn update(&mut self, preds: &Tensor, target: &Tensor) {
        let c = *preds.shape().last().unwrap_or(&0);
        assert!(
            preds.dim() == target.dim() + 1 && preds.shape()[..preds.dim() - 1] == *target.shape(),
            "Perplexity::update: expected logits [..., C] and target [...], got {:?} and {:?}",
            preds.shape(),
            target.shape()
        );
        let logp = preds
            .detach()
            .to_dtype(DType::F64)
            .log_softmax(-1)
            .to_vec::<f64>();
        for (row, &y) in logp
            .chunks(c)
            .zip(&target.to_dtype(DType::I64).to_vec::<i64>())
        {
            if Some(y) == self.ignore_index {
                continue;
            }
            assert!(
                (0..c as i64).contains(&y),
                "Perplexity::update: target {y} is outside 0..{c}"
            );
            self.nll -= row[y as usize];
            self.count += 1;
        }
    }
    fn compute(&self) -> f64 {
        (self.nll / self.count as f64).exp()
    }
    fn reset(&mut self) {
        self.nll = 0.0;
        self.count = 0;
    }
    fn sync_state(&self) -> Vec<f64> {
        vec![self.nll, self.count as f64]
    }
    fn load_sync_state(&mut self, summed: &[f64]) {
        self.nll = summed[0];
        self.count = summed[1] as u64;
    }
    fn name(&self) -> String {
        "perplexity".into()
    }
}
