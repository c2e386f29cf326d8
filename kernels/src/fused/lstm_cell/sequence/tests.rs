//! Tests of `sequence`.

use super::*;
use crate::fused::lstm_cell::{lstm_cell_backward, lstm_cell_forward};

fn data(len: usize, seed: u64) -> Vec<f64> {
    (0..len)
        .map(|i| ((((i as u64 * 2_654_435_761 + seed) % 1000) as f64) / 500.0) - 1.0)
        .collect()
}

/// `a @ b^T` for row-major `a` `[m, k]`, `b` `[n, k]`.
fn mm_t(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    (0..m * n)
        .map(|ij| (0..k).map(|q| a[ij / n * k + q] * b[ij % n * k + q]).sum())
        .collect()
}

/// The step-by-step loop over the single-step kernels, as the reference.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn reference(
    pre: &[f64],
    bias: &[f64],
    w: &[f64],
    h0: &[f64],
    c0: &[f64],
    dy: &[f64],
    (dh_n, dc_n): (&[f64], &[f64]),
    dims: LstmDims,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, hs) = (dims.batch, dims.hidden);
    let (row, gr) = (n * hs, 4 * n * hs);
    let mut y = vec![0.0; dims.steps * row];
    let (mut h, mut c) = (h0.to_vec(), c0.to_vec());
    let mut kept = Vec::new();
    for s in 0..dims.steps {
        let t = dims.time(s);
        let xt: Vec<f64> = (0..gr)
            .map(|j| pre[t * gr + j] + bias[j % (4 * hs)])
            .collect();
        let hw = mm_t(&h, w, n, 4 * hs, hs);
        let out = lstm_cell_forward(&xt, &hw, &c, hs);
        kept.push((
            t,
            c.clone(),
            h.clone(),
            out.gates.to_vec(),
            out.tanh_c.to_vec(),
        ));
        y[t * row..(t + 1) * row].copy_from_slice(&out.h);
        h = out.h.to_vec();
        c = out.c.to_vec();
    }
    let (mut dh, mut dc) = (dh_n.to_vec(), dc_n.to_vec());
    let mut da_all = vec![0.0; dims.steps * gr];
    for (t, c_prev, _h_prev, gates, tanh_c) in kept.iter().rev() {
        let dm: Vec<f64> = (0..row).map(|j| dh[j] + dy[t * row + j]).collect();
        let (da, dcp) = lstm_cell_backward(&dm, &dc, gates, tanh_c, c_prev, hs);
        da_all[t * gr..(t + 1) * gr].copy_from_slice(&da);
        // dh = da @ W_hh.
        dh = (0..row)
            .map(|ij| {
                (0..4 * hs)
                    .map(|q| da[ij / hs * 4 * hs + q] * w[q * hs + ij % hs])
                    .sum()
            })
            .collect();
        dc = dcp.to_vec();
    }
    (y, h, c, da_all, [dh, dc].concat())
}

/// One test sequence's inputs: projections, biases, recurrent weight, initial state,
/// output gradients and the final state's gradients.
struct Inputs {
    pre: Vec<f64>,
    bias: Vec<f64>,
    w: Vec<f64>,
    h0: Vec<f64>,
    c0: Vec<f64>,
    dy: Vec<f64>,
    dh_n: Vec<f64>,
    dc_n: Vec<f64>,
}

/// Runs `f` on every `(steps, batch, hidden)` of `shapes`, both directions, with its
/// inputs, on 1, 2 and 3 threads (so batches of 16 rows and more also run as blocks of
/// rows side by side, `row_blocks`, evenly split or not).
fn for_each_case(shapes: &[(usize, usize, usize)], f: impl Fn(LstmDims, Inputs)) {
    let _threads = crate::cpu::thread_count_lock();
    for threads in [1, 2, 3] {
        crate::cpu::set_num_threads(threads);
        for &(steps, batch, hidden) in shapes {
            for reverse in [false, true] {
                let dims = LstmDims {
                    steps,
                    batch,
                    hidden,
                    reverse,
                };
                f(dims, inputs(dims));
            }
        }
    }
    crate::cpu::set_num_threads(0);
}

#[test]
fn rows_split_into_blocks_of_eight_or_more() {
    let _threads = crate::cpu::thread_count_lock();
    crate::cpu::set_num_threads(3);
    // Rows per block >= 8, at most one block per thread, none for a weight past 1 MiB.
    assert_eq!(row_blocks(17, 40, 4), 2);
    assert_eq!(row_blocks(32, 40, 4), 3);
    assert_eq!(row_blocks(7, 40, 4), 1);
    assert_eq!(row_blocks(32, 256, 4), 3);
    assert_eq!(row_blocks(32, 256, 8), 1);
    crate::cpu::set_num_threads(0);
}

