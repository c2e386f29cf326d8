//! Text generation for decoder models (`model.generate(..)`): the prompt is run once
//! (prefill) and every new token after it one step at a time over a KV cache.
//!
//! The logits processors run in `transformers`' order — repetition penalty,
//! temperature, top-k, top-p — then the next token is the argmax (greedy) or a sample
//! from a seeded generator (reproducible). Rows of a batch are left-padded
//! (`attention_mask` 0 on the pads); a row that emits a stop token is finished and
//! continues with the pad id, and generation ends when every row is.

use ferrograd::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A decoder that generation can drive.
pub trait CausalLM {
    /// An empty cache (keys and values of every layer, kept between steps).
    fn new_cache(&self) -> KvCache;

    /// Runs `ids` `[batch, len]` (int64) at `positions` `[batch, len]` after what
    /// `cache` holds, `mask` `[batch, cached + len]` marking real tokens (1) and pads
    /// (0); appends the new keys and values to `cache`. Returns the next-token logits
    /// `[batch, vocab]` of the last position when `last_only`, else `[batch, len,
    /// vocab]`.
    fn forward_cached(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: &mut KvCache,
        last_only: bool,
    ) -> Tensor;

    /// The device the model's weights are on.
    fn device(&self) -> Device;
}

/// Keys and values of every layer of a decoder, `[batch, kv_heads, cached, head_dim]`
/// each (the cache of every decoder of this crate).
///
/// Each layer keeps its keys and values in buffers with room to spare (rows and
/// positions, like a `Vec`'s capacity): a step's new keys are written in place after the
/// cached ones, and attention reads the filled part as a view, so a decode step copies
/// only its own keys, not the whole cache. [`KvCache::reserve`] sizes the buffers for a
/// known bound (`generate` reserves the prompt and `max_new_tokens`; the server's
/// running batch reserves its batch limit and the context once and reuses the buffers
/// for every request after). Where gradients flow through the cache or a forward is
/// traced for export, steps are concatenated instead, as before.
pub struct KvCache {
    pub(crate) layers: Vec<Option<LayerKv>>,
    /// Rows and positions to make room for when buffers are made.
    reserved: (usize, usize),
}

/// One layer's cached keys and values: buffers `[row capacity, heads, position capacity,
/// head_dim]`, of which rows `..rows` and positions `..len` hold the cache.
pub(crate) struct LayerKv {
    k: Tensor,
    v: Tensor,
    rows: usize,
    len: usize,
    /// Whether `k` and `v` are this cache's own buffers (written in place), not a step's
    /// tensors kept as they came (a view into the projection, maybe in a graph).
    owned: bool,
}

/// The region `rows` × `from..from + len` of a buffer.
fn region(buffer: &Tensor, rows: usize, from: usize, len: usize) -> Tensor {
    buffer.narrow(0, 0, rows).narrow(2, from, len)
}

/// Whether a step must be recorded (gradients flow, or an export traces it): then the
/// cache concatenates, so the graph sees every step.
fn recorded(k: &Tensor, v: &Tensor) -> bool {
    ferrograd::onnx::is_tracing()
        || (ferrograd::prelude::is_grad_enabled()
            && (k.requires_grad_flag() || v.requires_grad_flag()))
}

impl LayerKv {
    fn keys(&self) -> Tensor {
        region(&self.k, self.rows, 0, self.len)
    }

    fn values(&self) -> Tensor {
        region(&self.v, self.rows, 0, self.len)
    }

    /// (rows, positions) the buffers hold.
    fn capacity(&self) -> (usize, usize) {
        (self.k.shape()[0], self.k.shape()[2])
    }

    /// Makes room for `rows` × `positions` (contents kept in place): new buffers of at
    /// least the reservation, or double the old size, when the old ones are too small.
    fn make_room(&mut self, rows: usize, positions: usize, reserved: (usize, usize)) {
        let (row_cap, pos_cap) = self.capacity();
        if self.owned && rows <= row_cap && positions <= pos_cap {
            return;
        }
        let grown = |need: usize, cap: usize, reserve: usize| {
            if need <= cap {
                cap
            } else {
                need.max(reserve).max(2 * cap)
            }
        };
        let rows_to = grown(rows, row_cap, reserved.0);
        let pos_to = grown(positions, pos_cap, reserved.1);
        let grow = |buffer: &Tensor| {
            let mut shape = buffer.shape().to_vec();
            shape[0] = rows_to;
            shape[2] = pos_to;
            let fresh = Tensor::zeros(&shape, buffer.dtype(), &buffer.device());
            region(&fresh, self.rows, 0, self.len).copy_(&region(buffer, self.rows, 0, self.len));
            fresh
        };
        self.k = grow(&self.k);
        self.v = grow(&self.v);
        self.owned = true;
    }

