//! Numeric tables: CSV files, and arrays in safetensors or `.npy` files.

use super::super::{DataError, Dataset, TensorDataset};
use crate::{DType, Tensor};
use std::path::Path;

/// A CSV file of numeric columns as `(features, targets)` samples: features f32 `[F]`
/// (every column but `target_columns`, by index), targets as a PyTorch user reading the
/// file with pandas would get them. A header row is skipped when `has_header`. A cell
/// that is not a number is an error naming its row and column.
///
/// Targets, per pandas' inference (`torch.tensor(df[cols].values)`): when every target
/// cell is an integer the targets are int64 — one target column gives class labels
/// `[N]` (a sample's target is a scalar), as `cross_entropy` takes them, several give
/// `[N, T]` — else f32 `[N, T]` (regression targets keep their column dim, as a model's
/// `[N, 1]` output has it). [`CsvDataset::with_target_dtype`] chooses instead.
///
/// ```
/// use ferrograd_runtime::prelude::*;
/// use ferrograd_runtime::data::Dataset;
/// use ferrograd_runtime::data::datasets::CsvDataset;
/// let path = std::env::temp_dir().join("ferrograd-doc.csv");
/// std::fs::write(&path, "a,b,label\n1,2,0\n3.5,4,1\n").unwrap();
/// let d = CsvDataset::new(&path, true, &[2]).unwrap();
/// let (x, y) = d.get(1).unwrap();
/// assert_eq!((x.to_vec::<f32>(), y.item::<i64>()), (vec![3.5, 4.0], 1));
/// assert_eq!(d.tensors().1.shape(), &[2]);
/// std::fs::write(&path, "1,2\n3,x\n").unwrap();
/// assert!(CsvDataset::new(&path, false, &[1]).unwrap_err().to_string().contains("row 2, column 2"));
/// ```
#[derive(Debug)]
pub struct CsvDataset {
    inner: TensorDataset<(Tensor, Tensor)>,
    header: Vec<String>,
}

impl CsvDataset {
    /// Reads `path`, inferring the targets' dtype (see the type's docs).
    pub fn new(
        path: impl AsRef<Path>,
        has_header: bool,
        target_columns: &[usize],
    ) -> Result<Self, DataError> {
        Self::read(path.as_ref(), has_header, target_columns, None)
    }

    /// Reads `path` with targets of `dtype`: [`DType::I64`] (every target cell must be
    /// an integer; one target column gives `[N]`, several `[N, T]`) or a float dtype
    /// (`[N, T]`).
    ///
    /// ```
    /// use ferrograd_runtime::prelude::*;
    /// use ferrograd_runtime::data::datasets::CsvDataset;
    /// let path = std::env::temp_dir().join("ferrograd-doc-dtype.csv");
    /// std::fs::write(&path, "1,2,3\n4,5,6\n").unwrap();
    /// let (_, y) = CsvDataset::with_target_dtype(&path, false, &[2], DType::F32).unwrap().tensors();
    /// assert_eq!((y.dtype(), y.shape()), (DType::F32, &[2, 1][..]));
    /// std::fs::write(&path, "1,2,3.5\n").unwrap();
    /// let e = CsvDataset::with_target_dtype(&path, false, &[2], DType::I64).unwrap_err();
    /// assert!(e.to_string().contains("row 1, column 3"));
    /// ```
    pub fn with_target_dtype(
        path: impl AsRef<Path>,
        has_header: bool,
        target_columns: &[usize],
        dtype: DType,
    ) -> Result<Self, DataError> {
        let path = path.as_ref();
        if !(dtype == DType::I64 || dtype.is_float()) {
            return Err(DataError::Invalid(format!(
                "CsvDataset: target dtype {dtype:?} is neither int64 nor a float dtype"
            )));
        }
        Self::read(path, has_header, target_columns, Some(dtype))
    }

