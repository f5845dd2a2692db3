//! Gradescope autograder output, one `results.json` per student and exercise, per Gradescope's
//! published format (https://gradescope-autograders.readthedocs.io/en/latest/specs/): top-level
//! `score`, `max_score`, `output`, `visibility`, `tests[]` with `name`, `score`, `max_score`,
//! `status` (`passed`/`failed`), `output`, `visibility`. A skipped criterion is a test worth 0 of 0.
use super::{write_atomic, Gradebook, GradebookExporter, Record, GRADED};
use serde_json::{json, Value};
use std::path::Path;

pub struct GradescopeExporter;

/// `class_max`: what a no-submission row is out of (the most a graded record is worth).
pub fn results(r: &Record, class_max: u32) -> Value {
    let tests: Vec<Value> = r
        .verdicts
        .iter()
        .map(|c| {
            let mut output = format!(
                "{}\n{}\nmeasured / 实测: {}\nbound / 要求: {}",
                c.why.zh, c.why.en, c.measured.en, c.bound.en
            );
            if c.status == "SKIP" {
                output = format!("skipped / 跳过\n{output}");
            }
            json!({
                "name": format!("{} — {} / {}", c.id, c.title.zh, c.title.en),
                "score": c.earned() as f64,
                "max_score": c.max() as f64,
                "status": if c.status == "FAIL" { "failed" } else { "passed" },
                "output": output,
                "visibility": "visible",
            })
        })
        .collect();
    let output = if r.outcome != GRADED {
        "no submission found / 未找到提交".to_string()
    } else if let Some(f) = &r.run_failure {
        format!("{}\n{}", f.zh, f.en)
    } else {
        format!(
            "{} passed, {} failed, {} skipped / 通过 {}，未通过 {}，跳过 {}",
            r.summary.passed,
            r.summary.failed,
            r.summary.skipped,
            r.summary.passed,
            r.summary.failed,
            r.summary.skipped
        )
    };
    json!({
        "score": r.summary.points as f64,
        "max_score": if r.outcome == GRADED { r.summary.max_points } else { class_max } as f64,
        "execution_time": r.run_s.round() as u64,
        "output": output,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    })
}

impl GradebookExporter for GradescopeExporter {
    fn name(&self) -> &'static str {
        "gradescope"
    }
    fn export(&self, book: &Gradebook, out: &Path) -> anyhow::Result<()> {
        for r in book.rows() {
            let path = out
                .join("gradescope")
                .join(&r.exercise)
                .join(&r.student)
                .join("results.json");
            let text =
                serde_json::to_string_pretty(&results(r, book.max_points(&r.exercise)))? + "\n";
            write_atomic(&path, text.as_bytes())?;
        }
        Ok(())
    }
}
