//! The lowering of recurrent layers to ONNX's `RNN`/`LSTM`/`GRU`, shared by the traced
//! exporter and the `network!` graph writer.

use super::*;

/// The options of a recurrent layer's export (traced, or from `network!`'s graph).
pub(crate) struct RnnExport {
    pub(crate) mode: RnnKind,
    pub(crate) layers: usize,
    pub(crate) hidden: usize,
    pub(crate) dirs: usize,
    pub(crate) batch_first: bool,
    pub(crate) bias: bool,
    pub(crate) has_state: bool,
    pub(crate) unbatched: bool,
}

/// Where a lowering shared by the traced exporter and [`super::GraphWriter`] writes its
/// nodes.
pub(crate) trait NodeSink {
    /// A fresh value name from `stem`.
    fn fresh(&mut self, stem: &str) -> String;
    /// A node with the given outputs.
    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    );
    /// An int64 1-D constant.
    fn const_i64(&mut self, values: &[i64]) -> String;
    /// A node with one fresh output, returned.
    fn op1(&mut self, op: &str, inputs: &[String], attrs: Vec<pb::AttributeProto>) -> String {
        let out = self.fresh(&format!("{op}_out"));
        self.node(op, inputs, std::slice::from_ref(&out), attrs);
        out
    }
    /// Size `axis` of `value` at run time, as a 1-element int64 tensor.
    fn dim_of(&mut self, value: &str, axis: usize) -> String {
        let shape = self.op1("Shape", &[value.to_string()], vec![]);
        let idx = self.const_i64(&[axis as i64]);
        self.op1("Gather", &[shape, idx], vec![attr_i("axis", 0)])
    }
}

impl NodeSink for Builder<'_> {
    fn fresh(&mut self, stem: &str) -> String {
        Builder::fresh(self, stem)
    }
    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    ) {
        Builder::node(self, op, inputs, outputs, attrs)
    }
    fn const_i64(&mut self, values: &[i64]) -> String {
        Builder::const_i64(self, values)
    }
    fn dim_of(&mut self, value: &str, axis: usize) -> String {
        Builder::dim_of(self, value, axis)
    }
}

