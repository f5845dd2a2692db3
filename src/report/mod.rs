//! Reports: one `Report` per graded run, rendered by one exporter per format behind `Exporter`.
pub mod json;
pub mod platform;
pub mod table;
pub mod yaml;

use crate::checks::{Status, Verdict};
use crate::error::exit;
use crate::evidence;
use crate::i18n::{Lang, Text};
pub use crate::observations::DriverTimings;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub points: u32,
    pub max_points: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub exercise: String,
    pub title: Text,
    pub submission: String,
    pub device: String,
    pub seed: u64,
    pub verdicts: Vec<Verdict>,
    pub summary: Summary,
    /// Seconds the submission's run took (driver start to exit).
    pub run_s: f64,
    /// Why the run as a whole failed, if it did.
    pub run_failure: Option<Text>,
    /// The last lines the submission wrote to stderr, when something failed.
    pub stderr_tail: Option<String>,
    /// Probes that did not finish, with their error (named once; verdicts point here).
    #[serde(default)]
    pub failed_probes: BTreeMap<String, String>,
    /// What the sandbox could not enforce here (docs/how-grading-works.md, "Security"); empty
    /// when all held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandbox_gaps: Vec<Text>,
    /// Notes on how the submission was read (a notebook's dropped magics, a hint on a timeout).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Text>,
    /// The run's recorded observations the pictures of `--html` and `grade report` are drawn
    /// from (compact: small metrics and the ranked operator lists); empty when nothing ran.
    #[serde(default, skip_serializing_if = "evidence::Observed::is_empty")]
    pub evidence: evidence::Observed,
    /// Where this grading's time went, stage by stage: a record of what grading costs
    /// (`scripts/bench-grading`), never a criterion; the tables do not show it.
    #[serde(default)]
    pub timings: Timings,
}

/// One grading's time by stage, in seconds (docs/benchmarks.md, "Where a grading's time goes").
/// The run's own stages are the driver's (`driver`, from its `timings` record); `None` when the
/// run ended before the driver sent them (a crash, a timeout) or no run was made.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Timings {
    /// Stage 1: exercise.yaml, the rubric and the course's Python loaded and validated.
    pub spec_s: f64,
    /// Stage 2: the shape drawn, the weights and batch generated.
    pub workload_s: f64,
    /// The run's folder laid out: driver, job, inputs (and a student's copy of a compile cache).
    pub stage_s: f64,
    /// Stage 3: the process started to reaped (the report's `run_s`).
    pub run_s: f64,
    /// The process started to the driver's first line: the interpreter's start-up (or a fork).
    pub interpreter_s: Option<f64>,
    /// The driver's stages (imports, set-up, the grader's hook, audit, the submission's import,
    /// the probes, recording).
    pub driver: Option<DriverTimings>,
    /// The driver's last record to the process reaped: exit, the watcher's poll, the sweep.
    pub exit_s: Option<f64>,
    /// Stage 4: the libtorch reference (and optimizer updates).
    pub reference_s: f64,
    /// Stage 5: every criterion judged, the report assembled.
    pub checks_s: f64,
    /// Stages 1–5 in all (what is left of a `grade exercise` process's wall time: its start,
    /// the course found, the report rendered, the progress written, its exit).
    pub total_s: f64,
}

impl Summary {
    pub fn of(verdicts: &[Verdict]) -> Summary {
        let count = |s: Status| verdicts.iter().filter(|v| v.status == s).count();
        let points = |keep: fn(Status) -> bool| {
            verdicts
                .iter()
                .filter(|v| keep(v.status))
                .map(|v| v.points)
                .sum()
        };
        // a criterion's points that need others passing (`requires:`) count only with them
        let passed = |id: &String| {
            verdicts
                .iter()
                .any(|v| &v.id == id && v.status == Status::Pass)
        };
        let earned: u32 = verdicts
            .iter()
            .filter(|v| v.status == Status::Pass && v.requires.iter().all(passed))
            .map(|v| v.points)
            .sum();
        // a failed gate (the course's Python, the grader's instruments) makes the lesson 0
        let gate_failed = verdicts.iter().any(|v| v.gate && v.status == Status::Fail);
        Summary {
            passed: count(Status::Pass),
            failed: count(Status::Fail),
            skipped: count(Status::Skip),
            points: if gate_failed { 0 } else { earned },
            max_points: points(|s| s != Status::Skip),
        }
    }
}

impl Report {
    /// 0 when every criterion that applies passed, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        if self.summary.failed == 0 {
            exit::PASS
        } else {
            exit::FAIL
        }
    }
}

/// Output format, chosen with `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
    /// Gradescope's results.json (what its autograder writes): one test per criterion
    Gradescope,
    /// PrairieLearn's external-grading results.json: score in [0, 1], one test per criterion
    Prairielearn,
}

/// Renders a report for people or machines.
pub trait Exporter {
    fn render(&self, report: &Report, lang: Lang) -> String;
}

/// The default look: the brief table for people.
/// Criteria that passed but whose points are withheld because a criterion they need
/// (`requires:`) did not pass, each as `id (required, …)`.
pub fn withheld(verdicts: &[Verdict]) -> Vec<String> {
    let passed: std::collections::BTreeSet<&str> = verdicts
        .iter()
        .filter(|v| v.status == Status::Pass)
        .map(|v| v.id.as_str())
        .collect();
    verdicts
        .iter()
        .filter(|v| v.status == Status::Pass && v.points > 0)
        .filter(|v| v.requires.iter().any(|r| !passed.contains(r.as_str())))
        .map(|v| format!("{} ({})", v.id, v.requires.join(", ")))
        .collect()
}

pub fn exporter(format: Format, color: bool) -> Box<dyn Exporter> {
    exporter_with(format, color, false)
}

/// `verbose`: the full table with every criterion's reason (`--verbose`).
pub fn exporter_with(format: Format, color: bool, verbose: bool) -> Box<dyn Exporter> {
    match format {
        Format::Table => Box::new(table::TableExporter { color, verbose }),
        Format::Json => Box::new(json::JsonExporter),
        Format::Yaml => Box::new(yaml::YamlExporter),
        Format::Gradescope => Box::new(platform::PlatformExporter(platform::Platform::Gradescope)),
        Format::Prairielearn => {
            Box::new(platform::PlatformExporter(platform::Platform::Prairielearn))
        }
    }
}
