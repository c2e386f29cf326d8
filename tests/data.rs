//! `data`: samplers' order and coverage, the loader's batches (the same for any number of
//! workers under one seed), error propagation from workers, clean shutdown, collation,
//! data-set combinators, and the IDX reader on tiny, corrupt and real files.

use ferrograd::data::datasets::{MNIST, read_idx};
use ferrograd::data::*;
use ferrograd::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn g(seed: u64) -> Generator {
    Generator::new(seed)
}

#[test]
fn samplers_cover_what_they_should() {
    assert_eq!(
        SequentialSampler::new(4).indices(0, &mut g(0)),
        vec![0, 1, 2, 3]
    );

    let s = RandomSampler::new(50);
    let a = s.indices(0, &mut g(1));
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..50).collect::<Vec<_>>(), "a permutation");
    assert_eq!(
        a,
        s.indices(0, &mut g(1)),
        "the same seed gives the same order"
    );
    assert_ne!(a, s.indices(0, &mut g(2)));

    let long = RandomSampler::with_replacement(4, false, 10).indices(0, &mut g(3));
    assert_eq!(long.len(), 10);
    let mut first = long[..4].to_vec();
    first.sort();
    assert_eq!(
        first,
        vec![0, 1, 2, 3],
        "whole permutations when num_samples > n"
    );

    let draws = RandomSampler::with_replacement(3, true, 3000).indices(0, &mut g(4));
    for k in 0..3 {
        let c = draws.iter().filter(|&&i| i == k).count();
        assert!((800..1200).contains(&c), "uniform draws: {c} of index {k}");
    }

    let w = WeightedRandomSampler::new(vec![1.0, 3.0, 0.0], 4000, true).unwrap();
    let draws = w.indices(0, &mut g(5));
    let ones = draws.iter().filter(|&&i| i == 1).count() as f64 / 4000.0;
    assert!((ones - 0.75).abs() < 0.03, "weight 3 of 4 drawn {ones}");
    assert!(!draws.contains(&2), "zero weight is never drawn");
    let distinct = WeightedRandomSampler::new(vec![1.0, 1.0, 1.0], 3, false)
        .unwrap()
        .indices(0, &mut g(6));
    assert_eq!(distinct.iter().collect::<HashSet<_>>().len(), 3);
    assert!(WeightedRandomSampler::new(vec![1.0, 0.0], 2, false).is_err());
    assert!(WeightedRandomSampler::new(vec![-1.0], 1, true).is_err());

    let b = BatchSampler::new(SequentialSampler::new(7), 3, false);
    assert_eq!(
        b.batches(0, &mut g(0)),
        vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
    );
    assert_eq!(
        BatchSampler::new(SequentialSampler::new(7), 3, true)
            .batches(0, &mut g(0))
            .len(),
        2
    );
}

#[test]
fn distributed_sampler_splits_one_permutation_across_ranks() {
    for drop_last in [false, true] {
        let ranks: Vec<Vec<usize>> = (0..3)
            .map(|r| {
                DistributedSampler::new(10, 3, r, true, 9, drop_last)
                    .unwrap()
                    .indices(2, &mut g(r as u64))
            })
            .collect();
        let len = if drop_last { 3 } else { 4 };
        assert!(ranks.iter().all(|r| r.len() == len), "{ranks:?}");
        let all: HashSet<usize> = ranks.iter().flatten().copied().collect();
        if drop_last {
            assert_eq!(all.len(), 9, "disjoint shares of 9 samples");
        } else {
            assert_eq!(all.len(), 10, "every sample is covered, padding repeats");
        }
    }
    let s = DistributedSampler::new(10, 2, 0, true, 9, false).unwrap();
    assert_ne!(
        s.indices(0, &mut g(0)),
        s.indices(1, &mut g(0)),
        "set_epoch reshuffles"
    );
    assert!(DistributedSampler::new(10, 2, 2, true, 0, false).is_err());
}

/// Items depend on a per-sample random draw, so batches only agree across worker counts
/// if the per-sample streams do.
struct Noisy {
    n: usize,
    seen: Arc<Mutex<HashSet<std::thread::ThreadId>>>,
}

