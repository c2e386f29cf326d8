//! Data-loader workers never outlive their epoch (or, persistent, their loader): counted
//! as the process's threads named `ferrograd-data-*` (Linux `/proc`). Alone in its test
//! binary so that no other test's workers are counted.

use ferrograd::data::{DataError, DataLoader, Dataset};
use ferrograd::prelude::*;

struct Slow;

impl Dataset for Slow {
    type Item = i64;
    fn len(&self) -> usize {
        64
    }
    fn get(&self, index: usize) -> Result<i64, DataError> {
        std::thread::sleep(std::time::Duration::from_millis(1));
        Ok(index as i64)
    }
}

#[cfg(target_os = "linux")]
fn data_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc is mounted")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("ferrograd-data"))
        .count()
}

#[cfg(target_os = "linux")]
#[test]
fn workers_stop_with_the_epoch_or_with_the_loader() {
    assert_eq!(data_threads(), 0);
    let mut loader = DataLoader::builder(Slow)
        .batch_size(4)
        .num_workers(3)
        .build();
    {
        let mut epoch = loader.iter();
        let first: Tensor = epoch.next().unwrap().unwrap();
        assert_eq!(first.to_vec::<i64>(), vec![0, 1, 2, 3]);
        assert_eq!(data_threads(), 3, "three workers while the epoch runs");
        // Abandoned mid-epoch, with batches still in flight.
    }
    assert_eq!(data_threads(), 0, "dropping the epoch joins its workers");
    assert_eq!(loader.iter().count(), 16);
    assert_eq!(data_threads(), 0);
    drop(loader);

    let mut loader = DataLoader::builder(Slow)
        .batch_size(4)
        .num_workers(2)
        .persistent_workers(true)
        .build();
    for _ in 0..3 {
        assert_eq!(loader.iter().filter(Result::is_ok).count(), 16);
        assert_eq!(data_threads(), 2, "persistent workers stay between epochs");
    }
    let mut epoch = loader.iter();
    epoch.next();
    drop(epoch);
    assert_eq!(
        loader.iter().count(),
        16,
        "a new epoch after an abandoned one"
    );
    drop(loader);
    assert_eq!(data_threads(), 0, "and stop with the loader");
}
