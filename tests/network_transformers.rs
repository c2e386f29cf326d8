//! A BERT encoder and a GPT-2 decoder written end to end in `network!`, as Hugging Face
//! writes them: embeddings with the positions computed inside (`arange(T)`), blocks that
//! take several inputs, blocks repeated (`[Block<..>; n]`), the [CLS] token and the last
//! step selected (`select`). Each equals a forward written by hand over the same modules.

use ferrograd::nn::{MhaArgs, Module};
use ferrograd::prelude::*;

network! {
    /// Word, position and token-type embeddings, summed and normalised; the position ids
    /// are `0..T`, made inside.
    pub struct BertEmbeddings(ids: [N, T]: i64, types: [N, T]: i64) -> [N, T, 32] {
        let summed = word_embeddings: Embedding(100 -> 32, padding_idx = 0)(ids)
            + position_embeddings: Embedding(64 -> 32)(arange(T))
            + token_type_embeddings: Embedding(2 -> 32)(types);
        summed -> norm: LayerNorm(32) -> dropout: Dropout(0.1)
    }

    /// A post-norm encoder layer (BERT's): attention with a key-padding-free mask-less
    /// path, residual, norm, GELU feed-forward, residual, norm.
    pub struct BertLayer<const D: usize, const HEADS: usize>(x: [N, T, D]) -> [N, T, D] {
        let a = attention: MultiheadAttention(D, HEADS, batch_first = true)(x);
        let h = x + a -> attention_norm: LayerNorm(D);
        let f = h -> intermediate: Linear(D -> 4 * D) -> gelu -> output: Linear(4 * D -> D);
        h + f -> output_norm: LayerNorm(D)
    }

    /// `BertModel`: the sequence output and the pooled [CLS] token.
    pub struct Bert(ids: [N, T]: i64, types: [N, T]: i64) -> ([N, T, 32], [N, 32]) {
        let h = embeddings: BertEmbeddings(ids, types);
        let sequence = h -> encoder: [BertLayer<32, 4>; 2];
        let pooled = select(dim = 1, index = 0)(sequence) -> pooler: Linear(32 -> 32) -> tanh;
        (sequence, pooled)
    }
}

network! {
    /// A pre-norm GPT-2 block: causal self-attention and a tanh-GELU MLP, each around a
    /// residual.
    pub struct Gpt2Block<const D: usize, const HEADS: usize>(x: [N, T, D]) -> [N, T, D] {
        let a = x -> ln_1: LayerNorm(D) -> attn: MultiheadAttention(D, HEADS, batch_first = true, is_causal = true);
        let h = x + a;
        let m = h -> ln_2: LayerNorm(D) -> c_fc: Linear(D -> 4 * D) -> gelu_tanh -> c_proj: Linear(4 * D -> D);
        h + m
    }

    /// GPT-2: token and learned position embeddings (`wpe` indexed by `arange(T)`), two
    /// blocks, the final norm, and the next-token logits of the last step.
    pub struct Gpt2(ids: [N, T]: i64) -> [N, 100] {
        let h = wte: Embedding(100 -> 32)(ids) + wpe: Embedding(64 -> 32)(arange(T));
        let last = h -> blocks: [Gpt2Block<32, 4>; 2] -> ln_f: LayerNorm(32);
        select(dim = 1, index = -1)(last) -> lm_head: Linear(32 -> 100, bias = false)
    }
}

fn ids(n: usize, t: usize, seed: usize) -> Tensor {
    Tensor::from_vec(
        (0..n * t)
            .map(|i| ((i * 37 + seed) % 99 + 1) as i64)
            .collect(),
        &[n, t],
    )
}

fn positions(n: usize, t: usize) -> Tensor {
    Tensor::from_vec((0..n * t).map(|i| (i % t) as i64).collect(), &[n, t])
}

fn bert_layer_by_hand<const D: usize, const H: usize>(l: &BertLayer<D, H>, x: &Tensor) -> Tensor {
    let a = l.attention.forward(x, x, x);
    let h = l.attention_norm.forward(&x.add(&a));
    let f = l.output.forward(&l.intermediate.forward(&h).gelu());
    l.output_norm.forward(&h.add(&f))
}

#[test]
fn bert_in_network_equals_its_hand_written_forward() {
    manual_seed(41);
    let mut bert = Bert::new(&Device::Cpu);
    bert.eval();
    assert_eq!(Bert::NUM_PARAMETERS, bert.num_parameters());
    let keys: Vec<String> = bert.state_dict().into_keys().collect();
    for key in [
        "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "encoder.0.attention.in_proj_weight",
        "encoder.1.output_norm.bias",
        "pooler.weight",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} in {keys:?}");
    }
    let (n, t) = (3, 7);
    let (x, types) = (
        ids(n, t, 5),
        Tensor::zeros(&[n, t], DType::I64, &Device::Cpu),
    );
    let (sequence, pooled) = bert.forward(&x, &types);
    let e = &bert.embeddings;
    let emb = e
        .word_embeddings
        .forward(&x)
        .add(&e.position_embeddings.forward(&positions(n, t)))
        .add(&e.token_type_embeddings.forward(&types));
    let mut h = e.norm.forward(&emb);
    for layer in &bert.encoder {
        h = bert_layer_by_hand(layer, &h);
    }
    assert!(sequence.allclose(&h, 1e-5, 1e-5));
    let cls = bert.pooler.forward(&h.select(1, 0)).tanh();
    assert!(pooled.allclose(&cls, 1e-5, 1e-5));
    // Another length: the positions follow T.
    let (sequence, _) = bert.forward(
        &ids(2, 4, 9),
        &Tensor::ones(&[2, 4], DType::I64, &Device::Cpu),
    );
    assert_eq!(sequence.shape(), &[2, 4, 32]);
}

#[test]
fn gpt2_in_network_equals_its_hand_written_causal_forward() {
    manual_seed(42);
    let mut gpt = Gpt2::new(&Device::Cpu);
    gpt.eval();
    assert_eq!(Gpt2::NUM_PARAMETERS, gpt.num_parameters());
    let (n, t) = (2, 6);
    let x = ids(n, t, 3);
    let logits = gpt.forward(&x);
    assert_eq!(logits.shape(), &[n, 100]);
    let by_hand = |args: &MhaArgs| {
        let mut h = gpt.wte.forward(&x).add(&gpt.wpe.forward(&positions(n, t)));
        for b in &gpt.blocks {
            let y = b.ln_1.forward(&h);
            let a = b.attn.forward_with(&y, &y, &y, args).0;
            let h1 = h.add(&a);
            let m = b
                .c_proj
                .forward(&b.c_fc.forward(&b.ln_2.forward(&h1)).gelu_tanh());
            h = h1.add(&m);
        }
        gpt.lm_head.forward(&gpt.ln_f.forward(&h).select(1, t - 1))
    };
    let causal = MhaArgs {
        is_causal: true,
        ..MhaArgs::default()
    };
    assert!(logits.allclose(&by_hand(&causal), 1e-5, 1e-5));
    // The comparison tells causal attention from full attention.
    assert!(!logits.allclose(&by_hand(&MhaArgs::default()), 1e-3, 1e-3));
}
