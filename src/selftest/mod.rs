//! `grade check` (the course's self-test; the rubric's check kinds are `src/checks/`): the course
//! proves itself. For each exercise the reference solution must pass
//! every criterion, the starter must fail with a reason for each failure, every fixture must fail
//! exactly the criteria `expected.yaml` lists for it, and the rubric and the README's common
//! mistakes must be covered (see `coverage`). Anything else is a surprise, reported with the part
//! of the graded report that shows it. Submissions are graded by `pipeline::grade`, in-process.
pub mod coverage;
pub mod expected;
pub mod render;
pub mod surprise;

use crate::course::Course;
use crate::device::Device;
use crate::error::{exit, GradeError};
use crate::i18n::Text;
use crate::pipeline::{self, GradeRequest, Spec};
use crate::report::Report;
use crate::runner::Executor;
use crate::text;
use expected::Expected;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
pub use surprise::{Part, Surprise};

/// What to check and how.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Exercise ids; empty means every available exercise.
    pub ids: Vec<String>,
    /// Grade every submission this many times.
    pub runs: u32,
    /// Submissions graded at once.
    pub jobs: u32,
    /// Grade only these submissions (`solution`, `starter`, fixture stems); empty means all.
    pub only: Vec<String>,
    pub device: Device,
}

/// One submission graded once, and whether it did what it must.
#[derive(Clone, Debug, Serialize)]
pub struct Graded {
    /// `solution`, `starter` or the fixture's stem.
    pub name: String,
    pub part: Part,
    pub path: String,
    pub run: u32,
    /// Criteria it must fail (those that apply on this device); `None`: any, but at least one.
    pub expected_failures: Option<Vec<String>>,
    /// Timing bands (`band: true`) it is not held to: it is wrong elsewhere and expected.yaml
    /// does not list them, so either verdict is as expected (the verdict is still reported);
    /// and the criteria its expected.yaml entry names `either:` (a verdict left to the draw).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub either: Vec<String>,
    pub failed: Vec<String>,
    pub as_expected: bool,
    /// Grading time (workload, run, reference, checks).
    pub seconds: f64,
    pub report: Report,
}

