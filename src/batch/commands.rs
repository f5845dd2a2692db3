//! `grade batch`, `grade gradebook`, `grade diff`, `grade report`: from parsed arguments to output
//! and exit code.
use super::{progress, BatchOptions};
use crate::cli::{BatchArgs, DiffArgs, GradebookArgs, ReportArgs};
use crate::course::Course;
use crate::error::{exit, GradeError};
use crate::gradebook;
use crate::runner::Executor;

/// The default: one run per core. Every time criterion compares quantities measured in the same
/// windows or interleaved step by step, so a neighbour on the other core stretches both sides
/// alike and cannot flip a verdict (issue 18).
pub fn default_jobs() -> usize {
    cores()
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
        None => course.exercises()?,
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

/// `grade report OUT` (the class page) or `grade report OLD NEW` (the page of their diff).
pub fn report(course: Option<&Course>, args: &ReportArgs) -> Result<i32, GradeError> {
    let t0 = std::time::Instant::now();
    let path = match args.folders.as_slice() {
        [out] => crate::html::class::write_class(out, course, args.lang, args.output.as_deref())?,
        [old_p, new_p] => {
            let old = gradebook::diff::load(old_p)?;
            let new = gradebook::diff::load(new_p)?;
            let page = crate::html::class::diff_page(&old, &new, args.lang);
            let path = args.output.clone().unwrap_or_else(|| {
                let dir = if new_p.is_dir() {
                    new_p.clone()
                } else {
                    new_p.parent().map(|p| p.to_path_buf()).unwrap_or_default()
                };
                dir.join("diff.html")
            });
            gradebook::write_atomic(&path, page.as_bytes())?;
            path
        }
        _ => unreachable!("clap takes one or two folders"),
    };
    println!("{}", path.display());
    eprintln!(
        "written in {:.3} s / 用时 {:.3} 秒",
        t0.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    Ok(exit::PASS)
}
