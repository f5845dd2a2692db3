//! Helpers the end-to-end test files share (`mod support;`).
#![allow(dead_code)] // each test binary uses some of these helpers
pub mod lesson;
use serde_json::{json, Value};

/// `id  STATUS` per line: the stable part of a graded report, as snapshotted.
#[allow(dead_code)]
pub fn verdict_table(report: &Value) -> String {
    verdict_table_with(report, &Value::Null)
}

/// The verdict table of a `grade check` submission: a timing band it is not held to (`either`,
/// a fixture wrong elsewhere) reads `PASS|FAIL`, whichever the load made it.
pub fn verdict_table_with(report: &Value, either: &Value) -> String {
    let either: Vec<&str> = either
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let id = v["id"].as_str().unwrap();
            let status = if either.contains(&id) {
                "PASS|FAIL (timing band)"
            } else {
                v["status"].as_str().unwrap()
            };
            format!("{id:<28} {status}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Copy a folder tree (without `__pycache__`).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_dir(&src, &dst);
            }
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A notebook of `cells` (code cells as given; `# md` cells become markdown), sources as line lists.
pub fn notebook(cells: &[&str]) -> Value {
    let cells: Vec<Value> = cells
        .iter()
        .map(|src| {
            let lines: Vec<String> = src.split_inclusive('\n').map(String::from).collect();
            if let Some(md) = src.strip_prefix("# md\n") {
                json!({"cell_type": "markdown", "metadata": {}, "source": md})
            } else {
                json!({"cell_type": "code", "metadata": {}, "execution_count": null,
                       "outputs": [], "source": lines})
            }
        })
        .collect();
    json!({"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3"}},
           "cells": cells})
}

/// A `.py` file as a student would paste it into a notebook: a cell per top-level block (split
/// before each `def`, `class`, decorator or import that follows a blank line).
pub fn cells_of(py: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut blank = false;
    for line in py.split_inclusive('\n') {
        let starts_block = ["def ", "class ", "@", "import ", "from "]
            .iter()
            .any(|k| line.starts_with(k));
        if blank && starts_block && !cells.last().unwrap().trim().is_empty() {
            cells.push(String::new());
        }
        blank = line.trim().is_empty();
        cells.last_mut().unwrap().push_str(line);
    }
    cells
}

/// `py` as a notebook a student might hand in: a markdown cell, a cell of magics and a shell line
/// (dropped when graded), then the code split into cells (`cells_of`).
pub fn notebook_of_py(title: &str, py: &str) -> Value {
    let mut cells = vec![
        format!("# md\n# {title}\nMy work for this lesson.\n"),
        "%load_ext autoreload\n%autoreload 2\n!nvidia-smi -L\n".to_string(),
    ];
    cells.extend(cells_of(py));
    let refs: Vec<&str> = cells.iter().map(String::as_str).collect();
    notebook(&refs)
}

/// A page as headless Chromium rendered it: the DOM after its scripts ran, and every console
/// message (our pages log nothing, so any is a defect).
#[allow(dead_code)]
pub struct Rendered {
    pub dom: String,
    pub console: Vec<String>,
}

/// Debian's `chromium` (test.sh installs it). None when absent; in CI (`CI` set) that is a failure.
#[allow(dead_code)]
pub fn chromium() -> Option<std::path::PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|n| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(n))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed (test.sh installs it: apt-get install -y chromium)"
        );
        eprintln!("note: no chromium here; the rendered-page checks are skipped (CI runs them)");
    }
    found
}

/// Render `page` (a file, `#fragment` allowed) in headless Chromium: the DOM after its scripts
/// ran, console messages, and a screenshot into `shot`.
#[allow(dead_code)]
pub fn render(chromium: &std::path::Path, page: &str, shot: &std::path::Path) -> Rendered {
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[String]| {
        let o = std::process::Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("file://{page}"))
            .output()
            .expect("chromium runs");
        assert!(
            o.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    let o = run(&["--dump-dom".into()]);
    let console = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(String::from)
        .collect();
    if let Some(dir) = shot.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    run(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1200,2400".into(),
        "--hide-scrollbars".into(),
    ]);
    assert!(shot.is_file(), "a screenshot at {}", shot.display());
    Rendered {
        dom: String::from_utf8_lossy(&o.stdout).into_owned(),
        console,
    }
}