impl Graded {
    /// The timing bands it failed without being held to them (see `either`).
    pub fn bands_failed(&self) -> Vec<String> {
        self.either
            .iter()
            .filter(|c| self.failed.contains(c))
            .cloned()
            .collect()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ExerciseCheck {
    pub id: String,
    pub title: Text,
    pub submissions: Vec<Graded>,
    /// Criteria that do not apply on this device, so no fixture can prove them here.
    pub unprovable: Vec<String>,
    /// Sum of the grading times of its submissions.
    pub seconds: f64,
    pub surprises: Vec<Surprise>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub device: String,
    pub runs: u32,
    pub jobs: u32,
    /// `--only`: the submissions graded (empty: all of them).
    pub only: Vec<String>,
    pub exercises: Vec<ExerciseCheck>,
    pub surprises: usize,
    /// Wall-clock time of the whole check.
    pub total_s: f64,
}

impl CheckReport {
    pub fn exit_code(&self) -> i32 {
        if self.surprises == 0 {
            exit::PASS
        } else {
            exit::FAIL
        }
    }
}

/// Progress, for the caller to show.
pub enum Event<'a> {
    Start {
        submissions: usize,
        jobs: u32,
    },
    Graded {
        done: usize,
        total: usize,
        graded: &'a Graded,
        runs: u32,
    },
}

/// One submission to grade once.
struct Job {
    exercise: usize,
    name: String,
    part: Part,
    path: PathBuf,
    run: u32,
    expected: Option<Vec<String>>,
    /// See `Graded::either`.
    either: Vec<String>,
    /// An entry of `either:` alone (no `fail:`): at least one of these must fail.
    one_of: Vec<String>,
}

struct Prepared {
    spec: Spec,
    expected: Expected,
    coverage: coverage::Coverage,
}

/// Check the exercises. `Err` when the check cannot run (bad YAML, no Python, …): exit 2.
pub fn run(
    course: &Course,
    opts: &CheckOptions,
    executor: &(dyn Executor + Sync),
    progress: &(dyn Fn(Event) + Sync),
) -> Result<CheckReport, GradeError> {
    let start = Instant::now();
    let ids: Vec<String> = if opts.ids.is_empty() {
        course.exercises()?
    } else {
        let mut ids: Vec<String> = Vec::new();
        for id in &opts.ids {
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        ids
    };
    if ids.is_empty() {
        return Err(anyhow::anyhow!(
            "no exercise is available to check (no exercises/*/exercise.yaml)"
        )
        .into());
    }
    // Static checks first: a malformed file stops the check before anything is graded.
    let mut prepared = Vec::new();
    for id in &ids {
        let spec = Spec::load(course, id)?;
        let expected = Expected::load(course, id, &spec.rubric)?;
        let coverage = coverage::check(course, &spec, &expected, opts.device)?;
        prepared.push(Prepared {
            spec,
            expected,
            coverage,
        });
    }
    let jobs = plan(course, &prepared, opts)?;
    progress(Event::Start {
        submissions: jobs.len(),
        jobs: opts.jobs,
    });
    let done = AtomicUsize::new(0);
    let graded = pool(&jobs, opts.jobs as usize, |job| {
        let t = Instant::now();
        let report = pipeline::grade(
            course,
            &GradeRequest {
                id: prepared[job.exercise].spec.exercise.id.clone(),
                submission: job.path.clone(),
                device: opts.device,
                seed: None,
                timeout: None,
                dump_observations: None,
                trusted: true, // the course's own solution, starter and fixtures
            },
            executor,
        )?;
        let g = judge(course, job, report, t.elapsed().as_secs_f64());
        progress(Event::Graded {
            done: done.fetch_add(1, Ordering::SeqCst) + 1,
            total: jobs.len(),
            graded: &g,
            runs: opts.runs,
        });
        Ok(g)
    })?;
    let mut exercises: Vec<ExerciseCheck> = prepared
        .into_iter()
        .map(|p| ExerciseCheck {
            id: p.spec.exercise.id.clone(),
            title: p.spec.exercise.title.clone(),
            submissions: Vec::new(),
            unprovable: p.coverage.unprovable,
            seconds: 0.0,
            surprises: p.coverage.surprises,
        })
        .collect();
    let mut graded_surprises: Vec<Vec<Surprise>> = vec![Vec::new(); exercises.len()];
    for (job, g) in jobs.iter().zip(graded) {
        let ex = &mut exercises[job.exercise];
        if let Some(s) = surprise(course, &ex.id, job, &g) {
            graded_surprises[job.exercise].push(s);
        }
        ex.seconds += g.seconds;
        ex.submissions.push(g);
    }
    for (ex, mut graded) in exercises.iter_mut().zip(graded_surprises) {
        // submissions' surprises first (solution, starter, fixtures), then coverage
        graded.append(&mut ex.surprises);
        ex.surprises = graded;
    }
    Ok(CheckReport {
        device: opts.device.name().into(),
        runs: opts.runs,
        jobs: opts.jobs,
        only: opts.only.clone(),
        surprises: exercises.iter().map(|e| e.surprises.len()).sum(),
        exercises,
        total_s: start.elapsed().as_secs_f64(),
    })
}

/// Every submission × run, in order: solution, starter, fixtures (by name); `--only` applied.
fn plan(
    course: &Course,
    prepared: &[Prepared],
    opts: &CheckOptions,
) -> Result<Vec<Job>, GradeError> {
    let mut all = Vec::new();
    for (i, p) in prepared.iter().enumerate() {
        let id = &p.spec.exercise.id;
        let applicable = |fails: &expected::Fails| -> Vec<String> {
            let ids = fails.on(opts.device);
            p.spec
                .rubric
                .criteria
                .iter()
                .filter(|c| ids.contains(&&c.id) && expected::applies(c, opts.device))
                .map(|c| c.id.clone())
                .collect()
        };
        let job = |name: &str, part, path: &PathBuf, fails: Option<&expected::Fails>| {
            let expected = fails.map(applicable);
            let declared = fails
                .map(|f| f.either_on(opts.device, &p.spec.rubric))
                .unwrap_or_default();
            let one_of = match &expected {
                Some(want) if want.is_empty() => declared.clone(),
                _ => Vec::new(),
            };
            let mut either = expected
                .as_ref()
                .map(|want| {
                    let held = if one_of.is_empty() { want } else { &one_of };
                    expected::bands_not_held(&p.spec.rubric, held, opts.device)
                })
                .unwrap_or_default();
            let may = fails
                .map(|f| f.may_on(opts.device, &p.spec.rubric))
                .unwrap_or_default();
            for c in declared.into_iter().chain(may) {
                if !either.contains(&c) {
                    either.push(c);
                }
            }
            Job {
                exercise: i,
                name: name.into(),
                part,
                path: path.clone(),
                run: 1,
                either,
                one_of,
                expected,
            }
        };
        let pass = expected::Fails::default();
        all.push(job(
            expected::SOLUTION,
            Part::Solution,
            &course.solution(id),
            Some(&pass),
        ));
        all.push(job(
            expected::STARTER,
            Part::Starter,
            &course.starter(id),
            p.expected.starter.as_ref(),
        ));
        for (stem, (path, fails)) in &p.expected.fixtures {
            all.push(job(stem, Part::Fixtures, path, Some(fails)));
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for j in &all {
        if !names.contains(&j.name.as_str()) {
            names.push(&j.name);
        }
    }
    if let Some(bad) = opts.only.iter().find(|n| !names.contains(&n.as_str())) {
        return Err(anyhow::anyhow!(
            "--only {bad}: no such submission; choose from: {}",
            names.join(", ")
        )
        .into());
    }
    let mut jobs = Vec::new();
    for j in all {
        if !opts.only.is_empty() && !opts.only.contains(&j.name) {
            continue;
        }
        if !j.path.is_file() {
            return Err(GradeError::SubmissionMissing {
                path: j.path,
                id: prepared[j.exercise].spec.exercise.id.clone(),
            });
        }
        jobs.extend((1..=opts.runs).map(|run| Job {
            run,
            name: j.name.clone(),
            path: j.path.clone(),
            expected: j.expected.clone(),
            either: j.either.clone(),
            one_of: j.one_of.clone(),
            ..j
        }));
    }
    Ok(jobs)
}

/// Run `f` over `items` on `workers` threads; results in input order. The first error stops
/// the workers from taking new items and is returned.
fn pool<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(&T) -> Result<R, GradeError> + Sync,
) -> Result<Vec<R>, GradeError> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<R, GradeError>>>> =
        Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    if r.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    results.lock().expect("no worker panics holding the lock")[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("no worker panicked")
        .into_iter()
        .flatten()
        .collect()
}

/// Compare a report with what the submission must do.
fn judge(course: &Course, job: &Job, report: Report, seconds: f64) -> Graded {
    let failed: Vec<String> = report
        .verdicts
        .iter()
        .filter(|v| v.status == crate::checks::Status::Fail)
        .map(|v| v.id.clone())
        .collect();
    let (unexpected, missing) = differences(job, &failed);
    let as_expected = unexpected.is_empty()
        && missing.is_empty()
        && (job.part != Part::Starter || !failed.is_empty() && unexplained(&report).is_empty());
    Graded {
        name: job.name.clone(),
        part: job.part,
        path: course.rel(&job.path),
        run: job.run,
        expected_failures: job.expected.clone(),
        either: job.either.clone(),
        failed,
        as_expected,
        seconds,
        report,
    }
}

/// (failed but not expected, expected but not failed); nothing when any failure will do. A band
/// the job is not held to (`either`) is neither; an `either:` alone (`one_of`) that none of its
/// criteria failed is missing as "one of …".
fn differences(job: &Job, failed: &[String]) -> (Vec<String>, Vec<String>) {
    let Some(want) = job.expected.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let mut missing: Vec<String> = want
        .iter()
        .filter(|c| !failed.contains(c))
        .cloned()
        .collect();
    if !job.one_of.is_empty() && !job.one_of.iter().any(|c| failed.contains(c)) {
        missing.push(format!("one of {}", job.one_of.join(" | ")));
    }
    (
        failed
            .iter()
            .filter(|c| !want.contains(c) && !job.either.contains(c))
            .cloned()
            .collect(),
        missing,
    )
}

/// Failed criteria whose reason is empty in either language.
fn unexplained(report: &Report) -> Vec<String> {
    report
        .verdicts
        .iter()
        .filter(|v| v.status == crate::checks::Status::Fail)
        .filter(|v| v.why.zh.trim().is_empty() || v.why.en.trim().is_empty())
        .map(|v| v.id.clone())
        .collect()
}

/// The surprise a graded submission makes, if any.
fn surprise(course: &Course, exercise: &str, job: &Job, g: &Graded) -> Option<Surprise> {
    if g.as_expected {
        return None;
    }
    let r = &g.report;
    let rubric = course.rel(&course.rubric(exercise));
    let exp = course.rel(&course.fixtures_dir(exercise).join("expected.yaml"));
    let (unexpected, missing) = differences(job, &g.failed);
    let list = |ids: &[String]| {
        ids.iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let at = (
        format!("{}（第 {} 次，seed {}）", g.path, g.run, r.seed),
        format!("{} (run {}, seed {})", g.path, g.run, r.seed),
    );
    let mut zh = Vec::new();
    let mut en = Vec::new();
    let mut files = vec![g.path.clone()];
    let mut criteria: Vec<String> = unexpected.iter().chain(&missing).cloned().collect();
    match g.part {
        Part::Solution => {
            zh.push(format!(
                "参考答案 {} 未通过 {}：参考答案或 {rubric} 中的界限有误",
                at.0,
                list(&unexpected)
            ));
            en.push(format!("the reference solution {} fails {}: the solution or the bound in {rubric} is wrong", at.1, list(&unexpected)));
            files.push(rubric);
        }
        Part::Starter | Part::Fixtures => {
            if g.part == Part::Starter && g.failed.is_empty() {
                zh.push(format!("起始代码 {} 通过了全部评分项；它必须失败", at.0));
                en.push(format!(
                    "the starter {} passes every criterion; it must fail",
                    at.1
                ));
            }
            if !unexpected.is_empty() {
                zh.push(format!(
                    "{}：未通过 {exp} 中 `{}` 没有列出的 {}",
                    at.0,
                    g.name,
                    list(&unexpected)
                ));
                en.push(format!(
                    "{}: fails {}, which {exp} does not list for `{}`",
                    at.1,
                    list(&unexpected),
                    g.name
                ));
            }
            if !missing.is_empty() {
                zh.push(format!(
                    "{}：通过了 {exp} 中 `{}` 必须失败的 {}",
                    at.0,
                    g.name,
                    list(&missing)
                ));
                en.push(format!(
                    "{}: passes {}, which {exp} says `{}` must fail",
                    at.1,
                    list(&missing),
                    g.name
                ));
            }
            let silent = if g.part == Part::Starter {
                unexplained(r)
            } else {
                Vec::new()
            };
            if !silent.is_empty() {
                zh.push(format!(
                    "起始代码 {} 未通过 {} 却没有说明原因",
                    at.0,
                    list(&silent)
                ));
                en.push(format!(
                    "the starter {} fails {} without a reason",
                    at.1,
                    list(&silent)
                ));
                criteria.extend(silent);
            }
            if job.expected.is_some() {
                files.push(exp);
            }
            files.push(rubric);
        }
        Part::Coverage => unreachable!("coverage surprises are not graded"),
    }
    Some(Surprise {
        exercise: exercise.into(),
        part: g.part,
        submission: Some(g.name.clone()),
        run: Some(g.run),
        seed: Some(r.seed),
        criteria,
        files,
        message: Text::new(zh.join("；"), en.join("; ")),
        evidence: evidence(r, &missing),
    })
}

/// The part of a report that explains it: every failed criterion with its reason, the criteria
/// that should have failed but passed, the run's failure, the last lines of stderr.
pub fn evidence(r: &Report, passed_but_expected: &[String]) -> Vec<Text> {
    let mut out: Vec<Text> = r
        .verdicts
        .iter()
        .filter(|v| v.status == crate::checks::Status::Fail || passed_but_expected.contains(&v.id))
        .map(|v| {
            let mark = if v.status == crate::checks::Status::Fail {
                "✘"
            } else {
                "✔"
            };
            text!(
                format!(
                    "{mark} {}：{}［测得 {}；界限 {}］",
                    v.id, v.why.zh, v.measured.zh, v.bound.zh
                ),
                format!(
                    "{mark} {}: {} [measured {}; bound {}]",
                    v.id, v.why.en, v.measured.en, v.bound.en
                )
            )
        })
        .collect();
    if let Some(f) = &r.run_failure {
        out.push(text!(
            format!("运行失败：{}", f.zh),
            format!("run failed: {}", f.en)
        ));
    }
    if let Some(tail) = &r.stderr_tail {
        let lines: Vec<&str> = tail.lines().collect();
        for l in &lines[lines.len().saturating_sub(8)..] {
            out.push(Text::same(format!("stderr │ {l}")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(fail: &[&str], either: &[&str], one_of: &[&str]) -> Job {
        let ids = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Job {
            exercise: 0,
            name: "f".into(),
            part: Part::Fixtures,
            path: PathBuf::from("f.py"),
            run: 1,
            expected: Some(ids(fail)),
            either: ids(either),
            one_of: ids(one_of),
        }
    }

    fn failed(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    /// `{either: [a, b]}` alone: one of them failing, either one, is as expected; neither is a
    /// miss named "one of a | b"; anything else failing is unexpected.
    #[test]
    fn either_alone_needs_one_of_its_criteria_to_fail() {
        let j = job(&[], &["a", "b"], &["a", "b"]);
        for f in [&["a"][..], &["b"], &["a", "b"]] {
            assert_eq!(differences(&j, &failed(f)), (vec![], vec![]), "{f:?}");
        }
        assert_eq!(
            differences(&j, &failed(&[])),
            (vec![], vec!["one of a | b".to_string()])
        );
        assert_eq!(
            differences(&j, &failed(&["a", "c"])),
            (vec!["c".to_string()], vec![])
        );
        // beside `fail:`, `either:` is only tolerance
        let j = job(&["c"], &["a"], &[]);
        assert_eq!(differences(&j, &failed(&["c"])), (vec![], vec![]));
        assert_eq!(differences(&j, &failed(&["c", "a"])), (vec![], vec![]));
    }
}
