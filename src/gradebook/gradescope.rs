//! Gradescope autograder output, one `results.json` per student and exercise, per Gradescope's
//! published format (https://gradescope-autograders.readthedocs.io/en/latest/specs/): top-level
//! `score`, `execution_time`, `output`, `visibility`, `stdout_visibility`, `tests[]` with `name`,
//! `score`, `max_score`, `status` (`passed`/`failed`), `output`, `visibility` (no top-level
//! `max_score`: the spec has none). A skipped criterion is a test worth 0 of 0.
//! `grade exercise --format gradescope` (the autograder of `grade export gradescope`) adds the
//! student's report as `output`; `cannot_grade` is the document for exit 2.
use super::{write_atomic, Gradebook, GradebookExporter, Record, GRADED};
use serde_json::{json, Value};
use std::path::Path;

pub struct GradescopeExporter;

/// Gradescope takes the submission's maximum from the assignment's points; the tests carry each
/// criterion's `max_score`.
pub fn results(r: &Record) -> Value {
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
            let text = serde_json::to_string_pretty(&results(r))? + "\n";
            write_atomic(&path, text.as_bytes())?;
        }
        Ok(())
    }
}

/// `results` with the student's report as the top-level `output`, as a Markdown code block
/// (`output_format: md`), so the report's columns stay aligned on Gradescope's page.
pub fn with_output(mut doc: Value, report: &str) -> Value {
    // a fence longer than any run of backticks in the report (its stderr tail is the student's)
    let longest = report
        .split(|ch| ch != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    doc["output"] = format!("{fence}text\n{}\n{fence}", report.trim_end()).into();
    doc["output_format"] = "md".into();
    doc
}

/// The submission could not be graded (`grade` exit 2): score 0, the reason as the top-level
/// `output` (students and the instructor see it; the grader's stderr is in Gradescope's stdout).
pub fn cannot_grade(message: &str) -> Value {
    json!({
        "score": 0.0,
        "output": message,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [],
    })
}
