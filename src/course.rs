//! The course on disk: where the root is, which exercises exist, where each file of one lives,
//! and which Python runs them.
use crate::error::GradeError;
use std::path::{Path, PathBuf};

/// The chapter's six lessons, in order.
pub const EXERCISES: [&str; 6] = [
    "01-metrics",
    "02-profiler",
    "03-memory",
    "04-checkpoint",
    "05-compile",
    "06-sync",
];

pub struct Course {
    pub root: PathBuf,
}

impl Course {
    /// `--root`/`GRADE_ROOT`, else the first folder upward from the current directory with
    /// `exercises/` and `rubrics/`, else the source tree `grade` was built from.
    pub fn locate(explicit: Option<PathBuf>) -> Result<Course, GradeError> {
        let is_root = |p: &Path| p.join("exercises").is_dir() && p.join("rubrics").is_dir();
        if let Some(root) = explicit {
            return if is_root(&root) {
                Ok(Course { root })
            } else {
                Err(GradeError::RootNotFound)
            };
        }
        if let Ok(cwd) = std::env::current_dir() {
            if let Some(found) = cwd.ancestors().find(|p| is_root(p)) {
                return Ok(Course {
                    root: found.to_path_buf(),
                });
            }
        }
        let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        if is_root(&built) {
            return Ok(Course { root: built });
        }
        Err(GradeError::RootNotFound)
    }

    pub fn check_id(&self, id: &str) -> Result<(), GradeError> {
        if !EXERCISES.contains(&id) {
            return Err(GradeError::UnknownExercise {
                id: id.into(),
                known: EXERCISES.join(" "),
            });
        }
        let dir = self.exercise_dir(id);
        if !dir.join("exercise.yaml").is_file() {
            return Err(GradeError::ExerciseMissing {
                id: id.into(),
                path: dir.join("exercise.yaml"),
            });
        }
        Ok(())
    }

    pub fn exercise_dir(&self, id: &str) -> PathBuf {
        self.root.join("exercises").join(id)
    }
    pub fn rubric(&self, id: &str) -> PathBuf {
        self.root.join("rubrics").join(format!("{id}.yaml"))
    }
    pub fn starter(&self, id: &str) -> PathBuf {
        self.exercise_dir(id).join("exercise.py")
    }
    pub fn solution(&self, id: &str) -> PathBuf {
        self.root.join("solutions").join(id).join("exercise.py")
    }
    /// `tests/fixtures/ID/`: one submission per common mistake, and `expected.yaml`.
    pub fn fixtures_dir(&self, id: &str) -> PathBuf {
        self.root.join("tests").join("fixtures").join(id)
    }
    pub fn readme(&self, id: &str) -> PathBuf {
        self.exercise_dir(id).join("README.md")
    }
    /// `path` relative to the course root, for messages.
    pub fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
    /// The folder with the `course` package.
    pub fn package_path(&self) -> PathBuf {
        self.root.join("exercises")
    }

    pub fn python(&self, explicit: Option<PathBuf>) -> PathBuf {
        explicit.unwrap_or_else(|| self.root.join(".venv").join("bin").join("python"))
    }
}