    /// A layer holding `k`, `v` `[rows, heads, len, head_dim]`: in buffers of the
    /// reservation when there is one and the step is not recorded, else the tensors
    /// themselves (no copy).
    fn from_step(k: Tensor, v: Tensor, reserved: (usize, usize)) -> LayerKv {
        let (rows, len) = (k.shape()[0], k.shape()[2]);
        let record = recorded(&k, &v);
        let mut layer = LayerKv {
            k,
            v,
            rows,
            len,
            owned: false,
        };
        if !record && (reserved.0 > rows || reserved.1 > len) {
            let (step_k, step_v) = (layer.k.clone(), layer.v.clone());
            // Empty buffers of the step's shape, grown to the reservation.
            layer.rows = 0;
            layer.len = 0;
            layer.make_room(rows.max(reserved.0), len.max(reserved.1), reserved);
            region(&layer.k, rows, 0, len).copy_(&step_k);
            region(&layer.v, rows, 0, len).copy_(&step_v);
            layer.rows = rows;
            layer.len = len;
        }
        layer
    }
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> KvCache {
        KvCache {
            layers: (0..layers).map(|_| None).collect(),
            reserved: (0, 0),
        }
    }

    /// Sizes the buffers for `rows` sequences of up to `positions` cached positions
    /// (`Vec::reserve`'s habit): buffers made or grown after this have at least that
    /// room, so steps within the bound write in place and never reallocate.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// use ferrograd_models::generation::CausalLM;
    /// use ferrograd_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
    /// let config = Gpt2Config { vocab_size: 64, n_positions: 32, n_embd: 16, n_layer: 2, n_head: 2, ..Default::default() };
    /// let model = Gpt2LMHeadModel::new(&config, &Device::Cpu);
    /// let mut cache = model.new_cache();
    /// cache.reserve(1, 16);
    /// let ids = Tensor::from_vec(vec![1i64, 2, 3], &[1, 3]);
    /// let pos = Tensor::from_vec(vec![0i64, 1, 2], &[1, 3]);
    /// let mask = Tensor::ones(&[1, 3], DType::I64, &Device::Cpu);
    /// no_grad(|| model.forward_cached(&ids, &pos, &mask, &mut cache, true));
    /// assert_eq!((cache.len(), cache.capacity()), (3, (1, 16)));
    /// ```
    pub fn reserve(&mut self, rows: usize, positions: usize) {
        self.reserved = (rows, positions);
        let reserved = self.reserved;
        for layer in self.layers.iter_mut().flatten() {
            let (r, p) = (layer.rows.max(rows), layer.len.max(positions));
            layer.make_room(r, p, reserved);
        }
    }

    /// The (rows, positions) the buffers have room for; `(0, 0)` before the first step.
    pub fn capacity(&self) -> (usize, usize) {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or((0, 0), LayerKv::capacity)
    }

    /// Forgets every cached position and row, keeping the buffers for reuse.
    pub fn clear(&mut self) {
        for layer in self.layers.iter_mut().flatten() {
            layer.rows = 0;
            layer.len = 0;
        }
    }

