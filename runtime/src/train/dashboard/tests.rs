//! Tests of `dashboard`.

use super::*;
use ratatui::backend::TestBackend;

fn screen(v: &View, width: u16, height: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    let memory = Memory {
        tensors: 3 << 20,
        peak: 5 << 20,
        resident: Some(200 << 20),
        cuda: None,
    };
    t.draw(|f| render(f, v, &memory)).unwrap();
    let buf = t.backend().buffer();
    (0..height)
        .map(|y| {
            (0..width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_panel_shows_its_numbers() {
    let mut v = View::new("runs/test", 3, None, None);
    v.first_epoch = Some(0);
    v.epoch_batches = 100;
    for step in 1..=150u64 {
        v.loss.push(step as f64, 2.0 / step as f64);
        v.lr.push(step as f64, 0.1);
    }
    v.lr_now = 0.1;
    v.epoch = 1;
    v.batch = 50;
    v.run_batches = 150;
    v.global_step = 150;
    v.epoch_samples = 1600;
    v.epoch_loss = (5.0, 50);
    v.epoch_correct = Some((1200, 1600));
    v.val_loss.push((100.0, 0.3));
    v.metrics.insert("val_accuracy".into(), vec![(1.0, 0.91)]);
    v.last_epoch.insert("val_accuracy".into(), 0.91);
    v.last_epoch.insert("train_loss".into(), 0.25);
    v.throughput = vec![100, 200, 300];
    let s = screen(&v, 110, 34);
    for needle in [
        "ferrograd · runs/test",
        "epoch 2/3",
        "step 150",
        "ETA",
        "epoch  50/100 batches",
        "run  150/300 batches",
        "loss 0.1000",
        "log scale",
        "metrics",
        "val_accuracy",
        "learning rate 1.000e-1",
        "samples/s",
        "tensors   3.0 MiB",
        "peak      5.0 MiB",
        "process   200.0 MiB",
        "91.00%",
        "train_loss",
        "0.2500",
        "q: stop",
    ] {
        assert!(s.contains(needle), "{needle:?} is not on the screen:\n{s}");
    }
    // Half the run's batches are done: the ETA is about the time elapsed.
    let eta = v.eta().unwrap();
    assert!(
        eta <= v.started.elapsed() + Duration::from_millis(50),
        "{eta:?}"
    );
}

#[test]
fn a_small_terminal_gets_one_line() {
    let mut v = View::new("runs/test", 3, None, None);
    v.epoch_batches = 10;
    v.batch = 4;
    v.epoch_loss = (2.0, 4);
    let s = screen(&v, 50, 10);
    assert!(s.contains("epoch 1/3 batch 4/10 loss 0.5000"), "{s}");
}

#[test]
fn a_long_curve_is_averaged_not_dropped() {
    let mut c = Curve::default();
    for i in 0..10_000 {
        c.push(i as f64, i as f64);
    }
    let d = c.data();
    assert!(d.len() <= CURVE_POINTS, "{}", d.len());
    // Averages of consecutive x's equal those of y's, and cover the whole range.
    assert!(d.iter().all(|p| (p.0 - p.1).abs() < 1e-9));
    assert!(
        d[0].0 < 100.0 && d.last().unwrap().0 > 9_900.0,
        "{:?}",
        d.last()
    );
    // Non-finite losses are skipped.
    c.push(1.0, f64::NAN);
    assert_eq!(c.data().len(), d.len());
}

#[test]
fn max_steps_and_max_time_bound_the_estimate() {
    let mut v = View::new("r", 100, Some(20), Some(Duration::from_secs(3600)));
    v.first_epoch = Some(0);
    v.epoch_batches = 1000;
    v.run_batches = 10;
    v.global_step = 10;
    assert_eq!(v.run_total(), 20);
    assert!(v.eta().unwrap() < Duration::from_secs(3600));
    let v = View::new("r", 1, None, Some(Duration::from_secs(60)));
    assert!(v.eta().unwrap() <= Duration::from_secs(60));
}

#[test]
fn byte_and_value_formats() {
    assert_eq!(format_bytes(512), "512 B");
    assert_eq!(format_bytes(3 << 30), "3.0 GiB");
    assert_eq!(format_duration(Duration::from_secs(3725)), "1:02:05");
    assert_eq!(format_value("val_accuracy", 0.5), "50.00%");
    assert_eq!(format_value("lr", 1e-4), "1.000e-4");
    assert_eq!(format_value("val_loss", 0.25), "0.2500");
    assert_eq!(format_value("samples_per_sec", 1234.56), "1235");
}
