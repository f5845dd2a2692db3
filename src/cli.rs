//! Command line (clap derive): `grade exercise`, `grade watch`, `grade check`, `grade list`,
//! `grade batch`, `grade gradebook`, `grade diff`, `grade report`.
use crate::device::Device;
use crate::error::GradeError;
use crate::i18n::Lang;
use crate::report::Format;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Exit codes / 退出码:
  0  every criterion passed                         所有验收项通过
  1  at least one criterion failed                  至少一项未通过
  2  the grader could not grade (bad rubric or      无法评分（规则文件有误、找不到提交、
     exercise YAML, missing submission, no Python)  没有 Python 环境等）

Environment: GRADE_ROOT (course folder), GRADE_PYTHON (interpreter with torch), NO_COLOR.";

#[derive(Parser, Debug)]
#[command(name = "grade", version, about = "Grades the PyTorch performance course's exercises (性能与显存：Profiler、compile 与检查点)", after_help = AFTER_HELP)]
pub struct Cli {
    /// Course folder holding exercises/, solutions/ and rubrics/ [default: found upward from the current directory]
    #[arg(long, global = true, env = "GRADE_ROOT")]
    pub root: Option<PathBuf>,
    /// Python interpreter with torch 2.13 [default: <root>/.venv/bin/python]
    #[arg(long, global = true, env = "GRADE_PYTHON")]
    pub python: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Grade one exercise: your working copy, a given file, or the reference solution.
    #[command(after_help = AFTER_HELP)]
    Exercise(ExerciseArgs),
    /// For maintainers: prove the course works (solutions pass, starters and fixtures fail as expected).
    ///
    /// Each reference solution passes every criterion, each starter fails with a reason for every
    /// failed criterion, each fixture fails exactly the criteria tests/fixtures/<ID>/expected.yaml
    /// lists, every criterion is failed by some fixture and names what it `catches`, and every
    /// common mistake (常见错误) of the lesson README is mapped to criteria.
    #[command(after_help = CHECK_AFTER_HELP)]
    Check(CheckArgs),
    /// List the exercises, with your last verdict and score for each (from .grade/state.json).
    List(ListArgs),
    /// What your code may use: the course's Python (course.yaml `policy:`), with what a lesson's
    /// contract adds when ID is given: modules and what of each, bases, what may be set.
    Policy(PolicyArgs),
    /// Regrade your working copy (or --submission FILE) each time you save it; q quits.
    #[command(after_help = WATCH_AFTER_HELP)]
    Watch(WatchArgs),
    /// For instructors: grade a whole class (a folder per student, or a NAME.py per student) and
    /// write gradebooks (records, grades.csv, grades.json, Gradescope, PrairieLearn, JUnit) into --out.
    #[command(after_help = BATCH_AFTER_HELP)]
    Batch(BatchArgs),
    /// Assemble the gradebooks of a `grade batch --out` folder from whatever records exist (after
    /// sharded runs) and name the students still missing.
    Gradebook(GradebookArgs),
    /// For instructors: what a grading platform runs (`grade export gradescope ID`: Gradescope's
    /// autograder zip).
    #[command(subcommand)]
    Export(ExportCommand),
    /// What changed between two gradebooks (two --out folders or two grades.json), per student and
    /// criterion, with a summary.
    Diff(DiffArgs),
    /// For instructors: a self-contained HTML page of a graded class (`OUT/report.html`: the class
    /// at a glance, score distribution, each criterion's pass rate, the common mistakes it catches
    /// and who failed it, every student's full report with its pictures and regrade command). Given
    /// two gradebooks, the page of their `grade diff` (`NEW/diff.html`).
    Report(ReportArgs),
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A `grade batch --out` folder (after `grade gradebook` for shards); or OLD NEW, two
    /// gradebooks (folders or grades.json) to compare
    #[arg(num_args = 1..=2, required = true, value_name = "OUT")]
    pub folders: Vec<PathBuf>,
    /// Write the page here [default: OUT/report.html; for two gradebooks NEW/diff.html]
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Lang::Zh)]
    pub lang: Lang,
}

