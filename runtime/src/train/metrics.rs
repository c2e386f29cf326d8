//! Training metrics: the incremental metrics of a validation loop ([`Metric`]:
//! accuracy, top-k, precision/recall/F1, confusion matrix, AUROC, perplexity; [`Mean`]),
//! and the CSV log of per-epoch values with its plot ([`MetricsLog`]).

mod classification;
pub use classification::{
    Accuracy, Auroc, Average, ConfusionMatrix, Mean, Metric, Perplexity, PrecisionRecallF1, Score,
};

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the metrics log could not be read, written or drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file or the values do not fit the log's columns.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The plot could not be drawn or encoded.
    #[error("{}: plotting failed: {reason}", path.display())]
    Plot {
        /// The image file.
        path: PathBuf,
        /// The drawing backend's error.
        reason: String,
    },
}

/// Per-epoch metrics in a CSV file (a header of column names, one row of numbers per
/// epoch), written as they come so a crashed run keeps its history, and reopened by a
/// resumed run ([`MetricsLog::resume`]).
#[derive(Clone, Debug)]
pub struct MetricsLog {
    path: PathBuf,
    columns: Vec<String>,
    rows: Vec<Vec<f64>>,
}

impl MetricsLog {
    /// A new, empty log at `path` (replacing any file there) with `columns`.
    ///
    /// # Errors
    /// [`MetricsError::Io`] when the file cannot be written.
    pub fn create(path: impl AsRef<Path>, columns: &[&str]) -> Result<Self, MetricsError> {
        let log = MetricsLog {
            path: path.as_ref().to_path_buf(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        };
        log.rewrite()?;
        Ok(log)
    }

    /// The log at `path` with its rows so far, to append to (a new one when there is no
    /// file); rows whose first column exceeds `up_to` (epochs logged after the
    /// checkpoint a run resumes from) are dropped.
    ///
    /// # Errors
    /// [`MetricsError::Format`] when the file's header is not `columns` or a value is
    /// not a number; [`MetricsError::Io`] when it cannot be read or rewritten.
    ///
    /// ```
    /// use ferrograd_runtime::train::MetricsLog;
    /// let path = std::env::temp_dir().join("ferrograd-doc-resume.csv");
    /// let mut log = MetricsLog::create(&path, &["epoch", "loss"]).unwrap();
    /// for e in 1..=3 {
    ///     log.append(&[e as f64, 1.0 / e as f64]).unwrap();
    /// }
    /// let log = MetricsLog::resume(&path, &["epoch", "loss"], 2.0).unwrap();
    /// assert_eq!(log.rows().len(), 2);
    /// ```
    pub fn resume(
        path: impl AsRef<Path>,
        columns: &[&str],
        up_to: f64,
    ) -> Result<Self, MetricsError> {
        let path = path.as_ref();
        if !path.exists() {
            return Self::create(path, columns);
        }
        let bad = |reason: String| MetricsError::Format {
            path: path.to_path_buf(),
            reason,
        };
        let mut reader = csv::Reader::from_path(path).map_err(|e| bad(e.to_string()))?;
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .map(str::to_string)
            .collect();
        if header != columns {
            return Err(bad(format!("has columns {header:?}, expected {columns:?}")));
        }
        let mut rows = Vec::new();
        for (i, record) in reader.records().enumerate() {
            let record = record.map_err(|e| bad(e.to_string()))?;
            let row = record
                .iter()
                .map(|v| v.trim().parse::<f64>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("row {}: {e}", i + 1)))?;
            if row.len() != columns.len() {
                return Err(bad(format!("row {} has {} values", i + 1, row.len())));
            }
            rows.push(row);
        }
        rows.retain(|r| r[0] <= up_to);
        let log = MetricsLog {
            path: path.to_path_buf(),
            columns: header,
            rows,
        };
        log.rewrite()?;
        Ok(log)
    }

    /// Appends a row (one value per column) and writes it to the file.
    ///
    /// # Errors
    /// [`MetricsError::Format`] on the wrong number of values; [`MetricsError::Io`] when
    /// the file cannot be written.
    pub fn append(&mut self, values: &[f64]) -> Result<(), MetricsError> {
        if values.len() != self.columns.len() {
            return Err(MetricsError::Format {
                path: self.path.clone(),
                reason: format!(
                    "{} values for the {} columns {:?}",
                    values.len(),
                    self.columns.len(),
                    self.columns
                ),
            });
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|source| self.io(source))?;
        f.write_all(format!("{}\n", join(values)).as_bytes())
            .map_err(|source| self.io(source))?;
        self.rows.push(values.to_vec());
        Ok(())
    }

