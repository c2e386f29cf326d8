//! The training dashboard in a real terminal: this test binary runs its own
//! `dashboard_child` inside a detached `tmux` session, reads the screen back with
//! `tmux capture-pane`, presses `q`, and checks that without a terminal the Trainer
//! falls back to the progress bar.

use ferrograd::data::{DataLoader, TensorDataset};
use ferrograd::nn::{Linear, Module, functional as F};
use ferrograd::optim::{Sgd, SgdConfig};
use ferrograd::prelude::*;
use ferrograd::train::metrics::Accuracy;
use ferrograd::train::{Callback, Context, StepOutput, Trainer, TrainerConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Sleeps after each batch, so that a person (or the test) can watch the run.
struct Pause(Duration);

impl Callback for Pause {
    fn name(&self) -> String {
        "Pause".into()
    }
    fn on_train_batch_end(&mut self, _ctx: &mut Context, _loss: f64) {
        std::thread::sleep(self.0);
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The program the terminal runs: a small classifier trained by a `Trainer` with the
/// dashboard on, `FERROGRAD_DASHBOARD_EPOCHS` epochs of 80 batches, pausing
/// `FERROGRAD_DASHBOARD_PAUSE_MS` after each, its files in `FERROGRAD_DASHBOARD_DIR`.
#[test]
#[ignore = "run inside a terminal by the dashboard tests"]
fn dashboard_child() {
    let root = PathBuf::from(
        std::env::var("FERROGRAD_DASHBOARD_DIR").expect("FERROGRAD_DASHBOARD_DIR is set"),
    );
    let epochs = env_number("FERROGRAD_DASHBOARD_EPOCHS", 3) as usize;
    let pause = Duration::from_millis(env_number("FERROGRAD_DASHBOARD_PAUSE_MS", 10));
    manual_seed(7);
    let n = 800;
    let x = Tensor::randn(&[n, 2], DType::F32, &Device::Cpu);
    let y = x
        .narrow(1, 0, 1)
        .gt(&x.narrow(1, 1, 1))
        .to_dtype(DType::I64)
        .reshape(&[n]);
    let mut train = DataLoader::builder(TensorDataset::new(vec![
        x.narrow(0, 0, 640),
        y.narrow(0, 0, 640),
    ]))
    .batch_size(8)
    .shuffle(true)
    .build();
    let mut val = DataLoader::builder(TensorDataset::new(vec![
        x.narrow(0, 640, 160),
        y.narrow(0, 640, 160),
    ]))
    .batch_size(32)
    .build();
    let mut model = Linear::new(2, 2, &Device::Cpu);
    let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.1));
    let mut trainer = Trainer::new(TrainerConfig {
        max_epochs: epochs,
        root_dir: root,
        dashboard: true,
        tensorboard: false,
        ..Default::default()
    })
    .metric(Accuracy::new())
    .callback(Pause(pause));
    let report = trainer
        .fit(
            &mut model,
            &mut opt,
            None,
            &mut train,
            Some(&mut val),
            &mut |m: &mut Linear, b: Vec<Tensor>| {
                let logits = m.forward(&b[0]);
                StepOutput::new(F::cross_entropy(&logits, &b[1]))
                    .with_predictions(logits, b[1].clone())
            },
        )
        .expect("the fit runs");
    println!(
        "FIT DONE epochs={} stopped_early={} val_accuracy={:.3}",
        report.epochs, report.stopped_early, report.metrics["val_accuracy"]
    );
}

fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tmux is missing under CI (.ci/run installs it)"
        );
        eprintln!("skipped: the dashboard tests need tmux");
    }
    found
}

