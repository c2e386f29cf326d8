//! Fuzzes the CIFAR reader: any input is an `Ok` or an `Err`, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("ferrograd-fuzz-cifar-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(dir.join("test_batch.bin"), data).is_ok()
    {
        let _ = ferrograd::data::datasets::CIFAR10::new(&dir, false);
    }
});
