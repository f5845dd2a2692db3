//! `grade diff OLD NEW`: per student and criterion what changed between two gradebooks (two
//! `--out` folders or two `grades.json`), as a line diff (`similar`), and a summary.
use super::json::GradesJson;
use super::Record;
use similar::{ChangeTag, TextDiff};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

pub fn load(path: &Path) -> anyhow::Result<GradesJson> {
    let file = if path.is_dir() {
        path.join("grades.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e} (expected a `grade batch --out` folder or a grades.json)",
            file.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))
}

/// The lines one record reads as (timings left out: they change on every run).
fn lines(r: Option<&Record>) -> String {
    let Some(r) = r else {
        return "(no record / 无记录)\n".into();
    };
    if r.outcome != super::GRADED {
        return "no submission / 未提交\n".into();
    }
    let mut s = format!("total {}/{}\n", r.summary.points, r.summary.max_points);
    for c in &r.verdicts {
        let _ = writeln!(s, "{:<28} {} {}/{}", c.id, c.status, c.earned(), c.max());
    }
    s
}

fn score(r: Option<&Record>) -> Option<(u32, usize)> {
    r.map(|r| (r.summary.points, r.summary.failed))
}

#[derive(Debug, Default, PartialEq)]
pub struct DiffSummary {
    pub improved: usize,
    pub regressed: usize,
    pub changed: usize,
    pub unchanged: usize,
}

/// The diff as text, and its summary.
pub fn diff(old: &GradesJson, new: &GradesJson) -> (String, DiffSummary) {
    let index = |g: &GradesJson| -> BTreeMap<(String, String), Record> {
        g.grades
            .iter()
            .map(|r| ((r.student.clone(), r.exercise.clone()), r.clone()))
            .collect()
    };
    let (a, b) = (index(old), index(new));
    let mut keys: Vec<_> = a.keys().chain(b.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let mut out = String::new();
    let mut sum = DiffSummary::default();
    for key in keys {
        let (ra, rb) = (a.get(&key), b.get(&key));
        let (la, lb) = (lines(ra), lines(rb));
        if la == lb {
            sum.unchanged += 1;
            continue;
        }
        let word = match (score(ra), score(rb)) {
            (Some((pa, fa)), Some((pb, fb))) if pb > pa || (pb == pa && fb < fa) => {
                sum.improved += 1;
                "improved / 提高"
            }
            (Some((pa, fa)), Some((pb, fb))) if pb < pa || (pb == pa && fb > fa) => {
                sum.regressed += 1;
                "regressed / 降低"
            }
            _ => {
                sum.changed += 1;
                "changed / 变化"
            }
        };
        let _ = writeln!(out, "── {} {} ({word})", key.0, key.1);
        for change in TextDiff::from_lines(&la, &lb).iter_all_changes() {
            let sign = match change.tag() {
                ChangeTag::Delete => "-",
                ChangeTag::Insert => "+",
                ChangeTag::Equal => continue,
            };
            let _ = write!(out, "  {sign} {}", change.value());
        }
    }
    let _ = writeln!(
        out,
        "{} improved, {} regressed, {} changed otherwise, {} unchanged / 提高 {}，降低 {}，其他变化 {}，不变 {}",
        sum.improved, sum.regressed, sum.changed, sum.unchanged,
        sum.improved, sum.regressed, sum.changed, sum.unchanged
    );
    (out, sum)
}