    /// The number of cached positions.
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.len)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows in the cache: its batch size (0 when nothing is cached).
    pub fn batch_size(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.rows)
    }

    /// Keeps the rows `rows`, in that order (sequences leaving a running batch); none
    /// left empties the cache. The buffers are kept.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// use ferrograd_models::generation::{CausalLM, GenerationConfig};
    /// use ferrograd_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
    /// let config = Gpt2Config { vocab_size: 64, n_positions: 32, n_embd: 16, n_layer: 2, n_head: 2, ..Default::default() };
    /// let model = Gpt2LMHeadModel::new(&config, &Device::Cpu);
    /// let mut cache = model.new_cache();
    /// let ids = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]);
    /// let pos = Tensor::from_vec(vec![0i64, 1, 2, 0, 1, 2], &[2, 3]);
    /// let mask = Tensor::ones(&[2, 3], DType::I64, &Device::Cpu);
    /// model.forward_cached(&ids, &pos, &mask, &mut cache, true);
    /// cache.select_rows(&[1]);
    /// assert_eq!((cache.batch_size(), cache.len()), (1, 3));
    /// cache.pad_left(2);
    /// assert_eq!(cache.len(), 5);
    /// cache.trim_left(2);
    /// assert_eq!(cache.len(), 3);
    /// ```
    pub fn select_rows(&mut self, rows: &[usize]) {
        if rows.is_empty() {
            self.clear();
            return;
        }
        let index: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let index = Tensor::from_vec(index, &[rows.len()]);
        // Every layer's cache is on one device: the index moves there once.
        let mut on_device: Option<Tensor> = None;
        let reserved = self.reserved;
        for layer in self.layers.iter_mut().flatten() {
            let index = on_device.get_or_insert_with(|| {
                index
                    .to_device(&layer.k.device())
                    .expect("an index tensor on the cache's device")
            });
            let (k, v) = (
                layer.keys().index_select(0, index),
                layer.values().index_select(0, index),
            );
            if recorded(&layer.k, &layer.v) {
                *layer = LayerKv::from_step(k, v, (0, 0));
                continue;
            }
            layer.make_room(rows.len(), layer.len, reserved);
            region(&layer.k, rows.len(), 0, layer.len).copy_(&k);
            region(&layer.v, rows.len(), 0, layer.len).copy_(&v);
            layer.rows = rows.len();
        }
    }

    /// Puts `n` empty positions (zeros, for the caller's mask to hide) before every row's
    /// cached ones: a row joining a batch whose rows are longer. In place when the
    /// buffers have room.
    pub fn pad_left(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let reserved = self.reserved;
        for layer in self.layers.iter_mut().flatten() {
            let (rows, len) = (layer.rows, layer.len);
            if recorded(&layer.k, &layer.v) {
                let pad = |t: &Tensor| {
                    let mut shape = t.shape().to_vec();
                    shape[2] = n;
                    Tensor::cat(&[&Tensor::zeros(&shape, t.dtype(), &t.device()), t], 2)
                };
                *layer = LayerKv::from_step(pad(&layer.keys()), pad(&layer.values()), (0, 0));
                continue;
            }
            layer.make_room(rows, len + n, reserved);
            for buffer in [&layer.k, &layer.v] {
                // `copy_` reads an operand that overlaps its target from a copy.
                region(buffer, rows, n, len).copy_(&region(buffer, rows, 0, len));
                region(buffer, rows, 0, n).zero_();
            }
            layer.len = len + n;
        }
    }

    /// Drops the first `n` cached positions of every row (pads no row needs any more),
    /// in place.
    pub fn trim_left(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let reserved = self.reserved;
        for layer in self.layers.iter_mut().flatten() {
            let (rows, len) = (layer.rows, layer.len);
            let n = n.min(len);
            if recorded(&layer.k, &layer.v) {
                let (k, v) = (
                    layer.keys().narrow(2, n, len - n),
                    layer.values().narrow(2, n, len - n),
                );
                *layer = LayerKv::from_step(k, v, (0, 0));
                continue;
            }
            layer.make_room(rows, len, reserved);
            for buffer in [&layer.k, &layer.v] {
                region(buffer, rows, 0, len - n).copy_(&region(buffer, rows, n, len - n));
            }
            layer.len = len - n;
        }
    }

    /// Appends `other`'s rows after this cache's, copied into this cache's buffers: both
    /// must cache the same number of positions (pad the shorter with
    /// [`KvCache::pad_left`] first), unless this one holds no row.
    #[track_caller]
    pub fn append_rows(&mut self, other: KvCache) {
        assert_eq!(
            self.layers.len(),
            other.layers.len(),
            "KvCache::append_rows: caches of {} and {} layers",
            self.layers.len(),
            other.layers.len()
        );
        let reserved = self.reserved;
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            let Some(theirs) = theirs else { continue };
            let (k, v) = (theirs.keys(), theirs.values());
            match mine {
                None => *mine = Some(LayerKv::from_step(k, v, reserved)),
                Some(layer) if layer.rows == 0 && (recorded(&k, &v) || !layer.owned) => {
                    *layer = LayerKv::from_step(k, v, reserved)
                }
                Some(layer) if recorded(&layer.k, &layer.v) || recorded(&k, &v) => {
                    let cat = |a: Tensor, b: &Tensor| Tensor::cat(&[&a, b], 0);
                    *layer =
                        LayerKv::from_step(cat(layer.keys(), &k), cat(layer.values(), &v), (0, 0));
                }
                Some(layer) => {
                    if layer.rows == 0 {
                        layer.len = theirs.len;
                    }
                    assert_eq!(
                        layer.len, theirs.len,
                        "KvCache::append_rows: caches of {} and {} positions",
                        layer.len, theirs.len
                    );
                    let (at, more) = (layer.rows, theirs.rows);
                    layer.make_room(at + more, layer.len, reserved);
                    layer
                        .k
                        .narrow(0, at, more)
                        .narrow(2, 0, layer.len)
                        .copy_(&k);
                    layer
                        .v
                        .narrow(0, at, more)
                        .narrow(2, 0, layer.len)
                        .copy_(&v);
                    layer.rows = at + more;
                }
            }
        }
    }

    /// Each layer's place in the cache, for a decoder's attention to append to.
    pub(crate) fn layer_slots(&mut self) -> impl Iterator<Item = LayerSlot<'_>> {
        let reserved = self.reserved;
        self.layers
            .iter_mut()
            .map(move |slot| LayerSlot { slot, reserved })
    }
}

