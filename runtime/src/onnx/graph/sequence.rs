//! Attention, recurrent layers and the transformer encoder layer in the graph writer.

use super::*;

impl GraphWriter {
    /// `nn::MultiheadAttention` (`field`) on `q`, `k`, `v` without a mask: projections,
    /// heads split with `Reshape`/`Transpose`, scaled scores, softmax, the output
    /// projection; its parameters under their state-dict names.
    pub fn multihead_attention(
        &mut self,
        m: &crate::nn::MultiheadAttention,
        field: &str,
        q: &Value,
        k: &Value,
        v: &Value,
        causal: bool,
    ) -> Value {
        self.scope.push(field.to_string());
        let out = self.attention_in_scope(m, q, k, v, causal);
        self.scope.pop();
        out
    }

    fn attention_in_scope(
        &mut self,
        m: &crate::nn::MultiheadAttention,
        q: &Value,
        k: &Value,
        v: &Value,
        causal: bool,
    ) -> Value {
        if causal {
            self.unsupported("MultiheadAttention", "a causal mask (`is_causal`) has no lowering from `network!` yet; export with `onnx::export` (traced)");
            return q.clone();
        }
        if m.training && m.dropout > 0.0 {
            self.unsupported(
                "MultiheadAttention",
                &format!(
                    "dropout {} in training mode; call `eval()` before exporting",
                    m.dropout
                ),
            );
            return q.clone();
        }
        let (e, h) = (m.embed_dim, m.num_heads);
        let d = e / h;
        let dtype = q.dtype;
        // Batch-first inside.
        let bf = |g: &mut Self, x: &Value| {
            if m.batch_first {
                x.clone()
            } else {
                g.permute(x, &[1, 0, 2])
            }
        };
        let (q, k, v) = (bf(self, q), bf(self, k), bf(self, v));
        let bias = m
            .in_proj_bias
            .as_ref()
            .map(|b| self.param("in_proj_bias", b));
        let slice = |g: &mut Self, t: &str, i: usize| {
            let (s, e_) = (
                g.const_i64(&[(i * e) as i64]),
                g.const_i64(&[((i + 1) * e) as i64]),
            );
            let axis = g.const_i64(&[0]);
            g.node("Slice", &[t, &s, &e_, &axis], &[], Vec::new(), dtype)
                .name
        };
        let packed = m
            .in_proj_weight
            .as_ref()
            .map(|w| self.param("in_proj_weight", w));
        let mut heads = Vec::new();
        for (i, (x, own)) in [
            (&q, &m.q_proj_weight),
            (&k, &m.k_proj_weight),
            (&v, &m.v_proj_weight),
        ]
        .into_iter()
        .enumerate()
        {
            let w = match (&packed, own) {
                (Some(p), _) => slice(self, p, i),
                (None, Some(w)) => {
                    self.param(["q_proj_weight", "k_proj_weight", "v_proj_weight"][i], w)
                }
                (None, None) => {
                    self.unsupported("MultiheadAttention", "no projection weights");
                    return q.clone();
                }
            };
            let wt = self.node(
                "Transpose",
                &[&w],
                &[("perm", Attr::Ints(vec![1, 0]))],
                Vec::new(),
                dtype,
            );
            let mut y = self.node("MatMul", &[&x.name, &wt.name], &[], Vec::new(), dtype);
            if let Some(b) = &bias {
                let b = slice(self, b, i);
                y = self.node("Add", &[&y.name, &b], &[], Vec::new(), dtype);
            }
            // [N, L, E] → [N, L, H, D] → [N, H, L, D]
            let split = self.const_i64(&[0, 0, h as i64, d as i64]);
            let y = self.node("Reshape", &[&y.name, &split], &[], Vec::new(), dtype);
            heads.push(self.node(
                "Transpose",
                &[&y.name],
                &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
                Vec::new(),
                dtype,
            ));
        }
        let kt = self.node(
            "Transpose",
            &[&heads[1].name],
            &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
            Vec::new(),
            dtype,
        );
        let scores = self.node(
            "MatMul",
            &[&heads[0].name, &kt.name],
            &[],
            Vec::new(),
            dtype,
        );
        let scale = self.const_scalar(1.0 / (d as f64).sqrt(), dtype);
        let scores = self.node("Mul", &[&scores.name, &scale], &[], Vec::new(), dtype);
        let p = self.softmax(&scores, -1, false);
        let o = self.node("MatMul", &[&p.name, &heads[2].name], &[], Vec::new(), dtype);
        let o = self.node(
            "Transpose",
            &[&o.name],
            &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
            Vec::new(),
            dtype,
        );
        let merge = self.const_i64(&[0, 0, e as i64]);
        let o = self.node("Reshape", &[&o.name, &merge], &[], Vec::new(), dtype);
        let y = self.layer(&m.out_proj, "out_proj", &[&o]).remove(0);
        bf(self, &y)
    }
}