impl Dataset for Noisy {
    type Item = (Tensor, i64);
    fn len(&self) -> usize {
        self.n
    }
    fn get(&self, index: usize) -> Result<(Tensor, i64), DataError> {
        self.seen
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        let noise = with_sample_rng(|g| Tensor::rand_with(&[2], DType::F32, &Device::Cpu, g));
        Ok((noise.add_scalar(index as f64), index as i64))
    }
}

fn noisy(n: usize) -> (Noisy, Arc<Mutex<HashSet<std::thread::ThreadId>>>) {
    let seen = Arc::new(Mutex::new(HashSet::new()));
    (
        Noisy {
            n,
            seen: Arc::clone(&seen),
        },
        seen,
    )
}

fn epoch_batches<D: Dataset<Item = (Tensor, i64)> + 'static>(
    loader: &mut DataLoader<D>,
) -> Vec<(Vec<f32>, Vec<i64>)> {
    loader
        .iter()
        .map(|b| {
            let (x, y) = b.unwrap();
            (x.to_vec::<f32>(), y.to_vec::<i64>())
        })
        .collect()
}

#[test]
fn batches_are_the_same_for_any_number_of_workers() {
    let mut runs = Vec::new();
    for workers in [0, 1, 4] {
        let (d, _) = noisy(23);
        let mut loader = DataLoader::builder(d)
            .batch_size(5)
            .shuffle(true)
            .seed(42)
            .num_workers(workers)
            .prefetch_factor(2)
            .build();
        assert_eq!(loader.len(), 5);
        let first = epoch_batches(&mut loader);
        let second = epoch_batches(&mut loader);
        loader.set_epoch(0);
        assert_eq!(
            epoch_batches(&mut loader),
            first,
            "set_epoch(0) replays epoch 0"
        );
        assert_ne!(first, second, "each epoch reshuffles");
        runs.push((first, second));
    }
    let (d, seen) = noisy(40);
    let mut loader = DataLoader::builder(d).batch_size(4).num_workers(3).build();
    epoch_batches(&mut loader);
    assert!(
        seen.lock().unwrap().len() >= 2,
        "samples were loaded on worker threads"
    );
    assert_eq!(runs[0], runs[1], "0 vs 1 worker");
    assert_eq!(runs[0], runs[2], "0 vs 4 workers");
    let (first, _) = &runs[0];
    assert_eq!(first.last().unwrap().1.len(), 3, "the last partial batch");
    let mut labels: Vec<i64> = first.iter().flat_map(|(_, y)| y.clone()).collect();
    labels.sort();
    assert_eq!(labels, (0..23).collect::<Vec<_>>(), "every sample once");
}

#[test]
fn drop_last_and_sampler_option() {
    let (d, _) = noisy(23);
    let mut loader = DataLoader::builder(d)
        .batch_size(5)
        .drop_last(true)
        .sampler(SequentialSampler::new(23))
        .num_workers(2)
        .build();
    assert_eq!(loader.len(), 4);
    let batches = epoch_batches(&mut loader);
    assert_eq!(batches.len(), 4);
    assert_eq!(batches[0].1, vec![0, 1, 2, 3, 4]);
    assert_eq!(loader.iter().len(), 4, "an exact-size iterator");
}

struct Faulty;

impl Dataset for Faulty {
    type Item = i64;
    fn len(&self) -> usize {
        8
    }
    fn get(&self, index: usize) -> Result<i64, DataError> {
        match index {
            3 => Err(DataError::Invalid("bad record".into())),
            6 => panic!("corrupt sample"),
            i => Ok(i as i64),
        }
    }
}

#[test]
fn worker_errors_and_panics_reach_the_loop_naming_the_sample() {
    for workers in [0, 2] {
        let mut loader = DataLoader::builder(Faulty)
            .batch_size(2)
            .num_workers(workers)
            .build();
        let results: Vec<Result<Tensor, DataError>> = loader.iter().collect();
        assert_eq!(results.len(), 4);
        assert_eq!(results[0].as_ref().unwrap().to_vec::<i64>(), vec![0, 1]);
        let e = results[1].as_ref().unwrap_err().to_string();
        assert!(e.contains("sample 3") && e.contains("bad record"), "{e}");
        let e = results[3].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("sample 6") && e.contains("corrupt sample"),
            "{e}"
        );
        assert!(results[2].is_ok(), "the loader goes on after an error");
    }
}

