//! The course's Python (`policy:` in `course.yaml`, a lesson's additions in its `exercise.yaml`):
//! which modules a submission may import and what of each it may use, which classes its classes
//! may derive from, what it may set, and what to use instead of a refused name. Read and shape-
//! checked here; enforced in the submission's process by `src/driver/policy.py`, to which the job
//! hands it as JSON.
use crate::i18n::Text;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Module name → what of it a submission may use: `"*"` (every public name), a name, or
    /// `"!name"` (not that one). An empty list makes only the module's listed submodules reachable.
    #[serde(default)]
    pub modules: BTreeMap<String, Vec<String>>,
    /// Dotted names of the classes a submission's classes may derive from.
    #[serde(default)]
    pub bases: Vec<String>,
    /// Dotted names of modules (prefixes) whose attributes, and types whose instances' public
    /// attributes, a submission may set.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Dotted names of types whose instances may have only the attributes named set, each to a
    /// value of exactly one of its plain types (`int`, `bool`, `float`, `str`): a logger's level,
    /// never an object whose comparison runs the submission's code where logging reads it.
    #[serde(default)]
    pub settings: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Dotted names of class attributes refused although public (`torch.profiler.profile.
    /// toggle_collection_dynamic`: a profiler that stops collecting while it looks active).
    #[serde(default)]
    pub denied: Vec<String>,
    /// Dotted prefix → what to use instead (shown with a refusal).
    #[serde(default)]
    pub hints: BTreeMap<String, Text>,
}

/// `GRADE_POLICY=off` in the grader's environment: submissions run without the course's Python
/// (plain import; the static audit and the sandbox still hold). Only for the sandbox's own tests
/// (`tests/hostile.rs`, the robustness cases of `tests/e2e.rs`), which must meet attacks the
/// policy would refuse first; every report graded so says so.
pub fn switched_off() -> bool {
    std::env::var("GRADE_POLICY").is_ok_and(|v| v == "off")
}

impl Policy {
    /// The course's policy with a lesson's additions: a module's names are the union of both
    /// lists; bases, writable entries and hints are added.
    pub fn with(&self, lesson: &Policy) -> Policy {
        let mut out = self.clone();
        for (module, names) in &lesson.modules {
            let entry = out.modules.entry(module.clone()).or_default();
            for n in names {
                if !entry.contains(n) {
                    entry.push(n.clone());
                }
            }
        }
        out.bases.extend(lesson.bases.iter().cloned());
        out.writable.extend(lesson.writable.iter().cloned());
        for (ty, attrs) in &lesson.settings {
            out.settings
                .entry(ty.clone())
                .or_default()
                .extend(attrs.iter().map(|(a, t)| (a.clone(), t.clone())));
        }
        out.denied.extend(lesson.denied.iter().cloned());
        out.hints
            .extend(lesson.hints.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// The first entry that is not a dotted name, `*` or `!name` (what is wrong and where).
    pub fn problem(&self) -> Option<(String, String)> {
        let dotted = |s: &str| {
            !s.is_empty()
                && s.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
        };
        for (module, names) in &self.modules {
            if !dotted(module) {
                return Some((
                    format!("{module}:"),
                    format!("`{module}` is not a module name"),
                ));
            }
            for n in names {
                let bare = n.strip_prefix('!').unwrap_or(n);
                if n != "*" && (!dotted(bare) || bare.contains('.')) {
                    return Some((
                        n.clone(),
                        format!("`{n}` in modules.{module} is not a name, \"*\" or \"!name\""),
                    ));
                }
            }
        }
        for b in self
            .bases
            .iter()
            .chain(&self.writable)
            .chain(&self.denied)
            .chain(self.settings.keys())
        {
            if !dotted(b) {
                return Some((b.clone(), format!("`{b}` is not a dotted name")));
            }
        }
        for (ty, attrs) in &self.settings {
            for (attr, types) in attrs {
                if !dotted(attr) || attr.contains('.') || attr.starts_with('_') {
                    return Some((
                        attr.clone(),
                        format!("`{attr}` in settings.{ty} is not a public attribute name"),
                    ));
                }
                if let Some(t) = types
                    .iter()
                    .find(|t| !["int", "bool", "float", "str"].contains(&t.as_str()))
                {
                    return Some((
                        t.clone(),
                        format!("`{t}` in settings.{ty}.{attr} is not int, bool, float or str"),
                    ));
                }
            }
        }
        None
    }
}
