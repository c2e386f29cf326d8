//! Fuzzes the csv reader: any input is an `Ok` or an `Err`, never a panic, and never an
//! allocation of the size a corrupt header claims.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("ferrograd-fuzz-{}.csv", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        let _ = ferrograd::data::datasets::CsvDataset::new(&path, true, &[0]);
    }
});
