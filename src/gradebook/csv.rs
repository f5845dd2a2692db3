//! `grades.csv`: one row per student, per exercise one column per criterion (points earned,
//! empty when skipped) plus the exercise's total and outcome; the class total last.
use super::{write_atomic, Gradebook, GradebookExporter, GRADED};
use std::path::Path;

pub struct CsvExporter;

impl GradebookExporter for CsvExporter {
    fn name(&self) -> &'static str {
        "grades.csv"
    }
    fn export(&self, book: &Gradebook, out: &Path) -> anyhow::Result<()> {
        write_atomic(&out.join("grades.csv"), &render(book)?)
    }
}

pub fn render(book: &Gradebook) -> anyhow::Result<Vec<u8>> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let criteria: Vec<_> = book
        .roster
        .exercises
        .iter()
        .map(|e| (e.clone(), book.criteria(e)))
        .collect();
    let mut header = vec!["student".to_string()];
    for (e, cs) in &criteria {
        header.push(format!("{e}/outcome"));
        for (c, _) in cs {
            header.push(format!("{e}/{c}"));
        }
        header.push(format!("{e}/total"));
        header.push(format!("{e}/max"));
    }
    header.push("total".into());
    header.push("max".into());
    w.write_record(&header)?;
    for s in &book.roster.students {
        let mut row = vec![s.clone()];
        let (mut total, mut max) = (0, 0);
        for (e, cs) in &criteria {
            let rec = book.records.get(&(s.clone(), e.clone()));
            let outcome = match rec {
                None => "missing".to_string(),
                Some(r) if r.outcome != GRADED => "no submission".to_string(),
                Some(r) if r.summary.failed == 0 => "pass".to_string(),
                Some(_) => "fail".to_string(),
            };
            row.push(outcome);
            for (c, _) in cs {
                let cell = match rec.and_then(|r| r.verdicts.iter().find(|v| &v.id == c)) {
                    Some(v) if v.status == "SKIP" => String::new(),
                    Some(v) => v.earned().to_string(),
                    None if rec.is_some() => "0".to_string(),
                    None => String::new(),
                };
                row.push(cell);
            }
            let (t, m) = match rec {
                Some(r) if r.outcome == GRADED => (r.summary.points, r.summary.max_points),
                // no submission: worth what a graded submission of the class is worth
                Some(_) => (0, book.max_points(e)),
                None => (0, 0),
            };
            total += t;
            max += m;
            row.push(if rec.is_some() {
                t.to_string()
            } else {
                String::new()
            });
            row.push(if rec.is_some() {
                m.to_string()
            } else {
                String::new()
            });
        }
        row.push(total.to_string());
        row.push(max.to_string());
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
}
