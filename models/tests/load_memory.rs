//! Loading a pretrained model holds about one copy of its weights: the model is built
//! without random weights (`nn::init::skip_init`, whose zero pages are never touched)
//! and each tensor is copied out of the mapped file chunk by chunk, the chunk's pages
//! released as it goes. One test in its own binary, so its process's peak is its own.

use std::path::PathBuf;

/// The process's peak resident memory in KiB (`VmHWM`), on Linux.
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn loading_minilm_peaks_at_most_1_2_times_its_file() {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    let dir = root.join("all-minilm-l6-v2");
    if !dir.is_dir() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {} is missing",
            dir.display()
        );
        eprintln!("skipping: {} not found", dir.display());
        return;
    }
    let Some(before) = peak_kib() else {
        eprintln!("skipping: no /proc/self/status (not Linux)");
        return;
    };
    let model = ferrograd_models::bert::BertModel::from_pretrained(&dir).unwrap();
    let after = peak_kib().unwrap();
    let file = std::fs::metadata(dir.join("model.safetensors"))
        .unwrap()
        .len()
        / 1024;
    let ratio = (after - before) as f64 / file as f64;
    eprintln!(
        "peak grew by {} KiB loading a {file} KiB checkpoint: {ratio:.3}x",
        after - before
    );
    assert!(ratio <= 1.2, "peak memory {ratio:.3}x the file");
    drop(model);
}
