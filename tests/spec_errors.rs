//! Bad specs and bad invocations: exit 2 with `file:line:column`, what was found, what is allowed.
use grade::error::GradeError;
use grade::spec::{Exercise, Rubric};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn exercise() -> Exercise {
    Exercise::load(&root().join("exercises/04-checkpoint")).unwrap()
}

const GOOD: &str = "exercise: 04-checkpoint
criteria:
  - id: a
    title: {zh: 甲, en: a}
    check:
      ratio: {num: x.a, den: x.b, max: 0.5}
";

/// Load a rubric written to a temp file; return the error's display.
fn rubric_error(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, yaml).unwrap();
    match Rubric::load(&path, &exercise()) {
        Ok(_) => panic!("expected an error for:\n{yaml}"),
        Err(e @ GradeError::Spec { .. }) => {
            e.to_string().replace(&path.display().to_string(), "FILE")
        }
        Err(other) => panic!("not a spec error: {other}"),
    }
}

#[test]
fn the_good_rubric_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.yaml");
    std::fs::write(&path, GOOD).unwrap();
    assert_eq!(Rubric::load(&path, &exercise()).unwrap().criteria.len(), 1);
}

#[test]
fn the_shipped_rubric_and_exercise_load() {
    let ex = exercise();
    let r = Rubric::load(&root().join("rubrics/04-checkpoint.yaml"), &ex).unwrap();
    assert!(r.criteria.len() >= 10);
}

#[test]
fn yaml_syntax_error_has_line_and_column() {
    let e = rubric_error(&GOOD.replace("max: 0.5}", "max: 0.5"));
    assert!(e.starts_with("FILE:7:1:"), "{e}");
}

#[test]
fn unknown_key_names_the_allowed_ones() {
    let e = rubric_error(&GOOD.replace("    check:", "    pionts: 3\n    check:"));
    assert!(e.starts_with("FILE:5:5:"), "{e}");
    assert!(e.contains("unknown field `pionts`"), "{e}");
    assert!(e.contains("points"), "{e}");
}

#[test]
fn unknown_check_kind_lists_the_kinds() {
    let e = rubric_error(&GOOD.replace("ratio:", "ration:"));
    assert!(e.starts_with("FILE:6:7:"), "{e}");
    assert!(e.contains("unknown variant `ration`"), "{e}");
    for kind in [
        "close",
        "ratio",
        "range",
        "trace",
        "answer",
        "audit",
        "reproducible",
        "series",
        "stats",
        "break_even",
        "ledger",
        "growth",
        "ranking",
        "step_time",
        "all",
    ] {
        assert!(e.contains(&format!("`{kind}`")), "{kind} in: {e}");
    }
}

#[test]
fn bad_value_type_is_located() {
    let e = rubric_error(&GOOD.replace("max: 0.5", "max: lots"));
    assert!(e.starts_with("FILE:6:"), "{e}");
    assert!(e.contains("a number or a reference"), "{e}");
}

#[test]
fn unresolvable_reference_is_located() {
    let e = rubric_error(&GOOD.replace("max: 0.5", "max: $model.n_layers"));
    assert!(e.starts_with("FILE:3:5:"), "{e}");
    assert!(e.contains("does not name a number in exercise.yaml"), "{e}");
}

#[test]
fn a_recorded_bound_is_allowed_only_on_a_trace_count() {
    // `$metric.NAME` is a number of the run: a ratio bound read from it is refused at load
    let e = rubric_error(&GOOD.replace("max: 0.5", "max: $metric.x.c"));
    assert!(e.starts_with("FILE:3:5:"), "{e}");
    assert!(e.contains("allowed only as a trace count's bound"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.yaml");
    let count = GOOD.replace(
        "ratio: {num: x.a, den: x.b, max: 0.5}",
        "trace: {stream: s, count: step, equals: $metric.s.calls}",
    );
    std::fs::write(&path, count).unwrap();
    Rubric::load(&path, &exercise()).unwrap();
}

#[test]
fn a_sum_needs_a_count() {
    let e = rubric_error(&GOOD.replace(
        "ratio: {num: x.a, den: x.b, max: 0.5}",
        "trace: {stream: s, each: ckpt, sum: bytes, max: 1}",
    ));
    assert!(
        e.contains("sum: totals a field of the counted events"),
        "{e}"
    );
}

#[test]
fn inverted_bounds_are_rejected() {
    let e = rubric_error(&GOOD.replace("max: 0.5", "min: 2, max: 1"));
    assert!(e.contains("min (2) is greater than max (1)"), "{e}");
}

#[test]
fn duplicate_ids_point_at_the_id() {
    let dup = format!(
        "{GOOD}{}",
        GOOD.lines().skip(2).collect::<Vec<_>>().join("\n")
    );
    let e = rubric_error(&dup);
    assert!(e.contains("appears twice"), "{e}");
}

#[test]
fn rubric_for_another_exercise_is_rejected() {
    let e = rubric_error(&GOOD.replace("exercise: 04-checkpoint", "exercise: 05-compile"));
    assert!(e.starts_with("FILE:1:1:"), "{e}");
}

// ------------------------------------------------------------------------------- via the binary

/// A throwaway course root: the real one's files, with edits.
fn course_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for rel in [
        "exercises/04-checkpoint/exercise.yaml",
        "exercises/04-checkpoint/scenario.py",
        "exercises/04-checkpoint/exercise.py",
        "exercises/course/__init__.py",
        "exercises/course/model.py",
        "rubrics/04-checkpoint.yaml",
        "solutions/04-checkpoint/exercise.py",
        "course.yaml", // the course's Python (its policy)
    ] {
        let to = dir.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root().join(rel), to).unwrap();
    }
    dir
}

