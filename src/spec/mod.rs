//! Exercise and rubric files: read at run time with serde_yaml into typed, validated structs.
//! Every error names `file:line:column`, what was found and what is allowed.
pub mod exercise;
pub mod policy;
pub mod rubric;

pub use exercise::{Exercise, ModelConfig};
pub use policy::Policy;
pub use rubric::{Check, Criterion, Operand, Rubric};

use crate::error::GradeError;
use serde::de::DeserializeOwned;
use std::path::Path;

/// Parse a YAML file into `T`, mapping serde_yaml's errors to `file:line:column`.
pub fn load_yaml<T: DeserializeOwned>(path: &Path) -> Result<(T, String), GradeError> {
    let text = std::fs::read_to_string(path).map_err(|e| GradeError::Spec {
        path: path.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot read: {e}"),
    })?;
    match serde_yaml::from_str::<T>(&text) {
        Ok(v) => Ok((v, text)),
        Err(e) => {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((1, 1));
            // serde_yaml appends " at line L column C"; the prefix already says where.
            let msg = e.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            Err(GradeError::Spec {
                path: path.to_path_buf(),
                line,
                column,
                message: msg,
            })
        }
    }
}

/// A semantic error found after parsing: point at the first line containing `needle`.
pub fn spec_error(path: &Path, text: &str, needle: &str, message: String) -> GradeError {
    let (line, column) = text
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
        .unwrap_or((1, 1));
    GradeError::Spec {
        path: path.to_path_buf(),
        line,
        column,
        message,
    }
}
