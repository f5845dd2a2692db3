//! PrairieLearn external-grading output, one `results.json` per student and exercise, per
//! PrairieLearn's documented format (https://prairielearn.readthedocs.io/en/latest/externalGrading/,
//! "Grading results"): `gradable`, `score` in [0, 1], `message`, `output`, `tests[]` with `name`,
//! `description`, `points`, `max_points`, `message`, `output`. A submission that could not be graded
//! (exit 2, or no submission in a batch) is `gradable: false` with a `message`: PrairieLearn then
//! awards and deducts nothing and does not count the attempt. A skipped criterion is 0 of 0.
use super::{write_atomic, Gradebook, GradebookExporter, Record, GRADED};
use serde_json::{json, Value};
use std::path::Path;

pub struct PrairielearnExporter;

/// One criterion as a PrairieLearn test.
fn test(c: &super::Criterion) -> Value {
    let word = match c.status.as_str() {
        "PASS" => "PASS / 通过",
        "FAIL" => "FAIL / 未通过",
        _ => "SKIP / 跳过",
    };
    json!({
        "name": format!("{} — {} / {}", c.id, c.title.zh, c.title.en),
        "description": c.id,
        "points": c.earned(),
        "max_points": c.max(),
        "message": format!("{word}\n{}\n{}", c.why.zh, c.why.en),
        "output": format!("measured / 实测: {}\nbound / 要求: {}", c.measured.en, c.bound.en),
    })
}

/// `results.json` of a record; `output` is the student's report where the caller has it (`grade
/// exercise --format prairielearn`), else the summary line.
pub fn results(r: &Record, report: Option<&str>) -> Value {
    if r.outcome != GRADED {
        return cannot_grade("no submission found / 未找到提交");
    }
    let s = &r.summary;
    let score = if s.max_points == 0 {
        0.0
    } else {
        (s.points as f64 / s.max_points as f64).clamp(0.0, 1.0)
    };
    let summary = format!(
        "{} passed, {} failed, {} skipped: {} / {} points / 通过 {}，未通过 {}，跳过 {}：{} / {} 分",
        s.passed, s.failed, s.skipped, s.points, s.max_points, s.passed, s.failed, s.skipped,
        s.points, s.max_points
    );
    let message = match &r.run_failure {
        Some(f) => format!("{}\n{}\n{summary}", f.zh, f.en),
        None => summary.clone(),
    };
    json!({
        "gradable": true,
        "score": score,
        "message": message,
        "output": report.map(str::to_string).unwrap_or(summary),
        "tests": r.verdicts.iter().map(test).collect::<Vec<_>>(),
    })
}

/// The submission could not be graded (`grade` exit 2): no score, not an attempt.
pub fn cannot_grade(message: &str) -> Value {
    json!({
        "gradable": false,
        "message": message,
        "format_errors": [message],
    })
}

impl GradebookExporter for PrairielearnExporter {
    fn name(&self) -> &'static str {
        "prairielearn"
    }
    fn export(&self, book: &Gradebook, out: &Path) -> anyhow::Result<()> {
        for r in book.rows() {
            let path = out
                .join("prairielearn")
                .join(&r.exercise)
                .join(&r.student)
                .join("results.json");
            let text = serde_json::to_string_pretty(&results(r, None))? + "\n";
            write_atomic(&path, text.as_bytes())?;
        }
        Ok(())
    }
}