/// One layer's place in a [`KvCache`], handed to its attention.
pub(crate) struct LayerSlot<'a> {
    slot: &'a mut Option<LayerKv>,
    reserved: (usize, usize),
}

impl LayerSlot<'_> {
    /// Appends a step's keys and values; returns all of them (see [`append_kv`]).
    #[track_caller]
    pub(crate) fn append(self, k: Tensor, v: Tensor) -> (Tensor, Tensor) {
        append_kv(self.slot, self.reserved, k, v)
    }
}

/// Appends a step's keys and values `[batch, heads, len, head_dim]` to a layer's cached
/// ones (`slot`), returning all of them (what the step attends to): written into the
/// layer's buffers in place, or concatenated where the step is recorded.
#[track_caller]
fn append_kv(
    slot: &mut Option<LayerKv>,
    reserved: (usize, usize),
    k: Tensor,
    v: Tensor,
) -> (Tensor, Tensor) {
    let Some(layer) = slot else {
        let layer = LayerKv::from_step(k, v, reserved);
        let out = (layer.keys(), layer.values());
        *slot = Some(layer);
        return out;
    };
    let (rows, t) = (k.shape()[0], k.shape()[2]);
    assert_eq!(
        layer.rows, rows,
        "KvCache: a step of {rows} rows after a cache of {} rows",
        layer.rows
    );
    if recorded(&k, &v) {
        let k = Tensor::cat(&[&layer.keys(), &k], 2);
        let v = Tensor::cat(&[&layer.values(), &v], 2);
        *slot = Some(LayerKv::from_step(k.clone(), v.clone(), (0, 0)));
        return (k, v);
    }
    let len = layer.len;
    layer.make_room(rows, len + t, reserved);
    region(&layer.k, rows, len, t).copy_(&k);
    region(&layer.v, rows, len, t).copy_(&v);
    layer.len = len + t;
    (layer.keys(), layer.values())
}

/// Every position's logits `[batch, len, vocab]` of `ids` `[batch, len]` at positions
/// `0..len`, `mask` (1 token, 0 pad; all ones if `None`) for right-padded batches: a
/// decoder's `forward`, through its fresh cache.
pub(crate) fn forward_all<M: CausalLM>(model: &M, ids: &Tensor, mask: Option<&Tensor>) -> Tensor {
    let (b, t) = (ids.shape()[0], ids.shape()[1]);
    let device = ids.device();
    let mask = match mask {
        Some(m) => m.clone(),
        None => Tensor::ones(&[b, t], DType::I64, &device),
    };
    let positions = Tensor::arange(0.0, t as f64, 1.0, DType::I64, &device)
        .unsqueeze(0)
        .expand(&[b as isize, t as isize]);
    let mut cache = model.new_cache();
    model.forward_cached(ids, &positions, &mask, &mut cache, false)
}

