//! safetensors checkpoints: round trips of every dtype, PyTorch-saved state dicts loading
//! strictly (with a key-renaming hook) and giving PyTorch's outputs, hostile files as
//! errors, and atomic saves that survive a process killed mid-write.

use ferrograd::checkpoint::*;
use ferrograd::models::vision::resnet::{ResNet, ResNetConfig};
use ferrograd::nn::{BatchNorm1d, Forward, Linear, Module, StateDict};
use ferrograd::prelude::*;
use std::path::PathBuf;

#[derive(Module)]
struct Net {
    fc: Linear,
    bn: BatchNorm1d,
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrograd-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn a_module_round_trips_with_its_buffers() {
    manual_seed(1);
    let net = Net {
        fc: Linear::new(4, 3, &Device::Cpu),
        bn: BatchNorm1d::new(3, &Device::Cpu),
    };
    let x = Tensor::randn(&[8, 4], DType::F32, &Device::Cpu);
    net.bn.forward(&net.fc.forward(&x)); // moves the running statistics and the count
    let path = temp("net.safetensors");
    save_safetensors(&net, &path).unwrap();
    // For tests/fixtures/check_pytorch_loads.py: this file must load into PyTorch.
    let interop = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/interop");
    if std::fs::create_dir_all(&interop).is_ok() {
        save_safetensors(&net, interop.join("net.safetensors")).unwrap();
    }
    let mut fresh = Net {
        fc: Linear::new(4, 3, &Device::Cpu),
        bn: BatchNorm1d::new(3, &Device::Cpu),
    };
    let report = load_safetensors(&mut fresh, &path, true).unwrap();
    assert!(report.missing.is_empty() && report.unexpected.is_empty());
    for ((k, a), (_, b)) in net.state_dict().iter().zip(fresh.state_dict().iter()) {
        assert_eq!(a.dtype(), b.dtype(), "{k}");
        assert_eq!(
            a.to_dtype(DType::F64).to_vec::<f64>(),
            b.to_dtype(DType::F64).to_vec::<f64>(),
            "{k}"
        );
    }
    assert_eq!(
        fresh.bn.num_batches_tracked.as_ref().unwrap().item::<i64>(),
        1
    );

    let mut wrong = Net {
        fc: Linear::new(4, 5, &Device::Cpu),
        bn: BatchNorm1d::new(5, &Device::Cpu),
    };
    let e = load_safetensors(&mut wrong, &path, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("net.safetensors") && e.contains("fc.weight"),
        "{e}"
    );
}

#[test]
fn every_dtype_round_trips() {
    let mut state = StateDict::new();
    let cpu = &Device::Cpu;
    let base = Tensor::from_vec(vec![0.5f64, -1.25, 3.0], &[3]);
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::U8,
    ] {
        state.insert(format!("{dtype:?}"), base.abs().to_dtype(dtype));
    }
    state.insert("bool".into(), Tensor::from_vec(vec![true, false], &[2]));
    state.insert("scalar".into(), Tensor::full(&[], 4.0, DType::F32, cpu));
    let path = temp("dtypes.safetensors");
    save_state_dict(&state, &path, None).unwrap();
    let back = read_state_dict(&path).unwrap();
    assert_eq!(back.len(), state.len());
    for (k, t) in &state {
        assert_eq!(
            (back[k].dtype(), back[k].shape()),
            (t.dtype(), t.shape()),
            "{k}"
        );
        assert!(
            back[k]
                .to_dtype(DType::F64)
                .allclose(&t.to_dtype(DType::F64), 0.0, 0.0),
            "{k}"
        );
    }
}