impl NodeSink for GraphWriter {
    fn fresh(&mut self, stem: &str) -> String {
        GraphWriter::fresh(self, stem)
    }
    fn node(
        &mut self,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<pb::AttributeProto>,
    ) {
        let name = format!("{}_node", self.fresh(op));
        self.nodes.push(node_proto(
            name,
            op,
            inputs.to_vec(),
            outputs.to_vec(),
            attrs,
        ));
    }
    fn const_i64(&mut self, values: &[i64]) -> String {
        GraphWriter::const_i64(self, values)
    }
}

impl GraphWriter {
    /// `op` with `n` outputs of unknown shape.
    pub fn node_n(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        n: usize,
        dtype: DType,
    ) -> Vec<Value> {
        let first = self.node(op, inputs, attrs, Vec::new(), dtype);
        let mut outs = vec![first];
        let node = self.nodes.len() - 1;
        for _ in 1..n {
            let name = self.fresh(&format!("{op}_out"));
            self.nodes[node].output.push(name.clone());
            outs.push(Value {
                name,
                shape: Vec::new(),
                dtype,
            });
        }
        outs
    }

    /// `x.chunk(n, dim)`: `n` equal parts (ONNX `Split` without sizes).
    pub fn chunk(&mut self, x: &Value, n: usize, dim: isize) -> Vec<Value> {
        self.node_n(
            "Split",
            &[&x.name],
            &[("axis", Attr::Int(dim as i64))],
            n,
            x.dtype,
        )
    }
}

impl ExportLayer for Recurrent {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let (mode, config, params, training) = self.export_parts();
        let why = if inputs.is_empty() || inputs.len() > 3 {
            Some("takes the sequence and optionally h0 (and c0)")
        } else if config.proj_size > 0 {
            Some("an LSTM with proj_size")
        } else if training && config.dropout > 0.0 && config.num_layers > 1 {
            Some("dropout between layers in training mode; call `eval()` first")
        } else {
            None
        };
        if let Some(why) = why {
            g.unsupported("Recurrent", why);
            return inputs.to_vec();
        }
        let lstm = mode == RnnMode::Lstm;
        let x = &inputs[0];
        let mut ins: Vec<String> = inputs.iter().map(|v| v.name.clone()).collect();
        ins.extend(params.iter().map(|(name, t)| g.param(name, t)));
        let outs: Vec<String> = (0..2 + lstm as usize)
            .map(|i| g.fresh(&format!("rnn_out{i}")))
            .collect();
        let c = RnnExport {
            mode: match mode {
                RnnMode::Tanh => RnnKind::Tanh,
                RnnMode::Relu => RnnKind::Relu,
                RnnMode::Lstm => RnnKind::Lstm,
                RnnMode::Gru => RnnKind::Gru,
            },
            layers: config.num_layers,
            hidden: config.hidden_size,
            dirs: if config.bidirectional { 2 } else { 1 },
            batch_first: config.batch_first,
            bias: config.bias,
            has_state: inputs.len() > 1,
            unbatched: x.rank() == 2,
        };
        rnn_nodes(g, &c, &ins, &outs);
        outs.into_iter()
            .map(|name| Value {
                name,
                shape: Vec::new(),
                dtype: x.dtype,
            })
            .collect()
    }
}

impl ExportLayer for crate::nn::TransformerEncoderLayer {
    fn export_layer(&self, g: &mut GraphWriter, inputs: &[Value]) -> Vec<Value> {
        let Some(src) = one(g, "TransformerEncoderLayer", inputs) else {
            return inputs.to_vec();
        };
        let c = &self.config;
        if self.training && c.dropout > 0.0 {
            g.unsupported(
                "TransformerEncoderLayer",
                &format!(
                    "dropout {} in training mode; call `eval()` before exporting",
                    c.dropout
                ),
            );
            return vec![src.clone()];
        }
        let sa = |g: &mut GraphWriter, x: &Value| {
            g.multihead_attention(&self.self_attn, "self_attn", x, x, x, false)
        };
        let ff = |g: &mut GraphWriter, x: &Value| {
            let h = g.layer(&self.linear1, "linear1", &[x]).remove(0);
            let h = g.activation(c.activation.name(), &h, 0.0);
            g.layer(&self.linear2, "linear2", &[&h]).remove(0)
        };
        let norm = |g: &mut GraphWriter, n: &LayerNorm, field: &str, x: &Value| {
            g.layer(n, field, &[x]).remove(0)
        };
        let out = if c.norm_first {
            let n1 = norm(g, &self.norm1, "norm1", src);
            let a = sa(g, &n1);
            let x = g.binary("Add", src, &a);
            let n2 = norm(g, &self.norm2, "norm2", &x);
            let f = ff(g, &n2);
            g.binary("Add", &x, &f)
        } else {
            let a = sa(g, src);
            let x = g.binary("Add", src, &a);
            let x = norm(g, &self.norm1, "norm1", &x);
            let f = ff(g, &x);
            let y = g.binary("Add", &x, &f);
            norm(g, &self.norm2, "norm2", &y)
        };
        vec![out]
    }
}
