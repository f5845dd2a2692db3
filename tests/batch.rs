//! `grade batch` (issue 8) end to end on a small generated class of lesson 04: a solution copy,
//! the starter as a loose file, two fixtures (one under the `04-checkpoint.py` name), a hostile
//! submission, and an empty folder. One uninterrupted run is the baseline; a run interrupted with
//! SIGINT then resumed, and three shards merged with `grade gradebook`, must end with the same
//! gradebook (modulo timings). Plus: exporters' required fields, the seed regrades a row alone,
//! discovery, shards, and `grade diff` (snapshot). The class's `grade report` page and one
//! `grade exercise --html` page are rendered in headless Chromium and checked as rendered.
mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Tests that load every core (the hostile class with its fork bomb and busy threads; batches at
/// `--jobs 2`) run alone: at most one grading per core, the condition timing criteria are built
/// for (two tests at `--jobs 2` each would put four gradings on two cores).
static EXCLUSIVE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn grade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(args)
        .env("GRADE_ROOT", root())
        .env_remove("GRADE_PYTHON")
        .env("CI", "1")
        .output()
        .unwrap()
}

/// Student `id` of `class` hands in `src` as `id/exercise.py`.
fn hand_in(class: &Path, id: &str, src: &Path) {
    std::fs::create_dir_all(class.join(id)).unwrap();
    std::fs::copy(src, class.join(id).join("exercise.py")).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The class: id → what is graded and how it must come out.
fn make_class(dir: &Path) {
    let r = root();
    let put = |rel: &str, src: PathBuf| {
        let to = dir.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src, to).unwrap();
    };
    put(
        "alice/exercise.py",
        r.join("solutions/04-checkpoint/exercise.py"),
    );
    put("bob.py", r.join("exercises/04-checkpoint/exercise.py"));
    put(
        "carol/exercise.py",
        r.join("tests/fixtures/04-checkpoint/no_warmup.py"),
    );
    std::fs::create_dir_all(dir.join("dave")).unwrap();
    put(
        "eve/exercise.py",
        r.join("tests/fixtures/hostile/read_solution.py"),
    );
    put(
        "frank/04-checkpoint.py",
        r.join("tests/fixtures/04-checkpoint/wrong_targets.py"),
    );
    std::fs::write(dir.join("notes.txt"), "not a student").unwrap();
}

const STUDENTS: [&str; 6] = ["alice", "bob", "carol", "dave", "eve", "frank"];

fn batch(class: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "batch",
        s(class),
        "--exercise",
        "04-checkpoint",
        "--out",
        s(out),
        "--seed",
        "11",
        "--device",
        "cpu",
    ];
    args.extend_from_slice(extra);
    grade(&args)
}

/// As `batch`, with the course's Python off (`GRADE_POLICY=off`): the sandbox meets the attacks.
fn batch_policy_off(class: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "batch",
        s(class),
        "--exercise",
        "04-checkpoint",
        "--out",
        s(out),
        "--seed",
        "11",
        "--device",
        "cpu",
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(&args)
        .env("GRADE_ROOT", root())
        .env_remove("GRADE_PYTHON")
        .env("CI", "1")
        .env("GRADE_POLICY", "off")
        .output()
        .unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A gradebook modulo timings: per student, outcome, seed, key and every criterion's status.
fn essence(out: &Path) -> Vec<String> {
    let g = json(&out.join("grades.json"));
    assert_eq!(g["missing"].as_array().unwrap().len(), 0, "{g}");
    g["grades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let crits: Vec<String> = r["verdicts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    format!(
                        "{}={}",
                        v["id"].as_str().unwrap(),
                        v["status"].as_str().unwrap()
                    )
                })
                .collect();
            format!(
                "{} {} seed={} key={} {}",
                r["student"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["seed"],
                r["key"].as_str().unwrap(),
                crits.join(",")
            )
        })
        .collect()
}

fn expected_outcomes(out: &Path) {
    let g = json(&out.join("grades.json"));
    let rows: Vec<(String, String, bool)> = g["grades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["student"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
                r["summary"]["failed"].as_u64().unwrap() == 0,
            )
        })
        .collect();
    let want = [
        ("alice", "graded", true),
        ("bob", "graded", false),
        ("carol", "graded", false),
        ("dave", "no_submission", true),
        ("eve", "graded", false),
        ("frank", "graded", false),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
        .collect();
    assert_eq!(rows, want);
}

