//! Progress of a batch: an indicatif bar with ETA and the running pass/fail count on a terminal,
//! plain lines otherwise (pipes, CI); and the summary table at the end (tabled).
use super::Event;
use crate::gradebook::Gradebook;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use tabled::builder::Builder;
use tabled::settings::Style;

pub struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    done: usize,
    pass: usize,
    fail: usize,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// A bar only on a terminal outside CI.
    pub fn new() -> Progress {
        let tty = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        Progress {
            bar: tty.then(ProgressBar::hidden),
            total: 0,
            done: 0,
            pass: 0,
            fail: 0,
        }
    }

    pub fn on(&mut self, e: Event) {
        match e {
            Event::Start {
                total,
                skipped,
                jobs,
            } => {
                self.total = total;
                let msg = format!(
                    "grading {total} submission(s), {skipped} unchanged (resumed), {jobs} at a time / 评分 {total} 份，{skipped} 份未变（续评），并行 {jobs}"
                );
                match &self.bar {
                    Some(_) => {
                        let bar = ProgressBar::new(total as u64);
                        bar.set_style(
                            ProgressStyle::with_template("{bar:30} {pos}/{len} ETA {eta} {msg}")
                                .expect("a valid template"),
                        );
                        bar.println(msg);
                        self.bar = Some(bar);
                    }
                    None => eprintln!("{msg}"),
                }
            }
            Event::Done {
                record,
                resumed,
                seconds,
            } => {
                self.done += 1;
                if record.passed() {
                    self.pass += 1
                } else {
                    self.fail += 1
                }
                let line = format!(
                    "[{}/{}] {} {} {} {}/{}{}",
                    self.done,
                    self.total,
                    record.student,
                    record.exercise,
                    record.verdict_word(),
                    record.summary.points,
                    record.summary.max_points,
                    if resumed {
                        " (unchanged, resumed / 未变，沿用)".to_string()
                    } else {
                        format!(" ({seconds:.1} s)")
                    }
                );
                match &self.bar {
                    Some(bar) => {
                        bar.set_message(format!("pass {} fail {}", self.pass, self.fail));
                        bar.inc(1);
                        if !resumed {
                            bar.println(line);
                        }
                    }
                    None => eprintln!("{line}"),
                }
            }
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Students × exercises with scores, then the criteria failed most often.
pub fn summary(book: &Gradebook) -> String {
    let mut b = Builder::default();
    let mut head = vec!["student / 学生".to_string()];
    head.extend(book.roster.exercises.iter().cloned());
    b.push_record(head);
    let mut failed: BTreeMap<(String, String), usize> = BTreeMap::new();
    for s in &book.roster.students {
        let mut row = vec![s.clone()];
        for e in &book.roster.exercises {
            row.push(match book.records.get(&(s.clone(), e.clone())) {
                None => "missing / 缺失".into(),
                Some(r) => {
                    for c in r.verdicts.iter().filter(|c| c.status == "FAIL") {
                        *failed.entry((e.clone(), c.id.clone())).or_default() += 1;
                    }
                    if r.outcome == crate::gradebook::GRADED {
                        format!(
                            "{} {}/{}",
                            r.verdict_word(),
                            r.summary.points,
                            r.summary.max_points
                        )
                    } else {
                        r.verdict_word().into()
                    }
                }
            });
        }
        b.push_record(row);
    }
    let mut out = b.build().with(Style::rounded()).to_string() + "\n";
    let mut most: Vec<_> = failed.into_iter().collect();
    most.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if !most.is_empty() {
        let mut b = Builder::default();
        b.push_record([
            "criterion failed most often / 最常未通过的验收项",
            "students / 人数",
        ]);
        for ((e, c), n) in most.into_iter().take(10) {
            b.push_record([format!("{e} {c}"), n.to_string()]);
        }
        out += &(b.build().with(Style::rounded()).to_string() + "\n");
    }
    if !book.missing.is_empty() {
        out += &format!(
            "missing records / 缺少记录: {}\n",
            book.missing
                .iter()
                .map(|(s, e)| format!("{s}/{e}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}
