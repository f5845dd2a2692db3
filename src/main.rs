//! `grade` — the pipeline: spec → workload → run → reference → checks → report.
//! Stages 1–5 are `pipeline::grade`; `grade check` runs them over a whole course.
use clap::Parser;
use grade::cli::{CheckArgs, CheckFormat, Cli, Command, ExerciseArgs};
use grade::course::Course;
use grade::error::GradeError;
use grade::pipeline::{self, GradeRequest};
use grade::report;
use grade::runner::{zygote::ZygoteExecutor, Executor, PythonExecutor};
use grade::selftest::{self, CheckOptions};
use std::io::IsTerminal;

fn main() {
    grade::device::load_cuda_runtime();
    let cli = Cli::parse();
    // `--format gradescope|prairielearn`: the platform reads stdout even when grading fails
    let platform = match &cli.command {
        Command::Exercise(a) => report::platform::Platform::of(a.format),
        _ => None,
    };
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            if let Some(p) = platform {
                emit(&p.cannot_grade(&e.to_string()));
            }
            eprintln!("grade: error: {e}");
            e.exit_code()
        }
    };
    leave(code);
}

/// Exit with `code` once stdout and stderr are flushed, by `_exit`: libtorch's static destructors
/// (every registered operator freed: 0.1–0.2 s of each grading on this machine) don't run on the
/// way out. Nothing of grade's own is left to run by then: `dispatch` has returned, every value it
/// made (temporary folders, the warm interpreter, child processes) dropped.
fn leave(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` ends the process at once; nothing of this process is used after it
    unsafe { libc::_exit(code) }
}

fn dispatch(cli: Cli) -> Result<i32, GradeError> {
    // a report reads records only; the course (for its common mistakes) when there is one
    if let Command::Report(args) = &cli.command {
        return grade::batch::commands::report(Course::locate(cli.root).ok().as_ref(), args);
    }
    let course = Course::locate(cli.root)?;
    match cli.command {
        Command::List(args) => grade::state::list(&course, args.reset, args.lang),
        Command::Policy(args) => print_policy(&course, &args),
        Command::Watch(args) => {
            // every save is graded again: forks of one warm interpreter (torch imported once)
            let python = PythonExecutor::new(course.python(cli.python))?;
            many_runs(python, |ex| grade::watch::run(&course, &args, ex))
        }
        Command::Exercise(args) => {
            let python = course.python(cli.python);
            grade_exercise(&course, &args, &PythonExecutor::new(python)?)
        }
        Command::Check(args) => {
            let python = PythonExecutor::new(course.python(cli.python))?;
            many_runs(python, |ex| check_course(&course, &args, ex))
        }
        Command::Batch(args) => {
            let python = PythonExecutor::new(course.python(cli.python))?;
            many_runs(python, |ex| {
                grade::batch::commands::batch(&course, &args, ex)
            })
        }
        Command::Gradebook(args) => grade::batch::commands::gradebook(&args),
        Command::Diff(args) => grade::batch::commands::diff(&args),
        Command::Export(cmd) => grade::export::run(&course, &cmd),
        Command::Report(_) => unreachable!("dispatched above"),
    }
}

/// `grade policy [ID]`: the course's Python as the driver gets it (YAML or JSON).
fn print_policy(course: &Course, args: &grade::cli::PolicyArgs) -> Result<i32, GradeError> {
    let policy = match &args.id {
        Some(id) => pipeline::Spec::load(course, id)?.exercise.policy,
        None => course.file()?.policy,
    };
    let text = match args.format {
        grade::cli::PolicyFormat::Json => {
            serde_json::to_string_pretty(&policy).map_err(anyhow::Error::from)?
        }
        grade::cli::PolicyFormat::Yaml => {
            serde_yaml::to_string(&policy).map_err(anyhow::Error::from)?
        }
    };
    emit(&format!("{}\n", text.trim_end()));
    Ok(0)
}

/// The executor of the commands that grade many runs (`grade check`, `grade batch`, `grade
/// watch`): a warm interpreter, torch already imported, forks each run (GRADE_ZYGOTE=off: a fresh
/// one per run).
fn many_runs(
    python: PythonExecutor,
    grade_all: impl FnOnce(&(dyn Executor + Sync)) -> Result<i32, GradeError>,
) -> Result<i32, GradeError> {
    if std::env::var("GRADE_ZYGOTE").is_ok_and(|v| v == "off") {
        grade_all(&python)
    } else {
        grade_all(&ZygoteExecutor::new(python)?)
    }
}

/// Grade one submission of one exercise and print the report; the exit code is the verdict.
fn grade_exercise(
    course: &Course,
    args: &ExerciseArgs,
    executor: &dyn Executor,
) -> Result<i32, GradeError> {
    course.check_id(&args.id)?;
    let submission = match (&args.submission, args.solution) {
        (Some(p), _) => p.clone(),
        (None, true) => course.solution(&args.id),
        (None, false) => course.starter(&args.id),
    };
    let device = args.device.resolve()?;
    if args.progress || std::io::stderr().is_terminal() {
        // each probe's start, said as the driver sends it (runner/process.rs)
        std::env::set_var("GRADE_PROGRESS", "probes");
    }
    if args.progress && !std::io::stderr().is_terminal() {
        eprintln!(
            "⏳ grading {} ({}) on {} …",
            args.id,
            submission.display(),
            device.name()
        );
    }
    progress(&format!(
        "grading {} ({}) on {} …",
        args.id,
        submission.display(),
        device.name()
    ));
    // 1–5. spec, workload, run, reference, checks
    let report = pipeline::grade(
        course,
        &GradeRequest {
            id: args.id.clone(),
            submission,
            device,
            seed: args.seed,
            timeout: args.timeout,
            dump_observations: args.dump_observations.clone(),
            trusted: args.submission.is_none(),
        },
        executor,
    )?;
    if !args.solution {
        grade::state::record(
            course,
            &args.id,
            std::path::Path::new(&report.submission),
            &report,
        );
    }
    // 6. report
    let color = args.format == report::Format::Table && color_on_stdout();
    emit(&report::exporter_with(args.format, color, args.verbose).render(&report, args.lang));
    if let Some(path) = &args.html {
        let pictures = grade::html::lesson(Some(course), &args.id).map(|e| e.pictures);
        let page = grade::html::exercise_page(&report, &pictures.unwrap_or_default(), args.lang);
        grade::gradebook::write_atomic(path, page.as_bytes())?;
        eprintln!("HTML report / 网页报告: {}", path.display());
    }
    Ok(report.exit_code())
}

/// `grade check`: grade every solution, starter and fixture of the course against its
/// expectations; the exit code says whether anything surprised.
fn check_course(
    course: &Course,
    args: &CheckArgs,
    executor: &(dyn Executor + Sync),
) -> Result<i32, GradeError> {
    let opts = CheckOptions {
        ids: args.ids.clone(),
        runs: args.runs,
        jobs: args
            .jobs
            .unwrap_or(grade::batch::commands::default_jobs() as u32),
        only: args.only.clone(),
        device: args.device.resolve()?,
    };
    let lang = args.lang;
    let result = selftest::run(course, &opts, executor, &|e| {
        eprintln!("{}", selftest::render::progress(&e, lang))
    })?;
    emit(&match args.format {
        CheckFormat::Table => selftest::render::table(&result, lang, color_on_stdout()),
        CheckFormat::Json => selftest::render::json(&result),
    });
    Ok(result.exit_code())
}

fn color_on_stdout() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("⏳ {msg}");
    }
}

/// Writes a report to stdout. A reader that went away (`grade … | head`) is no error of the
/// grading's: the exit code still says how it went (`print!` would panic there).
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("grade: error: writing the report to stdout: {e}");
        }
    }
}
