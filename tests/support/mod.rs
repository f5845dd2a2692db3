//! Helpers the end-to-end test files share (`mod support;`).
#![allow(dead_code)] // each test binary uses some of these helpers
use serde_json::{json, Value};

/// `id  STATUS` per line: the stable part of a graded report, as snapshotted.
pub fn verdict_table(report: &Value) -> String {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{:<28} {}",
                v["id"].as_str().unwrap(),
                v["status"].as_str().unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Copy a folder tree (without `__pycache__`).
#[allow(dead_code)]
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
