//! A course is data (issue 23): a seventh lesson made only of files — README with a contract and
//! `### 常见错误`, exercise.yaml, starter, scenario using `ctx.lib`, solution, a rubric of existing
//! check kinds, two fixtures and expected.yaml (`tests/fixtures/authoring/07-mixed/`, mixed
//! precision: bf16 autocast vs fp32 on TinyGPT) — is added to a copy of the course exactly as
//! ARCHITECTURE.md's "Adding a lesson" says, with no Rust change and no rebuild: `grade list`
//! finds it, `grade check` proves it, `grade exercise` grades it (its `--html` page shows the
//! picture its exercise.yaml declares), `grade batch --all` includes it.
mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn grade(course: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(args)
        .env("GRADE_ROOT", course)
        .env("GRADE_PYTHON", root().join(".venv/bin/python"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_lesson_made_only_of_files_is_found_proved_graded_and_batched() {
    // the course as it is, then the new lesson's files on top (steps 1-4 of "Adding a lesson")
    let course = tempfile::tempdir().unwrap();
    for rel in ["exercises", "solutions", "rubrics"] {
        support::copy_dir(&root().join(rel), &course.path().join(rel));
    }
    std::fs::copy(
        root().join("course.yaml"),
        course.path().join("course.yaml"),
    )
    .unwrap();
    support::copy_dir(
        &root().join("tests/fixtures/authoring/07-mixed"),
        course.path(),
    );
    let c = course.path();

    let (code, stdout, _) = grade(c, &["list"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("07-mixed") && stdout.contains("混合精度"),
        "{stdout}"
    );

    // grade check: the solution passes, the starter fails, each fixture fails exactly its
    // expected.yaml criteria, the rubric's criteria are all caught, the README's 常见错误 mapped
    let (code, stdout, stderr) = grade(c, &["check", "07-mixed", "--format", "json"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let ex = &report["exercises"][0];
    assert_eq!(ex["id"], "07-mixed");
    assert_eq!(ex["surprises"].as_array().unwrap().len(), 0, "{ex:#}");

    // grade exercise, its page with the lesson's picture (step 7: `pictures:` of exercise.yaml)
    let page = course.path().join("07.html");
    let (code, stdout, stderr) = grade(
        c,
        &[
            "exercise",
            "07-mixed",
            "--solution",
            "--format",
            "json",
            "--seed",
            "7",
            "--html",
            page.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["exercise"], "07-mixed");
    assert!(r["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["status"] == "PASS"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<figcaption>为反向保存的激活：fp32 vs bf16 autocast</figcaption>"),
        "the picture declared in 07-mixed/exercise.yaml"
    );
    let bytes = r["evidence"]["metrics"]["numerics.on.activation_bytes"]
        .as_f64()
        .unwrap();
    assert!(
        html.contains(&format!(
            "<th scope=\"row\">bf16 autocast</th><td class=\"num\">{}</td>",
            grade::charts::fmt(bytes / 1048576.0)
        )),
        "its numbers: the recorded bytes in MiB"
    );

    // grade batch --all: a class whose one student did lesson 07 only
    let class = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(class.path().join("ada")).unwrap();
    std::fs::copy(
        c.join("solutions/07-mixed/exercise.py"),
        class.path().join("ada/07-mixed.py"),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = grade(
        c,
        &[
            "batch",
            class.path().to_str().unwrap(),
            "--all",
            "--out",
            out.path().to_str().unwrap(),
            "--seed",
            "1",
        ],
    );
    assert_eq!(
        code, 1,
        "the other lessons have no submission: {stdout}\n{stderr}"
    );
    let roster: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("roster.json")).unwrap())
            .unwrap();
    let exercises: Vec<&str> = roster["exercises"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(exercises.len(), 7, "{exercises:?}");
    assert_eq!(exercises.last(), Some(&"07-mixed"));
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("records/07-mixed/ada.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["outcome"], "graded", "{record:#}");
    assert_eq!(record["summary"]["failed"], 0, "{record:#}");
    let other: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("records/04-checkpoint/ada.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(other["outcome"], "no_submission");
}