const BATCH_AFTER_HELP: &str = "\
Discovery / 识别规则: in DIR, each folder is a student (id = folder name) whose submission for
exercise ID is ID/exercise.py, ID.py or (one exercise only) exercise.py inside it, or the same
name as a Jupyter notebook (.ipynb, after the .py); each NAME.py or NAME.ipynb is a student NAME
(one exercise only). A folder where nothing matches is a \"no submission\" row.
Hidden entries and other files are ignored. An empty class is exit 2.

Exit codes / 退出码:
  0  every student passed                           全部通过
  1  a student failed or has no submission          有学生未通过或未提交
  2  some job could not be graded, the batch was    有提交无法评分、评分被中断（用 --resume 续评）
     interrupted (rerun with --resume), bad input   或输入有误";

#[derive(Args, Debug)]
pub struct BatchArgs {
    /// Class folder: a folder or a NAME.py per student
    pub dir: PathBuf,
    /// Exercise id to grade
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    pub exercise: Option<String>,
    /// Grade every available exercise
    #[arg(long)]
    pub all: bool,
    /// Submissions graded at once [default and most: one per core; every timing criterion compares quantities measured in the same windows, so a busy neighbour cannot flip it]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Gradebook folder (records and gradebooks)
    #[arg(long, default_value = "grades")]
    pub out: PathBuf,
    /// Skip students whose record's key (submission, spec, rubric, grader, seed) is unchanged
    #[arg(long)]
    pub resume: bool,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// Batch seed; each student's seed derives from it and their id (recorded per row)
    /// [default: random; with --resume the one in OUT/roster.json]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Grade only shard K of N (students by a hash of their id); needs --seed
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<(u32, u32)>,
    /// Wall-clock limit per run [default: timeout_s in exercise.yaml]
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
}

const WATCH_AFTER_HELP: &str = "\
Keys / 按键: r  regrade now 立即重评    q or Ctrl-C  quit 退出 (a grading in progress finishes first)

Exit codes / 退出码:
  0  you quit                                       已退出
  2  it could not start (unknown exercise, missing  无法开始（未知练习、找不到文件、
     file, no Python)                               没有 Python 环境等）

Each grading's verdict and score go to .grade/state.json (see `grade list`).";

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Forget the recorded verdicts and scores (.grade/state.json)
    #[arg(long)]
    pub reset: bool,
    #[arg(long, value_enum, default_value_t = Lang::Zh)]
    pub lang: Lang,
}

