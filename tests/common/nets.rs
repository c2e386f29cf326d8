//! Networks shared by `tests/network_models.rs` (their forward and state-dict keys
//! against PyTorch), `tests/network_graph.rs` and `tests/onnx_export.rs` (their ONNX
//! export).

use ferrograd::prelude::*;

network! {
    /// Two 3x3 convolutions with batch norm and ReLU (`nn.Sequential` of six).
    pub struct DoubleConv<const CIN: usize, const COUT: usize>(x: [N, CIN, H, W]) -> [N, COUT, H, W] {
        x -> block: (
            Conv2d(CIN -> COUT, kernel = 3, padding = 1, bias = false), BatchNorm2d(COUT), relu,
            Conv2d(COUT -> COUT, kernel = 3, padding = 1, bias = false), BatchNorm2d(COUT), relu
        )
    }

    /// A two-level U-Net: sizes are multiples of 4 (declared as `4 * H`).
    pub struct UNet(x: [N, 3, 4 * H, 4 * W]) -> [N, 2, 4 * H, 4 * W] {
        let e1 = x -> enc1: DoubleConv<3, 16>;
        let e2 = e1 -> max_pool2d(2) -> enc2: DoubleConv<16, 32>;
        let mid = e2 -> max_pool2d(2) -> bottleneck: DoubleConv<32, 64>;
        let u2 = mid -> up2: ConvTranspose2d(64 -> 32, kernel = 2, stride = 2);
        let d2 = cat(dim = 1)(u2, e2) -> dec2: DoubleConv<64, 32>;
        let u1 = d2 -> up1: ConvTranspose2d(32 -> 16, kernel = 2, stride = 2);
        cat(dim = 1)(u1, e1) -> dec1: DoubleConv<32, 16> -> head: Conv2d(16 -> 2, kernel = 1)
    }
}

network! {
    /// BERT-style: word, position and token-type embeddings, then one post-norm encoder
    /// layer written out (attention, residual, norm, GELU feed-forward, residual, norm).
    pub struct BertLayer(ids: [N, T]: i64, positions: [N, T]: i64, types: [N, T]: i64) -> [N, T, 32] {
        let emb = word_embeddings: Embedding(100 -> 32, padding_idx = 0)(ids)
            + position_embeddings: Embedding(64 -> 32)(positions)
            + token_type_embeddings: Embedding(2 -> 32)(types);
        let h = emb -> emb_norm: LayerNorm(32) -> emb_dropout: Dropout(0.1);
        let a = attention: MultiheadAttention(32, 4, batch_first = true)(h) -> attn_dropout: Dropout(0.1);
        let h1 = h + a -> attn_norm: LayerNorm(32);
        let f = h1 -> intermediate: Linear(32 -> 64) -> gelu -> output: Linear(64 -> 32) -> ffn_dropout: Dropout(0.1);
        h1 + f -> out_norm: LayerNorm(32)
    }
}

network! {
    /// An LSTM classifier: embeddings, a 2-layer bidirectional LSTM, mean over time.
    pub struct LstmClassifier(ids: [N, T]: i64) -> [N, 5] {
        let emb = ids -> embed: Embedding(100 -> 16);
        let (out, (h, c)) = lstm: LSTM(16 -> 32, num_layers = 2, batch_first = true, bidirectional = true)(emb);
        out -> mean(dim = 1) -> head: Linear(64 -> 5)
    }
}