pub(crate) fn rnn_nodes<S: NodeSink>(g: &mut S, c: &RnnExport, ins: &[String], outs: &[String]) {
    let lstm = c.mode == RnnKind::Lstm;
    let (op, gates) = match c.mode {
        RnnKind::Tanh | RnnKind::Relu => ("RNN", 1),
        RnnKind::Lstm => ("LSTM", 4),
        RnnKind::Gru => ("GRU", 3),
    };
    // PyTorch's gate blocks → ONNX's: LSTM (i, f, g, o) → (i, o, f, c); GRU (r, z, n) → (z, r, h).
    let order: &[usize] = match c.mode {
        RnnKind::Lstm => &[0, 3, 1, 2],
        RnnKind::Gru => &[1, 0, 2],
        _ => &[0],
    };
    let n_state = if c.has_state { 1 + lstm as usize } else { 0 };
    let per_dir = 2 + 2 * c.bias as usize;
    // Time-major [T, N, F].
    let mut x = ins[0].clone();
    if c.unbatched {
        let ax = g.const_i64(&[1]);
        x = g.op1("Unsqueeze", &[x, ax], vec![]);
    } else if c.batch_first {
        x = g.op1("Transpose", &[x], vec![attr_ints("perm", &[1, 0, 2])]);
    }
    let mut h_parts = Vec::new();
    let mut c_parts = Vec::new();
    for layer in 0..c.layers {
        let mut w = Vec::new();
        let mut r = Vec::new();
        let mut b = Vec::new();
        for d in 0..c.dirs {
            let base = 1 + n_state + (layer * c.dirs + d) * per_dir;
            let reorder = |this: &mut S, t: &str| -> String {
                let sizes = this.const_i64(&vec![c.hidden as i64; gates]);
                let parts: Vec<String> = (0..gates)
                    .map(|g| this.fresh(&format!("gate{g}")))
                    .collect();
                this.node(
                    "Split",
                    &[t.to_string(), sizes],
                    &parts,
                    vec![attr_i("axis", 0)],
                );
                let ordered: Vec<String> = order.iter().map(|&i| parts[i].clone()).collect();
                this.op1("Concat", &ordered, vec![attr_i("axis", 0)])
            };
            let unsq = |this: &mut S, t: String| -> String {
                let ax = this.const_i64(&[0]);
                this.op1("Unsqueeze", &[t, ax], vec![])
            };
            let wi = reorder(g, &ins[base]);
            w.push(unsq(g, wi));
            let wh = reorder(g, &ins[base + 1]);
            r.push(unsq(g, wh));
            if c.bias {
                let bi = reorder(g, &ins[base + 2]);
                let bh = reorder(g, &ins[base + 3]);
                let cat = g.op1("Concat", &[bi, bh], vec![attr_i("axis", 0)]);
                b.push(unsq(g, cat));
            }
        }
        let stack = |this: &mut S, v: Vec<String>| -> String {
            if v.len() == 1 {
                v.into_iter().next().unwrap_or_default()
            } else {
                this.op1("Concat", &v, vec![attr_i("axis", 0)])
            }
        };
        let w = stack(g, w);
        let r = stack(g, r);
        let b = if c.bias { stack(g, b) } else { String::new() };
        let mut inputs = vec![x.clone(), w, r, b, String::new()];
        if c.has_state {
            // Rows layer*dirs .. (layer+1)*dirs of h0 (and c0).
            let (s, e, a) = (
                g.const_i64(&[(layer * c.dirs) as i64]),
                g.const_i64(&[((layer + 1) * c.dirs) as i64]),
                g.const_i64(&[0]),
            );
            let state_of = |this: &mut S, v: &str| -> String {
                let v = if c.unbatched {
                    let ax = this.const_i64(&[1]);
                    this.op1("Unsqueeze", &[v.to_string(), ax], vec![])
                } else {
                    v.to_string()
                };
                this.op1("Slice", &[v, s.clone(), e.clone(), a.clone()], vec![])
            };
            inputs.push(state_of(g, &ins[1]));
            if lstm {
                inputs.push(state_of(g, &ins[2]));
            }
        }
        while inputs.last().is_some_and(String::is_empty) {
            inputs.pop();
        }
        let y = g.fresh("rnn_y");
        let yh = g.fresh("rnn_h");
        let yc = g.fresh("rnn_c");
        let mut node_outs = vec![y.clone(), yh.clone()];
        if lstm {
            node_outs.push(yc.clone());
        }
        let mut attrs = vec![
            attr_i("hidden_size", c.hidden as i64),
            attr_s(
                "direction",
                if c.dirs == 2 {
                    "bidirectional"
                } else {
                    "forward"
                },
            ),
        ];
        match c.mode {
            RnnKind::Relu => attrs.push(attr_strings("activations", &vec!["Relu"; c.dirs])),
            RnnKind::Tanh => attrs.push(attr_strings("activations", &vec!["Tanh"; c.dirs])),
            RnnKind::Gru => attrs.push(attr_i("linear_before_reset", 1)),
            RnnKind::Lstm => {}
        }
        g.node(op, &inputs, &node_outs, attrs);
        h_parts.push(yh);
        c_parts.push(yc);
        // Y [T, dirs, N, H] → [T, N, dirs * H].
        let yt = g.op1("Transpose", &[y], vec![attr_ints("perm", &[0, 2, 1, 3])]);
        let t = g.dim_of(&yt, 0);
        let n = g.dim_of(&yt, 1);
        let f = g.const_i64(&[(c.dirs * c.hidden) as i64]);
        let shape = g.op1("Concat", &[t, n, f], vec![attr_i("axis", 0)]);
        x = g.op1("Reshape", &[yt, shape], vec![]);
    }
    // Outputs in PyTorch's layout.
    let y = if c.unbatched {
        let ax = g.const_i64(&[1]);
        g.op1("Squeeze", &[x, ax], vec![])
    } else if c.batch_first {
        g.op1("Transpose", &[x], vec![attr_ints("perm", &[1, 0, 2])])
    } else {
        x
    };
    g.node("Identity", &[y], &outs[..1], vec![]);
    let finish_state = |this: &mut S, parts: Vec<String>, out: &str| {
        let cat = if parts.len() == 1 {
            parts.into_iter().next().unwrap_or_default()
        } else {
            this.op1("Concat", &parts, vec![attr_i("axis", 0)])
        };
        if c.unbatched {
            let ax = this.const_i64(&[1]);
            this.node("Squeeze", &[cat, ax], &[out.to_string()], vec![]);
        } else {
            this.node("Identity", &[cat], &[out.to_string()], vec![]);
        }
    };
    finish_state(g, h_parts, &outs[1]);
    if lstm {
        finish_state(g, c_parts, &outs[2]);
    }
}