#[derive(Args, Debug)]
pub struct PolicyArgs {
    /// Exercise id (its additions included); the course's own policy without one
    pub id: Option<String>,
    #[arg(long, value_enum, default_value_t = PolicyFormat::Yaml)]
    pub format: PolicyFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyFormat {
    Yaml,
    Json,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Exercise id (`grade list` shows them)
    pub id: String,
    /// Watch and grade this file (.py or .ipynb) instead of exercises/<ID>/exercise.py
    #[arg(long)]
    pub submission: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// Seed for weights and inputs [default: a fresh random one per grading]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Wall-clock limit for each run [default: timeout_s in exercise.yaml]
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    #[arg(long, value_enum, default_value_t = Lang::Zh)]
    pub lang: Lang,
}

#[derive(Args, Debug)]
pub struct GradebookArgs {
    /// A `grade batch --out` folder
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The old gradebook: a --out folder or its grades.json
    pub old: PathBuf,
    /// The new gradebook
    pub new: PathBuf,
}

#[derive(Args, Debug)]
pub struct ExerciseArgs {
    /// Exercise id (`grade list` shows them)
    pub id: String,
    /// Grade this file (.py, or a Jupyter notebook .ipynb) instead of exercises/<ID>/exercise.py
    #[arg(long, conflicts_with = "solution")]
    pub submission: Option<PathBuf>,
    /// Grade the reference solution in solutions/<ID>/exercise.py
    #[arg(long)]
    pub solution: bool,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// Seed for weights and inputs [default: random, printed in the report]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Wall-clock limit for the submission's run [default: timeout_s in exercise.yaml]
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[arg(long, value_enum, default_value_t = Lang::Zh)]
    pub lang: Lang,
    /// The full table: every criterion's reason, not only the failed ones
    #[arg(long, short)]
    pub verbose: bool,
    /// Say each step of the grading on stderr as it starts (the lesson, then each probe), also
    /// when stderr is not a terminal (a notebook's `%grade`, a log)
    #[arg(long)]
    pub progress: bool,
    /// Also write the run's raw observations (metrics, traces, probe errors) as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub dump_observations: Option<PathBuf>,
    /// Also write the report as a self-contained HTML page with the lesson's pictures to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

const CHECK_AFTER_HELP: &str = "\
Exit codes / 退出码:
  0  no surprise: every expectation held            一切符合预期
  1  at least one surprise (listed with the part    至少一处意外（附上说明它的评分报告片段）
     of the report that shows it)
  2  check could not run (bad YAML, no Python, …)   无法检查（YAML 有误、没有 Python 等）

Expectations: tests/fixtures/<ID>/expected.yaml (criteria each fixture must fail) and the
`mistakes:` list of exercises/<ID>/exercise.yaml (README common mistakes → criteria).
Environment: GRADE_ROOT (course folder), GRADE_PYTHON (interpreter with torch), NO_COLOR.";

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Exercise ids to check [default: every available exercise]
    pub ids: Vec<String>,
    /// Grade every submission N times (each with a fresh seed): a flake shows as a surprise
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Grade N submissions at once [default and most: one per core, as `grade batch`; every
    /// timing criterion compares quantities measured in the same windows, so a busy neighbour
    /// cannot flip it]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Grade only these submissions: `solution`, `starter` or a fixture's file stem (repeatable).
    /// The static checks (expected.yaml, coverage, common mistakes) always run in full
    #[arg(long, value_name = "NAME")]
    pub only: Vec<String>,
    /// Device to grade on (criteria `only_on` another device are reported as not provable)
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// `json`: the whole check, every graded report included, for machines
    #[arg(long, value_enum, default_value_t = CheckFormat::Table)]
    pub format: CheckFormat,
    #[arg(long, value_enum, default_value_t = Lang::Zh)]
    pub lang: Lang,
}

/// `grade export`.
#[derive(Subcommand, Debug)]
pub enum ExportCommand {
    /// Gradescope's autograder zip: setup.sh and run_autograder at its root, the course in course/.
    /// Upload it on the assignment's "Configure Autograder" page.
    Gradescope(GradescopeArgs),
}

#[derive(Args, Debug)]
pub struct GradescopeArgs {
    /// Exercise id the autograder grades
    pub id: String,
    /// Where to write the zip
    #[arg(long, default_value = "autograder.zip")]
    pub out: PathBuf,
}

/// `--shard K/N` (K from 1, K ≤ N).
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let (k, n) = s.split_once('/').ok_or("expected K/N, e.g. 2/3")?;
    let (k, n): (u32, u32) = (
        k.trim().parse().map_err(|_| "K is not a number")?,
        n.trim().parse().map_err(|_| "N is not a number")?,
    );
    if n == 0 || k == 0 || k > n {
        return Err(format!("shard {k}/{n}: need 1 ≤ K ≤ N"));
    }
    Ok((k, n))
}

/// `grade check --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    Table,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Cuda,
    /// CUDA when libtorch sees a GPU, else CPU
    Auto,
}

impl DeviceArg {
    /// The device to grade on; `cuda` without CUDA is an error.
    pub fn resolve(self) -> Result<Device, GradeError> {
        let cuda = || tch::Cuda::is_available();
        match self {
            DeviceArg::Cpu => Ok(Device::Cpu),
            DeviceArg::Cuda if cuda() => Ok(Device::Cuda),
            DeviceArg::Cuda => Err(GradeError::NoCuda {
                why: crate::device::load_cuda_runtime().to_string(),
            }),
            DeviceArg::Auto => Ok(if cuda() { Device::Cuda } else { Device::Cpu }),
        }
    }
}
