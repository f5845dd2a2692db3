//! HTML reports (issue 20) on recorded observations and hand-made records, no grading: every
//! lesson's pictures with their numbers, the class page (glance table, distribution, pass rates,
//! common mistakes, full reports, regrade commands), the diff page, snapshots (SVG bodies and
//! seeds redacted), and a class of 30 written well under a second. The same pages rendered in a
//! real browser: tests/batch.rs.
use grade::charts::{self, Chart};
use grade::evidence::Observed;
use grade::gradebook::json::GradesJson;
use grade::html::{self, View};
use grade::i18n::Lang;
use grade::observations::Observations;
use grade::pictures;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn recorded(name: &str) -> Observed {
    let text = std::fs::read_to_string(root().join(format!("tests/recorded/{name}.json"))).unwrap();
    let obs: Observations = serde_json::from_str(&text).unwrap();
    Observed::of(&obs)
}

/// Every SVG body replaced (plotters' drawing is not what these snapshots are about; the
/// numbers are, in the tables beside each chart), seeds redacted.
fn redact(html: &str) -> String {
    let css = regex_lite(html, "<style>", "</style>", "<style>[css]</style>");
    let js = regex_lite(&css, "<script>", "</script>", "<script>[js]</script>");
    let svg = regex_lite(&js, "<svg", "</svg>", "<svg>[svg]</svg>");
    let seed = regex_lite(
        &svg,
        "<code class=\"seed\">",
        "</code>",
        "<code class=\"seed\">[seed]</code>",
    );
    let mut out = regex_lite(&seed, "--seed ", " ", "--seed [seed] ");
    // a line per row and block, so that a change reads as a small diff
    for tag in [
        "</tr>",
        "</p>",
        "</h1>",
        "</h2>",
        "</h3>",
        "</h4>",
        "</figure>",
        "</table>",
        "</summary>",
        "</details>",
        "</li>",
        "</section>",
    ] {
        out = out.replace(tag, &format!("{tag}\n"));
    }
    out
}

