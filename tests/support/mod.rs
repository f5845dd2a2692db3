//! Helpers the end-to-end test files share (`mod support;`).
use serde_json::Value;

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
