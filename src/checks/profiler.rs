//! `phase` and `per_call`: what the grader observed of a profiler around the calls of a step it
//! handed over (lesson 02). Both read only events the grader recorded as they happened:
//! - `profiler {switch: prepare|enable|disable}`: a real switch of torch's profiler (the
//!   scenario wraps `torch.autograd.profiler`'s three switches);
//! - `step {id, variant?, active}` / `step_done {id, <field>}`: one call of the step, `active`
//!   being torch's own "a profiler is recording" flag, `<field>` the grader's own measurement of
//!   the call (e.g. `op_us`);
//! - `recorded {id, ops}`: sent as a recording stops, when the grader found the call's work in
//!   that recording's raw results (its ops stamped inside the call's window): the call was
//!   profiled. A call made while collection was paused, or under a profiler whose results the
//!   grader never saw, has none, whatever torch's flag said.
//!
//! `phase` counts the whole steps that ran in a profiler phase, the phase being derived from the
//! order of the switch events before the step (none → `prepare` → warmup → `enable` → record →
//! `disable` → none), never from a flag the submission could set: `warmup` counts only the steps
//! during which nothing recorded (torch's flag off), `record` only those the grader saw recorded.
//! `before_recorded` counts the whole calls made with nothing recording before the first call
//! (of the variant) the grader saw recorded: the warm-up of a measurement, judged by what was
//! recording during each call, not by where anyone's windows fall (no call recorded at all:
//! every call made with nothing recording, there being no profile to warm up for). `per_call` holds a reported
//! per-call figure to the mean of the grader's own `<field>` over the calls it saw recorded: the
//! very calls the submission profiled.
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
    /// The grader found the call's work in a recording's results (a `recorded` event).
    pub recorded: bool,
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
                    recorded: false,
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
            "recorded" => {
                if let Some(&k) = id.and_then(|id| by_id.get(&id)) {
                    out[k].recorded = out[k].done.is_some();
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

/// How many whole calls of `variant` count in `phase` (see the module's doc).
pub fn in_phase(all: &[Call], phase: &str, variant: &Option<String>) -> usize {
    let mine = || {
        all.iter()
            .filter(|c| c.done.is_some() && of_variant(c, variant))
    };
    match phase {
        "before_recorded" => {
            // no call of the variant recorded: nothing was profiled to warm up for (the
            // criteria that count recorded calls say so); every unrecorded call counts
            let first = all
                .iter()
                .position(|c| c.recorded && of_variant(c, variant))
                .unwrap_or(all.len());
            all[..first]
                .iter()
                .filter(|c| c.done.is_some() && of_variant(c, variant) && !c.active)
                .count()
        }
        "warmup" => mine().filter(|c| c.phase == "warmup" && !c.active).count(),
        "record" => mine().filter(|c| c.phase == "record" && c.recorded).count(),
        p => mine().filter(|c| c.phase == p).count(),
    }
}

/// What each call was, in order, for a failure's message: its phase, `·rec` where the grader saw
/// it recorded, `·on` where torch's flag said recording but the grader saw nothing.
fn sequence(all: &[Call], variant: &Option<String>) -> String {
    let seq: Vec<String> = all
        .iter()
        .filter(|c| of_variant(c, variant))
        .map(|c| match (c.recorded, c.active) {
            (true, _) => format!("{}·rec", c.phase),
            (false, true) => format!("{}·on", c.phase),
            (false, false) => c.phase.to_string(),
        })
        .collect();
    if seq.is_empty() {
        "—".to_string()
    } else {
        seq.join(" ")
    }
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
        let n = in_phase(&all, &spec.phase, &spec.variant) as f64;
        let short = name.rsplit('.').next().unwrap_or(name);
        let who = match &spec.variant {
            Some(v) => format!("{short} {v}"),
            None => short.to_string(),
        };
        measured.push(format!("{who}: {}", fmt_num(n)));
        if !within(n, min, max) {
            let seq = sequence(&all, &spec.variant);
            let (what_zh, what_en) = match spec.phase.as_str() {
                "before_recorded" => (
                    "个没有任何 profiler 在记录时完成的完整调用在评分器看到的第一次被记录的调用之前（预热）".to_string(),
                    "whole calls made with nothing recording before the first call the grader saw recorded (warm-up)".to_string(),
                ),
                "record" => (
                    "个完整步的工作出现在 profiler 的记录结果中（评分器自己读取的结果）".to_string(),
                    "whole steps whose work the grader found in the profiler's recorded results".to_string(),
                ),
                p => (
                    format!("个完整步处于 profiler 的 {p} 阶段"),
                    format!("whole steps in the profiler's {p} phase"),
                ),
            };
            bad_zh.push(format!(
                "{who}：{} {what_zh}，应为 {}（各步：{seq}；·rec 为评分器看到被记录，·on 为 torch 的标志在记录但结果里没有）",
                fmt_num(n),
                fmt_bounds(min, max)
            ));
            bad_en.push(format!(
                "{who}: {} {what_en}, expected {} (each step: {seq}; ·rec: seen recorded, ·on: torch's flag on but nothing in the results)",
                fmt_num(n),
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
            match spec.phase.as_str() {
                "before_recorded" => text!(
                    "每次在第一次被记录的调用之前都有未被记录的完整调用（预热，按每次调用时 profiler 是否在记录判断）",
                    "untimed whole calls before the first recorded one every time (warm-up, judged by whether a profiler recorded during each call)"
                ),
                "record" => text!(
                    "每次被记录的步都出现在评分器读取的 profiler 结果中",
                    "every time, the recorded steps' work is in the profiler results the grader read"
                ),
                p => text!(
                    format!("每次都有 {p} 阶段的步（由 profiler 开关事件的顺序得出）"),
                    format!(
                        "steps in the {p} phase every time (from the order of the profiler's switches)"
                    )
                ),
            },
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
        .filter(|c| c.recorded && of_variant(c, &spec.variant))
        .filter_map(|c| c.done.as_ref()?.get(&spec.field)?.as_f64())
        .collect();
    let who = spec.variant.as_deref().unwrap_or("step");
    if seen.is_empty() {
        return Outcome::missing(
            text!(
                format!("评分器没有在任何 profiler 的记录结果中看到 {who} 的调用：没有可以对照的计时"),
                format!("the grader saw no {who} call recorded in a profiler's results: nothing to compare with")
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
            "{} = {}，评分器对它看到被记录的 {n} 次 {who} 调用测得每次 {}：比值 {}",
            spec.reported,
            fmt_num(reported),
            fmt_num(mean),
            fmt_num(r)
        ),
        format!(
            "{} = {}; the grader timed the {n} {who} calls it saw recorded at {} each: ratio {}",
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
