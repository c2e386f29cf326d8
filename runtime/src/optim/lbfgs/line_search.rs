//! The strong-Wolfe line search of [`Lbfgs`] (PyTorch's `_strong_wolfe` and
//! `_cubic_interpolate`) and the flat-vector helpers it shares with the step.

use super::Lbfgs;
use crate::Tensor;

pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub(super) fn max_abs(a: &[f64]) -> f64 {
    a.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

/// The minimiser of the cubic through `(x1, f1, g1)` and `(x2, f2, g2)`, clamped to
/// `bounds` (or the interval between the points); the midpoint when it has none.
fn cubic_interpolate(
    (x1, f1, g1): (f64, f64, f64),
    (x2, f2, g2): (f64, f64, f64),
    bounds: Option<(f64, f64)>,
) -> f64 {
    let (lo, hi) = bounds.unwrap_or(if x1 <= x2 { (x1, x2) } else { (x2, x1) });
    let d1 = g1 + g2 - 3.0 * (f1 - f2) / (x1 - x2);
    let d2_square = d1 * d1 - g1 * g2;
    if d2_square >= 0.0 {
        let d2 = d2_square.sqrt();
        let min_pos = if x1 <= x2 {
            x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2.0 * d2))
        } else {
            x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2.0 * d2))
        };
        min_pos.max(lo).min(hi)
    } else {
        (lo + hi) / 2.0
    }
}

/// One point of the line search: step, loss, gradient, directional derivative.
#[derive(Clone)]
struct Point {
    t: f64,
    f: f64,
    g: Vec<f64>,
    gtd: f64,
}

impl Lbfgs {
    /// The strong-Wolfe line search from `x` along `d` (PyTorch's `_strong_wolfe`, with
    /// c1 = 1e-4, c2 = 0.9): returns the accepted loss, gradient, step and evaluations.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn strong_wolfe(
        &self,
        closure: &mut dyn FnMut() -> f64,
        x: &[Tensor],
        mut t: f64,
        d: &[f64],
        f: f64,
        g: &[f64],
        gtd: f64,
        max_ls: usize,
    ) -> (f64, Vec<f64>, f64, usize) {
        let (c1, c2, tolerance_change) = (1e-4, 0.9, self.config.tolerance_change);
        let d_norm = max_abs(d);
        let (mut f_new, mut g_new) = self.directional_evaluate(closure, x, t, d);
        let mut evals = 1;
        let mut gtd_new = dot(&g_new, d);
        let mut prev = Point {
            t: 0.0,
            f,
            g: g.to_vec(),
            gtd,
        };
        let mut done = false;
        let mut ls_iter = 0;
        let mut bracket: Vec<Point> = Vec::new();
        while ls_iter < max_ls {
            let here = |g_new: &Vec<f64>| Point {
                t,
                f: f_new,
                g: g_new.clone(),
                gtd: gtd_new,
            };
            if f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= prev.f) {
                bracket = vec![prev.clone(), here(&g_new)];
                break;
            }
            if gtd_new.abs() <= -c2 * gtd {
                bracket = vec![here(&g_new)];
                done = true;
                break;
            }
            if gtd_new >= 0.0 {
                bracket = vec![prev.clone(), here(&g_new)];
                break;
            }
            let (min_step, max_step) = (t + 0.01 * (t - prev.t), t * 10.0);
            let next = cubic_interpolate(
                (prev.t, prev.f, prev.gtd),
                (t, f_new, gtd_new),
                Some((min_step, max_step)),
            );
            prev = here(&g_new);
            t = next;
            (f_new, g_new) = self.directional_evaluate(closure, x, t, d);
            evals += 1;
            gtd_new = dot(&g_new, d);
            ls_iter += 1;
        }
        if ls_iter == max_ls {
            bracket = vec![
                Point {
                    t: 0.0,
                    f,
                    g: g.to_vec(),
                    gtd,
                },
                Point {
                    t,
                    f: f_new,
                    g: g_new.clone(),
                    gtd: gtd_new,
                },
            ];
        }
        // Zoom: shrink the bracket until a point satisfies the conditions.
        let order = |b: &[Point]| {
            if b[0].f <= b[b.len() - 1].f {
                (0, 1)
            } else {
                (1, 0)
            }
        };
        let (mut low, mut high) = order(&bracket);
        let mut insufficient = false;
        while !done && ls_iter < max_ls {
            let (b_lo, b_hi) = (
                bracket[0].t.min(bracket[1].t),
                bracket[0].t.max(bracket[1].t),
            );
            if (bracket[1].t - bracket[0].t).abs() * d_norm < tolerance_change {
                break;
            }
            t = cubic_interpolate(
                (bracket[0].t, bracket[0].f, bracket[0].gtd),
                (bracket[1].t, bracket[1].f, bracket[1].gtd),
                None,
            );
            let eps = 0.1 * (b_hi - b_lo);
            if (b_hi - t).min(t - b_lo) < eps {
                if insufficient || t >= b_hi || t <= b_lo {
                    t = if (t - b_hi).abs() < (t - b_lo).abs() {
                        b_hi - eps
                    } else {
                        b_lo + eps
                    };
                    insufficient = false;
                } else {
                    insufficient = true;
                }
            } else {
                insufficient = false;
            }
            (f_new, g_new) = self.directional_evaluate(closure, x, t, d);
            evals += 1;
            gtd_new = dot(&g_new, d);
            ls_iter += 1;
            let point = Point {
                t,
                f: f_new,
                g: g_new.clone(),
                gtd: gtd_new,
            };
            if f_new > f + c1 * t * gtd || f_new >= bracket[low].f {
                bracket[high] = point;
                (low, high) = order(&bracket);
            } else {
                if gtd_new.abs() <= -c2 * gtd {
                    done = true;
                } else if gtd_new * (bracket[high].t - bracket[low].t) >= 0.0 {
                    bracket[high] = bracket[low].clone();
                }
                bracket[low] = point;
            }
        }
        let best = bracket.swap_remove(low);
        (best.f, best.g, best.t, evals)
    }
}