/// A detached tmux server of our own (not the user's), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` in a 110x34 terminal.
    fn start(name: &str, command: &str) -> Tmux {
        let t = Tmux {
            socket: format!("ferrograd-{name}-{}", std::process::id()),
        };
        let status = t
            .cmd()
            .args(["new-session", "-d", "-s", "dash", "-x", "110", "-y", "34"])
            .arg(command)
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"]);
        c
    }

    /// The screen as text.
    fn capture(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "dash"])
            .output()
            .expect("tmux capture-pane runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Captures the screen until `done` holds of it (panics with the last screen after
    /// `timeout`).
    fn wait_for(&self, timeout: Duration, what: &str, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if done(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "no {what} on the terminal after {timeout:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &str) {
        let ok = self
            .cmd()
            .args(["send-keys", "-t", "dash", keys])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tmux send-keys failed");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// The shell command running `dashboard_child` for `epochs` epochs into `root`, then
/// printing its exit status and waiting (so the final screen can be read).
fn child_command(root: &Path, epochs: usize, pause_ms: u64) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    format!(
        "env FERROGRAD_DASHBOARD_DIR='{}' FERROGRAD_DASHBOARD_EPOCHS={epochs} \
         FERROGRAD_DASHBOARD_PAUSE_MS={pause_ms} '{}' --ignored --exact \
         dashboard::dashboard_child --nocapture --test-threads=1; echo EXIT=$?; sleep 600",
        root.display(),
        exe.display()
    )
}

fn temp_root(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrograd-dashboard-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

const WAIT: Duration = Duration::from_secs(180);

#[test]
fn dashboard_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let root = temp_root("live");
    let tmux = Tmux::start("live", &child_command(&root, 3, 15));
    // Mid-run, after the first epoch: every panel, with numbers in it.
    let frame = tmux.wait_for(WAIT, "dashboard in its second epoch", |s| {
        s.contains("epoch 2/3") && s.contains("val_accuracy")
    });
    if let Ok(out) = std::env::var("FERROGRAD_DASHBOARD_OUT") {
        std::fs::write(out, &frame).expect("the frame is written");
    }
    println!("{frame}");
    for needle in [
        "ferrograd · ",
        "step ",
        "elapsed 0:00:",
        "ETA 0:",
        "batches",
        "loss ",
        " metrics ",
        "learning rate 1.000e-1",
        "throughput ",
        "samples/s",
        "memory",
        "tensors ",
        "process ",
        "last epoch",
        "train_loss",
        "q: stop",
    ] {
        assert!(
            frame.contains(needle),
            "{needle:?} is not on the screen:\n{frame}"
        );
    }
    // The charts drew something: braille dots of the loss curve.
    assert!(
        frame
            .chars()
            .any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)),
        "no curve on the screen:\n{frame}"
    );
    // The end: the terminal is restored, each epoch's line left on it.
    let end = tmux.wait_for(WAIT, "exit status", |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "the child failed:\n{end}");
    for needle in [
        "epoch 1/3 step 80 ",
        "epoch 2/3 step 160 ",
        "epoch 3/3 step 240 ",
        "val_accuracy",
        "FIT DONE epochs=3 stopped_early=false",
    ] {
        assert!(
            end.contains(needle),
            "{needle:?} is not left on the terminal:\n{end}"
        );
    }
    assert!(
        !end.contains("ETA"),
        "the dashboard is still on the screen:\n{end}"
    );
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn q_stops_the_run_after_the_current_batch() {
    if !tmux_available() {
        return;
    }
    let root = temp_root("quit");
    let tmux = Tmux::start("quit", &child_command(&root, 1000, 20));
    tmux.wait_for(WAIT, "dashboard", |s| {
        s.contains("ETA") && s.contains("q: stop")
    });
    tmux.keys("q");
    let end = tmux.wait_for(WAIT, "exit status", |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "the child failed:\n{end}");
    assert!(end.contains("stopped from the dashboard"), "{end}");
    assert!(
        end.contains("FIT DONE epochs=1 stopped_early=true"),
        "the run went on:\n{end}"
    );
    // The epoch ended as usual: validated and logged.
    let csv = std::fs::read_to_string(root.join("metrics.csv")).expect("metrics.csv");
    assert_eq!(csv.lines().count(), 2, "{csv}");
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn without_a_terminal_the_dashboard_falls_back_to_the_progress_bar() {
    let root = temp_root("pipe");
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([
            "--ignored",
            "--exact",
            "dashboard::dashboard_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FERROGRAD_DASHBOARD_DIR", &root)
        .env("FERROGRAD_DASHBOARD_EPOCHS", "1")
        .env("FERROGRAD_DASHBOARD_PAUSE_MS", "0")
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("FIT DONE epochs=1"), "{stdout}");
    // No alternate screen, raw mode or cursor movement went into the pipe.
    for output in [&stdout, &stderr] {
        assert!(
            !output.contains('\u{1b}'),
            "escape codes in a pipe: {output:?}"
        );
    }
    std::fs::remove_dir_all(&root).ok();
}