#[test]
fn a_pytorch_saved_state_dict_loads_strictly_and_gives_pytorchs_outputs() {
    // Written by `safetensors.torch.save_file(model.state_dict())` in
    // models/tests/fixtures/make_torchvision_fixtures.py (a narrow torchvision resnet18).
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/tests/fixtures/torchvision");
    let path = dir.join("resnet18-narrow.safetensors");
    let config = ResNetConfig::resnet18().width(4).num_classes(10);
    let mut model = ResNet::new(&config, &Device::Cpu);
    load_safetensors(&mut model, &path, true).unwrap();
    model.eval();
    let fx = read_state_dict(dir.join("outputs.safetensors")).unwrap();
    let logits = model.forward(&fx["input"]);
    assert!(logits.allclose(&fx["resnet18-narrow.eval_logits"], 1e-4, 1e-4));
    // The hook renames the checkpoint's keys (here: under a `backbone.` prefix, which
    // the model lacks), and a strict load then names what is missing and unexpected.
    let e = load_safetensors_with(&mut model, &path, true, |k| Some(format!("backbone.{k}")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing") && e.contains("backbone.fc.weight"),
        "with the hook: {e}"
    );
}

/// A safetensors file from a raw header and data section.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn hostile_files_are_errors_naming_the_file() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("header longer than the file", {
            let mut v = u64::MAX.to_le_bytes().to_vec();
            v.extend_from_slice(b"{}");
            v
        }),
        ("not json", raw_file("{nope", &[])),
        (
            "offsets past the data",
            raw_file(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
                &[0; 4],
            ),
        ),
        (
            "overlapping offsets",
            raw_file(
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}"#,
                &[0; 8],
            ),
        ),
        (
            "wrong size for dtype",
            raw_file(
                r#"{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "huge shape",
            raw_file(
                r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "unknown dtype",
            raw_file(
                r#"{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}"#,
                &[0; 8],
            ),
        ),
    ];
    for (name, bytes) in cases {
        let path = temp("hostile.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let got = std::panic::catch_unwind(|| read_state_dict(&path));
        let err = got
            .unwrap_or_else(|_| panic!("{name}: the reader panicked"))
            .expect_err(name)
            .to_string();
        assert!(err.contains("hostile.safetensors"), "{name}: {err}");
    }
    let e = read_state_dict(temp("absent.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.safetensors"), "{e}");
}

/// Saving is atomic: a child process killed while it writes checkpoint after checkpoint
/// to the same path leaves a complete, loadable file there.
#[test]
fn a_save_killed_mid_write_leaves_the_previous_file_intact() {
    if let Some(path) = std::env::var_os("FERROGRAD_CKPT_CHILD") {
        // The child: large checkpoints, forever, until killed.
        let mut state = StateDict::new();
        state.insert(
            "big".into(),
            Tensor::ones(&[4_000_000], DType::F32, &Device::Cpu),
        );
        loop {
            save_state_dict(&state, &path, None).unwrap();
        }
    }
    let path = temp("atomic.safetensors");
    let mut state = StateDict::new();
    state.insert(
        "big".into(),
        Tensor::zeros(&[4_000_000], DType::F32, &Device::Cpu),
    );
    save_state_dict(&state, &path, None).unwrap();
    for round in 0..3 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_save_killed_mid_write_leaves_the_previous_file_intact",
                "--nocapture",
            ])
            .env("FERROGRAD_CKPT_CHILD", &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150 + 70 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        let back = read_state_dict(&path).expect("a complete file after the kill");
        let v = back["big"].to_vec::<f32>();
        assert!(
            v.len() == 4_000_000 && (v.iter().all(|&x| x == 0.0) || v.iter().all(|&x| x == 1.0))
        );
    }
}

/// A state dict saved as shards with an index reads back whole (through the index in
/// `read_state_dict` and `load_safetensors`); shard sizes respect the limit.
#[test]
fn sharded_checkpoints_round_trip() {
    manual_seed(3);
    let net = Net {
        fc: Linear::new(64, 32, &Device::Cpu),
        bn: BatchNorm1d::new(32, &Device::Cpu),
    };
    let dir = temp("shards");
    std::fs::create_dir_all(&dir).unwrap();
    let index = save_sharded(&net.state_dict(), &dir, "model", 4096).unwrap();
    assert_eq!(index.file_name().unwrap(), "model.safetensors.index.json");
    // fc.weight is 8 KiB: a shard of its own; the rest share shards of at most 4 KiB.
    let shards: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    assert!(shards.len() >= 2, "{shards:?}");
    assert!(
        shards
            .iter()
            .all(|n| n.starts_with("model-0000") && n.contains("-of-0000"))
    );
    let back = read_sharded(&index).unwrap();
    assert_eq!(
        back.keys().collect::<Vec<_>>(),
        net.state_dict().keys().collect::<Vec<_>>()
    );
    let mut other = Net {
        fc: Linear::new(64, 32, &Device::Cpu),
        bn: BatchNorm1d::new(32, &Device::Cpu),
    };
    load_safetensors(&mut other, &index, true).unwrap();
    assert_eq!(
        other.fc.weight.to_vec::<f32>(),
        net.fc.weight.to_vec::<f32>()
    );
}

