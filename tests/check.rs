//! `grade check` on a copy of the course with one thing broken: each break must be reported
//! (exit 1, naming the file and the criterion) or refused (exit 2 with `file:line:column`).
//! To stay cheap, runs grade only the submission the break concerns (`--only`); the static
//! checks (expected.yaml, coverage, common mistakes) always run in full.
mod support;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const EX: &str = "04-checkpoint";

/// A throwaway course: the real course.yaml, exercises, solutions, rubrics and lesson fixtures.
struct CourseCopy(tempfile::TempDir);

impl CourseCopy {
    fn new() -> CourseCopy {
        let dir = tempfile::tempdir().unwrap();
        for rel in [
            "exercises",
            "solutions",
            "rubrics",
            "tests/fixtures/04-checkpoint",
        ] {
            support::copy_dir(&root().join(rel), &dir.path().join(rel));
        }
        // the course's Python (its policy) lives in course.yaml
        std::fs::copy(root().join("course.yaml"), dir.path().join("course.yaml")).unwrap();
        CourseCopy(dir)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.path().join(rel)
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }
    /// Rewrite a file with `edit`, which must change it.
    fn edit(&self, rel: &str, edit: impl FnOnce(&str) -> String) {
        let before = self.read(rel);
        let after = edit(&before);
        assert_ne!(before, after, "the edit of {rel} changed nothing");
        std::fs::write(self.path(rel), after).unwrap();
    }
    /// Rewrite the lines of `rel` that start with `prefix`.
    fn edit_lines(&self, rel: &str, prefix: &str, f: impl Fn(&str) -> String) {
        self.edit(rel, |t| {
            t.lines()
                .map(|l| {
                    if l.starts_with(prefix) {
                        f(l)
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
    fn check(&self, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_grade"))
            .arg("check")
            .args(args)
            .env("GRADE_ROOT", self.0.path())
            .env("GRADE_PYTHON", root().join(".venv/bin/python"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The check could not run (exit 2) and said `want` on stderr.
    fn assert_refused(&self, want: &str) {
        assert_eq!(self.code, 2, "{}{}", self.stdout, self.stderr);
        assert!(
            self.stderr.contains(want),
            "want {want:?} in:\n{}",
            self.stderr
        );
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
    /// The surprises whose part is `part` and which concern `criterion`.
    fn surprises(&self, part: &str, criterion: &str) -> Vec<Value> {
        self.json()["exercises"][0]["surprises"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["part"] == part
                    && s["criteria"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|c| c == criterion)
            })
            .cloned()
            .collect()
    }
}

/// 1-based line and column of `needle` in the first line of `text` that `pick` picks.
fn locate(text: &str, pick: impl Fn(&str) -> bool, needle: &str) -> (usize, usize) {
    let (i, l) = text.lines().enumerate().find(|(_, l)| pick(l)).unwrap();
    (i + 1, l.find(needle).unwrap() + 1)
}

/// Lines of `text` with the block of `- id: ID` (up to the next `- id:`) passed through `f`.
fn in_criterion(text: &str, id: &str, f: impl Fn(&str) -> String) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("- id:") {
            inside = line.trim_start() == format!("- id: {id}");
        }
        out.push_str(&if inside { f(line) } else { line.to_string() });
        out.push('\n');
    }
    out
}

#[test]
fn a_broken_bound_fails_the_solution_naming_rubric_and_criterion() {
    let course = CourseCopy::new();
    course.edit("rubrics/04-checkpoint.yaml", |t| {
        in_criterion(t, "activation_bytes_halved", |l| {
            l.replace("max: 0.5", "max: 0.0001")
        })
    });
    let run = course.check(&[EX, "--only", "solution", "--lang", "en"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    for want in [
        "surprise 1/",
        "the reference solution solutions/04-checkpoint/exercise.py (run 1, seed ",
        "fails `activation_bytes_halved`: the solution or the bound in rubrics/04-checkpoint.yaml is wrong",
        "│ ✘ activation_bytes_halved: ",
        "bound ≤ 1.000e-4",
        "total run time",
    ] {
        assert!(run.stdout.contains(want), "want {want:?} in:\n{}", run.stdout);
    }
    assert!(
        run.stderr
            .contains("[1/1] 04-checkpoint · solution · ✘ surprise"),
        "{}",
        run.stderr
    );
}

#[test]
fn deleting_an_expected_criterion_is_a_surprise_naming_expected_yaml() {
    let course = CourseCopy::new();
    course.edit_lines(
        "tests/fixtures/04-checkpoint/expected.yaml",
        "ckpt_in_inference:",
        |_| "ckpt_in_inference: []".into(),
    );
    let run = course.check(&[EX, "--only", "ckpt_in_inference", "--format", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let s = run.surprises("fixtures", "no_checkpoint_in_inference");
    assert_eq!(s.len(), 1, "{}", run.stdout);
    let msg = s[0]["message"]["en"].as_str().unwrap();
    assert!(
        msg.contains("tests/fixtures/04-checkpoint/ckpt_in_inference.py (run 1, seed ")
            && msg.contains("fails `no_checkpoint_in_inference`, which tests/fixtures/04-checkpoint/expected.yaml does not list for `ckpt_in_inference`"),
        "{msg}"
    );
    let evidence = s[0]["evidence"].to_string();
    assert!(
        evidence.contains("✘ no_checkpoint_in_inference: "),
        "{evidence}"
    );
    // the tampering fixture `unwrapped_counter` still fails it (it fails every criterion), so the
    // criterion is still shown to work: no coverage surprise
    assert_eq!(
        run.surprises("coverage", "no_checkpoint_in_inference")
            .len(),
        0
    );
}

#[test]
fn a_criterion_no_fixture_fails_is_a_surprise_naming_it() {
    let course = CourseCopy::new();
    course.edit("rubrics/04-checkpoint.yaml", |t| {
        let copy = in_criterion(t, "no_checkpoint_in_inference", |l| l.to_string())
            .lines()
            .skip_while(|l| l.trim_start() != "- id: no_checkpoint_in_inference")
            .take_while(|l| !l.is_empty())
            .map(|l| l.replace("id: no_checkpoint_in_inference", "id: never_failed"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(copy.contains("check:"), "{copy}");
        format!("{t}\n{copy}\n")
    });
    let run = course.check(&[EX, "--only", "starter", "--format", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let s = run.surprises("coverage", "never_failed");
    assert_eq!(s.len(), 1, "{}", run.stdout);
    assert!(
        s[0]["message"]["en"].as_str().unwrap().starts_with(
            "rubrics/04-checkpoint.yaml: criterion `never_failed` is failed by no fixture"
        ),
        "{}",
        s[0]
    );
}

#[test]
fn unknown_criterion_in_expected_yaml_exits_2_at_its_line_and_column() {
    let course = CourseCopy::new();
    let rel = "tests/fixtures/04-checkpoint/expected.yaml";
    course.edit_lines(rel, "ckpt_in_inference:", |l| {
        l.replace("no_checkpoint_in_inference", "no_checkpoint_in_inferenc3")
    });
    let (line, column) = locate(
        &course.read(rel),
        |l| l.starts_with("ckpt_in_inference:"),
        "no_checkpoint_in_inferenc3",
    );
    let run = course.check(&[EX]);
    run.assert_refused(&format!(
        "{}:{line}:{column}: `ckpt_in_inference`: unknown criterion `no_checkpoint_in_inferenc3`",
        course.path(rel).display(),
    ));
    assert!(
        !run.stderr.contains("gradings"),
        "nothing is graded: {}",
        run.stderr
    );
}

/// `either:` (a verdict left to the grading's draw) names known criteria, none also to fail: each
/// mistake is refused at its line, before anything is graded. (Alone, `{either: [...]}` is an
/// entry that must fail one of them: `selftest`'s unit tests.)
#[test]
fn either_in_expected_yaml_is_checked_at_its_line() {
    let rel = "tests/fixtures/04-checkpoint/expected.yaml";
    let cases: [(&str, &str); 2] = [
        (
            "{fail: [one_checkpoint_per_block], either: [activation_bytes_halvd]}",
            "`ckpt_in_inference`: unknown criterion `activation_bytes_halvd` under `either:`",
        ),
        (
            "{fail: [one_checkpoint_per_block], either: [one_checkpoint_per_block]}",
            "`ckpt_in_inference`: `one_checkpoint_per_block` is both to fail and `either:`",
        ),
    ];
    for (entry, want) in cases {
        let course = CourseCopy::new();
        course.edit_lines(rel, "ckpt_in_inference:", |_| {
            format!("ckpt_in_inference: {entry}")
        });
        let run = course.check(&[EX]);
        run.assert_refused(want);
        assert!(
            !run.stderr.contains("gradings"),
            "nothing is graded: {}",
            run.stderr
        );
    }
}

#[test]
fn fixtures_and_entries_must_match_one_to_one() {
    let course = CourseCopy::new();
    let dir = "tests/fixtures/04-checkpoint";
    std::fs::write(course.path(&format!("{dir}/stray.py")), "").unwrap();
    course.check(&[EX]).assert_refused(&format!(
        "expected.yaml:1:1: {dir}/stray.py has no entry; add `stray: [criteria it must fail]`"
    ));
    std::fs::remove_file(course.path(&format!("{dir}/stray.py"))).unwrap();
    std::fs::remove_file(course.path(&format!("{dir}/ckpt_in_inference.py"))).unwrap();
    let (line, column) = locate(
        &course.read(&format!("{dir}/expected.yaml")),
        |l| l.starts_with("ckpt_in_inference:"),
        "ckpt_in_inference:",
    );
    course.check(&[EX]).assert_refused(&format!(
        "expected.yaml:{line}:{column}: `ckpt_in_inference` is listed but {dir}/ckpt_in_inference.py does not exist"
    ));
}

#[test]
fn common_mistakes_must_be_quoted_from_the_readme_and_cover_it() {
    let course = CourseCopy::new();
    let yaml = "exercises/04-checkpoint/exercise.yaml";
    course.edit(yaml, |t| t.replace("{zh: 没有预热,", "{zh: 不预热,"));
    let run = course.check(&[EX, "--only", "starter", "--format", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let all = run.json()["exercises"][0]["surprises"].to_string();
    assert!(
        all.contains(&format!(
            "{yaml}: the mistakes entry `不预热` (no warm-up) does not occur"
        )),
        "{all}"
    );
    assert!(
        all.contains(
            "exercises/04-checkpoint/README.md: the common mistake `没有预热` maps to no criterion"
        ),
        "{all}"
    );
    // a criterion id the rubric does not have: the check cannot run, and says where
    course.edit(yaml, |t| {
        t.replace("criteria: [compare_warmup]", "criteria: [compare_warmpu]")
    });
    let (line, column) = locate(
        &course.read(yaml),
        |l| l.contains("compare_warmpu"),
        "compare_warmpu",
    );
    course.check(&[EX]).assert_refused(&format!(
        "exercise.yaml:{line}:{column}: mistakes: `不预热` maps to unknown criterion `compare_warmpu`"
    ));
}

#[test]
fn a_starter_that_passes_is_a_surprise() {
    let course = CourseCopy::new();
    std::fs::copy(
        course.path("solutions/04-checkpoint/exercise.py"),
        course.path("exercises/04-checkpoint/exercise.py"),
    )
    .unwrap();
    let run = course.check(&[EX, "--only", "starter", "--format", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let s: Vec<Value> = run.json()["exercises"][0]["surprises"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["part"] == "starter")
        .cloned()
        .collect();
    assert_eq!(s.len(), 1, "{s:?}");
    let msg = s[0]["message"]["en"].as_str().unwrap();
    // (not asserting "passes every criterion": a timing criterion may flake under test load)
    assert!(
        msg.contains("exercises/04-checkpoint/exercise.py (run 1, seed "),
        "{msg}"
    );
    assert!(
        msg.contains("passes `on_off_agree`, `matches_reference`"),
        "{msg}"
    );
    assert!(
        msg.contains("which tests/fixtures/04-checkpoint/expected.yaml says `starter` must fail"),
        "{msg}"
    );
}

#[test]
fn runs_and_jobs_grade_each_submission_n_times_concurrently() {
    let course = CourseCopy::new();
    let run = course.check(&[
        EX, "--only", "starter", "--runs", "3", "--jobs", "2", "--format", "json",
    ]);
    assert_ne!(run.code, 2, "{}", run.stderr);
    let j = run.json();
    assert_eq!((j["runs"].as_u64(), j["jobs"].as_u64()), (Some(3), Some(2)));
    let subs = j["exercises"][0]["submissions"].as_array().unwrap();
    let runs: Vec<u64> = subs.iter().map(|s| s["run"].as_u64().unwrap()).collect();
    assert_eq!(runs, [1, 2, 3]);
    let seeds: std::collections::BTreeSet<u64> = subs
        .iter()
        .map(|s| s["report"]["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds.len(), 3, "each run draws its own seed");
    assert!(
        subs.iter().all(|s| s["as_expected"] == true),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("[3/3] 04-checkpoint · starter #"),
        "{}",
        run.stderr
    );
}

#[test]
fn only_rejects_unknown_names() {
    CourseCopy::new()
        .check(&[EX, "--only", "nope"])
        .assert_refused("--only nope: no such submission; choose from: solution, starter, ");
}

#[test]
fn readme_mistakes_split_at_separators_and_or() {
    let readme = "# L\n### 常见错误 / Common mistakes\n\n- 甲；乙;丙。\n- 排查时只看丁，没有戊、己或庚。\n\n> - English: not items\n### 下一节\n- 不算\n";
    let (_, items) = grade::selftest::coverage::mistake_items(readme).unwrap();
    assert_eq!(
        items,
        ["甲", "乙", "丙", "排查时只看丁", "没有戊", "己", "庚"]
    );
    assert!(grade::selftest::coverage::mistake_items("# no section\n- 甲\n").is_none());
}

#[test]
fn expectations_may_differ_by_device() {
    let course = CourseCopy::new();
    let rel = "tests/fixtures/04-checkpoint/expected.yaml";
    // on CPU the `cpu:` list applies and the `cuda:` list does not
    course.edit_lines(rel, "ckpt_in_inference:", |_| {
        "ckpt_in_inference: {fail: [no_checkpoint_in_inference], cpu: [compare_sync], cuda: [peak_memory_drops]}".into()
    });
    let run = course.check(&[
        EX,
        "--device",
        "cpu",
        "--only",
        "ckpt_in_inference",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let s = run.surprises("fixtures", "compare_sync");
    assert_eq!(s.len(), 1, "{}", run.stdout);
    assert!(s[0]["message"]["en"].as_str().unwrap().contains("passes `compare_sync`, which tests/fixtures/04-checkpoint/expected.yaml says `ckpt_in_inference` must fail"));
    assert_eq!(s[0]["criteria"], serde_json::json!(["compare_sync"]));
    assert!(run.surprises("coverage", "peak_memory_drops").is_empty());
    // an unknown key is refused where it stands
    course.edit_lines(rel, "ckpt_in_inference:", |_| {
        "ckpt_in_inference: {fails: [compare_sync]}".into()
    });
    let (line, column) = locate(
        &course.read(rel),
        |l| l.starts_with("ckpt_in_inference:"),
        "fails",
    );
    course.check(&[EX]).assert_refused(&format!(
        "expected.yaml:{line}:{column}: ckpt_in_inference: unknown field `fails`, expected one of `fail`, `cpu`, `cuda`"
    ));
}

#[test]
fn a_fixture_wrong_elsewhere_is_not_held_to_timing_bands_it_does_not_list() {
    let course = CourseCopy::new();
    let rubric = "rubrics/04-checkpoint.yaml";
    // a timing band that now fails every submission
    course.edit(rubric, |t| {
        in_criterion(t, "step_time_cost", |l| l.replace("min: 0.9", "min: 1000"))
    });
    let run = course.check(&[
        EX,
        "--only",
        "no_sync",
        "--only",
        "chained_timestamps",
        "--format",
        "json",
        "--lang",
        "en",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let j = run.json();
    let subs: std::collections::BTreeMap<String, &Value> = j["exercises"][0]["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s))
        .collect();
    // wrong elsewhere (compare_sync): the band's failure is reported, not a surprise
    let no_sync = subs["no_sync"];
    assert_eq!(no_sync["as_expected"], true, "{}", run.stdout);
    assert_eq!(
        no_sync["either"],
        serde_json::json!(["step_time_cost", "compare_time_agrees"])
    );
    assert_eq!(
        no_sync["failed"],
        serde_json::json!(["step_time_cost", "compare_sync"])
    );
    assert!(
        run.stderr.contains(
            "no_sync · ✔ as expected; also failed timing band step_time_cost (wrong elsewhere: not held to it)"
        ),
        "{}",
        run.stderr
    );
    // a correct submission is held to every band
    assert!(subs["chained_timestamps"].get("either").is_none());
    let s = run.surprises("fixtures", "step_time_cost");
    assert_eq!(s.len(), 1, "{}", run.stdout);
    assert_eq!(s[0]["submission"], "chained_timestamps");
    // without `band: true` the same failure of no_sync is a surprise
    course.edit(rubric, |t| {
        in_criterion(t, "step_time_cost", |l| {
            if l.trim_start().starts_with("band: true") {
                String::new()
            } else {
                l.to_string()
            }
        })
    });
    let run = course.check(&[EX, "--only", "no_sync", "--format", "json", "--lang", "en"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let s = run.surprises("fixtures", "step_time_cost");
    assert_eq!(s.len(), 1, "{}", run.stdout);
    assert!(s[0]["message"]["en"]
        .as_str()
        .unwrap()
        .contains("fails `step_time_cost`, which tests/fixtures/04-checkpoint/expected.yaml does not list for `no_sync`"));
}