/// How to generate (`GenerationConfig`).
#[derive(Clone, Debug)]
pub struct GenerationConfig {
    /// New tokens to produce at most.
    pub max_new_tokens: usize,
    /// Sample from the distribution (else greedy).
    pub do_sample: bool,
    /// Divides the logits before sampling (`> 0`).
    pub temperature: f64,
    /// Keep only the `k` most likely tokens when sampling.
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches `p` when sampling.
    pub top_p: Option<f64>,
    /// `> 1` makes tokens already in the sequence less likely (CTRL's penalty).
    pub repetition_penalty: f64,
    /// Tokens that finish a row.
    pub eos_token_ids: Vec<u32>,
    /// The id finished rows continue with (and the prompt's pads).
    pub pad_token_id: u32,
    /// The sampling generator's seed.
    pub seed: u64,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            max_new_tokens: 32,
            do_sample: false,
            temperature: 1.0,
            top_k: None,
            top_p: None,
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            pad_token_id: 0,
            seed: 0,
        }
    }
}

/// Positions of a left-padded batch as `transformers` computes them: the running count
/// of real tokens minus one, and 1 on the pads.
fn positions_of(mask: &[Vec<i64>], from: usize, len: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(mask.len() * len);
    for row in mask {
        let mut count = 0i64;
        for (j, &m) in row.iter().enumerate().take(from + len) {
            count += m;
            if j >= from {
                out.push(if m == 0 { 1 } else { count - 1 });
            }
        }
    }
    out
}

/// Generates after `prompt` `[batch, len]` (int64 ids; left-padded rows marked by
/// `attention_mask`, all real if `None`), calling `on_step` with each step's new token
/// of every row (streaming). Returns `[batch, len + new]`: the prompt and what was
/// generated, as `generate` does.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd_models::generation::{GenerationConfig, generate};
/// use ferrograd_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
/// manual_seed(0);
/// let config = Gpt2Config { vocab_size: 64, n_positions: 32, n_embd: 16, n_layer: 2, n_head: 2, ..Default::default() };
/// let model = Gpt2LMHeadModel::new(&config, &Device::Cpu);
/// let prompt = Tensor::from_vec(vec![1i64, 2, 3], &[1, 3]);
/// let mut streamed = Vec::new();
/// let out = generate(&model, &prompt, None, &GenerationConfig { max_new_tokens: 5, ..Default::default() }, |t| streamed.push(t[0]));
/// assert_eq!(out.shape(), &[1, 8]);
/// assert_eq!(streamed.len(), 5);
/// ```
#[track_caller]
pub fn generate<M: CausalLM>(
    model: &M,
    prompt: &Tensor,
    attention_mask: Option<&Tensor>,
    config: &GenerationConfig,
    mut on_step: impl FnMut(&[u32]),
) -> Tensor {
    assert!(
        prompt.dim() == 2 && prompt.dtype() == DType::I64,
        "generate: the prompt must be [batch, len] int64 ids, got {:?} {:?}",
        prompt.shape(),
        prompt.dtype()
    );
    assert!(
        config.temperature > 0.0,
        "generate: temperature must be > 0, got {}",
        config.temperature
    );
    let (b, t) = (prompt.shape()[0], prompt.shape()[1]);
    let device = model.device();
    let mut tokens: Vec<Vec<i64>> = {
        let flat = prompt.to_vec::<i64>();
        flat.chunks(t.max(1)).map(<[i64]>::to_vec).collect()
    };
    let mut mask: Vec<Vec<i64>> = match attention_mask {
        Some(m) => {
            assert_eq!(
                m.shape(),
                prompt.shape(),
                "generate: attention_mask {:?} and prompt {:?} differ",
                m.shape(),
                prompt.shape()
            );
            let flat = m.to_dtype(DType::I64).to_vec::<i64>();
            flat.chunks(t.max(1)).map(<[i64]>::to_vec).collect()
        }
        None => vec![vec![1; t]; b],
    };
    let to_dev = |v: Vec<i64>, shape: &[usize]| {
        let x = Tensor::from_vec(v, shape);
        if device == Device::Cpu {
            x
        } else {
            x.to_device(&device)
                .expect("generate: moving ids to the model's device")
        }
    };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut cache = model.new_cache();
    // Room for the prompt and every new token: no step reallocates.
    cache.reserve(b, t + config.max_new_tokens);
    let mut finished = vec![false; b];
    let mut next_ids: Vec<i64> = tokens.iter().flatten().copied().collect();
    let mut step_len = t;
    ferrograd::prelude::no_grad(|| {
        for _ in 0..config.max_new_tokens {
            let cached = mask[0].len() - step_len;
            let positions = positions_of(&mask, cached, step_len);
            let mask_t = to_dev(
                mask.iter().flatten().copied().collect(),
                &[b, mask[0].len()],
            );
            let logits = model.forward_cached(
                &to_dev(std::mem::take(&mut next_ids), &[b, step_len]),
                &to_dev(positions, &[b, step_len]),
                &mask_t,
                &mut cache,
                true,
            );
            let logits = logits
                .to_dtype(DType::F32)
                .to_device(&Device::Cpu)
                .expect("generate: logits to the CPU");
            let v = logits.shape()[1];
            let flat = logits.to_vec::<f32>();
            let mut step = Vec::with_capacity(b);
            for (r, row) in flat.chunks(v).enumerate() {
                let id = if finished[r] {
                    config.pad_token_id
                } else {
                    let mut scores = row.to_vec();
                    choose(&mut scores, &tokens[r], config, &mut rng)
                };
                if config.eos_token_ids.contains(&id) {
                    finished[r] = true;
                }
                step.push(id);
            }
            on_step(&step);
            for (r, &id) in step.iter().enumerate() {
                tokens[r].push(id as i64);
                mask[r].push(1);
                next_ids.push(id as i64);
            }
            step_len = 1;
            if finished.iter().all(|&f| f) {
                break;
            }
        }
    });
    let len = tokens[0].len();
    Tensor::from_vec(tokens.into_iter().flatten().collect(), &[b, len])
}

