//! What `grade check` reports: a `Surprise` (something not as the course says it should be) and
//! the `Part` of the summary table it belongs to. Below the rest of `selftest/`: the coverage
//! checks make surprises, the runs make them, the renderer prints them.
use crate::i18n::Text;
use serde::Serialize;

/// The column of the summary table a finding belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    Solution,
    Starter,
    Fixtures,
    Coverage,
}

/// Something that is not as the course says it should be.
#[derive(Clone, Debug, Serialize)]
pub struct Surprise {
    pub exercise: String,
    pub part: Part,
    /// `solution`, `starter` or the fixture's stem, for graded submissions.
    pub submission: Option<String>,
    pub run: Option<u32>,
    pub seed: Option<u64>,
    /// The criteria concerned.
    pub criteria: Vec<String>,
    /// The files to look at, relative to the course root.
    pub files: Vec<String>,
    pub message: Text,
    /// The part of the graded report that shows it: verdicts with reasons, run failure, stderr.
    pub evidence: Vec<Text>,
}

impl Surprise {
    pub fn coverage(
        exercise: &str,
        criteria: Vec<String>,
        files: Vec<String>,
        message: Text,
    ) -> Self {
        Surprise {
            exercise: exercise.into(),
            part: Part::Coverage,
            submission: None,
            run: None,
            seed: None,
            criteria,
            files,
            message,
            evidence: Vec::new(),
        }
    }
}