/// Hostile indexes are errors: paths out of the directory, missing shards, shards
/// lacking the tensors the index puts there, malformed JSON.
#[test]
fn hostile_shard_indexes_are_errors() {
    let dir = temp("hostile-shards");
    std::fs::create_dir_all(&dir).unwrap();
    let mut state = StateDict::new();
    state.insert("a".into(), Tensor::ones(&[4], DType::F32, &Device::Cpu));
    save_sharded(&state, &dir, "model", 1 << 20).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        ("{", "not JSON"),
        ("{\"metadata\": {}}", "no weight_map"),
        (
            "{\"weight_map\": {\"a\": \"../model-00001-of-00001.safetensors\"}}",
            "not a file name",
        ),
        (
            "{\"weight_map\": {\"a\": \"/etc/passwd\"}}",
            "not a file name",
        ),
        ("{\"weight_map\": {\"a\": 7}}", "not a file name"),
        (
            "{\"weight_map\": {\"b\": \"model-00001-of-00001.safetensors\"}}",
            "lacks it",
        ),
        (
            "{\"weight_map\": {\"a\": \"nowhere.safetensors\"}}",
            "nowhere.safetensors",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let p = write(&format!("bad{i}.index.json"), text);
        let err = read_state_dict(&p).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

/// A training checkpoint keeps every part; files that are not checkpoints, or whose
/// metadata is malformed, are errors.
#[test]
fn training_checkpoints_round_trip_and_refuse_malformed_files() {
    use ferrograd::data::LoaderState;
    use ferrograd::optim::{Optimizer, Sgd, SgdConfig};
    manual_seed(5);
    let net = Net {
        fc: Linear::new(4, 3, &Device::Cpu),
        bn: BatchNorm1d::new(3, &Device::Cpu),
    };
    let mut opt = Sgd::named(net.named_parameters(), SgdConfig::new(0.1).momentum(0.9));
    for p in opt.params() {
        p.set_grad(Some(Tensor::ones(p.shape(), DType::F32, &Device::Cpu)));
    }
    opt.step();
    let scaler = ferrograd::amp::GradScaler::new().init_scale(128.0);
    let path = temp("train.safetensors");
    let loader = LoaderState {
        seed: u64::MAX - 3,
        epoch: 2,
        batch: 5,
    };
    Checkpoint::new(&net)
        .optimizer(&opt)
        .scaler(&scaler)
        .epoch(2)
        .step(40)
        .loader(loader)
        .meta("lr", "0.1")
        .save(&path)
        .unwrap();
    let ck = Checkpoint::load(&path).unwrap();
    assert_eq!((ck.epoch, ck.step, ck.loader), (2, 40, Some(loader)));
    assert_eq!(ck.metadata["lr"], "0.1");
    assert_eq!(ck.scaler.as_ref().unwrap()["scale"], 128.0);
    assert_eq!(
        ck.model.keys().collect::<Vec<_>>(),
        net.state_dict().keys().collect::<Vec<_>>()
    );
    let opt_state = ck.optimizer.as_ref().unwrap();
    assert!(opt_state.state["fc.weight"].contains_key("momentum_buffer"));
    // The model part is a plain state dict for any safetensors reader.
    let plain =
        read_state_dict_with(&path, |k| k.strip_prefix("model.").map(str::to_string)).unwrap();
    assert_eq!(plain.len(), ck.model.len());

    // A bare state dict is not a training checkpoint.
    let bare = temp("bare.safetensors");
    save_safetensors(&net, &bare).unwrap();
    let err = Checkpoint::load(&bare).unwrap_err().to_string();
    assert!(err.contains("not a ferrograd training checkpoint"), "{err}");
    // Malformed metadata.
    for (key, value, expected) in [
        ("epoch", "-1", "epoch"),
        ("scheduler", "[1, 2]", "scheduler"),
        ("loader", "{\"seed\": 1}", "loader"),
        ("optimizer.param_groups", "{", "param_groups"),
    ] {
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_string(), "ferrograd.checkpoint.v1".to_string());
        meta.insert(key.to_string(), value.to_string());
        let p = temp(&format!("bad-{key}.safetensors"));
        save_state_dict(&StateDict::new(), &p, Some(meta)).unwrap();
        let err = Checkpoint::load(&p).unwrap_err().to_string();
        assert!(err.contains(expected), "{key}: {err}");
    }
}

/// A bounded deterministic fuzz run of the checkpoint readers: mutated, truncated and
/// extended copies of a real training checkpoint (header bytes mostly) are an `Ok` or an
/// `Err`, never a panic. The open-ended run is `cargo +nightly fuzz run checkpoint`.
#[test]
fn checkpoint_readers_never_panic_on_mutated_files() {
    use ferrograd::optim::{Adam, AdamConfig, Optimizer};
    let net = Net {
        fc: Linear::new(4, 3, &Device::Cpu),
        bn: BatchNorm1d::new(3, &Device::Cpu),
    };
    let mut opt = Adam::named(net.named_parameters(), AdamConfig::default());
    for p in opt.params() {
        p.set_grad(Some(Tensor::ones(p.shape(), DType::F32, &Device::Cpu)));
    }
    opt.step();
    let source = temp("fuzz-source.safetensors");
    Checkpoint::new(&net)
        .optimizer(&opt)
        .epoch(1)
        .save(&source)
        .unwrap();
    let original = std::fs::read(&source).unwrap();
    let header_end = 8 + u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |m: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state as usize) % m.max(1)
    };
    let path = temp("fuzz-case.safetensors");
    for case in 0..600 {
        let mut bytes = original.clone();
        match case % 4 {
            0 => bytes.truncate(next(bytes.len())),
            1 | 2 => {
                for _ in 0..1 + next(4) {
                    let i = next(header_end);
                    let alphabet = b"{}[]\":,0123456789eE.-x ";
                    bytes[i] = alphabet[next(alphabet.len())];
                }
            }
            _ => {
                let i = next(bytes.len());
                bytes[i] = next(256) as u8;
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let outcome = std::panic::catch_unwind(|| {
            let _ = read_state_dict(&path);
            let _ = Checkpoint::load(&path);
        });
        assert!(outcome.is_ok(), "a reader panicked on case {case}");
    }
}