/// The next token of one row from its logits `scores` and the row so far.
fn choose(
    scores: &mut [f32],
    seen: &[i64],
    config: &GenerationConfig,
    rng: &mut ChaCha8Rng,
) -> u32 {
    if config.repetition_penalty != 1.0 {
        let p = config.repetition_penalty as f32;
        let mut done = vec![false; scores.len()];
        for &id in seen {
            let i = id as usize;
            if i < scores.len() && !done[i] {
                done[i] = true;
                scores[i] = if scores[i] < 0.0 {
                    scores[i] * p
                } else {
                    scores[i] / p
                };
            }
        }
    }
    if !config.do_sample {
        // The first maximum, as torch.argmax.
        let mut best = 0;
        for (i, &s) in scores.iter().enumerate() {
            if s > scores[best] {
                best = i;
            }
        }
        return best as u32;
    }
    let inv_t = (1.0 / config.temperature) as f32;
    for s in scores.iter_mut() {
        *s *= inv_t;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut keep = order.len();
    if let Some(k) = config.top_k {
        keep = keep.min(k.max(1));
    }
    let max = scores[order[0]];
    let mut probs: Vec<f64> = order[..keep]
        .iter()
        .map(|&i| ((scores[i] - max) as f64).exp())
        .collect();
    let total: f64 = probs.iter().sum();
    for p in &mut probs {
        *p /= total;
    }
    if let Some(top_p) = config.top_p {
        // The smallest prefix whose mass reaches top_p (at least one token).
        let mut mass = 0.0;
        let mut n = 0;
        while n < probs.len() {
            mass += probs[n];
            n += 1;
            if mass >= top_p {
                break;
            }
        }
        probs.truncate(n.max(1));
        let total: f64 = probs.iter().sum();
        for p in &mut probs {
            *p /= total;
        }
    }
    let mut u: f64 = rng.random::<f64>();
    for (k, p) in probs.iter().enumerate() {
        if u < *p {
            return order[k] as u32;
        }
        u -= p;
    }
    order[probs.len() - 1] as u32
}

#[cfg(test)]
mod tests;
