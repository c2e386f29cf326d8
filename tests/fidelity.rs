//! Readers, checkpoints, transforms and attention against the reference tools, on files
//! those tools wrote (`tests/fixtures/make_fidelity_fixtures.py`: Python's gzip, Pillow,
//! torchvision, pandas, `safetensors.torch`, `nn.MultiheadAttention`): what they accept
//! we accept, with the same values; what they reject we reject, naming the file.

mod common;

use ferrograd::checkpoint::{read_state_dict, save_state_dict};
use ferrograd::data::Dataset;
use ferrograd::data::datasets::{
    CIFAR100, Cifar100Label, CsvDataset, ImageFolder, ImageFolderOptions, MNIST, read_idx,
    read_image,
};
use ferrograd::data::transforms::*;
use ferrograd::nn::{MhaArgs, Module, MultiheadAttention, StateDict};
use ferrograd::prelude::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity")
        .join(rel)
}

fn reference() -> HashMap<String, Tensor> {
    common::typed_tensors(include_bytes!("fixtures/fidelity/fidelity.safetensors"))
}

fn expected(rel: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(rel)).unwrap()).unwrap()
}

#[track_caller]
fn max_diff(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape(), "shapes");
    let g = got.to_dtype(DType::F64).to_vec::<f64>();
    let w = want.to_dtype(DType::F64).to_vec::<f64>();
    g.iter()
        .zip(&w)
        .map(|(a, b)| {
            if a.is_nan() && b.is_nan() {
                0.0
            } else {
                (a - b).abs()
            }
        })
        .fold(0.0, f64::max)
}

// ---- IDX and gzip ----

#[test]
fn multi_member_and_zero_padded_gzip_read_as_python_reads_them() {
    let r = reference();
    let (dims, pixels) = read_idx(&fixture("idx/t10k-images-idx3-ubyte.gz")).unwrap();
    assert_eq!(dims, [16, 28, 28]);
    assert_eq!(pixels, r["idx.t10k-images-idx3-ubyte.gz"].to_vec::<u8>());
    let (dims, labels) = read_idx(&fixture("idx/t10k-labels-idx1-ubyte.gz")).unwrap();
    assert_eq!(dims, [16]);
    let want: Vec<u8> = r["idx.t10k-labels-idx1-ubyte.gz"]
        .to_vec::<i64>()
        .into_iter()
        .map(|l| l as u8)
        .collect();
    assert_eq!(labels, want);
    // The data set on top of them: torchvision's samples.
    let mnist = MNIST::new(fixture("idx"), false).unwrap();
    assert_eq!(mnist.len(), 16);
    let (x, y) = mnist.get(15).unwrap();
    assert_eq!(y, want[15] as i64);
    let px: Vec<f32> = pixels[15 * 784..16 * 784]
        .iter()
        .map(|&p| p as f32 / 255.0)
        .collect();
    assert_eq!(x.to_vec::<f32>(), px);
    // The same files named one by one.
    let files = MNIST::from_files(
        fixture("idx/t10k-images-idx3-ubyte.gz"),
        fixture("idx/t10k-labels-idx1-ubyte.gz"),
    )
    .unwrap();
    assert_eq!(
        files.tensors().1.to_vec::<i64>(),
        mnist.tensors().1.to_vec::<i64>()
    );
}

#[test]
fn corrupt_and_cut_gzip_streams_are_errors_naming_the_file_as_python_raises() {
    let verdicts = expected("idx/expected.json");
    for (name, want) in [
        ("corrupt-images-idx3-ubyte.gz", "corrupt gzip stream"),
        ("cut-images-idx3-ubyte.gz", "truncated gzip stream"),
    ] {
        assert!(verdicts[name].is_string(), "Python reads {name}");
        let e = read_idx(&fixture(&format!("idx/{name}")))
            .unwrap_err()
            .to_string();
        eprintln!("{name}: Python: {}; ours: {e}", verdicts[name]);
        assert!(e.contains(name) && e.contains(want), "{name}: {e}");
    }
}

// ---- ImageFolder and images ----

