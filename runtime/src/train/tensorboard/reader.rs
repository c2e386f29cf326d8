//! Reading event files back: one file's events, scalars, histograms and texts
//! ([`EventReader`]), and a whole run directory's scalars as TensorBoard shows them
//! ([`read_scalars`]).

use super::*;

/// Reads an event file back: its events, or the scalars, histograms and text in it.
///
/// ```
/// use ferrograd_runtime::train::tensorboard::{EventReader, SummaryWriter};
/// let dir = std::env::temp_dir().join(format!("ferrograd-doc-er-{}", std::process::id()));
/// let mut w = SummaryWriter::new(&dir).unwrap();
/// w.add_text("notes", "hello", 3).unwrap();
/// w.flush().unwrap();
/// let reader = EventReader::open(w.path()).unwrap();
/// assert_eq!(reader.texts().unwrap()["notes/text_summary"], vec![(3, "hello".to_string())]);
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
#[derive(Debug)]
pub struct EventReader {
    path: PathBuf,
    bytes: Vec<u8>,
}

/// The scalars of a whole run directory as TensorBoard shows them: its event files in
/// the order they were written, where a file that begins with a `SessionLog` START at
/// step `s` (a [`SummaryWriter::resume`]) drops the earlier files' events from step `s`
/// on. `(step, value)` by tag, in the order kept.
///
/// ```
/// use ferrograd_runtime::train::tensorboard::{SummaryWriter, read_scalars};
/// let dir = std::env::temp_dir().join(format!("ferrograd-doc-read-{}", std::process::id()));
/// let mut w = SummaryWriter::new(&dir).unwrap();
/// for step in 1..=4 {
///     w.add_scalar("loss", step as f64, step).unwrap();
/// }
/// w.flush().unwrap();
/// drop(w);
/// // A run resumed from a checkpoint at step 2 logs 3 and 4 again.
/// let mut w = SummaryWriter::resume(&dir, 3).unwrap();
/// w.add_scalar("loss", 30.0, 3).unwrap();
/// w.flush().unwrap();
/// assert_eq!(read_scalars(&dir).unwrap()["loss"], vec![(1, 1.0), (2, 2.0), (3, 30.0)]);
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
pub fn read_scalars(logdir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<(i64, f64)>>> {
    let logdir = logdir.as_ref();
    let mut files: Vec<PathBuf> = std::fs::read_dir(logdir)
        .map_err(io(logdir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("events.out.tfevents."))
        })
        .collect();
    // `events.out.tfevents.{secs:010}.{host}.{pid}.{uid:04}`: by time, then writer.
    let key = |p: &PathBuf| {
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let parts: Vec<&str> = name.split('.').collect();
        let secs = parts
            .get(3)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        let uid = parts
            .last()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        (secs, uid, name)
    };
    files.sort_by_key(key);
    let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for f in files {
        let reader = EventReader::open(&f)?;
        for e in reader.events()? {
            match e.what {
                Some(What::SessionLog(log))
                    if log.status == session_log::SessionStatus::Start as i32 =>
                {
                    for series in out.values_mut() {
                        series.retain(|(step, _)| *step < e.step);
                    }
                }
                Some(What::Summary(s)) => {
                    for v in s.value {
                        if let Some(summary::value::Value::SimpleValue(x)) = v.value {
                            out.entry(v.tag).or_default().push((e.step, x as f64));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out.retain(|_, v| !v.is_empty());
    Ok(out)
}

impl EventReader {
    /// Reads the whole file.
    pub fn open(path: impl AsRef<Path>) -> Result<EventReader> {
        let path = path.as_ref().to_path_buf();
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io(&path))?;
        Ok(EventReader { path, bytes })
    }

    /// Every event, in order. A broken record is an `Err` naming where it starts.
    pub fn events(&self) -> Result<Vec<Event>> {
        let (records, broken) = records(&self.bytes);
        if let Some((offset, reason)) = broken {
            return Err(TensorBoardError::Corrupt {
                path: self.path.clone(),
                offset: offset as u64,
                reason,
            });
        }
        records
            .into_iter()
            .map(|(offset, r)| {
                Event::decode(r).map_err(|e| TensorBoardError::Corrupt {
                    path: self.path.clone(),
                    offset: offset as u64,
                    reason: e.to_string(),
                })
            })
            .collect()
    }

    fn values(&self) -> Result<Vec<(i64, summary::Value)>> {
        Ok(self
            .events()?
            .into_iter()
            .filter_map(|e| match e.what {
                Some(What::Summary(s)) => Some((e.step, s.value)),
                _ => None,
            })
            .flat_map(|(step, values)| values.into_iter().map(move |v| (step, v)))
            .collect())
    }

    /// Scalars by tag: `(step, value)` in the order written.
    pub fn scalars(&self) -> Result<BTreeMap<String, Vec<(i64, f64)>>> {
        let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
        for (step, v) in self.values()? {
            if let Some(summary::value::Value::SimpleValue(x)) = v.value {
                out.entry(v.tag).or_default().push((step, x as f64));
            }
        }
        Ok(out)
    }

    /// Histograms by tag: `(step, histogram)`.
    pub fn histograms(&self) -> Result<BTreeMap<String, Vec<(i64, HistogramProto)>>> {
        let mut out: BTreeMap<String, Vec<(i64, HistogramProto)>> = BTreeMap::new();
        for (step, v) in self.values()? {
            if let Some(summary::value::Value::Histo(h)) = v.value {
                out.entry(v.tag).or_default().push((step, h));
            }
        }
        Ok(out)
    }

    /// Text summaries by tag: `(step, text)`.
    pub fn texts(&self) -> Result<BTreeMap<String, Vec<(i64, String)>>> {
        let mut out: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
        for (step, v) in self.values()? {
            if let Some(summary::value::Value::Tensor(t)) = v.value
                && let Some(s) = t.string_val.first()
            {
                out.entry(v.tag)
                    .or_default()
                    .push((step, String::from_utf8_lossy(s).into_owned()));
            }
        }
        Ok(out)
    }

    /// Images by tag: `(step, height, width, channels, PNG bytes)`.
    #[allow(clippy::type_complexity)]
    pub fn images(&self) -> Result<BTreeMap<String, Vec<(i64, usize, usize, usize, Vec<u8>)>>> {
        let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for (step, v) in self.values()? {
            if let Some(summary::value::Value::Image(i)) = v.value {
                out.entry(v.tag).or_default().push((
                    step,
                    i.height as usize,
                    i.width as usize,
                    i.colorspace as usize,
                    i.encoded_image_string,
                ));
            }
        }
        Ok(out)
    }
}
