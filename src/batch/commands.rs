//! `grade batch`, `grade gradebook`, `grade diff`: from parsed arguments to output and exit code.
use super::{progress, BatchOptions};
use crate::cli::{BatchArgs, DiffArgs, GradebookArgs};
use crate::course::{Course, EXERCISES};
use crate::error::{exit, GradeError};
use crate::gradebook;
use crate::runner::Executor;

/// The default: half the cores (at least one), so a run's timed probes do not compete for a core
/// with another run, as in `grade exercise` on a quiet machine.
pub fn default_jobs() -> usize {
    (cores() / 2).max(1)
}

/// The most: one run per core (each run has one torch thread). Every lesson's timing criteria
/// are built to hold with the other core busy; `grade check --jobs 2` proves each lesson that way
/// on 2 cores in CI.
pub fn max_jobs() -> usize {
    cores()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn batch(
    course: &Course,
    args: &BatchArgs,
    executor: &(dyn Executor + Sync),
) -> Result<i32, GradeError> {
    let exercises: Vec<String> = match &args.exercise {
        Some(id) => {
            course.check_id(id)?;
            vec![id.clone()]
        }
        None => EXERCISES
            .iter()
            .filter(|id| course.exercise_dir(id).join("exercise.yaml").is_file())
            .map(|s| s.to_string())
            .collect(),
    };
    let cap = max_jobs();
    let jobs = args.jobs.map_or(default_jobs(), |j| j as usize);
    if jobs > cap {
        eprintln!(
            "note: --jobs {jobs} capped to {cap} (one run per core) so that timing criteria stay reliable / 为保证计时验收可靠，并行数限制为 {cap}（每个运行一个核）"
        );
    }
    let opts = BatchOptions {
        class: args.dir.clone(),
        exercises,
        out: args.out.clone(),
        jobs: jobs.min(cap),
        resume: args.resume,
        device: args.device.resolve()?,
        seed: args.seed,
        shard: args.shard,
        timeout: args.timeout,
    };
    let mut p = progress::Progress::new();
    let outcome = super::run(course, &opts, executor, &mut |e| p.on(e))?;
    p.finish();
    print!("{}", progress::summary(&outcome.book));
    for e in &outcome.errors {
        eprintln!("grade: could not grade / 无法评分: {e}");
    }
    if outcome.interrupted {
        eprintln!(
            "interrupted: {} record(s) kept in {}; rerun with --resume to finish / 已中断：已保存的记录不会丢失，加 --resume 重跑即可完成",
            outcome.graded + outcome.resumed,
            opts.out.display()
        );
    }
    eprintln!(
        "gradebooks in {} (grades.csv, grades.json, junit.xml, gradescope/, prairielearn/) / 成绩册已写入",
        opts.out.display()
    );
    Ok(super::exit_code(&outcome))
}

pub fn gradebook(args: &GradebookArgs) -> Result<i32, GradeError> {
    let book = gradebook::write_all(&args.out)?;
    print!("{}", progress::summary(&book));
    if book.missing.is_empty() {
        Ok(exit::PASS)
    } else {
        eprintln!(
            "{} record(s) missing / 缺少 {} 份记录 (run the missing shards, or `grade batch --resume`)",
            book.missing.len(),
            book.missing.len()
        );
        Ok(exit::FAIL)
    }
}

pub fn diff(args: &DiffArgs) -> Result<i32, GradeError> {
    let old = gradebook::diff::load(&args.old)?;
    let new = gradebook::diff::load(&args.new)?;
    let (text, _) = gradebook::diff::diff(&old, &new);
    print!("{text}");
    Ok(exit::PASS)
}
