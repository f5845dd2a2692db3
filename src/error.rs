//! Errors the user acts on, and the documented exit codes they map to.
use std::path::PathBuf;

/// Exit codes (documented in `--help` and the README).
pub mod exit {
    /// Every criterion passed.
    pub const PASS: i32 = 0;
    /// At least one criterion failed (the submission ran, or failed to run, and was graded).
    pub const FAIL: i32 = 1;
    /// The grader could not grade: bad spec, missing submission, missing Python/torch, internal error.
    pub const CANNOT_GRADE: i32 = 2;
}

/// Why `grade` could not grade. Each message says what failed, where, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum GradeError {
    #[error("{path}:{line}:{column}: {message}")]
    Spec {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },

    #[error("unknown exercise `{id}`; known exercises: {known}. Run `grade list` to see them.")]
    UnknownExercise { id: String, known: String },

    #[error("submission not found: {path}\n  hint: grade your working copy with `grade exercise {id}`, or pass --submission FILE")]
    SubmissionMissing { path: PathBuf, id: String },

    #[error("Python interpreter not usable: {path}: {reason}\n  hint: run `./setup.sh` (it creates .venv with torch==2.13.0), or set GRADE_PYTHON")]
    Python { path: PathBuf, reason: String },

    #[error("course root not found (a folder with exercises/ and rubrics/); run grade inside the repository or set GRADE_ROOT")]
    RootNotFound,

    #[error("--device cuda requested but CUDA is not available to libtorch on this machine: {why}; use --device cpu or auto")]
    NoCuda { why: String },

    #[error(transparent)]
    Notebook(#[from] NotebookError),

    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl GradeError {
    pub fn exit_code(&self) -> i32 {
        exit::CANNOT_GRADE
    }
}

/// Why a notebook could not be read (exit 2: the grader could not grade).
#[derive(Debug, thiserror::Error)]
pub enum NotebookError {
    #[error("{path}:{line}:{column}: not a valid notebook: {message}\n  hint: the file is not the JSON Jupyter writes; open and save it again in Jupyter / 笔记本文件不是合法的 JSON")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: nbformat {found} is not supported (nbformat 4 is)\n  hint: save it again in a current Jupyter, or `jupyter nbconvert --to notebook --nbformat 4 {path}` / 请用 nbformat 4 保存")]
    OldFormat { path: PathBuf, found: String },
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
}
