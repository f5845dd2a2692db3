//! `exercises/NN-name/exercise.yaml`: the exercise's model, workload and scenario parameters.
use super::{load_yaml, spec_error};
use crate::error::GradeError;
use crate::i18n::Text;
use crate::pictures::Picture;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// TinyGPT's shape and the batch the grader generates.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub vocab: i64,
    pub seq_len: i64,
    pub d_model: i64,
    pub n_heads: i64,
    pub n_blocks: i64,
    pub batch: i64,
}

/// Choices of TinyGPT's shape drawn from the seed at every grading (lesson 03: so no table of
/// bytes can be pasted). Each key lists the values to draw from; a key left out keeps `model:`'s.
/// Every `d_model` must be divisible by every `n_heads`, so any draw is a valid model; `seq_len`
/// and `batch` are not drawn (the sweep's grid and the single ledgers' batch depend on them).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelDraw {
    #[serde(default)]
    pub vocab: Vec<i64>,
    #[serde(default)]
    pub d_model: Vec<i64>,
    #[serde(default)]
    pub n_heads: Vec<i64>,
    #[serde(default)]
    pub n_blocks: Vec<i64>,
}

/// One common mistake of the lesson: `zh` is quoted from the README's `### 常见错误` section.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Mistake {
    pub zh: String,
    pub en: String,
    /// Rubric criterion ids that catch it.
    pub criteria: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Exercise {
    pub id: String,
    pub title: Text,
    /// Wall-clock limit for one run of the submission, seconds.
    pub timeout_s: u64,
    /// Data-segment limit for the submission's process on CPU, MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    pub model: ModelConfig,
    /// The shape drawn per seed (`Exercise::model_for`); absent: `model` as written.
    #[serde(default)]
    pub model_draw: Option<ModelDraw>,
    /// Passed to the scenario as-is (`ctx.params`); the scenario documents its keys.
    #[serde(default)]
    pub params: serde_yaml::Mapping,
    /// The lesson README's common mistakes (常见错误), each mapped to the criteria that catch it.
    /// Read by `grade check`; grading ignores it.
    #[serde(default)]
    pub mistakes: Vec<Mistake>,
    /// Dotted prefixes the submission may assign although it did not define them (the static
    /// audit's per-lesson allowance, e.g. `torch._dynamo.config` for lesson 05's recompile limits).
    #[serde(default)]
    pub audit_allow: Vec<String>,
    /// What this lesson's contract needs of Python beyond the course's policy (`course.yaml`
    /// `policy:`); after `pipeline::Spec::load`, the course's policy with these additions.
    #[serde(default)]
    pub policy: crate::spec::Policy,
    /// The lesson's pictures in a report page (`--html`, `grade report`), drawn from the recorded
    /// evidence: one picture kind each (`src/pictures/`). Grading ignores it.
    #[serde(
        default,
        deserialize_with = "crate::pictures::deserialize_list",
        serialize_with = "crate::pictures::serialize_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pictures: Vec<Picture>,
    #[serde(skip)]
    pub dir: PathBuf,
}

/// A picture's semantic error, located at `needle` inside the `i`-th entry of `pictures:` (else
/// at the entry, else at `pictures:`).
fn picture_error(path: &Path, text: &str, i: usize, needle: &str, message: String) -> GradeError {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("pictures:"))
        .unwrap_or(0);
    // entries are the lines of the list's own indentation that start with `- `
    let indent = lines[start + 1..].iter().find_map(|l| {
        l.trim_start()
            .starts_with("- ")
            .then(|| l.len() - l.trim_start().len())
    });
    let entries: Vec<usize> = (start + 1..lines.len())
        .filter(|&n| {
            let l = lines[n];
            Some(l.len() - l.trim_start().len()) == indent && l.trim_start().starts_with("- ")
        })
        .collect();
    let from = entries.get(i).copied().unwrap_or(start);
    let to = entries.get(i + 1).copied().unwrap_or(lines.len());
    let (line, column) = (from..to)
        .find_map(|n| lines[n].find(needle).map(|c| (n + 1, c + 1)))
        .unwrap_or((from + 1, 1));
    GradeError::Spec {
        path: path.to_path_buf(),
        line,
        column,
        message: format!("pictures[{i}]: {message}"),
    }
}

