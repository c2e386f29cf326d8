//! TensorBoard event files: everything `SummaryWriter` logs reads back with the same
//! values, and a run killed mid-record resumes with a writer that cuts the broken record
//! and purges the steps after the checkpoint.
//!
//! With `FERROGRAD_TB_OUT=dir` the runs are also left in `dir` with the values they must
//! hold (`expected.json`), for `tests/fixtures/check_tensorboard.py`, which reads them
//! with the `tensorboard` package's `EventAccumulator`.

use ferrograd::prelude::*;
use ferrograd::train::tensorboard::{EventReader, SummaryWriter, TensorBoardError};
use std::path::{Path, PathBuf};

fn out_dir(name: &str) -> PathBuf {
    match std::env::var_os("FERROGRAD_TB_OUT") {
        Some(d) => {
            let dir = PathBuf::from(d).join(name);
            std::fs::remove_dir_all(&dir).ok();
            dir
        }
        None => std::env::temp_dir().join(format!("ferrograd-tb-{name}-{}", std::process::id())),
    }
}

fn event_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("events.out.tfevents."))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_summary_reads_back() {
    let dir = out_dir("summaries");
    let mut w = SummaryWriter::new(&dir).unwrap();
    let losses: Vec<f64> = (0..6).map(|s| 2.0 / (s as f64 + 1.0)).collect();
    for (step, loss) in losses.iter().enumerate() {
        w.add_scalar("loss/train", *loss, step as u64).unwrap();
        w.add_scalars(
            "lr",
            &[("encoder", 0.1 * step as f64), ("decoder", 0.01)],
            step as u64,
        )
        .unwrap();
    }
    let values: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
    let weights = Tensor::from_vec(values.clone(), &[10, 100]);
    w.add_histogram("weights", &weights, 4).unwrap();
    // A 3x8x6 RGB gradient in 0..1.
    let pixels: Vec<f32> = (0..3 * 8 * 6).map(|i| (i % 48) as f32 / 47.0).collect();
    let image = Tensor::from_vec(pixels.clone(), &[3, 8, 6]);
    w.add_image("input", &image, 5).unwrap();
    w.add_text("notes", "lr **0.1**, batch 64", 0).unwrap();
    w.add_hparams(
        &[
            ("lr", 0.1.into()),
            ("optimizer", "adamw".into()),
            ("amp", false.into()),
        ],
        &[("hparam/accuracy", 0.93)],
    )
    .unwrap();
    w.flush().unwrap();
    assert!(matches!(
        w.add_image(
            "bad",
            &Tensor::zeros(&[5, 2, 2], DType::F32, &Device::Cpu),
            0
        ),
        Err(TensorBoardError::Invalid(_))
    ));

    let r = EventReader::open(w.path()).unwrap();
    let scalars = r.scalars().unwrap();
    let got: Vec<(i64, f64)> = scalars["loss/train"].clone();
    let want: Vec<(i64, f64)> = losses
        .iter()
        .enumerate()
        .map(|(s, &l)| (s as i64, l as f32 as f64))
        .collect();
    assert_eq!(got, want);
    for (series, value) in [("lr_encoder", 0.5f32), ("lr_decoder", 0.01)] {
        let files = event_files(&dir.join(series));
        assert_eq!(files.len(), 1, "{series}");
        let s = EventReader::open(&files[0]).unwrap().scalars().unwrap();
        assert_eq!(s["lr"].len(), 6);
        assert_eq!(s["lr"][5].1, value as f64, "{series}");
    }
    let h = &r.histograms().unwrap()["weights"][0];
    assert_eq!(h.0, 4);
    let v64: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    assert_eq!(h.1.num, 1000.0);
    assert_eq!(h.1.bucket.iter().sum::<f64>(), 1000.0);
    assert_eq!(h.1.min, v64.iter().cloned().fold(f64::INFINITY, f64::min));
    assert_eq!(
        h.1.max,
        v64.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
    );
    assert!((h.1.sum - v64.iter().sum::<f64>()).abs() < 1e-9);
    assert!((h.1.sum_squares - v64.iter().map(|v| v * v).sum::<f64>()).abs() < 1e-9);
    let (step, height, width, channels, png) = r.images().unwrap()["input"][0].clone();
    assert_eq!((step, height, width, channels), (5, 8, 6, 3));
    let decoded = image::load_from_memory(&png).unwrap().to_rgb8();
    assert_eq!(decoded.dimensions(), (6, 8));
    for (p, px) in decoded.pixels().enumerate() {
        for c in 0..3 {
            assert_eq!(px[c], (pixels[c * 48 + p] * 255.0) as u8);
        }
    }
    assert_eq!(
        r.texts().unwrap()["notes/text_summary"],
        vec![(0, "lr **0.1**, batch 64".to_string())]
    );
    // add_hparams: a run subdirectory with the three hparams records and the metric.
    let runs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.ends_with("lr_encoder") && !p.ends_with("lr_decoder"))
        .collect();
    assert_eq!(runs.len(), 1);
    let hp = EventReader::open(&event_files(&runs[0])[0]).unwrap();
    let tags: Vec<String> = hp
        .events()
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.what {
            Some(ferrograd::train::tensorboard::proto::tensorboard::event::What::Summary(s)) => {
                Some(s.value[0].tag.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        tags,
        [
            "_hparams_/experiment",
            "_hparams_/session_start_info",
            "_hparams_/session_end_info",
            "hparam/accuracy"
        ]
    );
    if std::env::var_os("FERROGRAD_TB_OUT").is_some() {
        let expected = serde_json::json!({
            "loss/train": want,
            "lr_encoder": 0.5, "lr_decoder": 0.01,
            "histogram": {"num": 1000, "min": h.1.min, "max": h.1.max, "sum": h.1.sum, "sum_squares": h.1.sum_squares},
            "image": {"height": 8, "width": 6, "pixels": pixels.iter().map(|v| (v * 255.0) as u8).collect::<Vec<u8>>()},
            "text": "lr **0.1**, batch 64",
            "hparams": {"lr": 0.1, "optimizer": "adamw", "amp": false, "hparam/accuracy": 0.93},
        });
        std::fs::write(dir.join("expected.json"), expected.to_string()).unwrap();
    } else {
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn a_killed_run_resumes_with_its_broken_record_cut_and_later_steps_purged() {
    let dir = out_dir("resumed");
    let first = {
        let mut w = SummaryWriter::new(&dir).unwrap();
        for step in 0..10 {
            w.add_scalar("loss", step as f64, step).unwrap();
        }
        w.flush().unwrap();
        w.path().to_path_buf()
    };
    // Killed while writing: the last record is cut in the middle.
    let len = std::fs::metadata(&first).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap();
    file.set_len(len - 7).unwrap();
    drop(file);
    assert!(matches!(
        EventReader::open(&first).unwrap().events(),
        Err(TensorBoardError::Corrupt { .. })
    ));
    // Resumed from the checkpoint of step 5: steps 5.. are logged again, with new values.
    let mut w = SummaryWriter::resume(&dir, 5).unwrap();
    for step in 5..12 {
        w.add_scalar("loss", 100.0 + step as f64, step).unwrap();
    }
    w.flush().unwrap();
    let old = EventReader::open(&first).unwrap().scalars().unwrap();
    assert_eq!(
        old["loss"].len(),
        9,
        "the cut record is gone, the whole ones stay"
    );
    let new = EventReader::open(w.path()).unwrap();
    let purge = new
        .events()
        .unwrap()
        .into_iter()
        .find(|e| {
            matches!(
                e.what,
                Some(ferrograd::train::tensorboard::proto::tensorboard::event::What::SessionLog(_))
            )
        })
        .expect("a SessionLog START");
    assert_eq!(purge.step, 5);
    assert_eq!(new.scalars().unwrap()["loss"].len(), 7);
    if std::env::var_os("FERROGRAD_TB_OUT").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
}