    /// The column names.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The rows so far.
    pub fn rows(&self) -> &[Vec<f64>] {
        &self.rows
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> MetricsError {
        MetricsError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Writes the header and rows afresh.
    fn rewrite(&self) -> Result<(), MetricsError> {
        let mut text = self.columns.join(",") + "\n";
        for r in &self.rows {
            text += &join(r);
            text.push('\n');
        }
        std::fs::write(&self.path, text).map_err(|source| self.io(source))
    }

    /// Draws the log against its first column (the epoch) as PNG (`png`, 1200×480) and
    /// SVG (`svg`): a panel of the columns whose names contain "loss" and one of those
    /// containing "acc" (as percentages), each series a labelled line with markers.
    ///
    /// # Errors
    /// [`MetricsError::Plot`] when drawing fails, [`MetricsError::Io`] when a file cannot
    /// be written.
    ///
    /// ```
    /// use ferrograd_runtime::train::MetricsLog;
    /// let dir = std::env::temp_dir();
    /// let mut log = MetricsLog::create(dir.join("ferrograd-doc-plot.csv"), &["epoch", "train_loss", "test_accuracy"]).unwrap();
    /// log.append(&[1.0, 0.9, 0.80]).unwrap();
    /// log.append(&[2.0, 0.5, 0.90]).unwrap();
    /// log.plot(dir.join("ferrograd-doc-plot.png"), dir.join("ferrograd-doc-plot.svg")).unwrap();
    /// let svg = std::fs::read_to_string(dir.join("ferrograd-doc-plot.svg")).unwrap();
    /// assert!(svg.contains("train_loss") && svg.contains("<polyline"));
    /// ```
    #[cfg(feature = "plot")]
    pub fn plot(&self, png: impl AsRef<Path>, svg: impl AsRef<Path>) -> Result<(), MetricsError> {
        plot::draw(self, png.as_ref(), svg.as_ref())
    }
}

fn join(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(feature = "plot")]
mod plot {
    use super::{MetricsError, MetricsLog};
    use plotters::coord::Shift;
    use plotters::prelude::*;
    use std::path::Path;

    /// DejaVu Sans reduced to printable ASCII (10 KB; DejaVu's licence,
    /// `fonts/LICENSE_DEJAVU`, allows it), so the plots need no system fonts.
    const FONT: &[u8] = include_bytes!("fonts/DejaVuSans-ascii.ttf");
    const WIDTH: u32 = 1200;
    const HEIGHT: u32 = 480;
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];

    fn register_font() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // The bundled font parses (tested), so this cannot fail.
            let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
        });
    }

    pub(super) fn draw(log: &MetricsLog, png: &Path, svg: &Path) -> Result<(), MetricsError> {
        register_font();
        let plot_err = |path: &Path, e: String| MetricsError::Plot {
            path: path.to_path_buf(),
            reason: e,
        };
        let mut pixels = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, HEIGHT)).into_drawing_area();
            panels(log, &root).map_err(|e| plot_err(png, e))?;
            root.present().map_err(|e| plot_err(png, e.to_string()))?;
        }
        let image = image::RgbImage::from_raw(WIDTH, HEIGHT, pixels)
            .ok_or_else(|| plot_err(png, "the pixel buffer has the wrong size".into()))?;
        image
            .save_with_format(png, image::ImageFormat::Png)
            .map_err(|e| plot_err(png, e.to_string()))?;
        let root = SVGBackend::new(svg, (WIDTH, HEIGHT)).into_drawing_area();
        panels(log, &root).map_err(|e| plot_err(svg, e))?;
        root.present().map_err(|e| plot_err(svg, e.to_string()))?;
        Ok(())
    }

    /// Side by side, the panels that have columns: losses, accuracies, and any other
    /// metric.
    fn panels<DB: DrawingBackend>(
        log: &MetricsLog,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let is_loss = |c: &str| c.contains("loss");
        let is_acc = |c: &str| c.contains("acc") && !is_loss(c);
        let pick = |keep: &dyn Fn(&str) -> bool| -> Vec<usize> {
            (1..log.columns.len())
                .filter(|&i| keep(&log.columns[i]))
                .collect()
        };
        let groups: Vec<(&str, Vec<usize>, f64)> = vec![
            ("loss", pick(&is_loss), 1.0),
            ("accuracy (%)", pick(&is_acc), 100.0),
            ("value", pick(&|c| !is_loss(c) && !is_acc(c)), 1.0),
        ]
        .into_iter()
        .filter(|(_, columns, _)| !columns.is_empty())
        .collect();
        if groups.is_empty() {
            return Ok(());
        }
        let areas = root.split_evenly((1, groups.len()));
        for ((title, columns, scale), area) in groups.iter().zip(&areas) {
            panel(log, area, title, columns, *scale)?;
        }
        Ok(())
    }

    fn panel<DB: DrawingBackend>(
        log: &MetricsLog,
        area: &DrawingArea<DB, Shift>,
        title: &str,
        columns: &[usize],
        scale: f64,
    ) -> Result<(), String> {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let xs: Vec<f64> = log.rows.iter().map(|r| r[0]).collect();
        let values: Vec<f64> = log
            .rows
            .iter()
            .flat_map(|r| columns.iter().map(move |&c| r[c] * scale))
            .filter(|v| v.is_finite())
            .collect();
        let (x0, x1) = bounds(&xs, 1.0);
        let (y0, y1) = bounds(&values, 0.05);
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(log.columns[0].as_str())
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        for (k, &c) in columns.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let points: Vec<(f64, f64)> = log
                .rows
                .iter()
                .map(|r| (r[0], r[c] * scale))
                .filter(|(_, y)| y.is_finite())
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(log.columns[c].as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(err)?;
        }
        if !columns.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }

    /// A padded range around `values` (a unit range when there are none or all equal).
    fn bounds(values: &[f64], pad: f64) -> (f64, f64) {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() || !hi.is_finite() {
            return (0.0, 1.0);
        }
        let span = (hi - lo).max(1e-9);
        if pad >= 1.0 {
            (lo - 0.25, hi + 0.25)
        } else {
            (lo - span * pad, hi + span * pad)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::MetricsLog;

        /// The PNG has the plot's text: its captions are drawn with the bundled font
        /// (without a font, plotters draws no text at all).
        #[test]
        fn the_png_has_its_captions_drawn_with_the_bundled_font() {
            let dir = std::env::temp_dir().join(format!("ferrograd-plot-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut log =
                MetricsLog::create(dir.join("m.csv"), &["epoch", "train_loss", "test_acc"])
                    .unwrap();
            for e in 1..=4 {
                log.append(&[e as f64, 1.0 / e as f64, 0.5 + 0.1 * e as f64])
                    .unwrap();
            }
            log.plot(dir.join("m.png"), dir.join("m.svg")).unwrap();
            let img = image::open(dir.join("m.png")).unwrap().to_rgb8();
            assert_eq!(img.dimensions(), (super::WIDTH, super::HEIGHT));
            // The caption band (top 40 rows) of each panel holds dark text pixels.
            for x_range in [0..600u32, 600..1200] {
                let dark = x_range
                    .flat_map(|x| (0..40u32).map(move |y| (x, y)))
                    .filter(|&(x, y)| img.get_pixel(x, y).0.iter().all(|&c| c < 128))
                    .count();
                assert!(dark > 20, "no caption text drawn ({dark} dark pixels)");
            }
            let svg = std::fs::read_to_string(dir.join("m.svg")).unwrap();
            assert!(svg.contains("accuracy (%)") && svg.contains("test_acc"));
            std::fs::remove_dir_all(&dir).unwrap();
        }

        /// A log without an accuracy column gets no empty accuracy panel: its loss
        /// panel takes the whole width.
        #[test]
        fn only_the_panels_with_columns_are_drawn() {
            let dir =
                std::env::temp_dir().join(format!("ferrograd-plot-loss-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut log =
                MetricsLog::create(dir.join("m.csv"), &["step", "train_loss", "val_loss"]).unwrap();
            for s in 1..=4 {
                log.append(&[s as f64, 2.0 / s as f64, 2.5 / s as f64])
                    .unwrap();
            }
            log.plot(dir.join("m.png"), dir.join("m.svg")).unwrap();
            let svg = std::fs::read_to_string(dir.join("m.svg")).unwrap();
            assert!(!svg.contains("accuracy"), "an accuracy panel was drawn");
            let lines = |colour: &str| {
                svg.lines()
                    .filter(|l| l.contains("<polyline") && l.to_uppercase().contains(colour))
                    .count()
            };
            // Each loss column is a line in its colour (the first two of the palette).
            assert!(
                lines("1F77B4") >= 1 && lines("FF7F0E") >= 1,
                "a loss line is missing"
            );
            // The single panel spans the width: its lines reach the right half.
            let img = image::open(dir.join("m.png")).unwrap().to_rgb8();
            let coloured = (900..1150u32)
                .flat_map(|x| (60..400u32).map(move |y| (x, y)))
                .filter(|&(x, y)| {
                    let [r, g, b] = img.get_pixel(x, y).0;
                    r.abs_diff(g) > 60 || g.abs_diff(b) > 60
                })
                .count();
            assert!(coloured > 20, "nothing drawn in the right half");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
