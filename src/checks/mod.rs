//! The rubric engine: evaluates each criterion's check against the evidence of one run and
//! returns verdicts. One file per check kind; this file dispatches and formats numbers.
pub mod answer;
mod asleep;
pub mod audit;
pub mod break_even;
pub mod call_windows;
pub mod close;
pub mod growth;
pub mod ledger;
pub mod profiler;
pub mod range;
pub mod ranking;
pub mod ratio;
pub mod reproducible;
pub mod series;
pub mod stats;
pub mod step_ratio;
pub mod step_time;
pub mod trace;
mod trace_expect;

use crate::device::Device;
use crate::i18n::Text;
use crate::observations::{Absent, Evidence};
use crate::spec::rubric::{Check, OnlyOn};
use crate::spec::{Exercise, Operand, Rubric};
use crate::text;
use serde::Serialize;

/// What one check found.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub pass: bool,
    /// The measured value, human-readable.
    pub measured: Text,
    /// The bound it was held to.
    pub bound: Text,
    /// Why it passed or failed.
    pub why: Text,
    /// The probe whose failure left nothing to judge (the report names it once).
    pub blocked_by: Option<String>,
}

impl Outcome {
    pub fn new(
        pass: bool,
        measured: impl Into<Text>,
        bound: impl Into<Text>,
        why: Text,
    ) -> Outcome {
        Outcome {
            pass,
            measured: measured.into(),
            bound: bound.into(),
            why,
            blocked_by: None,
        }
    }

    /// The value needed is not there: fail, saying why.
    pub fn missing(why: impl Into<Absent>, bound: impl Into<Text>) -> Outcome {
        let absent = why.into();
        Outcome {
            pass: false,
            measured: "—".into(),
            bound: bound.into(),
            why: absent.why,
            blocked_by: absent.probe,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// One criterion's verdict, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub id: String,
    pub title: Text,
    pub status: Status,
    pub points: u32,
    pub measured: Text,
    pub bound: Text,
    pub why: Text,
    pub catches: Option<Text>,
    /// The failed probe that left this criterion nothing to judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    /// A gate (`gate: true` in the rubric): it earns no points itself, and when it fails the
    /// lesson scores 0 (the course's Python and the grader's instruments, like a compile error).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gate: bool,
    /// The criteria whose passing its points need (`requires:` in the rubric).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
}

/// What checks read besides the evidence: `$model.*` / `$params.*` bounds.
pub struct Env<'a> {
    pub evidence: &'a Evidence,
    pub exercise: &'a Exercise,
}

impl Env<'_> {
    pub fn resolve(&self, op: &Option<Operand>) -> Option<f64> {
        op.as_ref().and_then(|o| o.resolve(self.exercise))
    }

    /// A bound that may also be `$metric.NAME` (a number this run recorded): `Ok(None)` when
    /// none is given, `Err` when the run did not record it (its probe failed), so that a missing
    /// bound is never read as no bound.
    pub fn bound(&self, op: &Option<Operand>) -> Result<Option<f64>, Absent> {
        match op {
            Some(Operand::Metric(name)) => self.evidence.number(name).map(Some),
            _ => Ok(self.resolve(op)),
        }
    }
}

pub fn evaluate(check: &Check, env: &Env) -> Outcome {
    match check {
        Check::Close(c) => close::evaluate(c, env),
        Check::Ledger(l) => ledger::evaluate(l, env),
        Check::Growth(g) => growth::evaluate(g, env),
        Check::Ratio(r) => ratio::evaluate(r, env),
        Check::Range(r) => range::evaluate(r, env),
        Check::Trace(t) => trace::evaluate(t, env),
        Check::Answer(a) => answer::evaluate(a, env),
        Check::Audit(_) => audit::evaluate(env),
        Check::Reproducible(r) => reproducible::evaluate(r, env),
        Check::Ranking(r) => ranking::evaluate(r, env),
        Check::Phase(p) => profiler::evaluate_phase(p, env),
        Check::PerCall(c) => profiler::evaluate_per_call(c, env),
        Check::Series(s) => series::evaluate(s, env),
        Check::Stats(s) => stats::evaluate(s, env),
        Check::StepTime(s) => step_time::evaluate(s, env),
        Check::StepRatio(s) => step_ratio::evaluate(s, env),
        Check::BreakEven(b) => break_even::evaluate(b, env),
        Check::CallWindows(p) => call_windows::evaluate(p, env),
        Check::All(checks) => {
            let outs: Vec<Outcome> = checks.iter().map(|c| evaluate(c, env)).collect();
            let failed: Vec<&Outcome> = outs.iter().filter(|o| !o.pass).collect();
            let shown: Vec<&Outcome> = if failed.is_empty() {
                outs.iter().collect()
            } else {
                failed.clone()
            };
            let join = |parts: Vec<&Text>| {
                // a part that says nothing (a sub-check with nothing to show) adds no separator
                let mut zh: Vec<&str> = parts
                    .iter()
                    .map(|t| t.zh.as_str())
                    .filter(|s| !s.is_empty())
                    .collect();
                let mut en: Vec<&str> = parts
                    .iter()
                    .map(|t| t.en.as_str())
                    .filter(|s| !s.is_empty())
                    .collect();
                zh.dedup();
                en.dedup();
                Text::new(zh.join("；"), en.join("; "))
            };
            Outcome {
                pass: failed.is_empty(),
                measured: join(outs.iter().map(|o| &o.measured).collect()),
                bound: join(outs.iter().map(|o| &o.bound).collect()),
                why: join(shown.iter().map(|o| &o.why).collect()),
                blocked_by: failed.iter().find_map(|o| o.blocked_by.clone()),
            }
        }
    }
}