    fn read(
        path: &Path,
        has_header: bool,
        target_columns: &[usize],
        dtype: Option<DType>,
    ) -> Result<Self, DataError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(has_header)
            .flexible(false)
            .from_path(path)
            .map_err(|e| DataError::format(path, e.to_string()))?;
        let header = if has_header {
            reader
                .headers()
                .map_err(|e| DataError::format(path, e.to_string()))?
                .iter()
                .map(str::to_string)
                .collect()
        } else {
            Vec::new()
        };
        let want_ints = dtype == Some(DType::I64);
        let (mut features, mut targets, mut int_targets) = (Vec::new(), Vec::new(), Vec::new());
        let mut all_int = true;
        let mut width = None;
        let mut rows = 0;
        for (r, record) in reader.records().enumerate() {
            let row = r + 1 + has_header as usize;
            let record = record.map_err(|e| DataError::format(path, format!("row {row}: {e}")))?;
            let w = *width.get_or_insert(record.len());
            if let Some(&bad) = target_columns.iter().find(|&&c| c >= w) {
                return Err(DataError::format(
                    path,
                    format!("target column {} is past the {w} columns", bad + 1),
                ));
            }
            for (c, cell) in record.iter().enumerate() {
                let cell = cell.trim();
                let not_a = |what: &str| {
                    DataError::format(
                        path,
                        format!("row {row}, column {}: {cell:?} is not {what}", c + 1),
                    )
                };
                let v: f32 = cell.parse().map_err(|_| not_a("a number"))?;
                if target_columns.contains(&c) {
                    match cell.parse::<i64>() {
                        Ok(i) => int_targets.push(i),
                        Err(_) if want_ints => return Err(not_a("an integer")),
                        Err(_) => all_int = false,
                    }
                    targets.push(v);
                } else {
                    features.push(v);
                }
            }
            rows += 1;
        }
        let w = width.unwrap_or(0);
        let t = target_columns.len();
        let x = Tensor::from_vec(features, &[rows, w.saturating_sub(t)]);
        let ints = dtype.map_or(all_int && t > 0, |d| d == DType::I64);
        let y = if ints {
            let shape: &[usize] = if t == 1 { &[rows] } else { &[rows, t] };
            Tensor::from_vec(int_targets, shape)
        } else {
            Tensor::from_vec(targets, &[rows, t]).to_dtype(dtype.unwrap_or(DType::F32))
        };
        Ok(CsvDataset {
            inner: TensorDataset::try_new((x, y))?,
            header,
        })
    }

    /// The header row (empty without one).
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::CsvDataset;
    /// let path = std::env::temp_dir().join("ferrograd-doc-header.csv");
    /// std::fs::write(&path, "x,y\n1,2\n").unwrap();
    /// assert_eq!(CsvDataset::new(&path, true, &[1]).unwrap().header(), ["x", "y"]);
    /// ```
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// All features `[N, F]` and targets (`[N]` or `[N, T]`, see the type's docs).
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::CsvDataset;
    /// let path = std::env::temp_dir().join("ferrograd-doc-all.csv");
    /// std::fs::write(&path, "1,2,3\n4,5,6\n").unwrap();
    /// let (x, y) = CsvDataset::new(&path, false, &[0]).unwrap().tensors();
    /// assert_eq!((x.shape(), y.shape()), (&[2, 2][..], &[2][..]));
    /// ```
    pub fn tensors(&self) -> (Tensor, Tensor) {
        self.inner.tensors().clone()
    }
}

impl Dataset for CsvDataset {
    type Item = (Tensor, Tensor);
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn get(&self, index: usize) -> Result<(Tensor, Tensor), DataError> {
        self.inner.get(index)
    }
    fn get_stacked(&self, indices: &[usize]) -> Option<Result<(Tensor, Tensor), DataError>> {
        self.inner.get_stacked(indices)
    }
}

