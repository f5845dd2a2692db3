//! `phase` and `per_call`: what the grader observed of a profiler around the calls of a step it
//! handed over (lesson 02). Both read only events the grader recorded as they happened:
//! - `profiler {switch: prepare|enable|disable}`: a real switch of torch's profiler (the
//!   scenario wraps `torch.autograd.profiler`'s three switches);
//! - `step {id, variant?, active}` / `step_done {id, <field>}`: one call of the step, `active`
//!   being torch's own "a profiler is recording" flag, `<field>` the grader's own measurement of
//!   the call (e.g. `op_us`).
//!
//! `phase` counts the whole steps that ran in a profiler phase, the phase being derived from the
//! order of the switch events before the step (none → `prepare` → warmup → `enable` → record →
//! `disable` → none), never from a flag the submission could set. `per_call` holds a reported
//! per-call figure to the mean of the grader's own `<field>` over the calls made while the
//! profiler recorded: the very calls the submission profiled.
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::i18n::Text;
use crate::observations::Event;
use crate::spec::rubric::{PerCallSpec, PhaseSpec};
use crate::text;
use serde_json::Value;
use std::collections::BTreeMap;

/// A step call as the trace shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub id: i64,
    pub variant: Option<String>,
    /// torch's own recording flag when the call began.
    pub active: bool,
    /// The profiler's phase when the call began, from the switch events before it.
    pub phase: &'static str,
    /// The `step_done` event's fields (None: the call never finished).
    pub done: Option<BTreeMap<String, Value>>,
}

/// The step calls of one trace, each with its derived phase.
pub fn calls(events: &[Event]) -> Vec<Call> {
    let mut phase = "none";
    let mut out: Vec<Call> = Vec::new();
    let mut by_id: BTreeMap<i64, usize> = BTreeMap::new();
    for e in events {
        let id = e.fields.get("id").and_then(Value::as_i64);
        match e.e.as_str() {
            "profiler" => {
                phase = match e.field_str("switch") {
                    Some("prepare") => "warmup",
                    Some("enable") => "record",
                    Some("disable") => "none",
                    _ => phase,
                }
            }
            "step" => {
                let id = id.unwrap_or(out.len() as i64);
                by_id.insert(id, out.len());
                out.push(Call {
                    id,
                    variant: e.field_str("variant").map(str::to_string),
                    active: e.fields.get("active") == Some(&Value::Bool(true)),
                    phase,
                    done: None,
                });
            }
            "step_done" => {
                if let Some(&k) = id.and_then(|id| by_id.get(&id)) {
                    if out[k].done.is_none() {
                        out[k].done = Some(e.fields.clone());
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn of_variant(c: &Call, variant: &Option<String>) -> bool {
    variant.is_none() || c.variant.as_ref() == variant.as_ref()
}

pub fn evaluate_phase(spec: &PhaseSpec, env: &Env) -> Outcome {
    let (min, max) = match env.resolve(&spec.equals) {
        Some(v) => (Some(v), Some(v)),
        None => (env.resolve(&spec.min), env.resolve(&spec.max)),
    };
    let bound = Text::same(format!("{} {}", spec.phase, fmt_bounds(min, max)));
    let mut measured = Vec::new();
    let mut bad_zh = Vec::new();
    let mut bad_en = Vec::new();
    for name in spec.stream.names() {
        let events = match env.evidence.trace(name) {
            Ok(ev) => ev,
            Err(why) => return Outcome::missing(why, bound),
        };
        let all = calls(events);
        let n = all
            .iter()
            .filter(|c| c.done.is_some() && c.phase == spec.phase && of_variant(c, &spec.variant))
            .count() as f64;
        let short = name.rsplit('.').next().unwrap_or(name);
        measured.push(format!("{short}: {}", fmt_num(n)));
        if !within(n, min, max) {
            let phases: Vec<&str> = all.iter().map(|c| c.phase).collect();
            let seq = if phases.is_empty() {
                "—".to_string()
            } else {
                phases.join(" ")
            };
            bad_zh.push(format!(
                "{short}：{} 个完整步处于 profiler 的 {} 阶段，应为 {}（各步所处阶段：{seq}）",
                fmt_num(n),
                spec.phase,
                fmt_bounds(min, max)
            ));
            bad_en.push(format!(
                "{short}: {} whole steps in the profiler's {} phase, expected {} (phase of each step: {seq})",
                fmt_num(n),
                spec.phase,
                fmt_bounds(min, max)
            ));
        }
    }
    let measured = Text::same(measured.join(", "));
    if bad_en.is_empty() {
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                format!(
                    "每次都有 {} 阶段的步（由 profiler 开关事件的顺序得出）",
                    spec.phase
                ),
                format!(
                    "steps in the {} phase every time (from the order of the profiler's switches)",
                    spec.phase
                )
            ),
        );
    }
    Outcome::new(
        false,
        measured,
        bound,
        Text::new(bad_zh.join("；"), bad_en.join("; ")),
    )
}

pub fn evaluate_per_call(spec: &PerCallSpec, env: &Env) -> Outcome {
    let (min, max) = (env.resolve(&spec.min), env.resolve(&spec.max));
    let bound = fmt_bounds(min, max);
    let events = match env.evidence.trace(&spec.stream) {
        Ok(ev) => ev,
        Err(why) => return Outcome::missing(why, bound),
    };
    let reported = match env.evidence.number(&spec.reported) {
        Ok(x) => x,
        Err(why) => return Outcome::missing(why, bound),
    };
    let seen: Vec<f64> = calls(events)
        .iter()
        .filter(|c| c.active && of_variant(c, &spec.variant))
        .filter_map(|c| c.done.as_ref()?.get(&spec.field)?.as_f64())
        .collect();
    let who = spec.variant.as_deref().unwrap_or("step");
    if seen.is_empty() {
        return Outcome::missing(
            text!(
                format!("profiler 记录时没有运行过 {who} 的调用：没有可以对照的计时"),
                format!("no {who} call ran while a profiler recorded: nothing to compare with")
            ),
            bound,
        );
    }
    let mean = seen.iter().sum::<f64>() / seen.len() as f64;
    if mean <= 0.0 {
        return Outcome::missing(
            text!("评分器测得的耗时为 0", "the grader's own timing is 0"),
            bound,
        );
    }
    let r = reported / mean;
    let pass = within(r, min, max);
    let n = seen.len();
    let measured = format!("{} ({} / {})", fmt_num(r), fmt_num(reported), fmt_num(mean));
    let (zh, en) = (
        format!(
            "{} = {}，评分器对被记录的 {n} 次 {who} 调用测得每次 {}：比值 {}",
            spec.reported,
            fmt_num(reported),
            fmt_num(mean),
            fmt_num(r)
        ),
        format!(
            "{} = {}; the grader timed the {n} {who} calls made while recording at {} each: ratio {}",
            spec.reported,
            fmt_num(reported),
            fmt_num(mean),
            fmt_num(r)
        ),
    );
    let why = if pass {
        Text::new(format!("{zh}，满足 {bound}"), format!("{en}, {bound}"))
    } else {
        Text::new(
            format!("{zh}，不满足 {bound}"),
            format!("{en}, not {bound}"),
        )
    };
    Outcome::new(pass, measured, bound, why)
}
