//! `grades.json`: the whole gradebook for machines and for `grade diff`.
use super::{write_atomic, Gradebook, GradebookExporter, Record, Roster};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub struct JsonExporter;

#[derive(Debug, Serialize, Deserialize)]
pub struct GradesJson {
    pub roster: Roster,
    /// One entry per record, in roster order (student, then exercise).
    pub grades: Vec<Record>,
    /// `student/exercise` pairs of the roster without a record.
    pub missing: Vec<String>,
}

pub fn of(book: &Gradebook) -> GradesJson {
    GradesJson {
        roster: book.roster.clone(),
        grades: book.rows().cloned().collect(),
        missing: book
            .missing
            .iter()
            .map(|(s, e)| format!("{s}/{e}"))
            .collect(),
    }
}

impl GradebookExporter for JsonExporter {
    fn name(&self) -> &'static str {
        "grades.json"
    }
    fn export(&self, book: &Gradebook, out: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(&of(book))? + "\n";
        write_atomic(&out.join("grades.json"), text.as_bytes())
    }
}