#[test]
fn image_folder_lists_what_torchvision_lists_in_its_order() {
    let want = expected("folder/expected.json");
    let root = fixture("folder");
    let e = ImageFolder::new(&root).unwrap_err().to_string();
    assert!(
        e.contains("no valid file for the classes empty"),
        "torchvision: {}; ours: {e}",
        want["error"]
    );
    let d = ImageFolder::with_options(&root, ImageFolderOptions { allow_empty: true }).unwrap();
    let classes: Vec<String> = serde_json::from_value(want["classes"].clone()).unwrap();
    assert_eq!(d.classes(), classes);
    let samples: Vec<(String, i64)> = d
        .samples()
        .iter()
        .map(|(p, c)| {
            let rel = p.strip_prefix(&root).unwrap();
            (rel.to_string_lossy().into_owned(), *c)
        })
        .collect();
    let torchvision: Vec<(String, i64)> = serde_json::from_value(want["samples"].clone()).unwrap();
    assert_eq!(samples, torchvision);
    // Every format decodes to the pixels Pillow gives (JPEG to the IDCT's rounding).
    let r = reference();
    for (i, (path, _)) in d.samples().iter().enumerate() {
        let (img, _) = d.get(i).unwrap();
        let diff = max_diff(&img, &r[&format!("folder.{i}")]);
        let jpeg = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("JPG" | "jpeg")
        );
        assert!(
            diff <= if jpeg { 8.0 } else { 0.0 },
            "{}: differs from Pillow by {diff}",
            path.display()
        );
    }
}

