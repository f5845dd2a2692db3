//! End-to-end: the real `grade` binary's terminal tables (both languages, `--verbose`, NO_COLOR)
//! and robust grading of broken submissions (crashes, hangs, forged results, memory bombs, huge
//! output), with `grade exercise` on lesson 4. Each lesson's own fixtures are proven by its
//! tests/lesson_0N.rs.
mod support;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::lesson::{explain, report_failing as failing, root, why, Lesson};

struct Graded {
    code: i32,
    report: Value,
}

fn grade(submission: &Path, extra: &[&str]) -> Graded {
    let (code, report) = Lesson("04-checkpoint").grade_file_with(submission, extra);
    Graded { code, report }
}

#[test]
fn starter_table_in_english_and_chinese() {
    let starter = root().join("exercises/04-checkpoint/exercise.py");
    for lang in ["en", "zh"] {
        let out = Command::new(env!("CARGO_BIN_EXE_grade"))
            .args(["exercise", "04-checkpoint", "--seed", "1", "--lang", lang])
            .env("GRADE_ROOT", root())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let table = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            !table.contains('\x1b'),
            "no colour codes when piped / NO_COLOR"
        );
        let table = table.replace(&starter.display().to_string(), "[starter]");
        insta::with_settings!({filters => vec![(r"(run|运行) \d+\.\d s", "$1 [t] s")]}, {
            insta::assert_snapshot!(format!("04-checkpoint__starter_table_{lang}"), table);
        });
    }
}

/// `--verbose`: the full table with every criterion's reason, both languages.
#[test]
fn starter_verbose_table_in_english_and_chinese() {
    let starter = root().join("exercises/04-checkpoint/exercise.py");
    for lang in ["en", "zh"] {
        let out = Command::new(env!("CARGO_BIN_EXE_grade"))
            .args([
                "exercise",
                "04-checkpoint",
                "--seed",
                "1",
                "--verbose",
                "--lang",
                lang,
            ])
            .env("GRADE_ROOT", root())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let table = String::from_utf8_lossy(&out.stdout)
            .replace(&starter.display().to_string(), "[starter]");
        assert!(table.contains(if lang == "en" { "criterion" } else { "准则" }));
        insta::with_settings!({filters => vec![(r"(run|运行) \d+\.\d s", "$1 [t] s")]}, {
            insta::assert_snapshot!(format!("04-checkpoint__starter_verbose_{lang}"), table);
        });
    }
}

// ------------------------------------------------------------------------------- hostile input

/// A robustness case meets the runner itself: graded with the course's Python off
/// (`GRADE_POLICY=off`), which would refuse most of them before they ran.
fn robustness(name: &str, extra: &[&str]) -> Graded {
    let (code, report) = Lesson("04-checkpoint").grade_file_env(
        &root().join(format!("tests/fixtures/robustness/{name}.py")),
        extra,
        &[("GRADE_POLICY", "off")],
    );
    let g = Graded { code, report };
    assert_eq!(
        g.code,
        1,
        "{name}: a bad submission is graded (exit 1), not an error (2)\n{}",
        explain(&g.report)
    );
    assert!(
        g.report["summary"]["passed"].as_u64().unwrap() <= 1,
        "{name}\n{}",
        explain(&g.report)
    );
    for v in g.report["verdicts"].as_array().unwrap() {
        if v["id"] != "instruments_intact" && v["status"] != "SKIP" {
            assert_eq!(v["status"], "FAIL", "{name}: {} must fail", v["id"]);
        }
    }
    g
}

#[test]
fn crash_on_import_fails_with_the_error_and_line() {
    let g = robustness("crash_on_import", &[]);
    assert!(
        why(&g.report, "on_off_agree").contains("RuntimeError: boom at import (submission.py:2")
    );
}

#[test]
fn hang_is_killed_at_the_timeout_with_its_children() {
    let start = std::time::Instant::now();
    let g = robustness("hang", &["--timeout", "8"]);
    assert!(start.elapsed().as_secs() < 40);
    assert!(g.report["run_failure"]["en"]
        .as_str()
        .unwrap()
        .contains("ran past its 8 s limit"));
}

#[test]
fn exiting_before_results_fails() {
    let g = robustness("os_exit", &[]);
    assert!(g.report["run_failure"]["en"]
        .as_str()
        .unwrap()
        .contains("ended before the driver wrote its results"));
    let g = robustness("sys_exit", &[]);
    assert!(why(&g.report, "on_off_agree").contains("called sys.exit(0)"));
}

