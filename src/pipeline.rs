//! Grading one submission, stages 1–5 of the pipeline (spec → workload → run → reference →
//! checks), ending in a `Report`. `grade exercise` renders that report (stage 6); `grade check`
//! grades many submissions with it and compares their verdicts with the course's expectations.
use crate::checks::{self, Env};
use crate::course::Course;
use crate::device::Device;
use crate::error::GradeError;
use crate::notebook::{self, Notebook};
use crate::observations::Evidence;
use crate::report::{Report, Summary, Timings};
use crate::runner::{Executor, RunRequest};
use crate::spec::{Exercise, Rubric};
use crate::{reference, text, workload};
use std::path::{Path, PathBuf};

/// One submission to grade, and how.
#[derive(Clone, Debug)]
pub struct GradeRequest {
    pub id: String,
    pub submission: PathBuf,
    pub device: Device,
    /// Seed for weights and inputs; `None` draws one the submission cannot predict.
    pub seed: Option<u64>,
    /// Overrides `timeout_s` of exercise.yaml.
    pub timeout: Option<u64>,
    /// Also write the run's raw observations as JSON here.
    pub dump_observations: Option<PathBuf>,
    /// The course's own code (its solution, starter, fixtures), not a student's: only such a run
    /// may write what later runs share (lesson 05's compile cache).
    pub trusted: bool,
}

/// Exercise and rubric of one lesson, loaded and validated together (stage 1).
pub struct Spec {
    pub exercise: Exercise,
    pub rubric: Rubric,
}

impl Spec {
    pub fn load(course: &Course, id: &str) -> Result<Spec, GradeError> {
        course.check_id(id)?;
        let mut exercise = Exercise::load(&course.exercise_dir(id))?;
        let rubric = Rubric::load(&course.rubric(id), &exercise)?;
        // the course's Python with what this lesson's contract adds (course.yaml + exercise.yaml)
        let course_file = course.root.join("course.yaml");
        let policy = course.file()?.policy.with(&exercise.policy);
        if policy.modules.is_empty() {
            // deny by default: with no policy a submission could import nothing at all
            return Err(GradeError::Spec {
                path: course_file,
                line: 0,
                column: 0,
                message: "no `policy:` (the course's Python: the modules a submission may import \
                          and what of each it may use); add one, as this project's course.yaml does \
                          (docs/course-authors.md)"
                    .into(),
            });
        }
        if let Some((needle, message)) = policy.problem() {
            let text = std::fs::read_to_string(&course_file).unwrap_or_default();
            return Err(crate::spec::spec_error(
                &course_file,
                &text,
                &needle,
                message,
            ));
        }
        exercise.policy = policy;
        Ok(Spec { exercise, rubric })
    }
}

