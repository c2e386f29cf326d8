//! Fuzzes the checkpoint readers: any bytes read as a safetensors state dict, a training
//! checkpoint or a shard index are an `Ok` or an `Err`, never a panic, and never an
//! allocation of the size a corrupt header claims.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("ferrograd-fuzz-ckpt-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let file = dir.join("input.safetensors");
    if std::fs::write(&file, data).is_ok() {
        let _ = ferrograd::checkpoint::read_state_dict(&file);
        let _ = ferrograd::checkpoint::Checkpoint::load(&file);
    }
    let index = dir.join("model.safetensors.index.json");
    if std::fs::write(&index, data).is_ok() {
        let _ = ferrograd::checkpoint::read_sharded(&index);
    }
});
