//! The harness every `tests/lesson_0N.rs` shares: a lesson's spec, its recorded observations
//! graded in pure Rust, its `expected.yaml`, and ONE `grade check ID` run of the real binary (the
//! solution, the starter and every fixture, graded on the warm interpreter one per core) whose
//! reports all the end-to-end tests of the binary read. A lesson's test file holds only what is
//! particular to that lesson.
use grade::checks::{self, Env, Status, Verdict};
use grade::observations::{Evidence, Observations};
use grade::runner::Device;
use grade::spec::{Exercise, Rubric};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The course folder of this checkout.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One lesson of the course, by id.
pub struct Lesson(pub &'static str);

impl Lesson {
    pub fn exercise(&self) -> Exercise {
        Exercise::load(&root().join("exercises").join(self.0)).unwrap()
    }

    pub fn rubric(&self, ex: &Exercise) -> Rubric {
        Rubric::load(&root().join(format!("rubrics/{}.yaml", self.0)), ex).unwrap()
    }

    /// `tests/recorded/ID.NAME.json` (observations dumped by `--dump-observations`).
    pub fn recorded(&self, name: &str) -> Observations {
        let path = root().join(format!("tests/recorded/{}.{name}.json", self.0));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// Every criterion's verdict on recorded observations (no tensors: criteria judged on
    /// tensors fail there), judged as on CPU.
    pub fn grade_obs(&self, obs: Observations) -> Vec<Verdict> {
        self.grade_obs_with(&self.exercise(), obs)
    }

    /// As `grade_obs`, with this exercise spec (a model drawn for the recording's seed, …).
    pub fn grade_obs_with(&self, ex: &Exercise, obs: Observations) -> Vec<Verdict> {
        self.grade_evidence(ex, obs, BTreeMap::new())
    }

    /// As `grade_obs_with`, with these tensors beside the recorded observations.
    pub fn grade_evidence(
        &self,
        ex: &Exercise,
        obs: Observations,
        tensors: BTreeMap<String, tch::Tensor>,
    ) -> Vec<Verdict> {
        let r = self.rubric(ex);
        let ev = Evidence {
            obs,
            tensors,
            run_failure: None,
        };
        checks::grade(
            &r,
            &Env {
                evidence: &ev,
                exercise: ex,
            },
            Device::Cpu,
        )
    }

    /// `tests/fixtures/ID/expected.yaml`: the criteria each submission fails on CPU (an entry is
    /// a list, `{fail: [...], cpu: [...], cuda: [...]}`, or `refused`: all of them), sorted.
    pub fn expected(&self) -> BTreeMap<String, Vec<String>> {
        let path = root().join(format!("tests/fixtures/{}/expected.yaml", self.0));
        let raw: BTreeMap<String, serde_yaml::Value> =
            serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let list = |v: &serde_yaml::Value| -> Vec<String> {
            v.as_sequence()
                .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        let ex = self.exercise();
        // `refused`: the course's Python refuses it before it runs, so every criterion that
        // applies on CPU fails
        let every: Vec<String> = self
            .rubric(&ex)
            .criteria
            .iter()
            .filter(|c| c.only_on != Some(grade::spec::rubric::OnlyOn::Cuda))
            .map(|c| c.id.clone())
            .collect();
        raw.into_iter()
            .map(|(k, v)| {
                let mut ids = if v.as_str() == Some("refused") {
                    every.clone()
                } else if v.is_sequence() {
                    list(&v)
                } else {
                    let mut ids = list(&v["fail"]);
                    ids.extend(list(&v["cpu"]));
                    ids
                };
                ids.sort();
                (k, ids)
            })
            .collect()
    }

    /// `grade exercise ID --format json` of one file (a cold run of its own): exit code, report.
    pub fn grade_file(&self, submission: &Path) -> (i32, Value) {
        self.grade_file_with(submission, &[])
    }

    /// As `grade_file`, with `extra` arguments (`--seed`, `--timeout`, …).
    pub fn grade_file_with(&self, submission: &Path, extra: &[&str]) -> (i32, Value) {
        self.grade_file_env(submission, extra, &[])
    }

    /// As `grade_file_with`, with `env` set for the grader (`GRADE_POLICY=off`).
    pub fn grade_file_env(
        &self,
        submission: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> (i32, Value) {
        let out = Command::new(env!("CARGO_BIN_EXE_grade"))
            .args(["exercise", self.0, "--format", "json", "--submission"])
            .arg(submission)
            .args(extra)
            .env("GRADE_ROOT", root())
            .env_remove("GRADE_PYTHON")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), report)
    }

    /// The one `grade check ID --device cpu --format json` of this test binary (graded on first
    /// use, shared by every test that asks): the solution, the starter and every fixture, each
    /// held by `grade check` itself to its expected.yaml entry, plus the static checks.
    pub fn check(&self) -> &'static Checked {
        static CHECK: OnceLock<Checked> = OnceLock::new();
        let c = CHECK.get_or_init(|| Checked::run(self.0));
        assert_eq!(c.id, self.0, "one lesson's check per test binary");
        c
    }
}

/// Failing criteria of a verdict list, sorted.
pub fn failing(vs: &[Verdict]) -> Vec<String> {
    let mut f: Vec<String> = vs
        .iter()
        .filter(|v| v.status == Status::Fail)
        .map(|v| v.id.clone())
        .collect();
    f.sort();
    f
}

/// The verdict of criterion `id`.
pub fn verdict<'a>(vs: &'a [Verdict], id: &str) -> &'a Verdict {
    vs.iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("no criterion {id}"))
}