/// Replace every `open … close` span (non-greedy) with `with`.
fn regex_lite(s: &str, open: &str, close: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(open) {
        out.push_str(&rest[..i]);
        match rest[i + open.len()..].find(close) {
            Some(j) => {
                out.push_str(with);
                rest = &rest[i + open.len() + j + close.len()..];
            }
            None => {
                rest = &rest[i..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The pictures lesson `ex`'s exercise.yaml declares, drawn from `ev`.
fn lesson_charts(ex: &str, ev: &Observed, lang: Lang) -> Vec<Chart> {
    let spec = grade::spec::Exercise::load(&root().join("exercises").join(ex)).unwrap();
    pictures::draw(&spec.pictures, ev, lang)
}

fn cell(rows: &[Vec<String>], row: &str, col: usize) -> String {
    rows.iter()
        .find(|r| r[0] == row)
        .unwrap_or_else(|| panic!("no row {row} in {rows:?}"))[col]
        .clone()
}

#[test]
fn every_lesson_draws_its_pictures_from_recorded_observations() {
    let mib = |b: f64| charts::fmt(b / 1024.0 / 1024.0);
    let expect = [
        ("01-metrics", 2),
        ("02-profiler", 1),
        ("03-memory", 3),
        ("04-checkpoint", 2),
        ("05-compile", 2),
        ("06-sync", 2),
    ];
    for (ex, n) in expect {
        let ev = recorded(&format!("{ex}.solution"));
        let cs = lesson_charts(ex, &ev, Lang::En);
        assert_eq!(
            cs.len(),
            n,
            "{ex}: {:?}",
            cs.iter().map(|c| &c.title).collect::<Vec<_>>()
        );
        for c in &cs {
            assert!(
                c.svg.starts_with("<svg") && c.svg.contains("viewBox"),
                "{ex} {}",
                c.title
            );
            assert!(
                !c.rows.is_empty(),
                "{ex} {}: numbers beside the chart",
                c.title
            );
            assert!(
                c.rows.iter().all(|r| r.len() == c.head.len()),
                "{ex} {}",
                c.title
            );
        }
        // the starter records (almost) nothing: no picture of nothing, no panic
        let starter = lesson_charts(ex, &recorded(&format!("{ex}.starter")), Lang::Zh);
        assert!(starter.len() <= n, "{ex} starter");
    }
    // the numbers are the recorded ones
    let ev = recorded("04-checkpoint.solution");
    let cs = lesson_charts("04-checkpoint", &ev, Lang::En);
    assert_eq!(cell(&cs[0].rows, "off", 1), mib(11203076.0));
    assert_eq!(cell(&cs[0].rows, "on", 1), mib(1192452.0));
    let on_step = ev.metrics["compare.run1.on.step_s"].as_f64().unwrap();
    assert_eq!(cell(&cs[1].rows, "on", 2), charts::fmt(on_step * 1e3));
    let ev = recorded("03-memory.solution");
    let cs = lesson_charts("03-memory", &ev, Lang::En);
    let state = ev.metrics["ledger.adam.optimizer_state"].as_f64().unwrap();
    assert_eq!(cell(&cs[0].rows, "adam yours", 3), mib(state));
    assert!(
        cs[1].title.ends_with("your answer: quadratic"),
        "{}",
        cs[1].title
    );
    // 06 per step: the exercise's params say how many steps each run took (8 and 16)
    let ex = grade::spec::Exercise::load(&root().join("exercises/06-sync")).unwrap();
    let ev = recorded("06-sync.solution").with_params(&ex.params);
    let cs = lesson_charts("06-sync", &ev, Lang::En);
    assert_eq!(
        cs[0].rows,
        vec![
            vec!["short (8 steps)", "3.25", "0.25"],
            vec!["long (16 steps)", "3.25", "0.25"]
        ],
        "read-backs per step: 26/8, 2/8; 52/16, 4/16"
    );
    assert!(cs[1]
        .title
        .starts_with("Constants created in the loop per step"));
    let cs = lesson_charts("06-sync", &recorded("06-sync.solution"), Lang::En);
    assert_eq!(
        cs[0].rows[0],
        vec!["short", "26", "2"],
        "per run without params"
    );
    let ev = recorded("05-compile.solution");
    let cs = lesson_charts("05-compile", &ev, Lang::En);
    let first = ev.metrics["real.compiled.first_s"].as_f64().unwrap();
    assert_eq!(cell(&cs[0].rows, "first", 2), charts::fmt(first));
    assert_eq!(cs.len(), 2, "first vs steady, and the break-even picture");
    let ev = recorded("02-profiler.solution");
    let cs = lesson_charts("02-profiler", &ev, Lang::En);
    // the first row is the step's bottleneck drawn for that grading (the scenario's `HOT_OPS`)
    let first = &ev.rows["top_ops.run1.top3"][0];
    assert_eq!(cs[0].rows[0][0], first["name"].as_str().unwrap());
    let us = first["self_us"].as_f64().unwrap();
    assert_eq!(cs[0].rows[0][1], charts::fmt(us / 1e3));
    let ev = recorded("01-metrics.solution");
    let cs = lesson_charts("01-metrics", &ev, Lang::En);
    assert_eq!(
        cs[0].rows.len(),
        3 + 3 + 2,
        "3 + 3 windows and two grader medians"
    );
    assert_eq!(cell(&cs[1].rows, "base (8×64)", 4), "1");
}

/// Issue 39: lesson 04's step-time picture sets the student's number beside the grader's own
/// measurement of the same timed windows on the clock `compare_time_agrees` judges it by (the
/// grader's wall clock, perf_counter, stamped where each step began and where its backward ended),
/// and says which clock; not the grader's separate timing probe on its cost clock.
#[test]
fn lesson_04_step_time_is_the_grader_clock_in_your_windows() {
    let text =
        std::fs::read_to_string(root().join("tests/recorded/04-checkpoint.solution.json")).unwrap();
    let obs: Observations = serde_json::from_str(&text).unwrap();
    // the grader's seconds of each window's one step, from the trace itself: consecutive reads of
    // one clock with exactly one whole step between them
    let trace = &obs.traces["compare.run1"];
    let mut per_variant: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut open = false;
    let mut inside: Vec<(f64, Option<f64>, String)> = Vec::new(); // (begun, done, variant)
    for e in trace {
        let t = e.fields.get("t").and_then(Value::as_f64);
        match e.e.as_str() {
            "timer" => {
                if open && inside.len() == 1 {
                    if let (b, Some(d), v) = &inside[0] {
                        per_variant.entry(v.clone()).or_default().push(d - b);
                    }
                }
                open = true;
                inside.clear();
            }
            "step" => inside.push((t.unwrap(), None, String::new())),
            "step_done" => {
                if let Some(last) = inside.last_mut() {
                    last.1 = t;
                }
            }
            "fwd_end" => {
                if let (Some(last), Some(v)) = (inside.last_mut(), e.field_str("variant")) {
                    last.2 = v.to_string();
                }
            }
            _ => {}
        }
    }
    let median = |v: &[f64]| pictures::median(v).unwrap();
    let ev = Observed::of(&obs);
    let cs = lesson_charts("04-checkpoint", &ev, Lang::En);
    let chart = &cs[1];
    for v in ["off", "on"] {
        let grader = median(&per_variant[v]);
        assert_eq!(
            cell(&chart.rows, v, 1),
            charts::fmt(grader * 1e3),
            "{v}: the grader's clock over the same windows ({:?})",
            per_variant[v]
        );
        let yours = ev.metrics[&format!("compare.run1.{v}.step_s")]
            .as_f64()
            .unwrap();
        assert_eq!(cell(&chart.rows, v, 2), charts::fmt(yours * 1e3));
    }
    let said = format!("{} {:?}", chart.title, chart.head);
    assert!(said.contains("perf_counter"), "which clock: {said}");
}

fn verdict(id: &str, status: &str, points: u32) -> Value {
    json!({
        "id": id,
        "title": {"zh": format!("{id} 的标题"), "en": format!("title of {id}")},
        "status": status,
        "points": points,
        "measured": {"zh": "0.4", "en": "0.4"},
        "bound": {"zh": "≤ 0.5", "en": "≤ 0.5"},
        "why": {"zh": format!("{id} 原因"), "en": format!("{id} why")},
        "catches": {"zh": format!("{id} 捕捉的错误"), "en": format!("mistake {id} catches")},
    })
}

fn record(student: &str, statuses: &[&str], evidence: &Observed) -> Value {
    let ids = ["on_off_agree", "activation_bytes_halved", "step_time_cost"];
    let verdicts: Vec<Value> = ids
        .iter()
        .zip(statuses)
        .map(|(id, st)| verdict(id, st, 2))
        .collect();
    let count = |s: &str| statuses.iter().filter(|x| **x == s).count();
    let points = 2 * count("PASS") as u32;
    json!({
        "exercise": "04-checkpoint",
        "title": {"zh": "激活检查点", "en": "Activation checkpointing"},
        "submission": format!("/class/{student}/exercise.py"),
        "device": "cpu",
        "seed": 1234567,
        "verdicts": verdicts,
        "summary": {"passed": count("PASS"), "failed": count("FAIL"), "skipped": count("SKIP"),
                    "points": points, "max_points": 2 * (3 - count("SKIP")) as u32},
        "run_s": 3.3,
        "run_failure": null,
        "stderr_tail": if count("FAIL") > 0 { Value::from("Traceback …\nValueError: nope") } else { Value::Null },
        "failed_probes": if count("FAIL") > 0 { json!({"compare": "ValueError: nope"}) } else { json!({}) },
        "evidence": evidence,
        "outcome": "graded",
        "student": student,
        "key": "k",
    })
}

/// A `grade batch --out` folder of `rows` (student → statuses; None: no submission).
fn class(out: &Path, rows: &[(&str, Option<&[&str]>)], missing: &[&str]) {
    let ev = recorded("04-checkpoint.solution");
    let mut students: Vec<&str> = rows.iter().map(|r| r.0).collect();
    students.extend(missing);
    std::fs::write(
        out.join("roster.json"),
        json!({"class": "demo", "exercises": ["04-checkpoint"], "students": students, "seed": 9, "device": "cpu"}).to_string(),
    )
    .unwrap();
    let dir = out.join("records/04-checkpoint");
    std::fs::create_dir_all(&dir).unwrap();
    for (s, st) in rows {
        let rec = match st {
            Some(st) => record(s, st, &ev),
            None => {
                json!({"student": s, "exercise": "04-checkpoint", "outcome": "no_submission", "seed": 5, "key": "k",
                           "verdicts": [], "summary": {"passed": 0, "failed": 0, "skipped": 0, "points": 0, "max_points": 0}})
            }
        };
        std::fs::write(dir.join(format!("{s}.json")), rec.to_string()).unwrap();
    }
}

#[test]
fn class_page_shows_everyone_every_criterion_and_every_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    class(
        out,
        &[
            ("ann", Some(&["PASS", "PASS", "PASS"])),
            ("ben", Some(&["FAIL", "FAIL", "SKIP"])),
            ("cat", None),
        ],
        &["dan"],
    );
    let course = grade::course::Course::locate(Some(root())).unwrap();
    for lang in [Lang::Zh, Lang::En] {
        let path = html::class::write_class(out, Some(&course), lang, None).unwrap();
        assert_eq!(path, out.join("report.html"));
        let page = std::fs::read_to_string(&path).unwrap();
        // self-contained: nothing fetched
        let no_ns = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        for remote in ["http://", "https://", "<link", "src=", "url("] {
            assert!(!no_ns.contains(remote), "{remote} in the page");
        }
        for s in ["ann", "ben", "cat", "dan"] {
            assert!(
                page.contains(&format!("data-student=\"{s}\"")),
                "{s} in the glance table"
            );
            assert!(
                page.contains(&format!("id=\"04-checkpoint--{s}\"")),
                "{s}'s full report"
            );
        }
        // ben failed activation_bytes_halved: his name in that criterion's row, its mistakes
        let row = |id: &str| {
            page.split(&format!("id=\"04-checkpoint--criterion--{id}\""))
                .nth(1)
                .unwrap()
                .split("</tr>")
                .next()
                .unwrap()
                .to_string()
        };
        let r = row("activation_bytes_halved");
        assert!(r.contains(">ben</a>") && !r.contains(">ann</a>"), "{r}");
        assert!(r.contains("1/2"), "pass rate 1 of 2 graded: {r}");
        assert!(
            r.contains("activation_bytes_halved 捕捉的错误")
                || r.contains("mistake activation_bytes_halved catches"),
            "{r}"
        );
        // the README's 常见错误 mapped by exercise.yaml `mistakes:`, beside `catches:`
        let r = row("on_off_agree");
        assert!(
            r.contains("常见错误 · 确认数值结果一致")
                || r.contains("common mistake · results not checked to agree"),
            "{r}"
        );
        // a criterion nobody applied to (skipped for ben, and only ann graded): no rate but 1/1
        assert!(row("step_time_cost").contains("1/1"));
        // regrade command, stderr tail, failed probe, lesson pictures inside the reports
        assert!(page.contains("grade exercise 04-checkpoint --submission /class/ben/exercise.py --seed 1234567 --device cpu"));
        assert!(page.contains("ValueError: nope"));
        assert!(
            page.matches("<figure").count() >= 2 + 2 * 2,
            "distribution, pass rates, 2 charts × 2 graded"
        );
        insta::assert_snapshot!(
            format!("class_page_{}", if lang == Lang::Zh { "zh" } else { "en" }),
            redact(&page)
        );
    }
}

#[test]
fn thirty_students_in_well_under_a_second() {
    let tmp = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("s{i:02}")).collect();
    let pass: &[&str] = &["PASS", "PASS", "PASS"];
    let fail: &[&str] = &["FAIL", "PASS", "FAIL"];
    let rows: Vec<(&str, Option<&[&str]>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), Some(if i % 3 == 0 { fail } else { pass })))
        .collect();
    class(tmp.path(), &rows, &[]);
    // with the course: each report's pictures (its exercise.yaml read once per lesson) drawn too
    let course = grade::course::Course::locate(Some(root())).unwrap();
    let t0 = Instant::now();
    let path = html::class::write_class(tmp.path(), Some(&course), Lang::Zh, None).unwrap();
    let took = t0.elapsed().as_secs_f64();
    let page = std::fs::read_to_string(path).unwrap();
    eprintln!(
        "report of 30 students: {:.3} s, {} KiB",
        took,
        page.len() / 1024
    );
    assert!(took < 0.5, "{took:.3} s for a class of 30 (debug build)");
    assert_eq!(page.matches("<tr data-student=").count(), 30);
    assert!(
        page.matches("<figure").count() >= 2 * 30,
        "the lesson's pictures"
    );
    assert!(
        page.contains("10/30") || page.contains("20/30"),
        "pass rates out of 30"
    );
}

#[test]
fn exercise_page_of_one_report() {
    let ev = recorded("04-checkpoint.solution");
    let rec = record("ann", &["PASS", "FAIL", "PASS"], &ev);
    let v: View = serde_json::from_value(rec).unwrap();
    let spec = grade::spec::Exercise::load(&root().join("exercises/04-checkpoint")).unwrap();
    // a lesson the course lacks (no exercise.yaml to read pictures from) has none
    assert_eq!(
        html::view_page(&v, &[], Lang::En)
            .matches("<figure")
            .count(),
        0
    );
    let page = html::view_page(&v, &spec.pictures, Lang::En);
    assert!(page.contains("<html lang=\"en\">"));
    assert_eq!(page.matches("<figure").count(), 2);
    assert!(page.contains("Activations saved for backward: checkpointing off vs on"));
    assert!(page.contains("common mistake: mistake activation_bytes_halved catches"));
    insta::assert_snapshot!("exercise_page_en", redact(&page));
}

#[test]
fn diff_page_of_two_gradebooks() {
    let book = |rows: &[(&str, &[&str])]| -> GradesJson {
        let ev = Observed::default();
        serde_json::from_value(json!({
            "roster": {"class": "demo", "exercises": ["04-checkpoint"], "students": rows.iter().map(|r| r.0).collect::<Vec<_>>(), "seed": 1, "device": "cpu"},
            "grades": rows.iter().map(|(s, st)| record(s, st, &ev)).collect::<Vec<_>>(),
            "missing": [],
        }))
        .unwrap()
    };
    let old = book(&[
        ("ann", &["PASS", "FAIL", "PASS"]),
        ("ben", &["PASS", "PASS", "PASS"]),
    ]);
    let new = book(&[
        ("ann", &["PASS", "PASS", "PASS"]),
        ("ben", &["PASS", "PASS", "PASS"]),
    ]);
    let page = html::class::diff_page(&old, &new, Lang::En);
    assert!(page.contains("1 improved"), "summary");
    assert!(page.contains("<code>activation_bytes_halved</code>: <span class=\"FAIL\">FAIL</span> → <span class=\"PASS\">PASS</span>"));
    // the pass rate of that criterion before and after, in the chart's table
    assert!(
        page.contains(
            "2 activation_bytes_halved</th><td class=\"num\">50</td><td class=\"num\">100</td>"
        ),
        "{page}"
    );
    insta::assert_snapshot!("diff_page_en", redact(&page));
}

/// The picture kinds' rules on hand-made evidence (what a course author writes in `pictures:`):
/// what a missing value leaves out (`require:`), alternatives and `median(…)`, quoted keys in
/// labels and titles, `per:` and `relative_to:`.
#[test]
fn picture_kinds_follow_their_rules_on_hand_made_evidence() {
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(deserialize_with = "grade::pictures::deserialize_list")]
        pictures: Vec<pictures::Picture>,
    }
    let yaml = r#"