impl Exercise {
    pub fn load(dir: &Path) -> Result<Exercise, GradeError> {
        let path = dir.join("exercise.yaml");
        let (mut ex, text): (Exercise, String) = load_yaml(&path)?;
        ex.dir = dir.to_path_buf();
        let m = &ex.model;
        for (name, v) in [
            ("vocab", m.vocab),
            ("seq_len", m.seq_len),
            ("d_model", m.d_model),
            ("n_heads", m.n_heads),
            ("n_blocks", m.n_blocks),
            ("batch", m.batch),
        ] {
            if v <= 0 {
                return Err(spec_error(
                    &path,
                    &text,
                    &format!("{name}:"),
                    format!("model.{name} is {v}; it must be a positive integer"),
                ));
            }
        }
        if m.d_model % m.n_heads != 0 {
            return Err(spec_error(
                &path,
                &text,
                "n_heads:",
                format!(
                    "model.d_model ({}) must be divisible by model.n_heads ({})",
                    m.d_model, m.n_heads
                ),
            ));
        }
        if let Some(draw) = &ex.model_draw {
            for (name, vs) in [
                ("vocab", &draw.vocab),
                ("d_model", &draw.d_model),
                ("n_heads", &draw.n_heads),
                ("n_blocks", &draw.n_blocks),
            ] {
                if vs.iter().any(|&v| v <= 0) {
                    return Err(spec_error(
                        &path,
                        &text,
                        "model_draw:",
                        format!("model_draw.{name} has a value ≤ 0; every choice must be a positive integer"),
                    ));
                }
            }
            let ds = if draw.d_model.is_empty() {
                vec![m.d_model]
            } else {
                draw.d_model.clone()
            };
            let hs = if draw.n_heads.is_empty() {
                vec![m.n_heads]
            } else {
                draw.n_heads.clone()
            };
            for d in &ds {
                if let Some(h) = hs.iter().find(|&&h| d % h != 0) {
                    return Err(spec_error(
                        &path,
                        &text,
                        "model_draw:",
                        format!("model_draw: d_model {d} is not divisible by n_heads {h}; every choice of d_model must be divisible by every choice of n_heads"),
                    ));
                }
            }
        }
        if ex.timeout_s == 0 {
            return Err(spec_error(
                &path,
                &text,
                "timeout_s:",
                "timeout_s must be at least 1 second".into(),
            ));
        }
        for m in &ex.mistakes {
            if m.zh.trim().is_empty() || m.en.trim().is_empty() || m.criteria.is_empty() {
                return Err(spec_error(
                    &path,
                    &text,
                    if m.zh.trim().is_empty() {
                        "mistakes:"
                    } else {
                        &m.zh
                    },
                    "each entry of mistakes: needs zh, en and at least one criterion id".into(),
                ));
            }
        }
        for (i, p) in ex.pictures.iter().enumerate() {
            if let Err((message, needle)) = p.validate() {
                return Err(picture_error(&path, &text, i, &needle, message));
            }
        }
        let dir_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if ex.id != dir_name {
            return Err(spec_error(
                &path,
                &text,
                "id:",
                format!(
                    "id is `{}` but the folder is `{dir_name}`; they must match",
                    ex.id
                ),
            ));
        }
        Ok(ex)
    }

    /// The model graded under `seed`: `model:` with the keys of `model_draw:` drawn from their
    /// choices (the same seed, the same shape, on any machine). Without `model_draw:`, `model:`.
    pub fn model_for(&self, seed: u64) -> ModelConfig {
        use rand::{Rng, SeedableRng};
        let mut cfg = self.model.clone();
        let Some(draw) = &self.model_draw else {
            return cfg;
        };
        // a stream of its own: the workload's weights and batch draw from `seed` itself
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x6d6f_6465_6c5f_6472);
        let mut pick = |choices: &[i64], keep: i64| {
            if choices.is_empty() {
                keep
            } else {
                choices[rng.random_range(0..choices.len())]
            }
        };
        cfg.vocab = pick(&draw.vocab, cfg.vocab);
        cfg.d_model = pick(&draw.d_model, cfg.d_model);
        cfg.n_heads = pick(&draw.n_heads, cfg.n_heads);
        cfg.n_blocks = pick(&draw.n_blocks, cfg.n_blocks);
        cfg
    }

    /// Resolve `$model.KEY` or `$params.KEY[.SUB]` to a number.
    pub fn lookup(&self, reference: &str) -> Option<f64> {
        let mut parts = reference.trim_start_matches('$').split('.');
        match parts.next()? {
            "model" => {
                let v = serde_yaml::to_value(&self.model).ok()?;
                v.get(parts.next()?)?.as_f64()
            }
            "params" => {
                let mut v = self.params.get(parts.next()?)?;
                for p in parts {
                    v = v.get(p)?;
                }
                v.as_f64()
            }
            _ => None,
        }
    }
}
