//! `grade report`: the class page of a `grade batch --out` folder (the class at a glance, score
//! distribution, per criterion pass rate with the mistakes it catches and who failed it, every
//! student's full report), and the page of a `grade diff` of two gradebooks. Reads records only;
//! runs nothing.
use super::{figure, l, lesson, page, report_body, status_word, View};
use crate::charts::{self, Chart};
use crate::course::Course;
use crate::gradebook::json::GradesJson;
use crate::gradebook::{self, Gradebook, Record, GRADED};
use crate::i18n::{Lang, Text};
use crate::spec::Exercise;
use maud::{html, Markup};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An id safe in an HTML `id` attribute and a URL fragment.
fn anchor(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| {
            p.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("--")
}

/// The README's common mistakes (`mistakes:` of exercise.yaml) per criterion id.
fn mistakes(spec: Option<&Exercise>) -> BTreeMap<String, Vec<Text>> {
    let mut m: BTreeMap<String, Vec<Text>> = BTreeMap::new();
    if let Some(ex) = spec {
        for mi in &ex.mistakes {
            for c in &mi.criteria {
                m.entry(c.clone())
                    .or_default()
                    .push(Text::new(mi.zh.clone(), mi.en.clone()));
            }
        }
    }
    m
}

struct Crit {
    id: String,
    title: Text,
    points: u32,
    catches: Option<Text>,
}

/// Criteria of an exercise in rubric order, from the graded record that has the most.
fn criteria(views: &BTreeMap<(String, String), View>, exercise: &str) -> Vec<Crit> {
    views
        .values()
        .filter(|v| v.exercise == exercise && v.graded())
        .max_by_key(|v| v.verdicts.len())
        .map(|v| {
            v.verdicts
                .iter()
                .map(|c| Crit {
                    id: c.id.clone(),
                    title: c.title.clone(),
                    points: c.points,
                    catches: c.catches.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn cell(status: Option<&str>, lang: Lang) -> Markup {
    let (class, mark, word) = match status {
        Some("PASS") => ("PASS", "✔", l(lang, "通过", "pass")),
        Some("FAIL") => ("FAIL", "✘", l(lang, "未通过", "fail")),
        Some("SKIP") => ("SKIP", "–", l(lang, "跳过", "skip")),
        Some("RECORD") => ("NONE", "?", l(lang, "无记录", "no record")),
        _ => ("NONE", "∅", l(lang, "未提交", "no submission")),
    };
    html! { td class={"cell " (class)} title=(word) { (mark) span.sr { " " (word) } } }
}

/// `OUT/report.html` of a class: what the gradebook and the records hold.
pub fn class_page(
    book: &Gradebook,
    views: &BTreeMap<(String, String), View>,
    course: Option<&Course>,
    lang: Lang,
) -> String {
    let roster = &book.roster;
    let title = format!("{} — {}", l(lang, "成绩报告", "Class report"), roster.class);
    let body = html! {
        h1 { (title) }
        p.meta {
            (roster.students.len()) " " (l(lang, "名学生", "students")) " · "
            (l(lang, "练习", "exercises")) ": " (roster.exercises.join(", ")) " · "
            (l(lang, "设备", "device")) ": " (roster.device) " · "
            (l(lang, "批次 seed", "batch seed")) ": " code.seed { (roster.seed) }
        }
        @if !book.missing.is_empty() {
            p.FAIL {
                (l(lang, "缺少记录：", "Records missing: "))
                (book.missing.iter().map(|(s, e)| format!("{s}/{e}")).collect::<Vec<_>>().join(", "))
            }
        }
        nav.noprint { ul { @for e in &roster.exercises { li { a href={"#" (anchor(&[e]))} { (e) } } } } }
        @for e in &roster.exercises { (exercise_section(book, views, course, e, lang)) }
    };
    page(&title, lang, body)
}

fn exercise_section(
    book: &Gradebook,
    views: &BTreeMap<(String, String), View>,
    course: Option<&Course>,
    ex: &str,
    lang: Lang,
) -> Markup {
    let crits = criteria(views, ex);
    let spec = lesson(course, ex);
    let mist = mistakes(spec.as_ref());
    let pictures = spec.as_ref().map_or(&[][..], |s| &s.pictures[..]);
    let students = &book.roster.students;
    let view = |s: &String| views.get(&(s.clone(), ex.to_string()));
    let status = |s: &String, id: &str| -> Option<String> {
        view(s)
            .filter(|v| v.graded())
            .and_then(|v| v.verdicts.iter().find(|c| c.id == id))
            .map(|c| c.status.clone())
    };
    let max = book.max_points(ex);
    let title = views
        .values()
        .find(|v| v.exercise == ex && !v.title.zh.is_empty())
        .map(|v| v.title.get(lang).to_string())
        .unwrap_or_default();
    let table_id = anchor(&["glance", ex]);
    // score distribution: how many students got each score; no submission apart
    let mut counts: BTreeMap<u32, usize> = (0..=max).map(|p| (p, 0)).collect();
    let mut none = 0usize;
    for s in students {
        match view(s) {
            Some(v) if v.graded() => *counts.entry(v.summary.points).or_default() += 1,
            _ => none += 1,
        }
    }
    let mut cats: Vec<String> = counts.keys().map(|p| p.to_string()).collect();
    let mut vals: Vec<f64> = counts.values().map(|&c| c as f64).collect();
    if none > 0 {
        cats.push(l(lang, "未提交", "none"));
        vals.push(none as f64);
    }
    let mut dist = charts::bars(
        &l(
            lang,
            &format!("得分分布（满分 {max}）"),
            &format!("Score distribution (out of {max})"),
        ),
        &l(lang, "学生数", "students"),
        &cats,
        &[(l(lang, "学生数", "students"), vals)],
        false,
    );
    dist.head[0] = l(lang, "得分", "score");
    // the table names the scores somebody got (the chart shows every score from 0)
    dist.rows.retain(|r| r[1] != "0");
    // pass rate per criterion
    let graded: Vec<&String> = students
        .iter()
        .filter(|s| view(s).is_some_and(|v| v.graded()))
        .collect();
    let rates: Vec<(usize, usize, Vec<&String>)> = crits
        .iter()
        .map(|c| {
            let applied: Vec<(&String, String)> = graded
                .iter()
                .filter_map(|s| status(s, &c.id).map(|st| (*s, st)))
                .filter(|(_, st)| st != "SKIP")
                .collect();
            let passed = applied.iter().filter(|(_, st)| st == "PASS").count();
            let failed = applied
                .iter()
                .filter(|(_, st)| st == "FAIL")
                .map(|(s, _)| *s)
                .collect();
            (passed, applied.len(), failed)
        })
        .collect();
    let mut pass_chart = charts::bars(
        &l(lang, "各验收项的通过率（%）", "Pass rate per criterion (%)"),
        "%",
        &(1..=crits.len()).map(|i| i.to_string()).collect::<Vec<_>>(),
        &[(
            l(lang, "通过率", "pass rate"),
            rates
                .iter()
                .map(|(p, n, _)| {
                    if *n == 0 {
                        0.0
                    } else {
                        100.0 * *p as f64 / *n as f64
                    }
                })
                .collect(),
        )],
        false,
    );
    pass_chart.head = vec![
        "#".into(),
        l(lang, "验收项", "criterion"),
        l(lang, "通过率", "pass rate"),
        l(lang, "通过/适用", "passed/applied"),
    ];
    pass_chart.rows = crits
        .iter()
        .zip(&rates)
        .enumerate()
        .map(|(i, (c, (p, n, _)))| {
            vec![
                (i + 1).to_string(),
                c.id.clone(),
                if *n == 0 {
                    "—".into()
                } else {
                    format!("{:.0}%", 100.0 * *p as f64 / *n as f64)
                },
                format!("{p}/{n}"),
            ]
        })
        .collect();
    html! {
        section id=(anchor(&[ex])) {
            h2 { (ex) " — " (title) }
            h3 { (l(lang, "全班一览", "The class at a glance")) }
            p.noprint {
                button type="button" hidden data-sort="student" data-table=(table_id) { (l(lang, "按学生排序", "Sort by student")) }
                button type="button" hidden data-sort="score" data-table=(table_id) { (l(lang, "按得分排序", "Sort by score")) }
            }
            div.scroll {
                table.glance id=(table_id) {
                    thead { tr {
                        th scope="col" { (l(lang, "学生", "student")) }
                        th scope="col" { (l(lang, "得分", "score")) }
                        @for (i, c) in crits.iter().enumerate() {
                            th scope="col" title=(c.title.get(lang)) { (i + 1) br; code { (c.id) } }
                        }
                    } }
                    tbody {
                        @for s in students {
                            @let v = view(s);
                            @let score = v.filter(|v| v.graded()).map_or(-1.0, |v| v.summary.points as f64);
                            tr data-student=(s) data-score=(score) {
                                th scope="row" { a href={"#" (anchor(&[ex, s]))} { (s) } }
                                @match v {
                                    Some(v) if v.graded() => td.num { (v.summary.points) "/" (v.summary.max_points) },
                                    Some(_) => td.NONE { (l(lang, "未提交", "no submission")) },
                                    None => td.NONE { (l(lang, "无记录", "no record")) },
                                }
                                @for c in &crits {
                                    @match v {
                                        Some(v) if v.graded() => (cell(Some(status(s, &c.id).as_deref().unwrap_or("SKIP")), lang)),
                                        Some(_) => (cell(None, lang)),
                                        None => (cell(Some("RECORD"), lang)),
                                    }
                                }
                            }
                        }
                    }
                }
            }
            h3 { (l(lang, "得分分布", "Score distribution")) }
            (figure(&dist))
            h3 { (l(lang, "各验收项", "Per criterion")) }
            (figure(&pass_chart))
            div.scroll {
                table.criteria {
                    thead { tr {
                        th scope="col" { "#" }
                        th scope="col" { (l(lang, "验收项", "criterion")) }
                        th scope="col" { (l(lang, "通过率", "pass rate")) }
                        th scope="col" { (l(lang, "捕捉的常见错误", "common mistakes it catches")) }
                        th scope="col" { (l(lang, "未通过的学生", "students who failed it")) }
                    } }
                    tbody {
                        @for (i, (c, (p, n, failed))) in crits.iter().zip(&rates).enumerate() {
                            tr id=(anchor(&[ex, "criterion", &c.id])) {
                                td.num { (i + 1) }
                                th scope="row" { code { (c.id) } " (" (c.points) ")" br; (c.title.get(lang)) }
                                td.num { (p) "/" (n) }
                                td {
                                    ul {
                                        @if let Some(m) = &c.catches { li { (m.get(lang)) } }
                                        @for m in mist.get(&c.id).into_iter().flatten() { li { (l(lang, "常见错误 · ", "common mistake · ")) (m.get(lang)) } }
                                    }
                                }
                                td {
                                    @if failed.is_empty() { "—" }
                                    @for (j, s) in failed.iter().enumerate() {
                                        @if j > 0 { ", " }
                                        a href={"#" (anchor(&[ex, s]))} { (s) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            h3 { (l(lang, "每位学生的完整报告", "Every student's full report")) }
            @for s in students {
                @let v = view(s);
                details id=(anchor(&[ex, s])) {
                    summary {
                        strong { (s) } " — "
                        @match v {
                            Some(v) if v.graded() => {
                                @let word = if v.summary.failed == 0 { "PASS" } else { "FAIL" };
                                span class=(word) { (status_word(word, lang)) }
                                " " (v.summary.points) "/" (v.summary.max_points)
                            }
                            Some(_) => span.NONE { (l(lang, "未提交", "no submission")) },
                            None => span.NONE { (l(lang, "无记录", "no record")) },
                        }
                    }
                    @match v {
                        Some(v) if v.graded() => (report_body(v, pictures, lang)),
                        Some(v) => p { (l(lang, "没有找到这位学生的提交。", "No submission was found for this student.")) " seed: " code.seed { (v.seed) } },
                        None => p { (l(lang, "这一行还没有记录（运行缺少的分片，或 `grade batch --resume`）。", "No record for this row yet (run the missing shards, or `grade batch --resume`).")) },
                    }
                }
            }
        }
    }
}

/// Every record of `out` as a page reads it.
pub fn views(out: &Path, book: &Gradebook) -> BTreeMap<(String, String), View> {
    book.records
        .keys()
        .filter_map(|(s, e)| {
            let text = std::fs::read_to_string(gradebook::record_path(out, e, s)).ok()?;
            let v: View = serde_json::from_str(&text).ok()?;
            Some(((s.clone(), e.clone()), v))
        })
        .collect()
}

/// Writes `out/report.html` (or `to`); returns the path written.
pub fn write_class(
    out: &Path,
    course: Option<&Course>,
    lang: Lang,
    to: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    let book = gradebook::assemble(out)?;
    let views = views(out, &book);
    let html = class_page(&book, &views, course, lang);
    let path = to.map_or_else(|| out.join("report.html"), Path::to_path_buf);
    gradebook::write_atomic(&path, html.as_bytes())?;
    Ok(path)
}

fn score(r: Option<&Record>) -> String {
    match r {
        None => "—".into(),
        Some(r) if r.outcome != GRADED => "∅".into(),
        Some(r) => format!("{}/{}", r.summary.points, r.summary.max_points),
    }
}

/// The page of `grade diff OLD NEW`: the summary, per exercise every changed row with the
/// criteria whose verdict changed, and each criterion's pass rate before and after.
pub fn diff_page(old: &GradesJson, new: &GradesJson, lang: Lang) -> String {
    let (_, sum) = gradebook::diff::diff(old, new);
    let index = |g: &GradesJson| -> BTreeMap<(String, String), Record> {
        g.grades
            .iter()
            .map(|r| ((r.exercise.clone(), r.student.clone()), r.clone()))
            .collect()
    };
    let (a, b) = (index(old), index(new));
    let mut exercises: Vec<String> = a.keys().chain(b.keys()).map(|k| k.0.clone()).collect();
    exercises.sort();
    exercises.dedup();
    let title = format!(
        "{} — {} → {}",
        l(lang, "成绩对比", "Gradebook diff"),
        old.roster.class,
        new.roster.class
    );
    let status_of = |r: Option<&Record>, id: &str| -> String {
        r.and_then(|r| r.verdicts.iter().find(|c| c.id == id))
            .map_or("—".into(), |c| c.status.clone())
    };
    let rate = |m: &BTreeMap<(String, String), Record>, ex: &str, id: &str| -> f64 {
        let st: Vec<&str> = m
            .iter()
            .filter(|(k, _)| k.0 == ex)
            .filter_map(|(_, r)| r.verdicts.iter().find(|c| c.id == id))
            .map(|c| c.status.as_str())
            .filter(|s| *s != "SKIP")
            .collect();
        if st.is_empty() {
            0.0
        } else {
            100.0 * st.iter().filter(|s| **s == "PASS").count() as f64 / st.len() as f64
        }
    };
    // per exercise: its criteria (first seen order), its students, the pass rates before/after
    let sections: Vec<(String, Vec<String>, Vec<String>, Chart)> = exercises
        .iter()
        .map(|ex| {
            let mut ids: Vec<String> = Vec::new();
            for r in a
                .iter()
                .chain(b.iter())
                .filter(|(k, _)| &k.0 == ex)
                .map(|(_, r)| r)
            {
                for c in &r.verdicts {
                    if !ids.contains(&c.id) {
                        ids.push(c.id.clone());
                    }
                }
            }
            let mut students: Vec<String> = a
                .keys()
                .chain(b.keys())
                .filter(|k| &k.0 == ex)
                .map(|k| k.1.clone())
                .collect();
            students.sort();
            students.dedup();
            let mut chart = charts::bars(
                &l(
                    lang,
                    "各验收项通过率：之前 vs 之后（%）",
                    "Pass rate per criterion: before vs after (%)",
                ),
                "%",
                &(1..=ids.len()).map(|i| i.to_string()).collect::<Vec<_>>(),
                &[
                    (
                        l(lang, "之前", "before"),
                        ids.iter().map(|id| rate(&a, ex, id)).collect(),
                    ),
                    (
                        l(lang, "之后", "after"),
                        ids.iter().map(|id| rate(&b, ex, id)).collect(),
                    ),
                ],
                false,
            );
            for (row, id) in chart.rows.iter_mut().zip(&ids) {
                row[0] = format!("{} {id}", row[0]);
            }
            (ex.clone(), ids, students, chart)
        })
        .collect();
    let body = html! {
        h1 { (title) }
        p.meta {
            (sum.improved) " " (l(lang, "提高", "improved")) " · "
            (sum.regressed) " " (l(lang, "降低", "regressed")) " · "
            (sum.changed) " " (l(lang, "其他变化", "changed otherwise")) " · "
            (sum.unchanged) " " (l(lang, "不变", "unchanged"))
        }
        @for (ex, ids, students, chart) in &sections {
            section id=(anchor(&[ex.as_str()])) {
                h2 { (ex) }
                div.scroll {
                    table.diff {
                        thead { tr {
                            th scope="col" { (l(lang, "学生", "student")) }
                            th scope="col" { (l(lang, "之前", "before")) }
                            th scope="col" { (l(lang, "之后", "after")) }
                            th scope="col" { (l(lang, "变化的验收项", "criteria that changed")) }
                        } }
                        tbody {
                            @for s in students {
                                @let key = (ex.clone(), s.clone());
                                @let (ra, rb) = (a.get(&key), b.get(&key));
                                @let changed: Vec<(String, String, String)> = ids.iter()
                                    .map(|id| (id.clone(), status_of(ra, id), status_of(rb, id)))
                                    .filter(|(_, x, y)| x != y).collect();
                                tr data-student=(s) {
                                    th scope="row" { (s) }
                                    td.num { (score(ra)) }
                                    td.num { (score(rb)) }
                                    td {
                                        @if changed.is_empty() && score(ra) == score(rb) { (l(lang, "不变", "unchanged")) }
                                        @for (id, x, y) in &changed {
                                            code { (id) } ": " span class=(x) { (x) } " → " span class=(y) { (y) } br;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                (figure(chart))
            }
        }
    };
    page(&title, lang, body)
}