/// Grade one submission: an `Err` only when the grader could not grade (exit 2); a submission
/// that crashes, hangs or cheats is a `Report` with failed criteria.
pub fn grade(
    course: &Course,
    req: &GradeRequest,
    executor: &dyn Executor,
) -> Result<Report, GradeError> {
    let started = std::time::Instant::now();
    let mut lap = started;
    let mut lap_s = || {
        let now = std::time::Instant::now();
        let s = now.duration_since(lap).as_secs_f64();
        lap = now;
        s
    };
    // 1. spec: what to run and how to judge it (read at run time, validated)
    let Spec {
        mut exercise,
        rubric,
    } = Spec::load(course, &req.id)?;
    exercise.timeout_s = req.timeout.unwrap_or(exercise.timeout_s).max(1);
    if !req.submission.is_file() {
        return Err(GradeError::SubmissionMissing {
            path: req.submission.clone(),
            id: req.id.clone(),
        });
    }
    // a notebook runs as the module of its code cells (texts naming its lines say `cell N, line M`)
    let prepared = notebook::Prepared::new(&req.submission)?;
    let spec_s = lap_s();
    // 2. workload: weights and inputs from a seed the submission cannot predict
    let seed = req.seed.unwrap_or_else(|| rand::random::<u32>() as u64);
    exercise.model = exercise.model_for(seed); // a shape drawn per seed where exercise.yaml asks
    let work = workload::generate(&exercise.model, seed);
    let workload_s = lap_s();
    // 3. run the submission under the driver, on a leash
    let mut run = executor.execute(&RunRequest {
        exercise: &exercise,
        submission: prepared.path(),
        workload: &work,
        device: req.device,
        seed,
        course_path: course.package_path(),
        trusted: req.trusted,
    })?;
    lap_s();
    if let (Some(path), Some(obs)) = (&req.dump_observations, &run.obs) {
        let json = serde_json::to_string_pretty(obs).map_err(anyhow::Error::from)?;
        std::fs::write(path, json)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    // 4. reference: the grader's own answer in libtorch
    let mut tensors = std::mem::take(&mut run.tensors);
    let mut answer =
        reference::compute_parts(&exercise.model, &work, reference::Parts::read_by(&rubric));
    if let Some(lr) = exercise.lookup("$params.lr") {
        // the weights after one optimizer step (lesson 03: the ledger runs exactly one)
        answer.extend(reference::updates(&work.weights, &answer, lr));
    }
    tensors.extend(answer);
    let reference_s = lap_s();
    let mut obs = run.obs.unwrap_or_default();
    obs.audit = obs.audit.take().or(run.audit.take()); // kept when the run crashed
    checks::audit::merge_runtime(&mut obs); // threads the submission started, found as it ran
    if let (Some((nb, _)), Some(audit)) = (&prepared.notebook, &mut obs.audit) {
        nb.map.place_findings(audit); // the audit's lines as the notebook's cells
    }
    let evidence = Evidence {
        obs,
        tensors,
        run_failure: run.failure.take(),
    };
    // 5. checks: one verdict per criterion
    let verdicts = checks::grade(
        &rubric,
        &Env {
            evidence: &evidence,
            exercise: &exercise,
        },
        req.device,
    );
    let failed_probe = evidence.obs.probes.values().any(|p| !p.ok);
    let driver = evidence.obs.timings.clone();
    let timings = Timings {
        spec_s,
        workload_s,
        stage_s: run.stage_s,
        run_s: run.wall_s,
        interpreter_s: driver.as_ref().map(|d| d.t0 - run.started),
        exit_s: driver
            .as_ref()
            .map(|d| run.started + run.wall_s - (d.t0 + d.end_s)),
        driver,
        reference_s,
        ..Timings::default()
    };
    let mut report = Report {
        exercise: exercise.id.clone(),
        title: exercise.title.clone(),
        submission: req.submission.display().to_string(),
        device: req.device.name().into(),
        seed,
        summary: Summary::of(&verdicts),
        verdicts,
        run_s: run.wall_s,
        run_failure: evidence.run_failure.clone(),
        stderr_tail: (evidence.run_failure.is_some() || failed_probe)
            .then_some(run.stderr_tail)
            .filter(|t| !t.trim().is_empty()),
        failed_probes: evidence
            .obs
            .probes
            .iter()
            .filter(|(_, p)| !p.ok)
            .map(|(name, p)| (name.clone(), p.error.clone().unwrap_or_default()))
            .collect(),
        sandbox_gaps: run.sandbox_gaps,
        notes: Vec::new(),
        evidence: crate::evidence::Observed::of(&evidence.obs).with_params(&exercise.params),
        timings,
    };
    // a criterion whose points need others (`requires:`) says so when it passed alone
    let withheld = crate::report::withheld(&report.verdicts);
    if !withheld.is_empty()
        && !report
            .verdicts
            .iter()
            .any(|v| v.gate && v.status == checks::Status::Fail)
    {
        report.notes.push(crate::text!(
            format!(
                "这些评分项通过了，但它们的分数要等括号里的评分项也通过才计入：{}",
                withheld.join("；")
            ),
            format!(
                "these passed, but their points count only once the criteria in brackets pass too: {}",
                withheld.join("; ")
            )
        ));
    }
    // nothing of the submission's work was observed (it was not imported, or every probe that
    // calls it failed: a starter, an empty file): criteria that hold by absence ("no
    // empty_cache call") pass vacuously then, and earn nothing
    let probes = &evidence.obs.probes;
    let load_failed = probes.get("load").is_some_and(|p| !p.ok);
    let worked = probes.iter().any(|(name, p)| name != "load" && p.ok);
    if report.summary.points > 0 && (load_failed || !worked || evidence.run_failure.is_some()) {
        report.summary.points = 0;
        report.notes.push(crate::text!(
            "评分器没有观察到你的任何工作（每个调用你的函数的探针都失败了）：本课记 0 分",
            "the grader observed none of your work (every probe that calls your functions failed): the lesson scores 0"
        ));
    }
    if crate::spec::policy::switched_off() {
        report.notes.push(crate::text!(
            "本次评分关闭了课程的 Python（GRADE_POLICY=off，只用于沙箱自身的测试）：成绩不作数",
            "graded with the course's Python switched off (GRADE_POLICY=off, for the sandbox's own tests only): this grade does not count"
        ));
    }
    if let Some((nb, _)) = &prepared.notebook {
        annotate(nb, &mut report, &req.submission);
    }
    report.timings.checks_s = lap_s();
    report.timings.total_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Rewrite the report's texts to name the notebook's cells, and add the notebook's notes (the
/// notebook's line map applied where the report is made, so a notebook knows nothing of reports).
fn annotate(nb: &Notebook, report: &mut Report, notebook: &Path) {
    let name = notebook
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let map = |s: &str| nb.map.map_text(s, &name);
    for err in report.failed_probes.values_mut() {
        *err = map(err);
    }
    if let Some(tail) = &mut report.stderr_tail {
        *tail = map(tail);
    }
    let timed_out = report
        .run_failure
        .as_ref()
        .is_some_and(|f| f.en.contains("ran past its"));
    if let Some(f) = &mut report.run_failure {
        f.zh = map(&f.zh);
        f.en = map(&f.en);
    }
    for v in &mut report.verdicts {
        for t in [&mut v.why, &mut v.measured] {
            t.zh = map(&t.zh);
            t.en = map(&t.en);
        }
    }
    report.notes.extend(nb.dropped_note());
    if timed_out {
        report.notes.push(text!(
            "笔记本的每个代码单元都会在导入时运行：训练或演示的代码单元请放进 `if __name__ == \"__main__\":` 之下，评分时它们就不会运行",
            "every code cell of a notebook runs when it is imported: guard cells that train or demo under `if __name__ == \"__main__\":` so they do not run when graded"
        ));
    }
}
