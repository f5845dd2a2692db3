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