pictures:
  - bars:
      title: {zh: "甲 {answer}", en: "A {answer} {nothing}"}
      unit: s
      value: ["m.{category}.{series}", "median(l.{category}.{series})"]
      require: REQUIRE
      categories:
        - {key: a, label: "a ({n.a})"}
        - {key: b, label: "b ({n.b})"}
      series:
        - {key: x, label: {zh: 叉, en: ex}}
        - {key: y, label: y}
  - bars:
      title: t
      unit: u
      value: "m.{category}.x"
      relative_to: b
      categories: [{key: a, label: a}, {key: b, label: b}]
      series: [{key: x, label: x, relative_label: x/b}]
      per: {value: "$params.{category}_steps", title: per step, unit: u/step, label: "{category}/{$params.{category}_steps}"}
"#;
    let ev: Observed = serde_json::from_value(json!({
        "metrics": {"m.a.x": 1.0, "m.b.x": 4.0, "l.a.y": [3.0, 1.0, 2.0, 9.0], "n.a": 8, "n.b": 16,
                    "answer": "linear"},
        "params": {"a_steps": 2, "b_steps": 4},
    }))
    .unwrap();
    let draw = |require: &str, ev: &Observed| {
        let doc: Doc = serde_yaml::from_str(&yaml.replace("REQUIRE", require)).unwrap();
        pictures::draw(&doc.pictures, ev, Lang::En)
    };
    // b.y is missing: `category` drops b, `series` drops y, `all` drops the picture
    let cs = draw("category", &ev);
    assert_eq!(cs[0].title, "A linear —", "quoted keys, a missing one as —");
    assert_eq!(cs[0].head, vec!["", "ex", "y"]);
    assert_eq!(
        cs[0].rows,
        vec![vec!["a (8)", "1", "2.5"]],
        "median(…) of the list, the alternative after the missing key"
    );
    let cs = draw("series", &ev);
    assert_eq!(cs[0].rows, vec![vec!["a (8)", "1"], vec!["b (16)", "4"]]);
    let cs = draw("all", &ev);
    assert_eq!(cs.len(), 1, "only the second picture");
    // per step (a: 1/2, b: 4/4), relative to b: the table has both
    assert_eq!(cs[0].title, "per step");
    assert_eq!(cs[0].head, vec!["", "x", "x/b"]);
    assert_eq!(
        cs[0].rows,
        vec![vec!["a/2", "0.5", "0.5"], vec!["b/4", "1", "1"]]
    );
    // a category whose label quotes a missing key is left out; without params, no division
    let mut bare = ev.clone();
    bare.metrics.remove("n.b");
    bare.params.clear();
    let cs = draw("category", &bare);
    assert_eq!(cs[0].rows, vec![vec!["a (8)", "1", "2.5"]]);
    assert_eq!(cs[1].title, "t");
    assert_eq!(
        cs[1].rows,
        vec![vec!["a", "1", "0.25"], vec!["b", "4", "1"]]
    );
}
