//! Command line (clap derive): `grade exercise`, `grade list`.
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
    /// List the exercises.
    List,
}

#[derive(Args, Debug)]
pub struct ExerciseArgs {
    /// Exercise id: 01-metrics 02-profiler 03-memory 04-checkpoint 05-compile 06-sync
    pub id: String,
    /// Grade this file instead of exercises/<ID>/exercise.py
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
    /// Also write the run's raw observations (metrics, traces, probe errors) as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub dump_observations: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Cuda,
    /// CUDA when libtorch sees a GPU, else CPU
    Auto,
}
