//! The repository's own tasks, `cargo run -p xtask -- <task> [--check]`:
//!
//! - `bench-tables`: the book's measured tables (`docs/src/performance.md`) from the
//!   bench scripts' records under `bench/results`.
//! - `ui-gallery`: the book's diagnostics page (`docs/src/diagnostics.md`): every
//!   compile-fail case of `ui-tests/tests/ui` with the error rustc prints for it.
//!
//! With `--check` a task writes nothing and fails when the page is not what it would
//! write: CI runs both that way, so the book never drifts from the records or the
//! compiler.

mod gallery;
mod tables;

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(about = "ferrograd's repository tasks")]
struct Args {
    #[command(subcommand)]
    task: Task,
    /// Fail when the page differs from what the task would write, instead of writing it.
    #[arg(long, global = true)]
    check: bool,
    /// The repository (default: the workspace this crate is in).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Task {
    /// Writes the performance tables of the book from bench/results.
    BenchTables,
    /// Writes the book's diagnostics page from ui-tests/tests/ui.
    UiGallery,
}

/// Writes `new` to `path` (or, with `check`, fails unless `old` equals it), naming `how`
/// to bring the file up to date.
fn write_or_check(path: &Path, old: &str, new: &str, check: bool, how: &str) -> Result<(), String> {
    if check {
        if old != new {
            return Err(format!("{} is out of date: run `{how}`", path.display()));
        }
        println!("{} is up to date", path.display());
        return Ok(());
    }
    std::fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn main() {
    let args = Args::parse();
    let root = args
        .root
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let result = match args.task {
        Task::BenchTables => tables::run(&root, args.check),
        Task::UiGallery => gallery::run(&root, args.check),
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        std::process::exit(1);
    }
}