/// The failed `audit` inside `check` (itself or under `all`), if any.
fn audit_failure(check: &Check, env: &Env) -> Option<Outcome> {
    match check {
        Check::Audit(_) => Some(audit::evaluate(env)).filter(|o| !o.pass),
        Check::All(checks) => checks.iter().find_map(|c| audit_failure(c, env)),
        _ => None,
    }
}

/// Grade every criterion of `rubric`.
pub fn grade(rubric: &Rubric, env: &Env, device: Device) -> Vec<Verdict> {
    rubric
        .criteria
        .iter()
        .map(|c| {
            let applies = match c.only_on {
                None => true,
                Some(OnlyOn::Cpu) => device == Device::Cpu,
                Some(OnlyOn::Cuda) => device == Device::Cuda,
            };
            let (status, out) = if !applies {
                let on = if c.only_on == Some(OnlyOn::Cuda) {
                    "cuda"
                } else {
                    "cpu"
                };
                let out = Outcome::new(
                    true,
                    "—",
                    "—",
                    text!(
                        format!("仅在 --device {on} 上检查"),
                        format!("checked only with --device {on}")
                    ),
                );
                (Status::Skip, out)
            } else {
                let out = match &env.evidence.run_failure {
                    // the audit left before the import: it is judged even when the run failed
                    Some(f) => match audit_failure(&c.check, env) {
                        Some(found) => Outcome {
                            why: Text::new(
                                format!("{}；{}", found.why.zh, f.zh),
                                format!("{}; {}", found.why.en, f.en),
                            ),
                            ..found
                        },
                        None => Outcome::missing(f.clone(), "—"),
                    },
                    None => evaluate(&c.check, env),
                };
                (if out.pass { Status::Pass } else { Status::Fail }, out)
            };
            Verdict {
                id: c.id.clone(),
                title: c.title.clone(),
                status,
                points: if c.gate { 0 } else { c.points },
                measured: out.measured,
                bound: out.bound,
                why: out.why,
                catches: c.catches.clone(),
                blocked_by: out.blocked_by,
                gate: c.gate,
                requires: c.requires.clone(),
            }
        })
        .collect()
}

/// Numbers for people: integers with thousands separators, others with 4 significant digits.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x.fract() == 0.0 && x.abs() < 1e15 {
        let s = format!("{}", x.abs() as u64);
        let mut out = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        return if x < 0.0 { format!("-{out}") } else { out };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        format!("{x:.3e}")
    } else {
        let digits = (3 - a.log10().floor() as i32).clamp(0, 9) as usize;
        let s = format!("{x:.digits$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// `≥ 0.9`, `≤ 0.5`, `in [0.5, 2]`.
pub fn fmt_bounds(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(l), Some(h)) if l == h => format!("= {}", fmt_num(l)),
        (Some(l), Some(h)) => format!("∈ [{}, {}]", fmt_num(l), fmt_num(h)),
        (Some(l), None) => format!("≥ {}", fmt_num(l)),
        (None, Some(h)) => format!("≤ {}", fmt_num(h)),
        (None, None) => "—".into(),
    }
}

pub fn within(x: f64, min: Option<f64>, max: Option<f64>) -> bool {
    x.is_finite() && min.is_none_or(|l| x >= l) && max.is_none_or(|h| x <= h)
}
