//! Grading platforms (issue 22): Gradescope's autograder zip (`grade export gradescope`), its
//! `run_autograder` and PrairieLearn's entrypoint (`examples/prairielearn/entrypoint.sh`), each run
//! as the platform runs it, on a fake root (`$AUTOGRADER_ROOT`, `$GRADE_PL_ROOT`) with the lesson-04
//! solution, a fixture that fails one criterion, a submission that crashes and none at all. Every
//! `results.json` is validated against a JSON schema written from the platform's documentation
//! (`tests/fixtures/platforms/`), and so are the PrairieLearn and Gradescope gradebooks of `grade
//! batch` (from records, no grading).
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Gradings run one at a time: timing criteria need the cores (docs/instructors.md, "Timing").
static GRADING: Mutex<()> = Mutex::new(());

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A schema of `tests/fixtures/platforms/` (checked as a schema of its own `$schema` draft on
/// every use).
fn schema(name: &str) -> PathBuf {
    root().join("tests/fixtures/platforms").join(name)
}

/// What is wrong with `doc` by `schema`, with the Python `jsonschema` package test.sh installs
/// (like `xmlschema` for JUnit; a Rust validator crate was a minute of every fresh build).
fn errors(schema: &Path, doc: &Value) -> Vec<String> {
    let script = r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1], encoding="utf-8"))
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
for e in cls(schema).iter_errors(json.load(sys.stdin)):
    print(f"{e.message} at /{'/'.join(map(str, e.absolute_path))}")
"#;
    let mut child = Command::new(root().join(".venv/bin/python"))
        .arg("-c")
        .arg(script)
        .arg(schema)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the test venv's python (test.sh installs jsonschema)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "validating against {}: {}",
        schema.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

fn validate(schema: &Path, doc: &Value, what: &str) {
    let errors = errors(schema, doc);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{doc:#}");
}

/// The zip of `grade export gradescope 04-checkpoint`, entry name → (mode, bytes).
fn export_zip(dir: &Path) -> Vec<(String, u32, Vec<u8>)> {
    let zip = dir.join("autograder.zip");
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(["export", "gradescope", "04-checkpoint", "--out"])
        .arg(&zip)
        .env("GRADE_ROOT", root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("at least 6 min"),
        "timeout advice: {stderr}"
    );
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&zip).unwrap()).unwrap();
    (0..archive.len())
        .map(|i| {
            let mut f = archive.by_index(i).unwrap();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            (
                f.name().unwrap().to_string(),
                f.unix_mode().unwrap() & 0o777,
                bytes,
            )
        })
        .collect()
}

/// The four submissions, written into `dir` (`None`: nothing submitted).
/// (case, the file submitted: its name and bytes, or nothing).
type Submission = (&'static str, Option<(&'static str, Vec<u8>)>);

fn submissions() -> Vec<Submission> {
    let read = |p: &str| std::fs::read(root().join(p)).unwrap();
    vec![
        (
            "solution",
            Some(("exercise.py", read("solutions/04-checkpoint/exercise.py"))),
        ),
        (
            "too_fine",
            Some((
                "exercise.py",
                read("tests/fixtures/04-checkpoint/too_fine.py"),
            )),
        ),
        // another name: the only .py of the folder is graded
        (
            "crash",
            Some((
                "my_checkpoint.py",
                b"raise RuntimeError('boom at import')\n".to_vec(),
            )),
        ),
        ("missing", None),
    ]
}

/// Run `script` with `env` as the platform would, and read the results.json it wrote.
fn run_script(script: &Path, env: &[(&str, &Path)], results: &Path) -> Value {
    let out = Command::new(script)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("GRADE_ROOT", root())
        .env("GRADE_BIN", env!("CARGO_BIN_EXE_grade"))
        .env("GRADE_LANG", "en")
        .env_remove("GRADE_PYTHON")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(results).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\nstdout: {}\nstderr: {}",
            results.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(text.len() < 1 << 20, "PrairieLearn's limit is 1 MB");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn by_id<'a>(tests: &'a [Value], id: &str) -> &'a Value {
    tests
        .iter()
        .find(|t| t["name"].as_str().unwrap().starts_with(&format!("{id} — ")))
        .unwrap_or_else(|| panic!("no test {id}"))
}