#[test]
fn a_truncated_jpeg_is_an_error_as_in_pillow_and_trailing_bytes_are_not() {
    let want = expected("jpeg/expected.json");
    let path = fixture("jpeg/truncated.jpg");
    let e = read_image(&path).unwrap_err().to_string();
    eprintln!("Pillow: {}; ours: {e}", want["truncated.jpg"]);
    assert!(
        want["truncated.jpg"]
            .as_str()
            .unwrap()
            .contains("truncated")
    );
    assert!(e.contains("truncated.jpg") && e.contains("image file is truncated"));
    assert!(want["trailing.jpg"].is_null());
    // Bytes after the end-of-image marker are ignored. (The decode itself agrees with
    // Pillow's to its 4:2:0 chroma upsampling, as tests/transforms.rs measures.)
    let trailing = read_image(&fixture("jpeg/trailing.jpg")).unwrap();
    let pillow = reference()["jpeg.trailing"].to_dtype(DType::F64);
    let mean = trailing
        .to_dtype(DType::F64)
        .sub(&pillow)
        .abs()
        .mean_all()
        .item::<f64>();
    assert!(mean <= 2.0, "trailing.jpg: mean |ours - Pillow| = {mean}");
    // Every prefix of a baseline and a progressive JPEG: decoded exactly when Pillow
    // decodes it (only the whole file).
    let dir = std::env::temp_dir().join(format!("ferrograd-jpeg-cuts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, file) in [
        (
            "shirt.jpg",
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images/shirt.jpg"),
        ),
        ("progressive.jpg", fixture("jpeg/progressive.jpg")),
    ] {
        let bytes = std::fs::read(file).unwrap();
        let pillow: Vec<bool> = serde_json::from_value(want["cuts"][name].clone()).unwrap();
        assert_eq!(pillow.len(), bytes.len() + 1);
        let cut_path = dir.join(name);
        for (n, &decodes) in pillow.iter().enumerate() {
            std::fs::write(&cut_path, &bytes[..n]).unwrap();
            assert_eq!(
                read_image(&cut_path).is_ok(),
                decodes,
                "{name} cut to {n} of {} bytes",
                bytes.len()
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- CIFAR-100 ----

#[test]
fn cifar100_gives_torchvisions_fine_labels_and_the_coarse_ones() {
    let r = reference();
    let path = fixture("cifar/train.bin");
    let d = CIFAR100::new(&path, true).unwrap();
    assert_eq!(d.len(), 5);
    assert_eq!(
        d.targets(Cifar100Label::Fine).to_vec::<i64>(),
        r["cifar.fine"].to_vec::<i64>()
    );
    assert_eq!(
        d.targets(Cifar100Label::Coarse).to_vec::<i64>(),
        r["cifar.coarse"].to_vec::<i64>()
    );
    // torchvision's images ([3, 32, 32] from the pickle), ours from the binary records.
    let (x, _) = d.tensors();
    let want = r["cifar.images"].to_dtype(DType::F32).div_scalar(255.0);
    assert!(max_diff(&x, &want) < 1e-7);
    let fine: Vec<i64> = (0..5).map(|i| d.get(i).unwrap().1).collect();
    assert_eq!(fine, r["cifar.fine"].to_vec::<i64>());
    let coarse = d.clone().target_type(Cifar100Label::Coarse);
    let labels: Vec<i64> = (0..5).map(|i| coarse.get(i).unwrap().1).collect();
    assert_eq!(labels, r["cifar.coarse"].to_vec::<i64>());
    let (_, batch) = coarse.get_stacked(&[4, 1]).unwrap().unwrap();
    assert_eq!(batch.to_vec::<i64>(), vec![labels[4], labels[1]]);
    // The canonical layout and an explicit file list read the same records.
    let dir = std::env::temp_dir().join(format!("ferrograd-cifar100-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("cifar-100-binary")).unwrap();
    std::fs::copy(&path, dir.join("cifar-100-binary/train.bin")).unwrap();
    let from_dir = CIFAR100::new(&dir, true).unwrap();
    assert_eq!(from_dir.tensors().1.to_vec::<i64>(), fine);
    let from_files = CIFAR100::from_files(&[&path, &path]).unwrap();
    assert_eq!(from_files.len(), 10);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_cifar100_coarse_label_past_19_is_an_error() {
    let e = CIFAR100::new(fixture("cifar/bad_coarse.bin"), true)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("bad_coarse.bin") && e.contains("record 2 has coarse label 25, outside 0..20"),
        "{e}"
    );
}

// ---- CSV ----

#[test]
fn csv_class_labels_are_int64_as_pandas_and_torch_give_them() {
    let r = reference();
    let path = fixture("csv/iris.csv");
    let d = CsvDataset::new(&path, true, &[2]).unwrap();
    assert_eq!(d.header(), ["sepal", "petal", "species", "height"]);
    let (x, y) = d.tensors();
    assert_eq!((y.dtype(), y.shape()), (DType::I64, &[12][..]));
    assert_eq!(y.to_vec::<i64>(), r["csv.species"].to_vec::<i64>());
    assert_eq!(x.shape(), &[12, 3]);
    // A batch of labels feeds cross_entropy as it does in PyTorch.
    let (xb, yb) = d.get_stacked(&[0, 5, 7]).unwrap().unwrap();
    assert_eq!(
        (xb.shape(), yb.shape(), yb.dtype()),
        (&[3, 3][..], &[3][..], DType::I64)
    );
    let logits = Tensor::zeros(&[3, 3], DType::F32, &Device::Cpu);
    let loss = F::cross_entropy(&logits, &yb);
    assert!((loss.item::<f32>() - 3f32.ln()).abs() < 1e-6);
    // A float target column stays f32 [N, 1] (regression); the dtype can be chosen.
    let (features, height) = CsvDataset::new(&path, true, &[2, 3]).unwrap().tensors();
    assert_eq!((height.dtype(), height.shape()), (DType::F32, &[12, 2][..]));
    assert_eq!(features.to_vec::<f32>(), r["csv.features"].to_vec::<f32>());
    let (_, height) = CsvDataset::new(&path, true, &[3]).unwrap().tensors();
    assert_eq!(height.to_vec::<f32>(), r["csv.height"].to_vec::<f32>());
    assert_eq!(height.shape(), &[12, 1]);
    let (_, species) = CsvDataset::with_target_dtype(&path, true, &[2], DType::F32)
        .unwrap()
        .tensors();
    assert_eq!(
        (species.dtype(), species.shape()),
        (DType::F32, &[12, 1][..])
    );
    let e = CsvDataset::with_target_dtype(&path, true, &[3], DType::I64).unwrap_err();
    assert!(e.to_string().contains("row 2, column 4"), "{e}");
}

// ---- safetensors ----

#[test]
fn safetensors_integer_and_float8_tensors_load_widened_to_torchs_values() {
    let r = reference();
    let ints = read_state_dict(fixture("st/ints.safetensors")).unwrap();
    for name in ["i8", "i16", "i32", "u16", "u32", "u64"] {
        let t = &ints[name];
        assert_eq!(t.dtype(), DType::I64, "{name}");
        assert_eq!(t.shape(), r[&format!("st.{name}")].shape(), "{name}");
        assert_eq!(
            t.to_vec::<i64>(),
            r[&format!("st.{name}")].to_vec::<i64>(),
            "{name}"
        );
    }
    let floats = read_state_dict(fixture("st/float8.safetensors")).unwrap();
    assert!(floats.len() >= 4);
    for (name, t) in &floats {
        let want = &r[&format!("st.{name}")];
        assert_eq!(max_diff(&t.to_dtype(DType::F32), want), 0.0, "{name}");
    }
    let e = read_state_dict(fixture("st/u64_too_big.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"big\"") && e.contains("9223372036854775808"),
        "{e}"
    );
}

#[test]
fn unrepresentable_tensors_are_all_named_in_file_order_every_time() {
    let path = fixture("st/complex.safetensors");
    let first = read_state_dict(&path).unwrap_err().to_string();
    // safetensors.torch writes the data sorted by dtype then name: m_complex, z_complex.
    let (m, z) = (first.find("\"m_complex\""), first.find("\"z_complex\""));
    assert!(m.is_some() && z.is_some() && m < z, "{first}");
    assert!(
        !first.contains("a_real") && first.contains("C64"),
        "{first}"
    );
    for _ in 0..5 {
        assert_eq!(read_state_dict(&path).unwrap_err().to_string(), first);
    }
}

#[test]
fn saved_files_carry_format_pt_metadata_as_save_pretrained_writes() {
    let path = std::env::temp_dir().join(format!(
        "ferrograd-format-{}.safetensors",
        std::process::id()
    ));
    let mut state = StateDict::new();
    state.insert("w".into(), Tensor::ones(&[2], DType::F32, &Device::Cpu));
    save_state_dict(&state, &path, None).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    assert_eq!(meta.get("format").map(String::as_str), Some("pt"));
    // Metadata given by the caller joins it; a `format` of the caller's wins.
    let mut given = HashMap::new();
    given.insert("epoch".to_string(), "3".to_string());
    save_state_dict(&state, &path, Some(given)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    assert_eq!(
        (meta["format"].as_str(), meta["epoch"].as_str()),
        ("pt", "3")
    );
    std::fs::remove_file(&path).unwrap();
}

// ---- transforms ----

#[test]
fn resize_matches_torchvisions_tensor_path_in_every_mode() {
    let r = reference();
    let input = r["resize.input"].clone();
    let float = input.to_dtype(DType::F32).div_scalar(255.0);
    let modes = [
        ("nearest", InterpolationMode::Nearest),
        ("nearest_exact", InterpolationMode::NearestExact),
        ("bilinear", InterpolationMode::Bilinear),
        ("bicubic", InterpolationMode::Bicubic),
    ];
    let mut checked = 0;
    for (mname, mode) in modes {
        for aa in [true, false] {
            for (sname, resize) in [
                ("down", Resize::new([15, 10])),
                ("up", Resize::new([31, 45])),
                ("shorter", Resize::shorter_side(16)),
            ] {
                let key = format!("resize.{mname}.{}.{sname}", if aa { "aa" } else { "noaa" });
                let Some(want_u8) = r.get(&format!("{key}.u8")) else {
                    continue;
                };
                let t = resize.interpolation(mode).antialias(aa);
                let got = t.apply(input.clone());
                assert_eq!(got.dtype(), DType::U8);
                let d = max_diff(&got, want_u8);
                eprintln!("{key}: u8 max |ours - torchvision| = {d}");
                assert!(d <= 1.0, "{key}: u8 off by {d}");
                if let Some(want) = r.get(&format!("{key}.f32")) {
                    let d = max_diff(&t.apply(float.clone()), want);
                    eprintln!("{key}: f32 max |ours - torchvision| = {d:.1e}");
                    assert!(d <= 2e-6, "{key}: f32 off by {d}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 18);
    let got = resized_crop_with(
        &float,
        [3, 4, 15, 19],
        [12, 9],
        InterpolationMode::Bicubic,
        true,
    );
    assert!(max_diff(&got, &r["resized_crop.bicubic"]) <= 2e-6);
}

#[test]
fn center_crop_rounds_its_offset_half_to_even_as_torchvision() {
    let r = reference();
    let tall = Tensor::arange(0.0, 770.0, 1.0, DType::F32, &Device::Cpu).reshape(&[1, 385, 2]);
    let got = CenterCrop::new([224, 2]).apply(tall);
    assert_eq!(got.to_vec::<f32>()[0], 160.0); // row 80, not 81
    assert_eq!(max_diff(&got, &r["center_crop.385"]), 0.0);
    let input = r["resize.input"].to_dtype(DType::F32);
    let got = CenterCrop::new([25, 33]).apply(input);
    assert_eq!(max_diff(&got, &r["center_crop.pad"]), 0.0);
}

// ---- MultiheadAttention ----

fn mha_from_fixture(r: &HashMap<String, Tensor>) -> MultiheadAttention {
    let mut mha = MultiheadAttention::new(8, 2, &Device::Cpu).batch_first(true);
    let state: StateDict = r
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("mha.param.")
                .map(|name| (name.to_string(), v.clone()))
        })
        .collect();
    mha.load_state_dict(&state, true).unwrap();
    mha.eval();
    mha
}

#[test]
fn multihead_attention_matches_pytorch_for_every_mask_combination() {
    let r = reference();
    let mha = mha_from_fixture(&r);
    let (q, kv) = (&r["mha.q"], &r["mha.kv"]);
    let mut checked = 0;
    for causal in [false, true] {
        for mask in ["none", "bool", "float"] {
            for kpm in ["none", "kpm"] {
                for (need, avg) in [(false, true), (true, true), (true, false)] {
                    let key = format!(
                        "mha.{}.{mask}.{kpm}.{}{}",
                        if causal { "causal" } else { "full" },
                        need as u8,
                        avg as u8
                    );
                    let args = MhaArgs {
                        key_padding_mask: (kpm == "kpm").then(|| &r["mha.kpm"]),
                        attn_mask: (mask != "none").then(|| &r[&format!("mha.mask.{mask}")]),
                        need_weights: need,
                        average_attn_weights: avg,
                        is_causal: causal,
                    };
                    let (out, weights) = mha.forward_with(q, kv, kv, &args);
                    let d = max_diff(&out, &r[&format!("{key}.out")]);
                    assert!(d <= 1e-5, "{key}: output off by {d}");
                    match (weights, r.get(&format!("{key}.weights"))) {
                        (Some(w), Some(want)) => {
                            let d = max_diff(&w, want);
                            assert!(d <= 1e-6, "{key}: weights off by {d}");
                        }
                        (None, None) => {}
                        (w, want) => panic!(
                            "{key}: weights returned {}, PyTorch's {}",
                            w.is_some(),
                            want.is_some()
                        ),
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 36);
}

#[test]
fn causal_attention_with_weights_never_looks_ahead() {
    let r = reference();
    let mha = mha_from_fixture(&r);
    let x = r["mha.q"].clone();
    let mut later = x.to_vec::<f32>();
    // Change the last step of every sequence ([N, L, E] = [2, 5, 8]).
    for b in 0..2 {
        for v in &mut later[(b * 5 + 4) * 8..(b * 5 + 5) * 8] {
            *v += 3.0;
        }
    }
    let later = Tensor::from_vec(later, x.shape());
    for need_weights in [false, true] {
        let args = MhaArgs {
            is_causal: true,
            need_weights,
            ..MhaArgs::default()
        };
        let (a, wa) = mha.forward_with(&x, &x, &x, &args);
        let (b, _) = mha.forward_with(&later, &later, &later, &args);
        let d = max_diff(&a.narrow(1, 0, 4), &b.narrow(1, 0, 4));
        assert!(
            d < 1e-6,
            "need_weights {need_weights}: earlier steps moved by {d}"
        );
        if let Some(w) = wa {
            // No weight above the diagonal.
            let upper = w.to_vec::<f32>();
            for (i, v) in upper.iter().enumerate() {
                let (row, col) = ((i / 5) % 5, i % 5);
                assert!(col <= row || *v == 0.0, "weight {v} at ({row}, {col})");
            }
        }
    }
}