#[test]
fn default_collate_stacks_nested_samples_and_reports_mismatches() {
    let items = vec![
        (
            Tensor::zeros(&[2], DType::F32, &Device::Cpu),
            vec![1i64, 2],
            0.5f64,
        ),
        (
            Tensor::ones(&[2], DType::F32, &Device::Cpu),
            vec![3i64, 4],
            1.5f64,
        ),
    ];
    let (x, v, s) = DefaultCollate.collate(items).unwrap();
    assert_eq!(x.shape(), &[2, 2]);
    assert_eq!(
        (v[0].to_vec::<i64>(), v[1].to_vec::<i64>()),
        (vec![1, 3], vec![2, 4])
    );
    assert_eq!(s.to_vec::<f64>(), vec![0.5, 1.5]);

    let maps: Vec<BTreeMap<String, f32>> = vec![
        BTreeMap::from([("a".to_string(), 1.0), ("b".to_string(), 2.0)]),
        BTreeMap::from([("a".to_string(), 3.0), ("b".to_string(), 4.0)]),
    ];
    let m = DefaultCollate.collate(maps).unwrap();
    assert_eq!(m["b"].to_vec::<f32>(), vec![2.0, 4.0]);

    let ragged = vec![
        Tensor::zeros(&[2], DType::F32, &Device::Cpu),
        Tensor::zeros(&[3], DType::F32, &Device::Cpu),
    ];
    let e = DefaultCollate.collate(ragged).unwrap_err().to_string();
    assert!(
        e.contains("[2]") && e.contains("[3]") && e.contains("entry 1"),
        "{e}"
    );
}

