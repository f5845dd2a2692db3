//! `tests/fixtures/ID/expected.yaml`: which criteria each fixture must fail — exactly those.
//! Keys are fixture file stems, plus `solution` (must be `[]`) and `starter`. A value is a list
//! of criterion ids (`no_sync: [compare_sync]`), or `{fail: [...], cpu: [...], cuda: [...]}` when
//! some criteria fail on one device only, or `refused` when the course's Python refuses it (then it
//! is not run at all and fails every criterion that applies: `src/driver/policy.py`). Validated against the rubric and the folder: an unknown
//! criterion, an entry without its `.py` file or a `.py` file without an entry is an error at
//! `file:line:column`. A fixture that must fail something is not held to the rubric's timing
//! bands (`band: true`) its entry leaves out, nor to the criteria its entry names `either:`
//! (`{fail: [...], either: [...]}`: a verdict its mistake leaves to what the grading draws, a
//! model shape from the seed; `selftest::Graded::either`); `{either: [...]}` alone: at least one
//! of them must fail; `{may: [...]}`: a fixture that fails nothing else may fail these.
use crate::course::Course;
use crate::device::Device;
use crate::error::GradeError;
use crate::spec::rubric::{Criterion, OnlyOn};
use crate::spec::{load_yaml, spec_error, Rubric};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const SOLUTION: &str = "solution";
pub const STARTER: &str = "starter";

/// The criteria one submission must fail: on every device, and on one device only.
/// Written `[ids]` or `{fail: [ids], cpu: [ids], cuda: [ids]}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fails {
    #[serde(default)]
    pub fail: Vec<String>,
    #[serde(default)]
    pub cpu: Vec<String>,
    #[serde(default)]
    pub cuda: Vec<String>,
    /// Criteria it may pass or fail: its mistake (already failing `fail`) puts it near their
    /// edge, on one side or the other by the shape a grading draws (lesson 04's
    /// `checkpoint_sequential_last`: two of three blocks checkpointed keep about half the bytes).
    /// Alone (no `fail:`): it must fail at least one of them, which one the draw decides (lesson
    /// 02's `redteam18_getattr_guard_frame`: its own work between the steps either ranks in the
    /// whole recording's top 5, which its list leaves out, or in its top 3, which is no training
    /// row). A fixture that must pass (`[]`) is held to every criterion.
    #[serde(default)]
    pub either: Vec<String>,
    /// Criteria a fixture that fails nothing else may pass or fail: a cheat the grader has made
    /// honest but for a chance it cannot rule out (lesson 04's `redteam22_logrecord_select`: its
    /// hidden clock is logging's stamp, whole seconds now, and leaves a step out of its windows
    /// only when a second's boundary falls inside it).
    #[serde(default)]
    pub may: Vec<String>,
    /// `refused`: the course's Python refuses it before it runs; every criterion fails.
    #[serde(skip)]
    pub refused: bool,
}

/// An entry of expected.yaml: a list, or the by-device map (its own errors kept).
struct Entry(Fails);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Entry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a list of criterion ids, {fail: [...], cpu: [...], cuda: [...]}, or `refused`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Entry, E> {
                if v == "refused" {
                    Ok(Entry(Fails {
                        refused: true,
                        ..Fails::default()
                    }))
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(v), &self))
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Entry, A::Error> {
                let fail = Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Entry(Fails {
                    fail,
                    ..Fails::default()
                }))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Entry, A::Error> {
                Fails::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Entry)
            }
        }
        d.deserialize_any(V)
    }
}

impl Fails {
    /// The criteria it must fail on `device`.
    pub fn on(&self, device: Device) -> Vec<&String> {
        let only = match device {
            Device::Cpu => &self.cpu,
            Device::Cuda => &self.cuda,
        };
        self.fail.iter().chain(only).collect()
    }
    fn all(&self) -> impl Iterator<Item = &String> {
        self.fail.iter().chain(&self.cpu).chain(&self.cuda)
    }
    /// What it is not held to on `device` besides the rubric's bands: its `either:` criteria.
    pub fn either_on(&self, device: Device, rubric: &Rubric) -> Vec<String> {
        Self::applicable(&self.either, device, rubric)
    }
    /// Its `may:` criteria on `device` (not held to either; never "one of").
    pub fn may_on(&self, device: Device, rubric: &Rubric) -> Vec<String> {
        Self::applicable(&self.may, device, rubric)
    }
    fn applicable(ids: &[String], device: Device, rubric: &Rubric) -> Vec<String> {
        rubric
            .criteria
            .iter()
            .filter(|c| ids.contains(&c.id) && applies(c, device))
            .map(|c| c.id.clone())
            .collect()
    }
}

/// Whether a criterion is graded on `device` (else it is SKIP).
pub fn applies(c: &Criterion, device: Device) -> bool {
    match c.only_on {
        None => true,
        Some(OnlyOn::Cpu) => device == Device::Cpu,
        Some(OnlyOn::Cuda) => device == Device::Cuda,
    }
}

/// The timing bands (`band: true`) a submission that must fail `must_fail` is not held to: when
/// it is wrong elsewhere, its error may be a small factor on a real timing, which the machine's
/// load can move across a band's edge, so either verdict of a band its entry does not list is as
/// expected. A submission that must pass (`[]`) is held to every band.
pub fn bands_not_held(rubric: &Rubric, must_fail: &[String], device: Device) -> Vec<String> {
    if must_fail.is_empty() {
        return Vec::new();
    }
    rubric
        .criteria
        .iter()
        .filter(|c| c.band && !must_fail.contains(&c.id))
        .filter(|c| applies(c, device))
        .map(|c| c.id.clone())
        .collect()
}

