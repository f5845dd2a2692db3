//! The course on disk: where the root is, which lessons it has (found, not listed: every
//! `exercises/*/exercise.yaml`, ordered by folder name or by an optional `course.yaml`), where
//! each file of one lives, and which Python runs them.
use crate::error::GradeError;
use crate::i18n::Text;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// `course.yaml` at the course root (optional): the course's title, and an order for its lessons
/// (lessons it does not name follow, by folder name).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CourseFile {
    #[serde(default)]
    pub title: Option<Text>,
    #[serde(default)]
    pub order: Vec<String>,
    /// The course's Python: what every submission may import and use (`src/spec/policy.rs`).
    #[serde(default)]
    pub policy: crate::spec::Policy,
}

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

    /// `course.yaml`, when the course has one (a malformed one is an error at file:line:column).
    pub fn file(&self) -> Result<CourseFile, GradeError> {
        let path = self.root.join("course.yaml");
        if !path.is_file() {
            return Ok(CourseFile::default());
        }
        crate::spec::load_yaml(&path).map(|(f, _)| f)
    }

    /// The lessons: each folder of `exercises/` holding an `exercise.yaml` (whether or not it
    /// parses: a malformed one is reported where it is used), in `course.yaml`'s order, then by
    /// folder name.
    pub fn exercises(&self) -> Result<Vec<String>, GradeError> {
        let mut found: Vec<String> = std::fs::read_dir(self.root.join("exercises"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("exercise.yaml").is_file())
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        let order = self.file()?.order;
        let rank = |id: &String| order.iter().position(|o| o == id).unwrap_or(order.len());
        found.sort_by_key(|id| (rank(id), id.clone()));
        Ok(found)
    }

    pub fn check_id(&self, id: &str) -> Result<(), GradeError> {
        let known = self.exercises()?;
        if !known.iter().any(|k| k == id) {
            return Err(GradeError::UnknownExercise {
                id: id.into(),
                known: known.join(" "),
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