/// The named tensors of a safetensors file (`f32`, `f64`, `f16`, `bf16`, `i64`, `u8`,
/// `bool`), as a [`TensorDataset`] over their first dim, in the order of `names`.
///
/// ```
/// use ferrograd_runtime::data::Dataset;
/// use ferrograd_runtime::data::datasets::safetensors_dataset;
/// let path = std::env::temp_dir().join("ferrograd-doc.safetensors");
/// let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let views = [("x", safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 2], &x).unwrap())];
/// safetensors::serialize_to_file(views, None, &path).unwrap();
/// let d = safetensors_dataset(&path, &["x"]).unwrap();
/// assert_eq!(d.get(1).unwrap()[0].to_vec::<f32>(), vec![3.0, 4.0]);
/// assert!(safetensors_dataset(&path, &["y"]).is_err());
/// ```
pub fn safetensors_dataset(
    path: impl AsRef<Path>,
    names: &[&str],
) -> Result<TensorDataset<Vec<Tensor>>, DataError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| DataError::format(path, format!("not a safetensors file: {e}")))?;
    let tensors = names
        .iter()
        .map(|&name| {
            let view = st
                .tensor(name)
                .map_err(|_| DataError::format(path, format!("no tensor named {name:?}")))?;
            crate::tensor::tensor_from_view(&view)
                .map_err(|reason| DataError::format(path, format!("tensor {name:?}: {reason}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    TensorDataset::try_new(tensors)
}

/// `.npy` arrays (`numpy.save`), one file per tensor, as a [`TensorDataset`] over their
/// first dim. Little- or big-endian f32, f64, f16, i64, i32, u8 and bool arrays in C
/// order are read; anything else is an error naming the file.
///
/// ```
/// use ferrograd_runtime::data::Dataset;
/// use ferrograd_runtime::data::datasets::npy_dataset;
/// let path = std::env::temp_dir().join("ferrograd-doc.npy");
/// let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
/// let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }";
/// let mut header = header.to_string();
/// while (10 + header.len() + 1) % 64 != 0 { header.push(' '); }
/// header.push('\n');
/// bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
/// bytes.extend_from_slice(header.as_bytes());
/// bytes.extend_from_slice(&1.5f32.to_le_bytes());
/// bytes.extend_from_slice(&2.5f32.to_le_bytes());
/// std::fs::write(&path, bytes).unwrap();
/// let d = npy_dataset(&[&path]).unwrap();
/// assert_eq!(d.get(1).unwrap()[0].to_vec::<f32>(), vec![2.5]);
/// ```
pub fn npy_dataset(paths: &[&Path]) -> Result<TensorDataset<Vec<Tensor>>, DataError> {
    let tensors = paths
        .iter()
        .map(|p| read_npy(p))
        .collect::<Result<Vec<_>, _>>()?;
    TensorDataset::try_new(tensors)
}

/// Reads one `.npy` file as a tensor.
///
/// ```
/// use ferrograd_runtime::data::datasets::read_npy;
/// let path = std::env::temp_dir().join("ferrograd-doc-bad.npy");
/// std::fs::write(&path, b"not numpy").unwrap();
/// assert!(read_npy(&path).unwrap_err().to_string().contains("ferrograd-doc-bad.npy"));
/// ```
pub fn read_npy(path: &Path) -> Result<Tensor, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    parse_npy(&bytes, path)
}

/// [`read_npy`] on the bytes of a `.npy` file (a request body, say); errors name
/// `<bytes>`.
///
/// ```
/// use ferrograd_runtime::data::datasets::decode_npy;
/// assert!(decode_npy(b"not numpy").is_err());
/// ```
pub fn decode_npy(bytes: &[u8]) -> Result<Tensor, DataError> {
    parse_npy(bytes, Path::new("<bytes>"))
}

fn parse_npy(bytes: &[u8], path: &Path) -> Result<Tensor, DataError> {
    let bad = |e: String| DataError::format(path, format!("not a readable .npy array: {e}"));
    let npy = npyz::NpyFile::new(bytes).map_err(|e| bad(e.to_string()))?;
    if npy.order() != npyz::Order::C {
        return Err(bad("Fortran-order arrays are not supported".into()));
    }
    let shape: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(format!("dim {d} is too large"))))
        .collect::<Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(format!("shape {shape:?} is too large")))?;
    let descr = npy.dtype().descr();
    macro_rules! read {
        ($t:ty) => {{
            let v: Vec<$t> = npy.into_vec::<$t>().map_err(|e| bad(e.to_string()))?;
            if v.len() != count {
                return Err(bad(format!(
                    "shape {shape:?} needs {count} values, found {}",
                    v.len()
                )));
            }
            v
        }};
    }
    let kind = descr
        .trim_matches(|c| c == '\'' || c == '"')
        .trim_start_matches(['<', '>', '|', '=']);
    Ok(match kind {
        "f4" => Tensor::from_vec(read!(f32), &shape),
        "f8" => Tensor::from_vec(read!(f64), &shape),
        "f2" => Tensor::from_vec(read!(half::f16), &shape),
        "i8" => Tensor::from_vec(read!(i64), &shape),
        "i4" => Tensor::from_vec(
            read!(i32).into_iter().map(i64::from).collect::<Vec<_>>(),
            &shape,
        ),
        "u1" => Tensor::from_vec(read!(u8), &shape),
        "b1" => Tensor::from_vec(read!(bool), &shape),
        other => return Err(bad(format!("dtype {other:?} is not supported"))),
    }
    .to_dtype(match kind {
        "i4" | "i8" => DType::I64,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "u1" => DType::U8,
        _ => DType::Bool,
    }))
}