/// The expectations of one exercise.
#[derive(Debug, Default)]
pub struct Expected {
    /// `tests/fixtures/ID/expected.yaml` (may not exist when there are no fixtures).
    pub path: PathBuf,
    /// `starter:` — the criteria the starter must fail, when listed.
    pub starter: Option<Fails>,
    /// Fixture stem → (its file, the criteria it must fail).
    pub fixtures: BTreeMap<String, (PathBuf, Fails)>,
}

impl Expected {
    pub fn load(course: &Course, id: &str, rubric: &Rubric) -> Result<Expected, GradeError> {
        let dir = course.fixtures_dir(id);
        let path = dir.join("expected.yaml");
        let py_files = python_files(&dir);
        if !path.exists() && py_files.is_empty() {
            return Ok(Expected {
                path,
                ..Expected::default()
            });
        }
        let (entries, text): (BTreeMap<String, Entry>, String) = load_yaml(&path)?;
        let known: BTreeSet<&str> = rubric.criteria.iter().map(|c| c.id.as_str()).collect();
        let mut out = Expected {
            path: path.clone(),
            ..Expected::default()
        };
        for (key, entry) in entries {
            let mut fails = entry.0;
            if fails.refused {
                // refused before it runs: every criterion fails where it applies
                for c in &rubric.criteria {
                    match c.only_on {
                        None => fails.fail.push(c.id.clone()),
                        Some(OnlyOn::Cpu) => fails.cpu.push(c.id.clone()),
                        Some(OnlyOn::Cuda) => fails.cuda.push(c.id.clone()),
                    }
                }
            }
            let at_key = |needle: &str, msg: String| locate(&path, &text, &key, needle, msg);
            let mut seen = BTreeSet::new();
            for c in fails.all() {
                if !known.contains(c.as_str()) {
                    return Err(at_key(
                        c,
                        format!(
                            "`{key}`: unknown criterion `{c}`; the criteria of {} are: {}",
                            course.rel(&course.rubric(id)),
                            known.iter().copied().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
                if !seen.insert(c) {
                    return Err(at_key(c, format!("`{key}`: `{c}` is listed twice")));
                }
            }
            for (c, field) in fails
                .either
                .iter()
                .map(|c| (c, "either"))
                .chain(fails.may.iter().map(|c| (c, "may")))
            {
                if !known.contains(c.as_str()) {
                    return Err(at_key(
                        c,
                        format!("`{key}`: unknown criterion `{c}` under `{field}:`"),
                    ));
                }
                if !seen.insert(c) {
                    return Err(at_key(
                        c,
                        format!("`{key}`: `{c}` is both to fail and `{field}:`; name it once"),
                    ));
                }
            }
            if !fails.may.is_empty() && (fails.all().next().is_some() || !fails.either.is_empty()) {
                return Err(at_key(
                    &fails.may[0],
                    format!("`{key}`: `may:` is for a fixture that fails nothing else (use `either:` beside `fail:`)"),
                ));
            }
            match key.as_str() {
                SOLUTION if fails.all().next().is_some() => {
                    return Err(at_key(
                        fails.all().next().expect("not empty"),
                        "`solution` must be [] — the reference solution passes every criterion"
                            .into(),
                    ))
                }
                SOLUTION => {}
                STARTER => out.starter = Some(fails),
                stem => {
                    let file = dir.join(format!("{stem}.py"));
                    if !file.is_file() {
                        return Err(at_key(
                            &format!("{stem}:"),
                            format!(
                                "`{stem}` is listed but {} does not exist (keys are fixture file stems, `solution` or `starter`)",
                                course.rel(&file)
                            ),
                        ));
                    }
                    out.fixtures.insert(stem.to_string(), (file, fails));
                }
            }
        }
        for stem in py_files {
            if stem == SOLUTION || stem == STARTER {
                return Err(spec_error(
                    &path,
                    &text,
                    &format!("{stem}:"),
                    format!(
                        "a fixture may not be named {stem}.py: the key `{stem}` means the {}",
                        if stem == SOLUTION {
                            "reference solution"
                        } else {
                            "starter"
                        }
                    ),
                ));
            }
            if !out.fixtures.contains_key(&stem) {
                return Err(GradeError::Spec {
                    path: path.clone(),
                    line: 1,
                    column: 1,
                    message: format!(
                        "{} has no entry; add `{stem}: [criteria it must fail]` ([] if it must pass)",
                        course.rel(&dir.join(format!("{stem}.py")))
                    ),
                });
            }
        }
        Ok(out)
    }
}

/// Stems of the `.py` files directly in `dir`, sorted.
fn python_files(dir: &Path) -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "py"))
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(String::from))
        .collect();
    stems.sort();
    stems
}

/// `spec_error` at the first `needle` within the top-level entry `key:`, comments ignored.
pub fn locate(path: &Path, text: &str, key: &str, needle: &str, message: String) -> GradeError {
    let anchor = format!("{key}:");
    let masked = mask_comments(text);
    let start = masked
        .iter()
        .position(|l| l.starts_with(&anchor))
        .unwrap_or(0);
    spec_error(path, &blank_before(&masked, start), needle, message)
}

/// The text's lines with `# comments` blanked out (same line numbers and columns).
pub fn mask_comments(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let cut = l
                .char_indices()
                .find(|&(i, c)| c == '#' && (i == 0 || l[..i].ends_with(char::is_whitespace)))
                .map_or(l.len(), |(i, _)| i);
            l[..cut].to_string()
        })
        .collect()
}

/// Lines before `start` emptied, so a search finds nothing there.
pub fn blank_before(lines: &[String], start: usize) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| if i < start { "" } else { l.as_str() })
        .collect::<Vec<_>>()
        .join("\n")
}
