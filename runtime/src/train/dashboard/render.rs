//! Drawing the dashboard: the header, the loss and metric curves, the learning rate,
//! throughput and memory panels, and the number formats they use.

use super::*;

pub(super) fn format_bytes(b: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[unit])
    }
}

pub(super) fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A metric's value as the summary shows it (accuracies in percent).
pub(super) fn format_value(name: &str, x: f64) -> String {
    if name == "samples_per_sec" {
        format!("{x:.0}")
    } else if name.contains("accuracy") {
        format!("{:.2}%", x * 100.0)
    } else if x != 0.0 && (x.abs() >= 1e5 || x.abs() < 1e-3) {
        format!("{x:.3e}")
    } else {
        format!("{x:.4}")
    }
}

/// Axis bounds around `values`, padded by a twentieth of their range.
pub(super) fn bounds(values: impl Iterator<Item = f64>) -> [f64; 2] {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return [0.0, 1.0];
    }
    let pad = ((hi - lo) * 0.05).max(hi.abs().max(1e-12) * 1e-3);
    [lo - pad, hi + pad]
}

pub(super) fn axis_labels(b: [f64; 2], fmt: fn(f64) -> String) -> Vec<Span<'static>> {
    vec![
        Span::raw(fmt(b[0])),
        Span::raw(fmt((b[0] + b[1]) / 2.0)),
        Span::raw(fmt(b[1])),
    ]
}

pub(super) const SERIES_COLORS: [Color; 6] = [
    Color::Green,
    Color::Magenta,
    Color::Yellow,
    Color::Blue,
    Color::Red,
    Color::White,
];

pub(super) fn render(f: &mut Frame, v: &View, memory: &Memory) {
    let area = f.area();
    if area.width < 60 || area.height < 20 {
        let text = format!(
            "epoch {}/{} batch {}/{} loss {:.4} — enlarge the terminal for the dashboard (60x20)",
            v.epoch + 1,
            v.max_epochs,
            v.batch,
            v.epoch_batches,
            v.epoch_loss.0 / v.epoch_loss.1.max(1) as f64
        );
        f.render_widget(Paragraph::new(text), area);
        return;
    }
    let [header, charts, panels, last] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Min(8),
        Constraint::Length(7),
        Constraint::Length(4),
    ])
    .areas(area);
    render_header(f, v, header);
    let [loss, metrics] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(charts);
    render_loss(f, v, loss);
    render_metrics(f, v, metrics);
    let [lr, speed, mem] = Layout::horizontal([
        Constraint::Percentage(34),
        Constraint::Percentage(33),
        Constraint::Percentage(33),
    ])
    .areas(panels);
    render_lr(f, v, lr);
    render_throughput(f, v, speed);
    render_memory(f, memory, mem);
    render_last(f, v, last);
}

pub(super) fn render_header(f: &mut Frame, v: &View, area: Rect) {
    let keys = if v.stopping {
        " stopping after this batch ".to_string()
    } else {
        " q: stop · Ctrl-C: quit ".to_string()
    };
    let block = Block::bordered()
        .title(Line::from(format!(" ferrograd · {} ", v.title)).bold())
        .title_bottom(Line::from(keys).right_aligned());
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [info, epoch_gauge, run_gauge] = Layout::vertical([Constraint::Length(1); 3]).areas(inner);
    let eta = v
        .eta()
        .map_or_else(|| "--:--:--".to_string(), format_duration);
    let steps = match v.max_steps {
        Some(m) => format!("{}/{m}", v.global_step),
        None => v.global_step.to_string(),
    };
    let info_line = Line::from(vec![
        Span::raw("epoch "),
        Span::raw(format!("{}/{}", v.epoch + 1, v.max_epochs)).bold(),
        Span::raw("  step "),
        Span::raw(steps).bold(),
        Span::raw("  elapsed "),
        Span::raw(format_duration(v.started.elapsed())).bold(),
        Span::raw("  ETA "),
        Span::raw(eta).bold().fg(Color::Cyan),
    ]);
    f.render_widget(Paragraph::new(info_line), info);
    let ratio = |done: u64, total: u64| (done as f64 / total.max(1) as f64).clamp(0.0, 1.0);
    f.render_widget(
        Gauge::default()
            .gauge_style(Style::default().fg(Color::Green).bg(Color::DarkGray))
            .ratio(ratio(v.batch as u64, v.epoch_batches as u64))
            .label(format!("epoch  {}/{} batches", v.batch, v.epoch_batches)),
        epoch_gauge,
    );
    let total = v.run_total();
    f.render_widget(
        Gauge::default()
            .gauge_style(Style::default().fg(Color::Blue).bg(Color::DarkGray))
            .ratio(ratio(v.run_batches, total))
            .label(format!("run  {}/{} batches", v.run_batches, total)),
        run_gauge,
    );
}

