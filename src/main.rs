//! `grade` — the pipeline: spec → workload → run → reference → checks → report.
use clap::Parser;
use grade::checks::{self, Env};
use grade::cli::{Cli, Command, DeviceArg, ExerciseArgs};
use grade::course::{Course, EXERCISES};
use grade::error::{exit, GradeError};
use grade::observations::Evidence;
use grade::report::{self, Report, Summary};
use grade::runner::{Device, Executor, PythonExecutor, RunRequest};
use grade::spec::{Exercise, Rubric};
use grade::{reference, workload};
use std::io::IsTerminal;

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("grade: error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}

fn dispatch(cli: Cli) -> Result<i32, GradeError> {
    let course = Course::locate(cli.root)?;
    match cli.command {
        Command::List => list(&course),
        Command::Exercise(args) => {
            let python = course.python(cli.python);
            grade_exercise(&course, &args, &PythonExecutor::new(python)?)
        }
    }
}

/// Grade one submission of one exercise and print the report; the exit code is the verdict.
fn grade_exercise(
    course: &Course,
    args: &ExerciseArgs,
    executor: &dyn Executor,
) -> Result<i32, GradeError> {
    course.check_id(&args.id)?;
    // 1. spec: what to run and how to judge it (read at run time, validated)
    let mut exercise = Exercise::load(&course.exercise_dir(&args.id))?;
    exercise.timeout_s = args.timeout.unwrap_or(exercise.timeout_s).max(1);
    let rubric = Rubric::load(&course.rubric(&args.id), &exercise)?;
    let submission = pick_submission(course, args)?;
    let device = pick_device(args.device)?;
    // 2. workload: weights and inputs from a seed the submission cannot predict
    let seed = args.seed.unwrap_or_else(|| rand::random::<u32>() as u64);
    let work = workload::generate(&exercise.model, seed);
    // 3. run the submission under the driver, on a leash
    progress(&format!(
        "grading {} ({}) on {} …",
        args.id,
        submission.display(),
        device.name()
    ));
    let run = executor.execute(&RunRequest {
        exercise: &exercise,
        submission: &submission,
        workload: &work,
        device,
        seed,
        course_path: course.package_path(),
    })?;
    if let (Some(path), Some(obs)) = (&args.dump_observations, &run.obs) {
        let json = serde_json::to_string_pretty(obs).map_err(anyhow::Error::from)?;
        std::fs::write(path, json)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    // 4. reference: the grader's own answer in libtorch
    let mut tensors = run.tensors;
    tensors.extend(reference::compute(&exercise.model, &work));
    let evidence = Evidence {
        obs: run.obs.unwrap_or_default(),
        tensors,
        run_failure: run.failure,
    };
    // 5. checks: one verdict per criterion
    let verdicts = checks::grade(
        &rubric,
        &Env {
            evidence: &evidence,
            exercise: &exercise,
        },
        device,
    );
    // 6. report
    let failed_probe = evidence.obs.probes.values().any(|p| !p.ok);
    let report = Report {
        exercise: exercise.id.clone(),
        title: exercise.title.clone(),
        submission: submission.display().to_string(),
        device: device.name().into(),
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
    };
    let color = args.format == report::Format::Table
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none();
    print!(
        "{}",
        report::exporter_with(args.format, color, args.verbose).render(&report, args.lang)
    );
    Ok(report.exit_code())
}

fn pick_submission(course: &Course, args: &ExerciseArgs) -> Result<std::path::PathBuf, GradeError> {
    let path = match (&args.submission, args.solution) {
        (Some(p), _) => p.clone(),
        (None, true) => course.solution(&args.id),
        (None, false) => course.starter(&args.id),
    };
    if !path.is_file() {
        return Err(GradeError::SubmissionMissing {
            path,
            id: args.id.clone(),
        });
    }
    Ok(path)
}

fn pick_device(arg: DeviceArg) -> Result<Device, GradeError> {
    let cuda = || tch::Cuda::is_available();
    match arg {
        DeviceArg::Cpu => Ok(Device::Cpu),
        DeviceArg::Cuda if cuda() => Ok(Device::Cuda),
        DeviceArg::Cuda => Err(GradeError::NoCuda),
        DeviceArg::Auto => Ok(if cuda() { Device::Cuda } else { Device::Cpu }),
    }
}

fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("⏳ {msg}");
    }
}

fn list(course: &Course) -> Result<i32, GradeError> {
    for id in EXERCISES {
        let dir = course.exercise_dir(id);
        match Exercise::load(&dir) {
            Ok(ex) => println!("{id:<14} {}  /  {}", ex.title.zh, ex.title.en),
            Err(_) if !dir.join("exercise.yaml").exists() => {
                println!("{id:<14} (not available yet / 尚未提供)")
            }
            Err(e) => println!("{id:<14} (broken spec: {e})"),
        }
    }
    Ok(exit::PASS)
}
