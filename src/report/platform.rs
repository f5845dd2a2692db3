//! `--format gradescope|prairielearn`: a report as the grading platform's `results.json` (the
//! same documents `grade batch` writes per student, `src/gradebook/gradescope.rs` and
//! `prairielearn.rs`), with the student's report (the brief table, `--lang`, no colour) as the
//! output the student reads; and the document a platform gets when `grade` could not grade (exit 2).
use super::table::TableExporter;
use super::{Exporter, Format, Report};
use crate::gradebook::{gradescope, prairielearn, Record, GRADED};
use crate::i18n::Lang;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Gradescope,
    Prairielearn,
}

impl Platform {
    pub fn of(format: Format) -> Option<Platform> {
        match format {
            Format::Gradescope => Some(Platform::Gradescope),
            Format::Prairielearn => Some(Platform::Prairielearn),
            _ => None,
        }
    }

    /// `results.json` when the submission could not be graded: Gradescope gets score 0 and the
    /// reason as the top-level `output`; PrairieLearn gets `gradable: false` and a `message`.
    pub fn cannot_grade(self, reason: &str) -> String {
        let message = format!("could not grade / 无法评分:\n{reason}");
        let doc = match self {
            Platform::Gradescope => gradescope::cannot_grade(&message),
            Platform::Prairielearn => prairielearn::cannot_grade(&message),
        };
        serde_json::to_string_pretty(&doc).expect("json") + "\n"
    }
}

pub struct PlatformExporter(pub Platform);

/// The report as a gradebook record (what the platform exporters read).
pub fn record(report: &Report) -> Record {
    let mut v = serde_json::to_value(report).expect("a report always serialises");
    v["outcome"] = GRADED.into();
    v["student"] = "".into();
    serde_json::from_value(v).expect("a report reads back as a record")
}

impl Exporter for PlatformExporter {
    fn render(&self, report: &Report, lang: Lang) -> String {
        let table = TableExporter {
            color: false,
            verbose: false,
        }
        .render(report, lang);
        let rec = record(report);
        let doc = match self.0 {
            Platform::Gradescope => gradescope::with_output(gradescope::results(&rec), &table),
            Platform::Prairielearn => prairielearn::results(&rec, Some(&table)),
        };
        serde_json::to_string_pretty(&doc).expect("json") + "\n"
    }
}