#[test]
fn dataset_combinators() {
    let x = Tensor::arange(0.0, 10.0, 1.0, DType::F32, &Device::Cpu);
    let d = Arc::new(TensorDataset::new(x.clone()));
    assert!(
        TensorDataset::try_new((x.clone(), Tensor::zeros(&[3], DType::F32, &Device::Cpu))).is_err()
    );
    assert!(matches!(
        d.get(10),
        Err(DataError::IndexOutOfRange { index: 10, len: 10 })
    ));

    let parts = random_split(Arc::clone(&d), &[0.5, 0.3, 0.2], &mut g(0)).unwrap();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        vec![5, 3, 2]
    );
    let mut all: Vec<usize> = parts.iter().flat_map(|p| p.indices().to_vec()).collect();
    all.sort();
    assert_eq!(all, (0..10).collect::<Vec<_>>(), "disjoint and covering");
    let again = random_split(Arc::clone(&d), &[0.5, 0.3, 0.2], &mut g(0)).unwrap();
    assert_eq!(again[0].indices(), parts[0].indices(), "seeded");
    assert_eq!(
        random_split(Arc::clone(&d), &[7.0, 3.0], &mut g(0)).unwrap()[0].len(),
        7
    );
    // 11 * [0.5, 0.5] = 5.5 each: the remainder goes round-robin, as PyTorch.
    let odd = Arc::new(TensorDataset::new(Tensor::zeros(
        &[11],
        DType::F32,
        &Device::Cpu,
    )));
    let halves = random_split(odd, &[0.5, 0.5], &mut g(0)).unwrap();
    assert_eq!((halves[0].len(), halves[1].len()), (6, 5));
    assert!(random_split(Arc::clone(&d), &[4.0, 3.0], &mut g(0)).is_err());

    let cat = ConcatDataset::new(vec![Arc::clone(&d), Arc::clone(&d)]);
    assert_eq!((cat.len(), cat.get(13).unwrap().item::<f32>()), (20, 3.0));
    let doubled = Arc::clone(&d).map(|t| t.mul_scalar(2.0));
    assert_eq!(doubled.get(4).unwrap().item::<f32>(), 8.0);
}

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrograd-data-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn idx_reader_reads_tiny_files_and_rejects_corrupt_ones() {
    let dir = temp_dir("idx");
    let pixels: Vec<u8> = (0..2 * 3 * 2).map(|i| i as u8 * 20).collect();
    std::fs::write(
        dir.join("train-images-idx3-ubyte.gz"),
        gz(&idx_bytes(&[2, 3, 2], &pixels)),
    )
    .unwrap();
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        idx_bytes(&[2], &[7, 1]),
    )
    .unwrap();
    let d = MNIST::new(&dir, true).unwrap();
    assert_eq!(d.len(), 2);
    let (img, label) = d.get(1).unwrap();
    assert_eq!((img.shape(), label), (&[1, 3, 2][..], 1));
    assert_eq!(img.to_vec::<f32>()[0], 120.0 / 255.0);
    let (x, y) = d.tensors();
    assert_eq!(
        (x.shape(), y.to_vec::<i64>()),
        (&[2, 1, 3, 2][..], vec![7, 1])
    );

    let e = MNIST::new(&dir, false).err().unwrap().to_string();
    assert!(
        e.contains("t10k-images-idx3-ubyte") && e.contains("does not download"),
        "{e}"
    );

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "truncated magic"),
        ("magic", vec![1, 2, 8, 1, 0, 0, 0, 0], "wrong magic"),
        (
            "type",
            vec![0, 0, 0x0d, 1, 0, 0, 0, 0],
            "not unsigned bytes",
        ),
        ("header", vec![0, 0, 8, 3, 0, 0, 0, 1], "truncated header"),
        ("data", idx_bytes(&[4], &[1, 2]), "truncated data"),
        ("trailing", idx_bytes(&[1], &[1, 2]), "trailing bytes"),
        (
            "huge",
            idx_bytes(&[u32::MAX, u32::MAX, u32::MAX], &[0; 8]),
            "too large",
        ),
        (
            "lying",
            idx_bytes(&[1 << 30, 1 << 2], &[0; 16]),
            "truncated data",
        ),
    ];
    for (name, bytes, want) in cases {
        for (suffix, content) in [("raw", bytes.clone()), ("gz", gz(&bytes))] {
            let path = dir.join(format!("{name}.{suffix}"));
            std::fs::write(&path, &content).unwrap();
            let e = read_idx(&path).unwrap_err().to_string();
            assert!(
                e.contains(want) && e.contains(&path.display().to_string()),
                "{name}.{suffix}: {e}"
            );
        }
    }
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        idx_bytes(&[3], &[7, 1, 2]),
    )
    .unwrap();
    let e = MNIST::new(&dir, true).err().unwrap().to_string();
    assert!(e.contains("expected 2 labels"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bounded deterministic fuzz run: mutated and truncated copies of a real (bundled)
/// IDX file never make the reader panic.
#[test]
fn idx_reader_never_panics_on_mutated_real_files() {
    let real = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data/mnist-mini/t10k-labels-idx1-ubyte.gz");
    let original = std::fs::read(&real).unwrap();
    let raw = {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&original[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    };
    let dir = temp_dir("fuzz");
    let path = dir.join("case.idx");
    let mut rng = Generator::new(1234);
    let mut state = 0x9E37_79B9u64;
    let mut next = |m: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state as usize) % m.max(1)
    };
    let _ = &mut rng;
    let mut errors = 0;
    for case in 0..300 {
        let base = if case % 2 == 0 { &raw } else { &original };
        let mut bytes = base.clone();
        match case % 3 {
            0 => bytes.truncate(next(bytes.len())),
            1 => {
                for _ in 0..1 + next(4) {
                    let i = next(bytes.len().min(32));
                    bytes[i] = next(256) as u8;
                }
            }
            _ => {
                let i = next(bytes.len());
                bytes[i] ^= 1 << next(8);
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let outcome = std::panic::catch_unwind(|| read_idx(&path).map(|(d, _)| d));
        let result = outcome.unwrap_or_else(|_| panic!("read_idx panicked on case {case}"));
        errors += result.is_err() as usize;
    }
    assert!(errors > 100, "most mutations are detected ({errors})");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The full MNIST from `$FERROGRAD_DATA` or `../shared/data`: skipped with a message when
/// absent, a failure under `CI=true`.
#[test]
fn reads_the_full_mnist_when_present() {
    let root = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"))
        .join("mnist");
    if !root.is_dir() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the MNIST data is missing at {}",
            root.display()
        );
        eprintln!("skipping: MNIST not found at {}", root.display());
        return;
    }
    let train = MNIST::new(&root, true).unwrap();
    let test = MNIST::new(&root, false).unwrap();
    assert_eq!((train.len(), test.len()), (60_000, 10_000));
    let (x, y) = train.tensors();
    assert!(
        (x.mean_all().item::<f32>() - 0.1307).abs() < 1e-3,
        "MNIST's mean pixel"
    );
    assert_eq!(
        (y.min_all().item::<i64>(), y.max_all().item::<i64>()),
        (0, 9)
    );
    let mut loader = DataLoader::builder(test)
        .batch_size(1000)
        .num_workers(2)
        .seed(0)
        .build();
    let seen: usize = loader.iter().map(|b| b.unwrap().1.shape()[0]).sum();
    assert_eq!(seen, 10_000);
}

#[test]
fn cifar_readers_read_records_and_reject_bad_files() {
    use ferrograd::data::datasets::{CIFAR10, CIFAR100};
    let dir = temp_dir("cifar").join("cifar-10-batches-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let record = |label: u8, fill: u8| {
        let mut r = vec![label];
        r.extend(std::iter::repeat_n(fill, 3072));
        r
    };
    for (i, name) in [
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
    ]
    .iter()
    .enumerate()
    {
        let bytes: Vec<u8> = [record(i as u8, 10 * i as u8), record(9, 255)].concat();
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), record(3, 51)).unwrap();
    let root = dir.parent().unwrap();
    let train = CIFAR10::new(root, true).unwrap();
    assert_eq!(train.len(), 10);
    let (img, label) = train.get(4).unwrap();
    assert_eq!((img.shape(), label), (&[3, 32, 32][..], 2));
    assert_eq!(img.to_vec::<f32>()[0], 20.0 / 255.0);
    let (x, y) = CIFAR10::new(root, false).unwrap().tensors();
    assert_eq!(
        (x.shape(), y.to_vec::<i64>()),
        (&[1, 3, 32, 32][..], vec![3])
    );
    let batch = train.get_stacked(&[1, 9]).unwrap().unwrap();
    assert_eq!(batch.1.to_vec::<i64>(), vec![9, 9]);

    std::fs::write(dir.join("test_batch.bin"), &record(3, 51)[..100]).unwrap();
    let e = CIFAR10::new(root, false).err().unwrap().to_string();
    assert!(
        e.contains("test_batch.bin") && e.contains("3073-byte records"),
        "{e}"
    );
    std::fs::write(dir.join("test_batch.bin"), record(10, 0)).unwrap();
    let e = CIFAR10::new(root, false).err().unwrap().to_string();
    assert!(e.contains("record 0 has label 10, outside 0..10"), "{e}");

    let dir100 = root.join("cifar-100-binary");
    std::fs::create_dir_all(&dir100).unwrap();
    let mut r = vec![3u8, 77];
    r.extend(std::iter::repeat_n(0u8, 3072));
    std::fs::write(dir100.join("test.bin"), &r).unwrap();
    assert_eq!(
        CIFAR100::new(root, false).unwrap().get(0).unwrap().1,
        77,
        "fine label"
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn text_csv_and_array_readers() {
    use ferrograd::data::datasets::{CsvDataset, TextDataset, npy_dataset, read_npy};
    let dir = temp_dir("tables");
    let csv = dir.join("t.csv");
    std::fs::write(&csv, "1,2,3\n4,5\n").unwrap();
    let e = CsvDataset::new(&csv, false, &[2]).unwrap_err().to_string();
    assert!(e.contains("t.csv") && e.contains("row 2"), "{e}");
    std::fs::write(&csv, "1,2,3\n4,5,6\n").unwrap();
    let e = CsvDataset::new(&csv, false, &[3]).unwrap_err().to_string();
    assert!(e.contains("target column 4"), "{e}");

    let text = dir.join("t.txt");
    std::fs::write(&text, [0xff, 0xfe, b'a']).unwrap();
    assert!(
        TextDataset::chars(&text, 1)
            .unwrap_err()
            .to_string()
            .contains("not UTF-8")
    );
    assert_eq!(TextDataset::bytes(&text, 1).unwrap().len(), 2);
    std::fs::write(&text, "ab").unwrap();
    assert!(
        TextDataset::chars(&text, 2)
            .unwrap_err()
            .to_string()
            .contains("too few")
    );

    let npy = |name: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/npy")
            .join(name)
    };
    let d = npy_dataset(&[
        &npy("x.npy"),
        &npy("y.npy"),
        &npy("z_be.npy"),
        &npy("flags.npy"),
    ])
    .unwrap();
    let row = d.get(2).unwrap();
    assert_eq!(row[0].to_vec::<f32>(), vec![2.0, 2.5]);
    assert_eq!(row[1].item::<i64>(), 7);
    assert_eq!(row[2].item::<f64>(), -2.0, "big-endian f8");
    assert!(row[3].item::<bool>());
    let e = read_npy(&npy("fortran.npy")).unwrap_err().to_string();
    assert!(e.contains("Fortran"), "{e}");
    std::fs::write(
        dir.join("cut.npy"),
        &std::fs::read(npy("x.npy")).unwrap()[..140],
    )
    .unwrap();
    assert!(read_npy(&dir.join("cut.npy")).is_err(), "a truncated array");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The bundled Shakespeare corpus as characters: skipped with a message when absent, a
/// failure under `CI=true`.
#[test]
fn reads_the_shakespeare_corpus_when_present() {
    use ferrograd::data::datasets::TextDataset;
    let path = std::env::var_os("FERROGRAD_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"))
        .join("text/shakespeare_8plays.txt");
    if !path.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the corpus is missing at {}",
            path.display()
        );
        eprintln!("skipping: corpus not found at {}", path.display());
        return;
    }
    let d = TextDataset::chars(&path, 128).unwrap();
    assert!(d.len() > 5000 && (40..200).contains(&d.vocab_size()));
    let (x, y) = d.get(10).unwrap();
    assert_eq!(
        x.narrow(0, 1, 127).to_vec::<i64>(),
        y.narrow(0, 0, 127).to_vec::<i64>()
    );
    let round = d.decode(&d.encode("To be, or not to be"));
    assert_eq!(round, "To be, or not to be");
}