pub(super) fn render_loss(f: &mut Frame, v: &View, area: Rect) {
    let mut train = v.loss.data();
    let mut val = v.val_loss.clone();
    // Losses span decades (the first steps' dwarf the rest): a log scale when all are
    // positive, labelled with the losses themselves.
    let log = train.iter().chain(&val).all(|p| p.1 > 0.0);
    if log {
        for p in train.iter_mut().chain(val.iter_mut()) {
            p.1 = p.1.log10();
        }
    }
    let mut datasets = vec![
        Dataset::default()
            .name("train")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::default().fg(Color::Cyan))
            .data(&train),
    ];
    if !val.is_empty() {
        datasets.push(
            Dataset::default()
                .name("val")
                .marker(Marker::Dot)
                .graph_type(GraphType::Line)
                .style(Style::default().fg(Color::Yellow))
                .data(&val),
        );
    }
    let xb = bounds(train.iter().chain(&val).map(|p| p.0).chain([0.0, 1.0]));
    let xb = [xb[0].max(0.0), xb[1]];
    let yb = bounds(train.iter().chain(&val).map(|p| p.1));
    let y_labels = if log {
        axis_labels(yb, |y| short(10f64.powf(y)))
    } else {
        axis_labels(yb, short)
    };
    let now = if v.epoch_loss.1 > 0 {
        format!(" loss {:.4} ", v.epoch_loss.0 / v.epoch_loss.1 as f64)
    } else {
        " loss ".to_string()
    };
    let scale = if log { " step · log scale " } else { " step " };
    let chart = Chart::new(datasets)
        .block(Block::bordered().title(now).title_bottom(scale))
        .x_axis(
            Axis::default()
                .bounds(xb)
                .labels(axis_labels(xb, |x| format!("{x:.0}"))),
        )
        .y_axis(Axis::default().bounds(yb).labels(y_labels));
    f.render_widget(chart, area);
}