fn inputs(dims: LstmDims) -> Inputs {
    let (n, hs) = (dims.batch, dims.hidden);
    let row = n * hs;
    Inputs {
        pre: data(dims.steps * 4 * row, 1),
        bias: data(4 * hs, 2),
        w: data(4 * hs * hs, 3).iter().map(|v| v * 0.3).collect(),
        h0: data(row, 4),
        c0: data(row, 5),
        dy: data(dims.steps * row, 6),
        dh_n: data(row, 7),
        dc_n: data(row, 8),
    }
}

#[test]
fn the_sequence_equals_the_step_by_step_loop_both_ways() {
    // Small, large enough that the products run on the team, and rows split unevenly
    // into blocks (17 = 9 + 8).
    for_each_case(&[(3, 2, 3), (4, 20, 40), (3, 17, 5)], |dims, inputs| {
        let (steps, n, hs) = (dims.steps, dims.batch, dims.hidden);
        let row = n * hs;
        let Inputs {
            pre,
            bias,
            w,
            h0,
            c0,
            dy,
            dh_n,
            dc_n,
        } = inputs;
        let (ry, rh, rc, rda, rd0) =
            reference(&pre, &bias, &w, &h0, &c0, &dy, (&dh_n, &dc_n), dims);
        let mut y = vec![0.0; steps * row];
        let seq = lstm_sequence_forward(
            HostBuffer::from_slice(&pre),
            Some(&bias),
            &w,
            &h0,
            &c0,
            &mut y,
            dims,
        );
        let last = dims.time(steps - 1);
        let close = |a: &[f64], b: &[f64], what: &str| {
            assert_eq!(a.len(), b.len(), "{what}");
            for (j, (x, y)) in a.iter().zip(b).enumerate() {
                assert!((x - y).abs() < 1e-12, "{what}[{j}]: {x} vs {y}");
            }
        };
        close(&y, &ry, "y");
        close(&y[last * row..(last + 1) * row], &rh, "h_n");
        close(&seq.c[last * row..(last + 1) * row], &rc, "c_n");
        let (mut dh, mut dc) = (dh_n.clone(), dc_n.clone());
        let (da, db) = lstm_sequence_backward(&seq, &w, &c0, &dy, &mut dh, &mut dc, dims);
        close(&da, &rda, "da");
        let rdb: Vec<f64> = (0..4 * hs)
            .map(|j| rda.chunks(4 * hs).map(|r| r[j]).sum())
            .collect();
        close(&db, &rdb, "db");
        close(&[dh, dc].concat(), &rd0, "dh0, dc0");
    });
}

/// In f32 the recurrent products run on the packed microkernel (with AVX2 or
/// AVX-512): 20 rows (register blocks of 8, 8 and 4, or 6 x 3 and 2), gate and hidden
/// widths that end in partial panels, threaded and not.
#[test]
fn f32_sequences_on_the_packed_weight_match_f64() {
    for_each_case(&[(5, 20, 40), (3, 3, 7), (3, 17, 33)], |dims, inputs| {
        let (steps, n, hs, reverse) = (dims.steps, dims.batch, dims.hidden, dims.reverse);
        let row = n * hs;
        let Inputs {
            pre,
            bias,
            w,
            h0,
            c0,
            dy,
            dh_n,
            dc_n,
        } = inputs;
        let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
        let run64 = {
            let mut y = vec![0.0; steps * row];
            let seq = lstm_sequence_forward(
                HostBuffer::from_slice(&pre),
                Some(&bias),
                &w,
                &h0,
                &c0,
                &mut y,
                dims,
            );
            let (mut dh, mut dc) = (dh_n.clone(), dc_n.clone());
            let (da, db) = lstm_sequence_backward(&seq, &w, &c0, &dy, &mut dh, &mut dc, dims);
            [y, da.to_vec(), db.to_vec(), dh, dc]
        };
        let run32 = {
            let mut y = vec![0.0f32; steps * row];
            let (w, c0) = (f(&w), f(&c0));
            let seq = lstm_sequence_forward(
                HostBuffer::from_slice(&f(&pre)),
                Some(&f(&bias)),
                &w,
                &f(&h0),
                &c0,
                &mut y,
                dims,
            );
            let (mut dh, mut dc) = (f(&dh_n), f(&dc_n));
            let (da, db) = lstm_sequence_backward(&seq, &w, &c0, &f(&dy), &mut dh, &mut dc, dims);
            [y, da.to_vec(), db.to_vec(), dh, dc]
        };
        for (what, (a, b)) in ["y", "da", "db", "dh0", "dc0"]
            .iter()
            .zip(run64.iter().zip(&run32))
        {
            assert_eq!(a.len(), b.len(), "{what}");
            for (j, (x, y)) in a.iter().zip(b).enumerate() {
                let tol = 1e-4 * (1.0 + x.abs());
                assert!(
                    (x - *y as f64).abs() < tol,
                    "{what}[{j}] ({steps}, {n}, {hs}, reverse {reverse}): {x} vs {y}"
                );
            }
        }
    });
}