fn grade(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(args)
        .env("GRADE_ROOT", root)
        .env("GRADE_PYTHON", self::root().join(".venv/bin/python"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn malformed_rubric_exits_2_with_file_line_column() {
    let course = course_copy();
    let path = course.path().join("rubrics/04-checkpoint.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("points: 2", "points: two", 1)).unwrap();
    let (code, stdout, stderr) = grade(course.path(), &["exercise", "04-checkpoint", "--solution"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    let line = text.lines().position(|l| l.contains("points: 2")).unwrap() + 1;
    let want = format!("{}:{line}:", path.display());
    assert!(stderr.contains(&want), "want {want} in: {stderr}");
    assert!(stderr.contains("points"), "{stderr}");
}

#[test]
fn malformed_exercise_yaml_exits_2() {
    let course = course_copy();
    let path = course.path().join("exercises/04-checkpoint/exercise.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("n_heads: 4", "n_heads: 5")).unwrap();
    let (code, _, stderr) = grade(course.path(), &["exercise", "04-checkpoint", "--solution"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("must be divisible by model.n_heads"),
        "{stderr}"
    );
    assert!(stderr.contains("exercise.yaml:"), "{stderr}");
}

#[test]
fn missing_submission_exits_2_with_a_hint() {
    let course = course_copy();
    std::fs::remove_file(course.path().join("exercises/04-checkpoint/exercise.py")).unwrap();
    let (code, _, stderr) = grade(course.path(), &["exercise", "04-checkpoint"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("submission not found"), "{stderr}");
    let (code, _, stderr) = grade(
        course.path(),
        &[
            "exercise",
            "04-checkpoint",
            "--submission",
            "/nonexistent/x.py",
        ],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("/nonexistent/x.py"), "{stderr}");
}

#[test]
fn unknown_exercises_exit_2_naming_the_lessons_found() {
    let (code, _, stderr) = grade(&root(), &["exercise", "07-nope"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("01-metrics 02-profiler 03-memory 04-checkpoint 05-compile 06-sync"),
        "{stderr}"
    );
    // a copy of the course with only lesson 04: lesson 01 is not a lesson of it
    let course = course_copy();
    let (code, _, stderr) = grade(course.path(), &["exercise", "01-metrics"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown exercise `01-metrics`; known exercises: 04-checkpoint."),
        "{stderr}"
    );
}

/// Lessons are found on disk (issue 23): a folder with `exercise.yaml` is a lesson, one without
/// is not; `course.yaml` orders them and titles the course; a malformed `exercise.yaml` is
/// reported by `grade list` (not fatal) and is exit 2 at file:line:column when it is named.
#[test]
fn lessons_are_discovered_and_ordered_by_course_yaml() {
    let course = course_copy();
    let p = course.path();
    std::fs::create_dir_all(p.join("exercises/00-notes")).unwrap(); // no exercise.yaml
    std::fs::create_dir_all(p.join("exercises/02-broken")).unwrap();
    std::fs::write(
        p.join("exercises/02-broken/exercise.yaml"),
        "id: 02-broken\ntitle: [oops\n",
    )
    .unwrap();
    std::fs::write(
        p.join("course.yaml"),
        "title: {zh: 测试课程, en: A test course}\norder: [04-checkpoint]\n",
    )
    .unwrap();
    let (code, stdout, _) = grade(p, &["list"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.starts_with("测试课程  /  A test course"), "{stdout}");
    let at = |id: &str| stdout.find(id).unwrap_or(usize::MAX);
    assert!(
        at("04-checkpoint") < at("02-broken"),
        "course.yaml's order: {stdout}"
    );
    assert!(!stdout.contains("00-notes"), "{stdout}");
    assert!(
        stdout.contains("02-broken") && stdout.contains("exercise.yaml:2:"),
        "{stdout}"
    );
    let (code, _, stderr) = grade(p, &["exercise", "02-broken"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("exercises/02-broken/exercise.yaml:2:"),
        "{stderr}"
    );
    std::fs::write(p.join("course.yaml"), "order: 3\n").unwrap();
    let (code, _, stderr) = grade(p, &["list"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("course.yaml:1:"), "{stderr}");
}

#[test]
fn missing_python_exits_2_with_a_hint() {
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(["exercise", "04-checkpoint", "--solution"])
        .env("GRADE_ROOT", root())
        .env("GRADE_PYTHON", "/nonexistent/python")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("setup.sh"));
}

#[test]
fn list_shows_all_six_lessons() {
    let (code, stdout, _) = grade(&root(), &["list"]);
    assert_eq!(code, 0);
    for id in [
        "01-metrics",
        "02-profiler",
        "03-memory",
        "04-checkpoint",
        "05-compile",
        "06-sync",
    ] {
        assert!(stdout.contains(id), "{stdout}");
    }
    assert!(stdout.contains("激活检查点"), "{stdout}");
}

#[test]
fn help_documents_exit_codes() {
    let (code, stdout, _) = grade(&root(), &["exercise", "--help"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("Exit codes") && stdout.contains("could not grade"),
        "{stdout}"
    );
}

#[test]
fn python_without_torch_exits_2() {
    // a fresh venv has no torch: the grader cannot grade (2); the submission is not failed (1)
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(["exercise", "04-checkpoint", "--solution"])
        .env("GRADE_ROOT", root())
        .env("GRADE_PYTHON", dir.path().join("bin/python"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("No module named"), "{stderr}");
}

#[test]
fn device_cuda_grades_where_cuda_exists_and_exits_2_elsewhere() {
    let (code, stdout, stderr) = grade(
        &root(),
        &[
            "exercise",
            "04-checkpoint",
            "--solution",
            "--device",
            "cuda",
        ],
    );
    if tch::Cuda::is_available() {
        assert_eq!(code, 0, "{stdout}{stderr}");
    } else {
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert!(stderr.contains("CUDA is not available"), "{stderr}");
    }
}

/// `pictures:` of exercise.yaml (a lesson's pictures as data) is validated when the lesson loads:
/// an unknown picture kind and a malformed entry are spec errors at `file:line:column` (exit 2).
#[test]
fn bad_pictures_exit_2_located() {
    let course = course_copy();
    let path = course.path().join("exercises/04-checkpoint/exercise.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let line_of = |t: &str, needle: &str| t.lines().position(|l| l.contains(needle)).unwrap() + 1;
    // an unknown kind: serde names the kinds there are
    let bad = text.replacen("  - bars:", "  - pie:", 1);
    std::fs::write(&path, &bad).unwrap();
    let (code, stdout, stderr) = grade(course.path(), &["exercise", "04-checkpoint", "--solution"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    let want = format!("{}:{}:", path.display(), line_of(&bad, "  - pie:"));
    assert!(stderr.contains(&want), "want {want} in: {stderr}");
    for kind in [
        "unknown variant `pie`",
        "bars",
        "points",
        "ranked",
        "sweep",
        "break_even",
    ] {
        assert!(stderr.contains(kind), "{kind} in: {stderr}");
    }
    // a well-formed entry that cannot be drawn: the second picture's series `yours` has no
    // value; located at `yours` inside that entry, not at the first picture's `yours`
    let bad = text.replacen(", value: \"compare.run1.{category}.step_s\"", "", 1);
    assert_ne!(bad, text);
    std::fs::write(&path, &bad).unwrap();
    let e = Exercise::load(path.parent().unwrap()).unwrap_err();
    let line = bad
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("key: yours"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("exercise.yaml:{line}:")),
        "line {line}: {msg}"
    );
    assert!(
        msg.contains("pictures[1]: bars: no value for category `off`, series `yours`"),
        "{msg}"
    );
    assert_eq!(e.exit_code(), 2);
}

/// The course's Python is the course's to define (deny by default): a course whose course.yaml has
/// no `policy:` cannot grade (exit 2 at course.yaml), rather than refuse every import.
#[test]
fn a_course_without_a_policy_exits_2_naming_course_yaml() {
    let course = course_copy();
    std::fs::write(
        course.path().join("course.yaml"),
        "order: [04-checkpoint]\n",
    )
    .unwrap();
    let (code, _, stderr) = grade(course.path(), &["exercise", "04-checkpoint", "--solution"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("course.yaml") && stderr.contains("no `policy:`"),
        "{stderr}"
    );
}