/// A bounded deterministic fuzz run over every parser: mutated and truncated copies of
/// real files (a bundled IDX file, the test PNG and JPEG, a numpy array, a CSV file) are
/// always an `Ok` or an `Err`, never a panic. The open-ended runs are the cargo-fuzz
/// targets in `fuzz/`.
#[test]
fn parsers_never_panic_on_mutated_files() {
    use ferrograd::data::datasets::{CsvDataset, read_image, read_npy};
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = temp_dir("fuzz-all");
    std::fs::write(dir.join("table.csv"), "a,b,c\n1,2,3\n4.5,-6,7e3\n").unwrap();
    type Parser = fn(&std::path::Path) -> bool;
    let parsers: Vec<(PathBuf, &str, Parser)> = vec![
        (fixtures.join("images/shirt.png"), "png", |p| {
            read_image(p).is_ok()
        }),
        (fixtures.join("images/shirt.jpg"), "jpg", |p| {
            read_image(p).is_ok()
        }),
        (fixtures.join("npy/x.npy"), "npy", |p| read_npy(p).is_ok()),
        (dir.join("table.csv"), "csv", |p| {
            CsvDataset::new(p, true, &[2]).is_ok()
        }),
        (
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("examples/data/mnist-mini/t10k-labels-idx1-ubyte.gz"),
            "idx",
            |p| read_idx(p).is_ok(),
        ),
    ];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |m: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state as usize) % m.max(1)
    };
    for (source, ext, parse) in parsers {
        let original = std::fs::read(&source).unwrap();
        assert!(parse(&source), "{ext}: the unmodified file parses");
        let path = dir.join(format!("case.{ext}"));
        for case in 0..150 {
            let mut bytes = original.clone();
            match case % 3 {
                0 => bytes.truncate(next(bytes.len())),
                1 => {
                    for _ in 0..1 + next(8) {
                        let i = next(bytes.len());
                        bytes[i] = next(256) as u8;
                    }
                }
                _ => {
                    let i = next(bytes.len());
                    let extra: Vec<u8> = (0..next(64)).map(|_| next(256) as u8).collect();
                    bytes.splice(i..i, extra);
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            let outcome = std::panic::catch_unwind(|| parse(&path));
            assert!(outcome.is_ok(), "{ext}: the parser panicked on case {case}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
