//! Gradebooks (issue 8): per-student records in `--out`, and the files assembled from them
//! (`grades.csv`, `grades.json`, Gradescope and PrairieLearn `results.json`, JUnit XML), one exporter per file
//! behind `GradebookExporter`. Every file is written atomically (temp file + rename), so a killed
//! batch leaves whole records or none.
//!
//! Layout of `--out`:
//! ```text
//! roster.json                         class, exercises, students, batch seed, device
//! records/<exercise>/<student>.json   the report of `grade exercise --format json` + student, key
//! grades.csv  grades.json  junit.xml
//! gradescope/<exercise>/<student>/results.json
//! prairielearn/<exercise>/<student>/results.json
//! ```
pub mod csv;
pub mod diff;
pub mod gradescope;
pub mod json;
pub mod junit;
pub mod prairielearn;

use crate::i18n::Text;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Who is in the class and how the batch grades them (the same for every shard).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Roster {
    pub class: String,
    pub exercises: Vec<String>,
    pub students: Vec<String>,
    pub seed: u64,
    pub device: String,
}

/// One criterion of a record, as the gradebooks read it (the report's verdict, fields the
/// exporters need; unknown fields of the record are ignored).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Criterion {
    pub id: String,
    pub title: Text,
    /// PASS, FAIL or SKIP.
    pub status: String,
    /// The criterion's points (earned when PASS).
    pub points: u32,
    #[serde(default)]
    pub measured: Text,
    #[serde(default)]
    pub bound: Text,
    #[serde(default)]
    pub why: Text,
}

impl Criterion {
    pub fn earned(&self) -> u32 {
        if self.status == "PASS" {
            self.points
        } else {
            0
        }
    }
    pub fn max(&self) -> u32 {
        if self.status == "SKIP" {
            0
        } else {
            self.points
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct RecordSummary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub points: u32,
    pub max_points: u32,
}

/// A per-student record as read back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub student: String,
    pub exercise: String,
    /// `graded` or `no_submission`.
    pub outcome: String,
    pub seed: u64,
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub verdicts: Vec<Criterion>,
    #[serde(default)]
    pub summary: RecordSummary,
    #[serde(default)]
    pub run_s: f64,
    #[serde(default)]
    pub run_failure: Option<Text>,
}

pub const GRADED: &str = "graded";
pub const NO_SUBMISSION: &str = "no_submission";

impl Record {
    pub fn passed(&self) -> bool {
        self.outcome == GRADED && self.summary.failed == 0
    }
    /// One word for tables: PASS, FAIL or "no submission".
    pub fn verdict_word(&self) -> &'static str {
        if self.outcome != GRADED {
            "no submission / 未提交"
        } else if self.summary.failed == 0 {
            "PASS"
        } else {
            "FAIL"
        }
    }
}

/// What the exporters see: every record found for the roster, and who is missing.
pub struct Gradebook {
    pub roster: Roster,
    /// (student, exercise) → record, in roster order.
    pub records: BTreeMap<(String, String), Record>,
    /// (student, exercise) pairs of the roster without a record.
    pub missing: Vec<(String, String)>,
}

impl Gradebook {
    /// Criteria of an exercise in rubric order, from the first graded record that has them.
    pub fn criteria(&self, exercise: &str) -> Vec<(String, u32)> {
        self.records
            .values()
            .filter(|r| r.exercise == exercise && r.outcome == GRADED)
            .max_by_key(|r| r.verdicts.len())
            .map(|r| {
                r.verdicts
                    .iter()
                    .map(|c| (c.id.clone(), c.points))
                    .collect()
            })
            .unwrap_or_default()
    }
    /// The most points a graded record of the exercise was worth (skipped criteria left out).
    pub fn max_points(&self, exercise: &str) -> u32 {
        self.records
            .values()
            .filter(|r| r.exercise == exercise && r.outcome == GRADED)
            .map(|r| r.summary.max_points)
            .max()
            .unwrap_or(0)
    }
    pub fn rows(&self) -> impl Iterator<Item = &Record> {
        self.roster.students.iter().flat_map(move |s| {
            self.roster
                .exercises
                .iter()
                .filter_map(move |e| self.records.get(&(s.clone(), e.clone())))
        })
    }
}

pub fn roster_path(out: &Path) -> PathBuf {
    out.join("roster.json")
}

pub fn record_path(out: &Path, exercise: &str, student: &str) -> PathBuf {
    out.join("records")
        .join(exercise)
        .join(format!("{student}.json"))
}

pub fn read_record(path: &Path) -> Option<Record> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Assemble the gradebook of `out` from its roster and whatever records exist.
pub fn assemble(out: &Path) -> anyhow::Result<Gradebook> {
    let rp = roster_path(out);
    let text = std::fs::read_to_string(&rp).map_err(|e| {
        anyhow::anyhow!("{}: {e} (not a `grade batch --out` folder?)", rp.display())
    })?;
    let roster: Roster =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", rp.display()))?;
    let mut records = BTreeMap::new();
    let mut missing = Vec::new();
    for s in &roster.students {
        for e in &roster.exercises {
            match read_record(&record_path(out, e, s)) {
                Some(r) => {
                    records.insert((s.clone(), e.clone()), r);
                }
                None => missing.push((s.clone(), e.clone())),
            }
        }
    }
    Ok(Gradebook {
        roster,
        records,
        missing,
    })
}

/// Writes one gradebook file (or a family of files) into `out`.
pub trait GradebookExporter {
    fn name(&self) -> &'static str;
    fn export(&self, book: &Gradebook, out: &Path) -> anyhow::Result<()>;
}

pub fn exporters() -> Vec<Box<dyn GradebookExporter>> {
    vec![
        Box::new(csv::CsvExporter),
        Box::new(json::JsonExporter),
        Box::new(gradescope::GradescopeExporter),
        Box::new(junit::JunitExporter),
        Box::new(prairielearn::PrairielearnExporter),
    ]
}

/// Every gradebook file of `out`, from its records.
pub fn write_all(out: &Path) -> anyhow::Result<Gradebook> {
    let book = assemble(out)?;
    for x in exporters() {
        x.export(&book, out)
            .map_err(|e| anyhow::anyhow!("writing the {} gradebook: {e}", x.name()))?;
    }
    Ok(book)
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `bytes` to `path` atomically: a temp file in the same folder, fsync, rename. Readers (and
/// a batch killed at any point) see the old file or the new one, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        anyhow::bail!("{}: {e}", path.display());
    }
    Ok(())
}