/// `junit.xml` against the JUnit XML schema (tests/fixtures/junit/junit.xsd), with the Python
/// `xmlschema` package test.sh installs; a copy with a testcase's required `name` removed must
/// be refused, so the validation can fail.
fn validate_junit(xml: &Path) {
    let script = r#"
import sys, xmlschema
schema = xmlschema.XMLSchema(sys.argv[1])
schema.validate(sys.argv[2])
text = open(sys.argv[2], encoding="utf-8").read()
broken = text.replace("<testcase name=", "<testcase title=", 1)
assert broken != text and not schema.is_valid(broken), "the schema must refuse a nameless testcase"
print("junit.xml valid")
"#;
    let o = Command::new(root().join(".venv/bin/python"))
        .arg("-c")
        .arg(script)
        .arg(root().join("tests/fixtures/junit/junit.xsd"))
        .arg(xml)
        .output()
        .expect("the test venv's python (test.sh installs xmlschema)");
    assert!(
        o.status.success(),
        "junit.xml does not validate: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn check_exporters(out: &Path) {
    // grades.csv: a header and one row per student
    let csv = std::fs::read_to_string(out.join("grades.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + STUDENTS.len(), "{csv}");
    assert!(
        lines[0].starts_with("student,04-checkpoint/outcome,"),
        "{}",
        lines[0]
    );
    assert!(lines[0].ends_with(",04-checkpoint/total,04-checkpoint/max,total,max"));
    assert!(lines[4].starts_with("dave,no submission,"), "{}", lines[4]);
    // Gradescope: every required field, for every student
    for st in STUDENTS {
        let r = json(&out.join(format!("gradescope/04-checkpoint/{st}/results.json")));
        // (no top-level max_score: Gradescope's spec has none; tests/platforms.rs validates
        // these files against a schema of the documented fields)
        assert!(r["score"].is_number(), "{st}: {r}");
        assert!(r["output"].is_string() && r["visibility"].is_string());
        for t in r["tests"].as_array().unwrap() {
            for f in ["name", "output", "visibility", "status"] {
                assert!(t[f].is_string(), "{st}: test field {f}: {t}");
            }
            assert!(t["score"].is_number() && t["max_score"].is_number(), "{t}");
            assert!(["passed", "failed"].contains(&t["status"].as_str().unwrap()));
        }
        if st != "dave" {
            assert!(!r["tests"].as_array().unwrap().is_empty());
        }
    }
    // JUnit: testsuites > testsuite (one per student) > testcase (one per criterion), with failures
    validate_junit(&out.join("junit.xml"));
    let xml = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let (mut suites, mut cases, mut failures, mut roots) = (0, 0, 0, 0);
    loop {
        match reader.read_event().expect("junit.xml is well-formed XML") {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                let attr =
                    |name: &str| e.attributes().flatten().any(|a| a.key.into_inner() == name);
                match e.name().into_inner() {
                    "testsuites" => roots += 1,
                    "testsuite" => {
                        suites += 1;
                        for a in ["name", "tests", "failures", "errors"] {
                            assert!(attr(a), "testsuite without {a}");
                        }
                    }
                    "testcase" => {
                        cases += 1;
                        assert!(attr("name") && attr("classname"));
                    }
                    "failure" => failures += 1,
                    _ => {}
                }
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!((roots, suites), (1, STUDENTS.len()));
    assert!(
        cases > 5 * 15 && failures > 3,
        "{cases} testcases, {failures} failures"
    );
}

/// Screenshots of the rendered pages, kept under target/ (a CI artifact).
fn screenshot(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("screenshots")
        .join(format!("{name}.png"))
}

/// Every `<figure class="chart">` of a rendered page has its SVG and its numbers.
fn charts_with_numbers(dom: &str) -> usize {
    let figures: Vec<&str> = dom
        .split("<figure class=\"chart\">")
        .skip(1)
        .map(|f| f.split("</figure>").next().unwrap())
        .collect();
    for f in &figures {
        assert!(f.contains("<svg"), "a chart without its picture: {f}");
        assert!(
            f.contains("<figcaption>") && f.contains("<td class=\"num\">"),
            "a chart without its numbers: {f}"
        );
    }
    figures.len()
}

/// `grade report OUT` for `students`, rendered (sorted by score through its `#by-score` link):
/// the glance table has every student, in score order; every chart has its numbers; the script
/// ran; nothing on the console. Returns the number of charts.
fn check_rendered_class_report(out: &Path, students: &[&str], shot: &str) -> Option<usize> {
    let chromium = support::chromium()?;
    let page = out.join("report.html");
    let r = support::render(
        &chromium,
        &format!("{}#by-score", page.display()),
        &screenshot(shot),
    );
    assert!(r.console.is_empty(), "console messages: {:?}", r.console);
    assert!(r.dom.contains("data-js=\"ready\""), "the page's script ran");
    let table = r
        .dom
        .split("<table class=\"glance\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("the glance table");
    let rows: Vec<(String, f64)> = table
        .split("<tr data-student=\"")
        .skip(1)
        .map(|row| {
            let student = row.split('"').next().unwrap().to_string();
            let score = row
                .split("data-score=\"")
                .nth(1)
                .and_then(|x| x.split('"').next())
                .and_then(|x| x.parse().ok())
                .unwrap();
            (student, score)
        })
        .collect();
    for s in students {
        assert!(
            rows.iter().any(|(r, _)| r == s),
            "{s} in the rendered glance table: {rows:?}"
        );
    }
    assert_eq!(rows.len(), students.len());
    assert!(
        rows.windows(2).all(|w| w[0].1 >= w[1].1),
        "#by-score sorted the table by score: {rows:?}"
    );
    Some(charts_with_numbers(&r.dom))
}

#[test]
fn class_end_to_end_resume_and_shards() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let class = tmp.path().join("class");
    make_class(&class);

    // 1. uninterrupted: every verdict as expected, every gradebook file
    let base = tmp.path().join("base");
    let t0 = Instant::now();
    let o = batch(&class, &base, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    eprintln!(
        "baseline: {:.1} s for {} students",
        t0.elapsed().as_secs_f64(),
        STUDENTS.len()
    );
    expected_outcomes(&base);
    check_exporters(&base);
    assert!(
        stderr.contains("[6/6]"),
        "plain progress lines off a terminal: {stderr}"
    );

    // 2. a record's seed regrades that row alone with `grade exercise --seed`
    let rec = json(&base.join("records/04-checkpoint/carol.json"));
    let seed = rec["seed"].as_u64().unwrap().to_string();
    let sub = class.join("carol/exercise.py");
    let carol_html = tmp.path().join("carol.html");
    let o = grade(&[
        "exercise",
        "04-checkpoint",
        "--submission",
        s(&sub),
        "--seed",
        &seed,
        "--device",
        "cpu",
        "--format",
        "json",
        "--html",
        s(&carol_html),
    ]);
    let alone: Value = serde_json::from_slice(&o.stdout).unwrap();
    let status = |r: &Value| -> Vec<String> {
        r["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                format!(
                    "{}={}",
                    v["id"].as_str().unwrap(),
                    v["status"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(status(&alone), status(&rec));
    assert_eq!(alone["seed"], rec["seed"]);
    // ... and its `--html` page, as rendered: every criterion, the pictures with their numbers
    if let Some(chromium) = support::chromium() {
        let r = support::render(&chromium, s(&carol_html), &screenshot("exercise-04-carol"));
        assert!(r.console.is_empty(), "console messages: {:?}", r.console);
        for v in alone["verdicts"].as_array().unwrap() {
            let id = format!("<code>{}</code>", v["id"].as_str().unwrap());
            assert!(r.dom.contains(&id), "{id} in the rendered page");
        }
        assert!(
            r.dom.contains(&format!("--seed {seed} --device cpu")),
            "regrade command"
        );
        assert_eq!(
            charts_with_numbers(&r.dom),
            2,
            "activation bytes, step time"
        );
    }

    // 3. SIGINT once the first record exists, then --resume: the same gradebook
    let resumed = tmp.path().join("resumed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args([
            "batch",
            s(&class),
            "--exercise",
            "04-checkpoint",
            "--out",
            s(&resumed),
            "--seed",
            "11",
            "--device",
            "cpu",
            // one at a time, so that the interrupt lands mid-batch (at the default, one per core,
            // the other core can finish the quick rows before alice's record appears)
            "--jobs",
            "1",
        ])
        .env("GRADE_ROOT", root())
        .env_remove("GRADE_PYTHON")
        .env("CI", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let first = resumed.join("records/04-checkpoint/alice.json");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !first.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        first.exists(),
        "the first record was written as soon as it was graded"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(2), "an interrupted batch is exit 2");
    let kept = std::fs::read_dir(resumed.join("records/04-checkpoint"))
        .unwrap()
        .count();
    assert!(
        kept < STUDENTS.len(),
        "interrupted mid-batch ({kept} records)"
    );
    let o = batch(&class, &resumed, &["--resume"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("unchanged, resumed"), "{stderr}");
    assert_eq!(essence(&resumed), essence(&base));

    // 4. three shards into one --out, assembled by `grade gradebook`: the same gradebook
    let sharded = tmp.path().join("sharded");
    for k in 1..=3 {
        let shard = format!("{k}/3");
        let o = batch(&class, &sharded, &["--shard", &shard]);
        assert!(
            matches!(o.status.code(), Some(0..=1)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = grade(&["gradebook", s(&sharded)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(essence(&sharded), essence(&base));
    assert_eq!(
        std::fs::read_to_string(sharded.join("grades.csv"))
            .unwrap()
            .lines()
            .count(),
        1 + STUDENTS.len()
    );

    // 5. the HTML report of the sharded class, rendered in a browser; and the page of a diff
    let o = grade(&["report", s(&sharded)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let graded = STUDENTS.len() - 1; // dave has no submission
    if let Some(charts) = check_rendered_class_report(&sharded, &STUDENTS, "class-report") {
        // distribution + pass rates; 04's two pictures for every graded student whose run got
        // that far (bob's starter and eve's hostile run record less)
        assert!(charts >= 2 + 2 * 2, "{charts} charts");
        assert!(charts <= 2 + 2 * graded, "{charts} charts");
    }
    let o = grade(&["report", s(&base), s(&sharded), "--lang", "en"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let diff = std::fs::read_to_string(sharded.join("diff.html")).unwrap();
    assert!(
        diff.contains(&format!(
            "0 improved · 0 regressed · 0 changed otherwise · {} unchanged",
            STUDENTS.len()
        )),
        "same grades, modulo timings"
    );
}

#[test]
fn gradebook_names_missing_students() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    std::fs::write(
        out.join("roster.json"),
        r#"{"class":"c","exercises":["04-checkpoint"],"students":["ann","ben"],"seed":1,"device":"cpu"}"#,
    )
    .unwrap();
    std::fs::create_dir_all(out.join("records/04-checkpoint")).unwrap();
    std::fs::write(
        out.join("records/04-checkpoint/ann.json"),
        r#"{"student":"ann","exercise":"04-checkpoint","outcome":"no_submission","seed":3,"key":"k","verdicts":[],"summary":{"passed":0,"failed":0,"skipped":0,"points":0,"max_points":0}}"#,
    )
    .unwrap();
    let o = grade(&["gradebook", s(out)]);
    assert_eq!(o.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("ben/04-checkpoint"), "{stdout}");
    assert!(out.join("grades.csv").is_file() && out.join("junit.xml").is_file());
}

#[test]
fn empty_class_is_exit_2() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("class")).unwrap();
    let o = grade(&[
        "batch",
        s(&tmp.path().join("class")),
        "--exercise",
        "04-checkpoint",
        "--out",
        s(&tmp.path().join("out")),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no student"));
}

#[test]
fn discovery_rules() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for f in [
        "a/exercise.py",
        "b/04-checkpoint.py",
        "c/04-checkpoint/exercise.py",
        "e.py",
        ".hidden/exercise.py",
        "notes.txt",
        "d/other.txt",
        // notebooks (issue 21): the same names as .ipynb, after the .py
        "a/exercise.ipynb",
        "f/exercise.ipynb",
        "g/04-checkpoint.ipynb",
        "h/04-checkpoint/exercise.ipynb",
        "i.ipynb",
    ] {
        let p = d.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }
    let found = grade::batch::discover(d).unwrap();
    let ids: Vec<_> = found.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e", "f", "g", "h", "i"]);
    let sub = |i: usize, single| {
        found[i]
            .submission("04-checkpoint", single)
            .map(|p| p.strip_prefix(d).unwrap().to_path_buf())
    };
    assert_eq!(sub(0, true), Some("a/exercise.py".into()));
    assert_eq!(sub(0, false), None, "exercise.py is ambiguous with --all");
    assert_eq!(sub(1, false), Some("b/04-checkpoint.py".into()));
    assert_eq!(sub(2, false), Some("c/04-checkpoint/exercise.py".into()));
    assert_eq!(sub(3, true), None, "no submission");
    assert_eq!(sub(4, true), Some("e.py".into()));
    assert_eq!(sub(5, true), Some("f/exercise.ipynb".into()));
    assert_eq!(
        sub(5, false),
        None,
        "exercise.ipynb is ambiguous with --all"
    );
    assert_eq!(sub(6, false), Some("g/04-checkpoint.ipynb".into()));
    assert_eq!(sub(7, false), Some("h/04-checkpoint/exercise.ipynb".into()));
    assert_eq!(sub(8, true), Some("i.ipynb".into()));
    assert_eq!(sub(8, false), None, "a loose notebook with --all");
    std::fs::create_dir_all(d.join("e")).unwrap();
    assert!(grade::batch::discover(d).is_err(), "e/ and e.py: ambiguous");
}

#[test]
fn shards_partition_the_class_stably() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let ids: Vec<String> = (0..200).map(|i| format!("student{i:03}")).collect();
    let of = |id: &str| {
        (1..=3)
            .filter(|&k| grade::batch::in_shard(id, (k, 3)))
            .collect::<Vec<_>>()
    };
    for id in &ids {
        assert_eq!(of(id).len(), 1, "{id} in exactly one shard");
    }
    let sizes: Vec<usize> = (1..=3)
        .map(|k| {
            ids.iter()
                .filter(|i| grade::batch::in_shard(i, (k, 3)))
                .count()
        })
        .collect();
    assert!(sizes.iter().all(|&n| n > 40), "{sizes:?}");
    // a student's shard and seed depend on the id alone
    assert_eq!(of("student007"), of("student007"));
    assert_eq!(
        grade::batch::student_seed(11, "alice"),
        grade::batch::student_seed(11, "alice")
    );
    assert_ne!(
        grade::batch::student_seed(11, "alice"),
        grade::batch::student_seed(12, "alice")
    );
    assert!(grade::batch::parse_shard("0/3").is_err() && grade::batch::parse_shard("4/3").is_err());
    assert_eq!(grade::batch::parse_shard("2/3"), Ok((2, 3)));
}

/// (student, outcome, [(criterion, status)])
type Row<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

fn book(rows: &[Row]) -> Value {
    let grades: Vec<Value> = rows
        .iter()
        .map(|(st, outcome, crits)| {
            let verdicts: Vec<Value> = crits
                .iter()
                .map(|(id, status)| serde_json::json!({"id": id, "title": {"zh": id, "en": id}, "status": status, "points": 1}))
                .collect();
            let passed = crits.iter().filter(|c| c.1 == "PASS").count();
            let failed = crits.iter().filter(|c| c.1 == "FAIL").count();
            serde_json::json!({"student": st, "exercise": "04-checkpoint", "outcome": outcome, "seed": 1, "key": "k",
                "verdicts": verdicts, "run_s": 1.0,
                "summary": {"passed": passed, "failed": failed, "skipped": 0, "points": passed, "max_points": crits.len()}})
        })
        .collect();
    serde_json::json!({"roster": {"class": "c", "exercises": ["04-checkpoint"], "students": [], "seed": 1, "device": "cpu"},
        "grades": grades, "missing": []})
}

#[test]
fn diff_of_a_regrade() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let old = book(&[
        (
            "ann",
            "graded",
            &[("matches_reference", "PASS"), ("compare_median", "FAIL")],
        ),
        (
            "ben",
            "graded",
            &[("matches_reference", "PASS"), ("compare_median", "PASS")],
        ),
        (
            "cat",
            "graded",
            &[("matches_reference", "PASS"), ("compare_median", "PASS")],
        ),
        ("dan", "no_submission", &[]),
    ]);
    let new = book(&[
        (
            "ann",
            "graded",
            &[("matches_reference", "PASS"), ("compare_median", "PASS")],
        ),
        (
            "ben",
            "graded",
            &[("matches_reference", "FAIL"), ("compare_median", "PASS")],
        ),
        (
            "cat",
            "graded",
            &[("matches_reference", "PASS"), ("compare_median", "PASS")],
        ),
        (
            "dan",
            "graded",
            &[("matches_reference", "PASS"), ("compare_median", "FAIL")],
        ),
    ]);
    std::fs::create_dir_all(tmp.path().join("old")).unwrap();
    std::fs::write(tmp.path().join("old/grades.json"), old.to_string()).unwrap();
    std::fs::write(tmp.path().join("new.json"), new.to_string()).unwrap();
    let o = grade(&[
        "diff",
        s(&tmp.path().join("old")),
        s(&tmp.path().join("new.json")),
    ]);
    assert_eq!(o.status.code(), Some(0));
    insta::assert_snapshot!(String::from_utf8_lossy(&o.stdout));
}

/// Every student of the hostile suite (tests/fixtures/hostile/) in one class with three ordinary
/// students, graded in one batch (runs forked from one warm interpreter): each attack fails every criterion, and the ordinary students'
/// rows (outcome, seed, key, every verdict) are exactly those of a batch without the attackers;
/// nothing an attacker started outlives the batch.
#[test]
fn hostile_students_do_not_change_other_rows() {
    let _alone = EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner());
    let r = root();
    let tmp = tempfile::tempdir().unwrap();
    let (class, control) = (tmp.path().join("class"), tmp.path().join("control"));
    for dir in [&class, &control] {
        // graded before and after the attackers (ids sort): a zygote an attacker broke would show
        for (id, src) in [
            ("a-sol", "solutions/04-checkpoint/exercise.py"),
            ("b-wrong", "tests/fixtures/04-checkpoint/wrong_when_on.py"),
            ("z-sol", "solutions/04-checkpoint/exercise.py"),
        ] {
            hand_in(dir, id, &r.join(src));
        }
    }
    let mut attackers = Vec::new();
    for e in std::fs::read_dir(r.join("tests/fixtures/hostile"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".py") {
            let id = format!("x-{stem}");
            hand_in(&class, &id, &e.path());
            attackers.push(id);
        }
    }
    assert!(attackers.len() >= 14, "{attackers:?}");
    let (out, out_control) = (tmp.path().join("out"), tmp.path().join("out-control"));
    // the sandbox meets each attack itself (the course's Python would refuse most first): both
    // batches graded with it off, so the ordinary rows compare like with like
    let o = batch_policy_off(&class, &out, &["--timeout", "15", "--jobs", "1"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = batch_policy_off(&control, &out_control, &["--jobs", "1"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let rows = essence(&out);
    let ordinary: Vec<&String> = rows.iter().filter(|r| !r.starts_with("x-")).collect();
    let control_rows = essence(&out_control);
    assert_eq!(
        ordinary,
        control_rows.iter().collect::<Vec<_>>(),
        "the ordinary students' rows changed when graded beside the attackers"
    );
    assert!(control_rows[0].starts_with("a-sol graded") && !control_rows[0].contains("=FAIL"));
    assert!(control_rows[2].starts_with("z-sol graded") && !control_rows[2].contains("=FAIL"));
    // in a batch, neighbours are runs forked from the same warm interpreter: out of reach
    let siblings = json(&out.join("records/04-checkpoint/x-attack_siblings.json"));
    let tail = siblings["stderr_tail"].as_str().unwrap();
    assert_eq!(tail.matches(": refused: ").count(), 2, "{tail}");
    assert!(!tail.contains("succeeded"), "{tail}");
    let g = json(&out.join("grades.json"));
    for row in g["grades"].as_array().unwrap() {
        let student = row["student"].as_str().unwrap();
        if !student.starts_with("x-") {
            continue;
        }
        assert_eq!(row["outcome"], "graded", "{student}");
        for v in row["verdicts"].as_array().unwrap() {
            if v["status"] != "SKIP" && v["id"] != "instruments_intact" {
                assert_eq!(v["status"], "FAIL", "{student}: {} must fail", v["id"]);
            }
        }
    }
    let daemon_alive = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("987654"))
            .unwrap_or(false)
    });
    assert!(!daemon_alive, "the daemon student outlived the batch");
}

/// `--all`: one student hands in all six solutions as Jupyter notebooks (`NN-name.ipynb`: the
/// code split into cells, a markdown cell, magics and a shell line; issue 21), another all six
/// starters (`NN-name.py`); every exercise is graded for both (forked from one warm interpreter,
/// two at once): every solution notebook passes, every starter fails, and the summary table has a
/// column per exercise.
#[test]
fn all_exercises_in_one_batch() {
    // two gradings at once use both cores: nothing else may run meanwhile
    let _alone = EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner());
    let r = root();
    let tmp = tempfile::tempdir().unwrap();
    let class = tmp.path().join("class");
    let ids = [
        "01-metrics",
        "02-profiler",
        "03-memory",
        "04-checkpoint",
        "05-compile",
        "06-sync",
    ];
    for (student, from) in [("sol", "solutions"), ("start", "exercises")] {
        std::fs::create_dir_all(class.join(student)).unwrap();
        for id in ids {
            let py = r.join(format!("{from}/{id}/exercise.py"));
            if student == "sol" {
                let nb = support::notebook_of_py(id, &std::fs::read_to_string(py).unwrap());
                let to = class.join(student).join(format!("{id}.ipynb"));
                std::fs::write(to, serde_json::to_string_pretty(&nb).unwrap()).unwrap();
            } else {
                std::fs::copy(py, class.join(student).join(format!("{id}.py"))).unwrap();
            }
        }
    }
    let out = tmp.path().join("out");
    let o = grade(&[
        "batch",
        s(&class),
        "--all",
        "--out",
        s(&out),
        "--seed",
        "5",
        "--jobs",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for id in ids {
        assert!(stdout.contains(id), "a column for {id}: {stdout}");
        for (student, passes) in [("sol", true), ("start", false)] {
            let rec = json(&out.join(format!("records/{id}/{student}.json")));
            let failed = rec["summary"]["failed"].as_u64().unwrap();
            // which criteria, and why: a timing verdict flipped by load must be nameable from CI's log
            let fails: Vec<String> = rec["verdicts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["status"] == "FAIL")
                .map(|v| format!("{} ({}: {})", v["id"], v["measured"]["en"], v["why"]["en"]))
                .collect();
            assert_eq!(
                failed == 0,
                passes,
                "{student} {id}: {failed} failed {fails:?}; run_failure {}; {}",
                rec["run_failure"],
                rec["stderr_tail"]
            );
        }
    }
}

/// The class of issue 8, in CI: 30 lesson-04 submissions (24 fixtures of
/// tests/fixtures/04-checkpoint spread over all of them, two hostile ones, solution copies) and a folder with no
/// submission, graded by one
/// `grade batch --jobs 2` on the warm interpreter. Every fixture fails exactly the criteria its
/// expected.yaml lists (a `[]` fixture passes), every solution copy passes, every hostile one
/// fails, the empty folder is "no submission". (scripts/bench-batch.sh times the same class
/// against 30 cold `grade exercise` runs.)
#[test]
fn a_class_of_thirty() {
    // two gradings at once use both cores: nothing else may run meanwhile
    let _alone = EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner());
    let r = root();
    let tmp = tempfile::tempdir().unwrap();
    let class = tmp.path().join("class");
    // fixture stem -> criteria it must fail on CPU (sorted)
    let expected = support::lesson::Lesson("04-checkpoint").expected();
    let must_fail = |stem: &str| expected[stem].clone();
    // (student, submission, the criteria it must fail; None: fails, which ones aside)
    let mut want: Vec<(String, PathBuf, Option<Vec<String>>)> = Vec::new();
    let mut fixtures: Vec<String> = std::fs::read_dir(r.join("tests/fixtures/04-checkpoint"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".py")
                .map(String::from)
        })
        .collect();
    fixtures.sort();
    // a class of thirty: 24 of the lesson's fixtures, spread over all of them (every kind: careful,
    // careless, refused cheats), two hostile students, solution copies to thirty
    let every = fixtures.len().div_ceil(24).max(1);
    let fixtures: Vec<String> = fixtures.into_iter().step_by(every).take(24).collect();
    for (i, stem) in fixtures.iter().enumerate() {
        want.push((
            format!("f{i:02}-{stem}"),
            r.join(format!("tests/fixtures/04-checkpoint/{stem}.py")),
            Some(must_fail(stem)),
        ));
    }
    for hostile in ["read_solution", "segfault"] {
        want.push((
            format!("h-{hostile}"),
            r.join(format!("tests/fixtures/hostile/{hostile}.py")),
            None,
        ));
    }
    while want.len() < 30 {
        want.push((
            format!("s{:02}", want.len()),
            r.join("solutions/04-checkpoint/exercise.py"),
            Some(Vec::new()),
        ));
    }
    for (id, src, _) in &want {
        hand_in(&class, id, src);
    }
    std::fs::create_dir_all(class.join("zz-empty")).unwrap();
    let out = tmp.path().join("out");
    let o = batch(&class, &out, &["--jobs", "2"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lesson = support::lesson::Lesson("04-checkpoint");
    let rubric = lesson.rubric(&lesson.exercise());
    let mut wrong = Vec::new();
    for (id, _, fails) in &want {
        let rec = json(&out.join(format!("records/04-checkpoint/{id}.json")));
        let failed = support::lesson::report_failing(&rec);
        let ok = match fails {
            // as `grade check` judges: a fixture wrong elsewhere is not held to the timing bands
            // its entry leaves out
            Some(f) => {
                let either = grade::selftest::expected::bands_not_held(
                    &rubric,
                    f,
                    grade::runner::Device::Cpu,
                );
                let held: Vec<String> = failed
                    .iter()
                    .filter(|c| !either.contains(c))
                    .cloned()
                    .collect();
                &held == f
            }
            None => !failed.is_empty(),
        };
        if !ok {
            wrong.push(format!(
                "{id}: failed {failed:?}, expected {fails:?}; run_failure {}",
                rec["run_failure"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let empty = json(&out.join("records/04-checkpoint/zz-empty.json"));
    assert_eq!(empty["outcome"], "no_submission");
    assert!(
        want.len() >= 30,
        "at least 30 submissions (and one empty folder)"
    );

    // its HTML report reads the records and runs nothing: well under a second (as the command
    // reports it; loading libtorch at the binary's start is not the report's work)
    let t0 = Instant::now();
    let o = grade(&["report", s(&out)]);
    let took = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let work: f64 = stderr
        .split("written in ")
        .nth(1)
        .and_then(|x| x.split(' ').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("the time it took: {stderr}"));
    eprintln!("grade report of 31 rows: {work:.3} s ({took:.3} s with the process start)");
    assert!(work < 0.5, "{work:.3} s");
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    for (id, _, _) in &want {
        assert!(page.contains(&format!("<tr data-student=\"{id}\"")), "{id}");
    }
}

/// The warm interpreter killed in the middle of a batch (as a submission could on a kernel
/// without Landlock signal scoping): the run it was serving is graded again on a fresh one, so no
/// student gets a verdict for the grader's failure and none is lost.
#[test]
fn a_killed_zygote_costs_no_verdict() {
    use std::io::BufRead;
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let class = tmp.path().join("class");
    for i in 1..=4 {
        hand_in(
            &class,
            &format!("s{i}"),
            &root().join("solutions/04-checkpoint/exercise.py"),
        );
    }
    let out = tmp.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args([
            "batch",
            s(&class),
            "--exercise",
            "04-checkpoint",
            "--out",
            s(&out),
        ])
        .args(["--seed", "3", "--jobs", "1", "--device", "cpu"])
        .env("GRADE_ROOT", root())
        .env_remove("GRADE_PYTHON")
        .env("CI", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let grader = child.id() as i32;
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut killed = None;
    let mut log = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        log.push(line.clone());
        if line.starts_with("[1/4]") {
            // the next run is starting or running on the zygote: kill the zygote
            std::thread::sleep(Duration::from_millis(300));
            for e in std::fs::read_dir("/proc").unwrap().flatten() {
                let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                    continue;
                };
                let ppid: i32 = stat[stat.rfind(')').unwrap() + 2..]
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap();
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                if ppid == grader && String::from_utf8_lossy(&cmd).contains("zygote.py") {
                    let pid: i32 = e.file_name().to_str().unwrap().parse().unwrap();
                    assert!(Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status()
                        .unwrap()
                        .success());
                    killed = Some(pid);
                }
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(killed.is_some(), "found the zygote: {log:?}");
    assert_eq!(status.code(), Some(0), "everyone passes: {log:?}");
    let g = json(&out.join("grades.json"));
    let rows = g["grades"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{g}");
    for r in rows {
        assert_eq!(r["summary"]["failed"], 0, "{r}");
    }
}

/// The cluster examples run as written, locally: `examples/slurm/grade-array.sbatch` as three
/// array tasks (SLURM_ARRAY_TASK_ID 1–3 of 3) and the Kubernetes Job's command for each of its
/// eight completion indexes (JOB_COMPLETION_INDEX 0–7), each into its own shared `--out`; then
/// `grade gradebook` assembles each, and both equal one uninterrupted batch.
#[test]
fn cluster_examples_run_locally() {
    let _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    let r = root();
    let tmp = tempfile::tempdir().unwrap();
    let class = tmp.path().join("class");
    for (id, src) in [
        ("ann", "exercises/04-checkpoint/exercise.py"),
        ("ben", "tests/fixtures/hostile/segfault.py"),
        ("cat", "exercises/04-checkpoint/exercise.py"),
        ("dan", "tests/fixtures/robustness/crash_on_import.py"),
    ] {
        hand_in(&class, id, &r.join(src));
    }
    std::fs::create_dir_all(class.join("eve")).unwrap(); // no submission
                                                         // the examples call `./grade`: a folder whose ./grade is this build
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_grade"), work.join("grade")).unwrap();
    let run = |script: &str, args: &[&str], env: &[(&str, String)]| {
        let o = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("example")
            .args(args)
            .current_dir(&work)
            .env("GRADE_ROOT", &r)
            .env_remove("GRADE_PYTHON")
            .env("CI", "1")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{script}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    // Slurm: the batch script itself, as three array tasks
    let sbatch = std::fs::read_to_string(r.join("examples/slurm/grade-array.sbatch")).unwrap();
    let slurm_out = tmp.path().join("slurm");
    for k in 1..=3 {
        run(
            &sbatch,
            &[s(&class), s(&slurm_out), "04-checkpoint"],
            &[
                ("SLURM_ARRAY_TASK_COUNT", "3".into()),
                ("SLURM_ARRAY_TASK_ID", k.to_string()),
                ("GRADE_DEVICE", "cpu".into()),
            ],
        );
    }
    // Kubernetes: the container's command, with the Job's paths mapped to this test's folders
    let job: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(r.join("examples/k8s/grade-job.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let completions = job["spec"]["completions"].as_u64().unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let k8s_out = tmp.path().join("k8s");
    let command = container["args"][0]
        .as_str()
        .unwrap()
        .replace("/class", s(&class))
        .replace("/grades", s(&k8s_out))
        .replace("./grade batch ", "./grade batch --device cpu ");
    for index in 0..completions {
        run(
            &command,
            &[],
            &[("JOB_COMPLETION_INDEX", index.to_string())],
        );
    }
    // one uninterrupted batch with the examples' seed
    let whole = tmp.path().join("whole");
    let o = grade(&[
        "batch",
        s(&class),
        "--exercise",
        "04-checkpoint",
        "--out",
        s(&whole),
        "--seed",
        "20261129",
        "--device",
        "cpu",
    ]);
    assert_eq!(o.status.code(), Some(1));
    for out in [&slurm_out, &k8s_out] {
        let o = grade(&["gradebook", s(out)]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "every student has a record: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(essence(out), essence(&whole), "{}", out.display());
    }
}