/// An axis label: three decimals, or three significant digits for small values.
pub(super) fn short(x: f64) -> String {
    if x == 0.0 || x.abs() >= 0.01 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

pub(super) fn render_metrics(f: &mut Frame, v: &View, area: Rect) {
    let block = Block::bordered().title(" metrics ").title_bottom(" epoch ");
    let mut running: Vec<(f64, f64)> = Vec::new();
    let mut series: Vec<(&str, &[(f64, f64)])> = v
        .metrics
        .iter()
        .map(|(k, p)| (k.as_str(), p.as_slice()))
        .collect();
    // The epoch in progress: its running training accuracy, at a fractional epoch.
    if let Some((right, seen)) = v.epoch_correct.filter(|c| c.1 > 0) {
        let x = v.epoch as f64 + v.batch as f64 / v.epoch_batches.max(1) as f64;
        running.push((x, right as f64 / seen as f64));
        series.push(("train_accuracy (now)", running.as_slice()));
    }
    if series.is_empty() {
        f.render_widget(
            Paragraph::new("after the first epoch: accuracy and validation metrics")
                .block(block)
                .dark_gray(),
            area,
        );
        return;
    }
    let datasets: Vec<Dataset> = series
        .iter()
        .enumerate()
        .map(|(i, (name, points))| {
            Dataset::default()
                .name(*name)
                .marker(if points.len() > 1 {
                    Marker::Braille
                } else {
                    Marker::Dot
                })
                .graph_type(if points.len() > 1 {
                    GraphType::Line
                } else {
                    GraphType::Scatter
                })
                .style(Style::default().fg(SERIES_COLORS[i % SERIES_COLORS.len()]))
                .data(points)
        })
        .collect();
    let (first, last) = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold((f64::INFINITY, 1.0f64), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    let pad = ((last - first) * 0.05).max(0.25);
    let xb = [(first - pad).max(0.0), last + pad];
    let yb = bounds(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)));
    f.render_widget(
        Chart::new(datasets)
            .block(block)
            .hidden_legend_constraints((Constraint::Ratio(2, 3), Constraint::Ratio(1, 2)))
            // Metrics rise to the top right: the legend goes below them.
            .legend_position(Some(ratatui::widgets::LegendPosition::BottomRight))
            .x_axis(
                Axis::default()
                    .bounds(xb)
                    .labels(axis_labels(xb, |x| format!("{x:.1}"))),
            )
            .y_axis(Axis::default().bounds(yb).labels(axis_labels(yb, short))),
        area,
    );
}

pub(super) fn render_lr(f: &mut Frame, v: &View, area: Rect) {
    let points = v.lr.data();
    let title = format!(" learning rate {:.3e} ", v.lr_now);
    let xb = bounds(points.iter().map(|p| p.0).chain([0.0]));
    let yb = bounds(points.iter().map(|p| p.1));
    let chart = Chart::new(vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::default().fg(Color::Magenta))
            .data(&points),
    ])
    .block(Block::bordered().title(title))
    .x_axis(Axis::default().bounds(xb))
    .y_axis(
        Axis::default()
            .bounds(yb)
            .labels(axis_labels(yb, |y| format!("{y:.1e}"))),
    );
    f.render_widget(chart, area);
}

pub(super) fn render_throughput(f: &mut Frame, v: &View, area: Rect) {
    let title = format!(" throughput {:.0} samples/s ", v.samples_per_sec());
    let block = Block::bordered().title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let width = inner.width as usize;
    let recent = &v.throughput[v.throughput.len().saturating_sub(width)..];
    f.render_widget(
        Sparkline::default()
            .data(recent)
            .style(Style::default().fg(Color::Green)),
        inner,
    );
}

pub(super) fn render_memory(f: &mut Frame, m: &Memory, area: Rect) {
    let mut lines = vec![
        Line::from(vec![
            Span::raw("tensors   "),
            Span::raw(format_bytes(m.tensors)).bold(),
        ]),
        Line::from(vec![
            Span::raw("peak      "),
            Span::raw(format_bytes(m.peak)),
        ]),
    ];
    if let Some(r) = m.resident {
        lines.push(Line::from(vec![
            Span::raw("process   "),
            Span::raw(format_bytes(r)),
        ]));
    }
    if let Some((now, peak)) = m.cuda {
        lines.push(Line::from(vec![
            Span::raw("cuda:0    "),
            Span::raw(format!(
                "{} (peak {})",
                format_bytes(now),
                format_bytes(peak)
            ))
            .bold(),
        ]));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" memory ")),
        area,
    );
}

pub(super) fn render_last(f: &mut Frame, v: &View, area: Rect) {
    let block = Block::bordered().title(" last epoch ");
    if v.last_epoch.is_empty() {
        f.render_widget(
            Paragraph::new("no epoch finished yet")
                .block(block)
                .dark_gray(),
            area,
        );
        return;
    }
    let mut spans = Vec::new();
    for (k, x) in &v.last_epoch {
        spans.push(Span::raw(format!("{k} ")).add_modifier(Modifier::DIM));
        spans.push(Span::raw(format!("{}   ", format_value(k, *x))).bold());
    }
    f.render_widget(
        Paragraph::new(Line::from(spans))
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(block),
        area,
    );
}
