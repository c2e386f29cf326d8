//! BERT and the sentence-transformers encoder against the real `sentence-transformers`
//! on all-MiniLM-L6-v2 (fixtures: `fixtures/make_bert_fixtures.py`).

use ferrograd::prelude::*;
use ferrograd_models::ModelError;
use ferrograd_models::bert::{BertConfig, BertModel, SentenceEncoder};
use ferrograd_models::hub::{self, LoadOptions};
use ferrograd_models::tokenizer::{EncodeOptions, Padding, Side, Tokenizer};
use std::path::PathBuf;

/// `$FERROGRAD_DATA/name` or `../shared/data/name` beside the checkout; `None` (with a
/// message) when absent, a failure under `CI=true`.
fn shared(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    let dir = root.join(name);
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {} is missing",
        dir.display()
    );
    eprintln!("skipping: {} not found", dir.display());
    None
}

struct Fixture {
    sentences: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
    max_seq_length: usize,
}

fn fixture() -> Fixture {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm.json"),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    Fixture {
        sentences: strings("sentences"),
        input_ids: v["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect(),
        embeddings: v["embeddings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect(),
        max_seq_length: v["max_seq_length"].as_u64().unwrap() as usize,
    }
}

#[test]
fn the_tokenizer_gives_transformers_ids() {
    let Some(dir) = shared("all-minilm-l6-v2") else {
        return;
    };
    let f = fixture();
    let tok = Tokenizer::from_pretrained(&dir).unwrap();
    let refs: Vec<&str> = f.sentences.iter().map(String::as_str).collect();
    let batch = tok
        .encode_batch(
            &refs,
            &EncodeOptions {
                max_length: Some(f.max_seq_length),
                ..Default::default()
            },
        )
        .unwrap();
    let longest = f.input_ids.iter().map(Vec::len).max().unwrap();
    assert_eq!(batch.input_ids.shape(), &[refs.len(), longest]);
    let ids = batch.input_ids.to_vec::<i64>();
    let mask = batch.attention_mask.to_vec::<i64>();
    for (i, want) in f.input_ids.iter().enumerate() {
        let row = &ids[i * longest..(i + 1) * longest];
        let got: Vec<u32> = row[..want.len()].iter().map(|&x| x as u32).collect();
        assert_eq!(&got, want, "sentence {i}: {:?}", f.sentences[i]);
        assert!(row[want.len()..].iter().all(|&x| x == tok.pad_id() as i64));
        let m = &mask[i * longest..(i + 1) * longest];
        assert_eq!(m.iter().sum::<i64>() as usize, want.len());
        assert_eq!(batch.lengths[i], want.len());
    }
    // Decoding the ids of a plain sentence gives it back, lower-cased.
    let ids = tok.encode("A man is eating food.", true).unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), "a man is eating food.");
    // Left padding and a fixed length.
    let left = tok
        .encode_batch(
            &["Hi!", "A man is eating food."],
            &EncodeOptions {
                padding: Padding::MaxLength(12),
                side: Side::Left,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(left.input_ids.shape(), &[2, 12]);
    let m = left.attention_mask.to_vec::<i64>();
    assert_eq!(&m[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]);
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn minilm_embeddings_equal_sentence_transformers() {
    let Some(dir) = shared("all-minilm-l6-v2") else {
        return;
    };
    let f = fixture();
    let mut encoder = SentenceEncoder::from_pretrained(&dir).unwrap();
    assert_eq!(encoder.max_seq_length, f.max_seq_length);
    // Batches of 7 mixing short and long texts, as the fixture's.
    encoder.batch_size = 7;
    let refs: Vec<&str> = f.sentences.iter().map(String::as_str).collect();
    let e = encoder.encode(&refs).unwrap();
    assert_eq!(e.shape(), &[refs.len(), 384]);
    let got = e.to_vec::<f32>();
    let (mut worst_cos, mut worst_abs) = (1.0f64, 0.0f32);
    for (i, want) in f.embeddings.iter().enumerate() {
        let row = &got[i * 384..(i + 1) * 384];
        worst_cos = worst_cos.min(cosine(row, want));
        for (a, b) in row.iter().zip(want) {
            worst_abs = worst_abs.max((a - b).abs());
        }
    }
    eprintln!(
        "MiniLM vs sentence-transformers over {} sentences: min cosine {worst_cos:.8}, max abs diff {worst_abs:.2e}",
        refs.len()
    );
    assert!(worst_cos >= 0.99999, "min cosine {worst_cos}");
    assert!(worst_abs <= 1e-4, "max abs diff {worst_abs}");
    // One at a time equals the batched result (padding does not leak).
    let single = encoder.encode(&refs[..1]).unwrap().to_vec::<f32>();
    for (a, b) in single.iter().zip(&got[..384]) {
        assert!((a - b).abs() < 1e-5);
    }
}

#[test]
fn loading_reports_keys_and_shapes() {
    let Some(dir) = shared("all-minilm-l6-v2") else {
        return;
    };
    let config = BertConfig::from_pretrained(&dir).unwrap();
    assert_eq!(
        (
            config.hidden_size,
            config.num_hidden_layers,
            config.vocab_size
        ),
        (384, 6, 30522)
    );
    let (model, loaded) = BertModel::from_pretrained_with(&dir, &Device::Cpu, None).unwrap();
    assert_eq!(loaded.unused, ["embeddings.position_ids"]);
    assert_eq!(loaded.loaded, 103);
    assert!(model.pooler.is_some());
    assert_eq!(model.num_parameters(), 22_713_216);
    // A model of another width names the key and both shapes.
    let mut wrong = BertModel::new(
        &BertConfig {
            hidden_size: 192,
            num_attention_heads: 12,
            ..config.clone()
        },
        true,
        &Device::Cpu,
    );
    match hub::load_weights(&mut wrong, &dir, &LoadOptions::default()) {
        Err(ModelError::Shape {
            key,
            expected,
            found,
            ..
        }) => {
            assert_eq!(key, "embeddings.LayerNorm.bias");
            assert_eq!((expected, found), (vec![192], vec![384]));
        }
        other => panic!("{other:?}"),
    }
    // A deeper model lacks layers 6..: missing keys are named.
    let mut deeper = BertModel::new(
        &BertConfig {
            num_hidden_layers: 7,
            ..config.clone()
        },
        true,
        &Device::Cpu,
    );
    let err = hub::load_weights(&mut deeper, &dir, &LoadOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("encoder.layer.6.attention.self.query.weight"),
        "{err}"
    );
    // bf16 on request.
    let (half, _) = BertModel::from_pretrained_with(&dir, &Device::Cpu, Some(DType::BF16)).unwrap();
    assert_eq!(half.embeddings.word_embeddings.weight.dtype(), DType::BF16);
}

#[test]
fn a_folder_without_weights_or_config_is_an_error() {
    let dir = std::env::temp_dir().join("ferrograd-models-empty");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(matches!(
        BertModel::from_pretrained(&dir),
        Err(ModelError::Io { .. })
    ));
    std::fs::write(dir.join("config.json"), "{\"hidden_size\": 4}").unwrap();
    let err = BertModel::from_pretrained(&dir).err().unwrap();
    assert!(err.to_string().contains("missing field"), "{err}");
    std::fs::write(
        dir.join("config.json"),
        r#"{"vocab_size": 10, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 8, "max_position_embeddings": 8}"#,
    )
    .unwrap();
    assert!(matches!(
        BertModel::from_pretrained(&dir),
        Err(ModelError::NoWeights { .. })
    ));
    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
    assert!(matches!(
        BertModel::from_pretrained(&dir),
        Err(ModelError::Checkpoint(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The encoder layer is a `network!`: at inference the graph's two post-norm endings run
/// as `add_layer_norm` passes and the exact-GELU intermediate as `bias_gelu` (fusions the
/// macro picks from the compile-time graph), while training runs the plain layers; both
/// give the same values.
#[test]
fn the_dsl_layer_runs_fused_at_inference_and_plain_in_training() {
    use ferrograd::nn::Activation;
    use ferrograd::profiler::{ProfilerOptions, profile};
    use ferrograd_models::bert::BertLayer;
    ferrograd::manual_seed(5);
    let mut layer = BertLayer::new(&Device::Cpu, 32, 4, 64, 1e-12, 0.1, 0.1, Activation::Gelu);
    layer.eval();
    let x = Tensor::randn(&[2, 6, 32], DType::F32, &Device::Cpu);
    let ops = |f: &dyn Fn() -> Tensor| {
        let (y, p) = profile(ProfilerOptions::default(), f);
        let names: Vec<(String, usize)> = p
            .key_averages(false)
            .into_iter()
            .map(|s| (s.name, s.calls))
            .collect();
        (y, names)
    };
    let (fused, names) = ops(&|| ferrograd::prelude::no_grad(|| layer.forward(&x, None)));
    let calls = |names: &[(String, usize)], op: &str| {
        names.iter().find(|(n, _)| n == op).map_or(0, |(_, c)| *c)
    };
    // Two post-norm endings (attention, feed-forward), one GELU.
    assert_eq!(calls(&names, "add_layer_norm"), 2, "{names:?}");
    assert_eq!(calls(&names, "bias_gelu"), 1, "{names:?}");
    assert_eq!(
        calls(&names, "layer_norm") + calls(&names, "gelu"),
        0,
        "{names:?}"
    );
    // With gradients on (as in training), the plain layers and the same values.
    let (plain, names) = ops(&|| layer.forward(&x, None));
    assert_eq!(calls(&names, "layer_norm"), 2, "{names:?}");
    assert_eq!(
        calls(&names, "add_layer_norm") + calls(&names, "bias_gelu"),
        0,
        "{names:?}"
    );
    let diff = fused.sub(&plain).abs().max_all().item::<f32>();
    assert!(diff < 1e-5, "fused and plain differ by {diff}");
}