/// Failed criteria of a JSON report, sorted.
pub fn report_failing(report: &Value) -> Vec<String> {
    let mut f: Vec<String> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "FAIL")
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    f.sort();
    f
}

/// Why a JSON report failed: every failed criterion with its reason and measurement, the run's
/// failure and the end of its stderr (for assertion messages).
pub fn explain(report: &Value) -> String {
    let mut lines: Vec<String> = report["verdicts"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["status"] == "FAIL")
                .map(|v| {
                    format!(
                        "FAIL {}: {} [{}]",
                        v["id"], v["why"]["en"], v["measured"]["en"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    lines.push(format!("run_failure: {}", report["run_failure"]));
    let tail = report["stderr_tail"].as_str().unwrap_or("");
    let tail: Vec<&str> = tail.lines().rev().take(8).collect();
    lines.extend(tail.into_iter().rev().map(|l| format!("stderr: {l}")));
    lines.join("\n")
}

/// The reason (English) criterion `id` of a JSON report gives.
pub fn why(report: &Value, id: &str) -> String {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no criterion {id}"))["why"]["en"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A `grade check ID` run: its exit code and JSON.
pub struct Checked {
    pub id: &'static str,
    pub code: i32,
    pub json: Value,
}

impl Checked {
    fn run(id: &'static str) -> Checked {
        let out = Command::new(env!("CARGO_BIN_EXE_grade"))
            .args([
                "check", id, "--device", "cpu", "--format", "json", "--lang", "en",
            ])
            .env("GRADE_ROOT", root())
            .env_remove("GRADE_PYTHON")
            .env_remove("GRADE_COMPILE_CACHE")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        Checked {
            id,
            code: out.status.code().unwrap_or(-1),
            json: serde_json::from_str(&stdout).unwrap_or_else(|e| {
                panic!(
                    "not JSON ({e}): {stdout}\nstderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            }),
        }
    }

    /// The lesson's part of the check (`exercises[0]`).
    pub fn lesson(&self) -> &Value {
        &self.json["exercises"][0]
    }

    /// Every graded submission (solution, starter, fixtures) by name.
    pub fn submissions(&self) -> BTreeMap<String, &Value> {
        self.lesson()["submissions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["name"].as_str().unwrap().to_string(), s))
            .collect()
    }

    /// The report of submission `name`.
    pub fn report(&self, name: &str) -> &Value {
        let subs = self.submissions();
        &subs
            .get(name)
            .unwrap_or_else(|| panic!("{name} was not graded by grade check {}", self.id))["report"]
    }

    /// The check's surprises of these parts (`solution`, `starter`, `fixtures`, `coverage`),
    /// each with the evidence that shows it.
    pub fn surprises(&self, parts: &[&str]) -> Vec<String> {
        self.lesson()["surprises"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| parts.iter().any(|p| s["part"] == *p))
            .map(|s| {
                let mut lines = vec![s["message"]["en"].as_str().unwrap().to_string()];
                for e in s["evidence"].as_array().into_iter().flatten() {
                    lines.push(format!("  | {}", e["en"].as_str().unwrap_or("")));
                }
                lines.join("\n")
            })
            .collect()
    }

    /// Every submission failed exactly its expected.yaml criteria (each explained when not), every
    /// file of the fixture folder and every expected.yaml entry was graded, no surprise of any
    /// part, `unprovable` is as given (criteria that need CUDA), exit 0. Returns each
    /// submission's verdict table (`id  STATUS`), for the caller to snapshot with insta as
    /// `ID__NAME` (the snapshot files live beside the caller).
    pub fn assert_proves_the_lesson(&self, unprovable: &[&str]) -> Vec<(String, String)> {
        let subs = self.submissions();
        let mut wrong = Vec::new();
        for (name, s) in &subs {
            if !s["as_expected"].as_bool().unwrap_or(false) {
                wrong.push(format!(
                    "{name}: failed {} but expected {}\n{}",
                    s["failed"],
                    s["expected_failures"],
                    explain(&s["report"])
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
        // the gate (issue 37): the starter earns nothing, and neither does a submission the course's
        // Python refused or whose instruments were tampered with, whatever else it passed
        for (name, s) in &subs {
            let gated = s["failed"]
                .as_array()
                .is_some_and(|f| f.iter().any(|c| c == "instruments_intact"));
            if *name == "starter" || gated {
                assert_eq!(
                    s["report"]["summary"]["points"], 0,
                    "{name} must score 0 (starter, or the gate failed)"
                );
            }
            // a fixture that marks the line the course's Python refuses: the gate names that line
            let file = root().join(s["path"].as_str().unwrap_or_default());
            let source = std::fs::read_to_string(&file).unwrap_or_default();
            if let Some(i) = source.lines().position(|l| l.contains("# REFUSED")) {
                let reason = why(&s["report"], "instruments_intact");
                assert!(
                    reason.contains(&format!("line {}:", i + 1)),
                    "{name}: the gate must name line {}: {reason}",
                    i + 1
                );
            }
        }
        let expected = Lesson(self.id).expected();
        assert_eq!(
            subs.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "the solution, the starter and every fixture graded, one per expected.yaml entry"
        );
        let surprises = self.surprises(&["solution", "starter", "fixtures", "coverage"]);
        assert!(surprises.is_empty(), "{}", surprises.join("\n"));
        assert_eq!(
            self.lesson()["unprovable"],
            serde_json::json!(unprovable),
            "criteria that cannot be shown on CPU"
        );
        assert_eq!(self.code, 0, "grade check {} exit code", self.id);
        subs.iter()
            .map(|(name, s)| {
                (
                    name.clone(),
                    super::verdict_table_with(&s["report"], &s["either"]),
                )
            })
            .collect()
    }
}

/// A list of criterion ids, sorted (what `expected()` gives is sorted).
pub fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A rubric check written as YAML (`{ratio: {num: a, den: b, min: 1}}`), read as a rubric's
/// `check:` is.
pub fn check(yaml: &str) -> grade::spec::rubric::Check {
    #[derive(serde::Deserialize)]
    struct W {
        #[serde(with = "serde_yaml::with::singleton_map_recursive")]
        check: grade::spec::rubric::Check,
    }
    serde_yaml::from_str::<W>(&format!("check: {yaml}"))
        .unwrap()
        .check
}

impl Lesson {
    /// The error loading this lesson's rubric gives when it holds one criterion whose `check:`
    /// is this YAML (a rubric's spec errors, tested per check kind).
    pub fn rubric_error(&self, check_yaml: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.yaml");
        let id = self.0;
        let text = format!(
            "exercise: {id}\ncriteria:\n  - id: x\n    title: {{zh: x, en: x}}\n    check: {check_yaml}\n"
        );
        std::fs::write(&path, text).unwrap();
        Rubric::load(&path, &self.exercise())
            .unwrap_err()
            .to_string()
    }
}