#[test]
fn forged_results_are_rejected() {
    // written to the results pipe at import: after the driver's header, so not its records
    let g = robustness("forge_results", &[]);
    assert!(g.report["run_failure"]["en"]
        .as_str()
        .unwrap()
        .contains("tampered or fabricated results"));
}

#[test]
fn wrong_return_types_fail_with_what_was_returned() {
    let g = robustness("wrong_types", &[]);
    // the shape is drawn from the seed: the message names the drawn one
    assert!(why(&g.report, "on_off_agree").contains("returned list, expected a Tensor of shape ("));
    assert!(why(&g.report, "compare_bytes_agree").contains("compare() must return"));
}

#[test]
fn memory_bomb_is_stopped_by_the_limit() {
    let g = robustness("memory_bomb", &[]);
    assert!(why(&g.report, "on_off_agree").contains("MemoryError"));
}

/// The reference solution with extra lines appended: a submission made on the fly.
fn solution_plus(extra: &str) -> tempfile::NamedTempFile {
    let mut src =
        std::fs::read_to_string(root().join("solutions/04-checkpoint/exercise.py")).unwrap();
    src.push_str(extra);
    let f = tempfile::Builder::new().suffix(".py").tempfile().unwrap();
    std::fs::write(f.path(), src).unwrap();
    f
}

#[test]
fn huge_output_is_capped_and_harmless() {
    let f = solution_plus(
        "\nimport sys\nsys.stdout.write('\\x00garbage\\xff' * 400_000)\nsys.stderr.write('noise\\n' * 400_000)\n",
    );
    let g = grade(f.path(), &[]);
    assert_eq!(g.code, 0, "{}", explain(&g.report));
}

#[test]
fn fixed_seed_is_reported() {
    let g = grade(
        &root().join("solutions/04-checkpoint/exercise.py"),
        &["--seed", "42"],
    );
    assert_eq!(g.code, 0, "{}", explain(&g.report));
    assert_eq!(g.report["seed"], 42);
}

#[test]
fn nan_measurements_fail_only_the_criteria_that_use_them() {
    let f = solution_plus(
        "\n_compare = compare\n\ndef compare(*a, **k):\n    r = _compare(*a, **k)\n    r['off']['step_s'] = r['on']['step_s'] = float('nan')\n    return r\n",
    );
    let g = grade(f.path(), &[]);
    let mut got = failing(&g.report);
    got.sort();
    assert_eq!(
        got,
        ["compare_median", "compare_time_agrees"],
        "{}",
        explain(&g.report)
    );
    assert!(why(&g.report, "compare_time_agrees").contains("is not a number: \"nan\""));
}

/// libtorch_cuda is loaded only where an NVIDIA driver is (`device::load_cuda_runtime`): a
/// stand-in `libcuda.so.1` (an empty library, built here with the C compiler set-up requires)
/// makes `grade` load the real libtorch_cuda.so after libtorch's CPU half, and a grading on the
/// CPU still passes; `--device cuda` without CUDA says which of the two it found (exit 2).
#[test]
fn libtorch_cuda_is_loaded_only_with_a_driver_and_grading_works_either_way() {
    let fake = tempfile::tempdir().unwrap();
    let src = fake.path().join("f.c");
    std::fs::write(&src, "int grade_test_not_a_driver(void) { return 0; }\n").unwrap();
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(fake.path().join("libcuda.so.1"))
        .arg(&src)
        .status()
        .expect("a C compiler (cc), as ./setup.sh needs");
    assert!(built.success());
    let run = |driver: bool, device: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_grade"));
        cmd.args([
            "exercise",
            "03-memory",
            "--solution",
            "--seed",
            "1",
            "--device",
            device,
        ])
        .env("GRADE_ROOT", root())
        .env("NO_COLOR", "1");
        if driver {
            cmd.env("LD_LIBRARY_PATH", fake.path());
        }
        cmd.output().unwrap()
    };
    let out = run(true, "cuda");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the NVIDIA driver and libtorch_cuda are loaded, but torch sees no GPU"),
        "{err}"
    );
    let out = run(true, "cpu");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    if !Path::new("/proc/driver/nvidia").exists() {
        let out = run(false, "cuda");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no NVIDIA driver on this machine"), "{err}");
    }
}

/// A reader that goes away before the report is written (`grade … | head`) is no crash: the
/// exit code is the command's own, and nothing panics.
#[test]
fn a_closed_stdout_is_no_panic() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(["policy", "01-metrics"])
        .env("GRADE_ROOT", root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before the child writes a byte
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