#[test]
fn gradescope_zip_and_autograder() {
    let tmp = tempfile::tempdir().unwrap();
    let entries = export_zip(tmp.path());
    let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    let mode = |n: &str| entries.iter().find(|e| e.0 == n).unwrap().1;
    // the two files Gradescope needs at the root, executable; the course under course/
    assert_eq!(&names[..2], ["setup.sh", "run_autograder"]);
    for exe in [
        "setup.sh",
        "run_autograder",
        "course/setup.sh",
        "course/grade",
        "course/scripts/install-system-deps.sh",
    ] {
        assert_eq!(mode(exe), 0o755, "{exe}");
    }
    for file in [
        "course/.cargo/config.toml",
        "course/Cargo.toml",
        "course/Cargo.lock",
        "course/build.rs",
        "course/src/main.rs",
        "course/src/driver/driver.py",
        "course/exercises/course/model.py",
        "course/exercises/04-checkpoint/exercise.yaml",
        "course/rubrics/04-checkpoint.yaml",
        "course/solutions/04-checkpoint/exercise.py",
    ] {
        assert_eq!(mode(file), 0o644, "{file}");
    }
    assert!(names
        .iter()
        .all(|n| n == &"setup.sh" || n == &"run_autograder" || n.starts_with("course/")));
    for left_out in [
        "target/",
        ".venv/",
        "__pycache__",
        "tests/",
        ".git/",
        ".cache/",
    ] {
        assert!(
            !names.iter().any(|n| n.contains(left_out)),
            "{left_out} in the zip"
        );
    }
    let script = |n: &str| String::from_utf8(entries.iter().find(|e| e.0 == n).unwrap().2.clone());
    for s in ["setup.sh", "run_autograder"] {
        assert!(
            script(s)
                .unwrap()
                .contains("exercise=${1:-${GRADE_EXERCISE:-04-checkpoint}}"),
            "{s}: the exercise id is its default"
        );
    }

    // run_autograder as Gradescope runs it, on a fake /autograder
    let v = schema("gradescope-results.schema.json");
    let ag = tmp.path().join("autograder");
    std::fs::create_dir_all(&ag).unwrap();
    let run = ag.join("run_autograder");
    std::fs::write(&run, script("run_autograder").unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _one = GRADING.lock().unwrap_or_else(|e| e.into_inner());
    for (case, file) in submissions() {
        let sub = ag.join("submission");
        let _ = std::fs::remove_dir_all(&sub);
        let _ = std::fs::remove_dir_all(ag.join("results"));
        std::fs::create_dir_all(&sub).unwrap();
        if let Some((name, bytes)) = &file {
            std::fs::write(sub.join(name), bytes).unwrap();
        }
        let r = run_script(
            &run,
            &[("AUTOGRADER_ROOT", &ag)],
            &ag.join("results/results.json"),
        );
        validate(&v, &r, case);
        let tests = r["tests"].as_array().unwrap();
        let score = r["score"].as_f64().unwrap();
        let sum: f64 = tests.iter().map(|t| t["score"].as_f64().unwrap()).sum();
        let max: f64 = tests.iter().map(|t| t["max_score"].as_f64().unwrap()).sum();
        assert_eq!(score, sum, "{case}: the score is the tests' sum");
        let output = r["output"].as_str().unwrap();
        match case {
            "solution" => {
                assert!(max > 0.0 && score == max, "{case}: {r:#}");
                assert!(tests.iter().all(|t| t["status"] == "passed"));
                // the student's report, in a code block
                assert_eq!(r["output_format"], "md");
                assert!(output.contains("Exercise 04-checkpoint"), "{output}");
            }
            "too_fine" => {
                let t = by_id(tests, "one_checkpoint_per_block");
                assert_eq!(
                    (t["status"].as_str(), t["score"].as_f64()),
                    (Some("failed"), Some(0.0))
                );
                assert!(t["max_score"].as_f64().unwrap() > 0.0);
                assert_eq!(
                    tests.iter().filter(|t| t["status"] == "failed").count(),
                    1,
                    "{r:#}"
                );
                assert!(score > 0.0 && score < max);
            }
            "crash" => {
                // only the static audit of the source (judged even when the run crashes) passes
                for t in tests.iter().filter(|t| t["score"].as_f64() > Some(0.0)) {
                    assert!(
                        t["name"]
                            .as_str()
                            .unwrap()
                            .starts_with("instruments_intact"),
                        "{t}"
                    );
                }
                assert!(score < 0.1 * max, "{r:#}");
                assert!(output.contains("boom at import"), "{output}");
            }
            "missing" => {
                assert_eq!(score, 0.0);
                assert!(tests.is_empty());
                assert!(output.contains("could not grade"), "{output}");
                assert!(output.contains("submission not found"), "{output}");
            }
            _ => unreachable!(),
        }
    }
}

#[test]
fn prairielearn_entrypoint() {
    let v = schema("prairielearn-results.schema.json");
    let tmp = tempfile::tempdir().unwrap();
    let pl = tmp.path().join("grade");
    let entry = root().join("examples/prairielearn/entrypoint.sh");
    // the question's info.json names this script and the exercise
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("examples/prairielearn/questions/04-checkpoint/info.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let opts = &info["externalGradingOptions"];
    assert_eq!(
        opts["entrypoint"],
        "/course/examples/prairielearn/entrypoint.sh 04-checkpoint"
    );
    assert!(
        opts["timeout"].as_u64().unwrap() <= 600,
        "PrairieLearn's maximum"
    );
    let _one = GRADING.lock().unwrap_or_else(|e| e.into_inner());
    for (case, file) in submissions() {
        let _ = std::fs::remove_dir_all(&pl);
        let student = pl.join("student");
        std::fs::create_dir_all(&student).unwrap();
        std::fs::create_dir_all(pl.join("data")).unwrap();
        std::fs::write(pl.join("data/data.json"), "{}").unwrap();
        if let Some((name, bytes)) = &file {
            std::fs::write(student.join(name), bytes).unwrap();
        }
        let out = Command::new(&entry)
            .arg("04-checkpoint")
            .env("GRADE_PL_ROOT", &pl)
            .env("GRADE_ROOT", root())
            .env("GRADE_BIN", env!("CARGO_BIN_EXE_grade"))
            .env("GRADE_LANG", "en")
            .env_remove("GRADE_PYTHON")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = std::fs::read_to_string(pl.join("results/results.json")).unwrap();
        assert!(text.len() < 1 << 20, "PrairieLearn's limit is 1 MB");
        let r: Value = serde_json::from_str(&text).unwrap();
        validate(&v, &r, case);
        match case {
            "solution" => {
                assert_eq!(
                    (r["gradable"].as_bool(), r["score"].as_f64()),
                    (Some(true), Some(1.0)),
                    "{r:#}"
                );
                let tests = r["tests"].as_array().unwrap();
                assert!(tests.iter().all(|t| t["points"] == t["max_points"]));
                assert!(r["output"]
                    .as_str()
                    .unwrap()
                    .contains("Exercise 04-checkpoint"));
            }
            "too_fine" => {
                let tests = r["tests"].as_array().unwrap();
                let t = by_id(tests, "one_checkpoint_per_block");
                assert_eq!(t["points"], 0);
                assert!(t["max_points"].as_u64().unwrap() > 0);
                let (got, max) = tests.iter().fold((0.0, 0.0), |(g, m), t| {
                    (
                        g + t["points"].as_f64().unwrap(),
                        m + t["max_points"].as_f64().unwrap(),
                    )
                });
                let score = r["score"].as_f64().unwrap();
                assert!(
                    (score - got / max).abs() < 1e-12,
                    "score = points / max_points"
                );
                assert!(score > 0.0 && score < 1.0, "{r:#}");
            }
            "crash" => {
                // gradable: the run was graded (and failed); only the source audit passes
                assert_eq!(r["gradable"], true, "{r:#}");
                assert!(r["score"].as_f64().unwrap() < 0.1, "{r:#}");
                for t in r["tests"].as_array().unwrap() {
                    if t["points"].as_u64().unwrap() > 0 {
                        assert!(t["name"]
                            .as_str()
                            .unwrap()
                            .starts_with("instruments_intact"));
                    }
                }
                assert!(r["output"].as_str().unwrap().contains("boom at import"));
            }
            "missing" => {
                assert_eq!(r["gradable"], false, "{r:#}");
                assert!(r.get("score").is_none());
                let m = r["message"].as_str().unwrap();
                assert!(m.contains("submission not found"), "{m}");
            }
            _ => unreachable!(),
        }
    }
}

/// A grader that fails before printing anything still leaves a results.json (score 0 / not
/// gradable), and `--format` documents of exit 2 match the schemas.
#[test]
fn grader_failure_still_writes_results() {
    let tmp = tempfile::tempdir().unwrap();
    let gs = schema("gradescope-results.schema.json");
    let pl = schema("prairielearn-results.schema.json");
    // a "grader" that dies at once
    let broken = tmp.path().join("broken-grade");
    std::fs::write(&broken, "#!/bin/sh\nexit 101\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (script, env, results, v) in [
        (
            "examples/gradescope/run_autograder",
            "AUTOGRADER_ROOT",
            "results/results.json",
            &gs,
        ),
        (
            "examples/prairielearn/entrypoint.sh",
            "GRADE_PL_ROOT",
            "results/results.json",
            &pl,
        ),
    ] {
        let dir = tmp.path().join(env);
        let out = Command::new(root().join(script))
            .arg("04-checkpoint")
            .env(env, &dir)
            .env("GRADE_BIN", &broken)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{script}");
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(results)).unwrap()).unwrap();
        validate(v, &r, script);
        assert!(
            r["output"]
                .as_str()
                .or(r["message"].as_str())
                .unwrap()
                .contains("exit 101"),
            "{r}"
        );
    }
    // exit 2 from `grade exercise --format gradescope|prairielearn` (unknown exercise)
    for (format, v) in [("gradescope", &gs), ("prairielearn", &pl)] {
        let out = Command::new(env!("CARGO_BIN_EXE_grade"))
            .args(["exercise", "99-nothing", "--format", format])
            .env("GRADE_ROOT", root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        validate(v, &r, format);
        let text = r.to_string();
        assert!(text.contains("unknown exercise"), "{text}");
    }
}

/// `grade batch` gradebooks: `prairielearn/ID/STUDENT/results.json` and Gradescope's, assembled
/// from records (a graded student and one without a submission), valid against the schemas.
#[test]
fn batch_gradebooks_match_the_schemas() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let roster = json!({"class": "c", "exercises": ["04-checkpoint"], "students": ["ann", "bob"],
        "seed": 1, "device": "cpu"});
    std::fs::write(out.join("roster.json"), roster.to_string()).unwrap();
    let verdict = |id: &str, status: &str, points: u32| {
        json!({"id": id, "title": {"zh": "标题", "en": "title"}, "status": status, "points": points,
            "measured": {"zh": "1", "en": "1"}, "bound": {"zh": "≤ 2", "en": "≤ 2"},
            "why": {"zh": "原因", "en": "why"}})
    };
    let ann = json!({"student": "ann", "exercise": "04-checkpoint", "outcome": "graded", "seed": 7,
        "verdicts": [verdict("a", "PASS", 2), verdict("b", "FAIL", 1), verdict("c", "SKIP", 1)],
        "summary": {"passed": 1, "failed": 1, "skipped": 1, "points": 2, "max_points": 3},
        "run_s": 4.2});
    let bob = json!({"student": "bob", "exercise": "04-checkpoint", "outcome": "no_submission",
        "seed": 8, "verdicts": [],
        "summary": {"passed": 0, "failed": 0, "skipped": 0, "points": 0, "max_points": 0}});
    std::fs::create_dir_all(out.join("records/04-checkpoint")).unwrap();
    for (name, r) in [("ann", &ann), ("bob", &bob)] {
        std::fs::write(
            out.join(format!("records/04-checkpoint/{name}.json")),
            r.to_string(),
        )
        .unwrap();
    }
    grade::gradebook::write_all(out).unwrap();
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(p)).unwrap()).unwrap()
    };
    let (gs, pl) = (
        schema("gradescope-results.schema.json"),
        schema("prairielearn-results.schema.json"),
    );
    for st in ["ann", "bob"] {
        validate(
            &gs,
            &read(&format!("gradescope/04-checkpoint/{st}/results.json")),
            st,
        );
        validate(
            &pl,
            &read(&format!("prairielearn/04-checkpoint/{st}/results.json")),
            st,
        );
    }
    let a = read("prairielearn/04-checkpoint/ann/results.json");
    assert_eq!(a["score"].as_f64(), Some(2.0 / 3.0));
    let points: Vec<(u64, u64)> = a["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["points"].as_u64().unwrap(),
                t["max_points"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(points, [(2, 2), (0, 1), (0, 0)]);
    let b = read("prairielearn/04-checkpoint/bob/results.json");
    assert_eq!(b["gradable"], false);
    // the schemas reject what the platforms would not read
    assert!(!errors(&pl, &json!({"gradable": true, "score": 1.5})).is_empty());
    assert!(!errors(&pl, &json!({"gradable": false})).is_empty());
    assert!(!errors(&gs, &json!({"score": 1, "tests": [{"status": "ok"}]})).is_empty());
    assert!(!errors(&gs, &json!({"score": 1, "max_score": 2})).is_empty());
}
