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
//!   grader never saw, has none, whatever torch's flag said;
//! - `recorded_part {id, ops}`: sent likewise when a recording holds some of the call's work but
//!   not all of it (collection paused for part of it, a recording stopped inside it): not a
//!   profiled call, but work of it is in the profile.
//!
//! `phase` counts the whole steps that ran in a profiler phase, the phase being derived from the
//! order of the switch events before the step (none → `prepare` → warmup → `enable` → record →
//! `disable` → none), never from a flag the submission could set: `warmup` counts only the steps
//! during which nothing recorded (torch's flag off when it began, and none of its work in any
//! recording: issue 38, round 4, a recording switched on inside a warm-up step), `record` the
//! steps the grader saw recorded, whatever the phase they began in; with an upper bound
//! (`equals`, `max`) a step partly recorded counts against it too (a profile that holds
//! `steps` whole steps and part of another does not record exactly `steps`).
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
    /// Some of the call's work, not all, is in a recording's results (`recorded_part`).
    pub partly: bool,
    /// The profiler's phase when the call began, from the switch events before it.
    pub phase: &'static str,
    /// The `step_done` event's fields (None: the call never finished).
    pub done: Option<BTreeMap<String, Value>>,
    /// The `recorded` event's fields: the grader's own reading of the call in the recording's
    /// results (e.g. `self_us`, the op's self time there); None: not seen recorded.
    pub rec: Option<BTreeMap<String, Value>>,
}

/// Where, in the trace, the warm-up of the recording the call returns lies: between the last
/// `prepare` before that recording's `enable` and the `enable` (event indices). The returned
/// profile holds the call's last recording (the scenario refuses any other object), so it is
/// the recording the last `disable` stopped. None: no recording stopped, or none was prepared.
fn returned_warmup(events: &[Event]) -> Option<(usize, usize)> {
    let switch = |i: usize| {
        let e = &events[i];
        (e.e == "profiler").then(|| e.field_str("switch")).flatten()
    };
    let stop = (0..events.len())
        .rev()
        .find(|&i| switch(i) == Some("disable"))?;
    let start = (0..stop).rev().find(|&i| switch(i) == Some("enable"))?;
    // torch's profiler session is global: the `enable` starts what the latest `prepare` set up
    let prep = (0..start).rev().find(|&i| switch(i) == Some("prepare"))?;
    Some((prep, start))
}

/// The step calls of one trace, each with its derived phase. A step counts in the `warmup` phase
/// only when it warmed the returned recording up (see `returned_warmup`): a `prepare` of a spare
/// profiler, or one after the recording, makes the steps after it `prepared`, not warm-up.
pub fn calls(events: &[Event]) -> Vec<Call> {
    let warms = returned_warmup(events);
    let mut phase = "none";
    let mut out: Vec<Call> = Vec::new();
    let mut by_id: BTreeMap<i64, usize> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let id = e.fields.get("id").and_then(Value::as_i64);
        match e.e.as_str() {
            "profiler" => {
                phase = match e.field_str("switch") {
                    Some("prepare") if warms.is_some_and(|(p, _)| p == i) => "warmup",
                    Some("prepare") => "prepared",
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
                    partly: false,
                    phase,
                    done: None,
                    rec: None,
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
                    if out[k].recorded && out[k].rec.is_none() {
                        out[k].rec = Some(e.fields.clone());
                    }
                }
            }
            "recorded_part" => {
                if let Some(&k) = id.and_then(|id| by_id.get(&id)) {
                    out[k].partly = out[k].done.is_some();
                }
            }
            _ => {}
        }
    }
    out
}

/// How many whole calls of `variant` had part of their work, not all, in a recording (and are not
/// counted recorded by another one).
pub fn partly_recorded(all: &[Call], variant: &Option<String>) -> usize {
    all.iter()
        .filter(|c| c.done.is_some() && of_variant(c, variant) && c.partly && !c.recorded)
        .count()
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
        "warmup" => mine()
            .filter(|c| c.phase == "warmup" && !c.active && !c.recorded && !c.partly)
            .count(),
        "record" => mine().filter(|c| c.recorded).count(),
        p => mine().filter(|c| c.phase == p).count(),
    }
}

/// What each call was, in order, for a failure's message: its phase, `·rec` where the grader saw
/// it recorded, `·on` where torch's flag said recording but the grader saw nothing.
fn sequence(all: &[Call], variant: &Option<String>) -> String {
    let seq: Vec<String> = all
        .iter()
        .filter(|c| of_variant(c, variant))
        .map(|c| match (c.recorded, c.partly, c.active) {
            (true, _, _) => format!("{}·rec", c.phase),
            (false, true, _) => format!("{}·part", c.phase),
            (false, false, true) => format!("{}·on", c.phase),
            (false, false, false) => c.phase.to_string(),
        })
        .collect();
    if seq.is_empty() {
        "—".to_string()
    } else {
        seq.join(" ")
    }
}

pub fn evaluate_phase(spec: &PhaseSpec, env: &Env) -> Outcome {
    // `equals` may be a number this run recorded (`$metric.…`: the steps a call was handed)
    let equals = match env.bound(&spec.equals) {
        Ok(v) => v,
        Err(why) => return Outcome::missing(why, Text::same(format!("{} = ?", spec.phase))),
    };
    let (min, max) = match equals {
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
        // an upper bound on recorded steps holds the steps a recording holds part of, too
        let part = if spec.phase == "record" && max.is_some() {
            partly_recorded(&all, &spec.variant) as f64
        } else {
            0.0
        };
        let short = name.rsplit('.').next().unwrap_or(name);
        let who = match &spec.variant {
            Some(v) => format!("{short} {v}"),
            None => short.to_string(),
        };
        measured.push(if part > 0.0 {
            format!("{who}: {} + {} part", fmt_num(n), fmt_num(part))
        } else {
            format!("{who}: {}", fmt_num(n))
        });
        if part > 0.0 && within(n, min, max) && !within(n + part, None, max) {
            let seq = sequence(&all, &spec.variant);
            bad_zh.push(format!(
                "{who}：记录结果里除了 {} 个完整步，还有另外 {} 步的一部分工作，应为 {}（各步：{seq}；·part 为部分被记录）",
                fmt_num(n),
                fmt_num(part),
                fmt_bounds(min, max)
            ));
            bad_en.push(format!(
                "{who}: the recorded results hold part of the work of {} more step(s) besides {} whole ones, expected {} (each step: {seq}; ·part: partly recorded)",
                fmt_num(part),
                fmt_num(n),
                fmt_bounds(min, max)
            ));
        } else if !within(n, min, max) {
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

/// The grader's figure for `variant`'s calls it saw recorded: the mean of `field` (read on the
/// `recorded` event, the grader's own reading of the recording's results, else on `step_done`),
/// with how many calls; or why there is none.
fn recorded_mean(
    all: &[Call],
    variant: &Option<String>,
    field: &str,
) -> Result<(f64, usize), Text> {
    let seen: Vec<f64> = all
        .iter()
        .filter(|c| c.recorded && of_variant(c, variant))
        .filter_map(|c| {
            let on = |m: &Option<BTreeMap<String, Value>>| m.as_ref()?.get(field)?.as_f64();
            on(&c.rec).or_else(|| on(&c.done))
        })
        .collect();
    let who = variant.as_deref().unwrap_or("step");
    if seen.is_empty() {
        return Err(text!(
            format!("评分器没有在任何 profiler 的记录结果中看到 {who} 的调用：没有可以对照的数值"),
            format!("the grader saw no {who} call recorded in a profiler's results: nothing to compare with")
        ));
    }
    let mean = seen.iter().sum::<f64>() / seen.len() as f64;
    if mean <= 0.0 {
        return Err(text!(
            format!("评分器在记录结果中读到的 {who} 的数值为 0"),
            format!("the grader's own figure for {who} in the recorded results is 0")
        ));
    }
    Ok((mean, seen.len()))
}

/// A ratio in a message: six significant digits (a tight band's edge shows).
fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.6}")
    } else {
        format!("{r}")
    }
}

/// The bounds as `fmt_bounds` writes them, but with the digits a tight band needs (`1.0001`).
fn fmt_tight_bounds(min: Option<f64>, max: Option<f64>) -> String {
    let f = |x: f64| {
        let s = format!("{x:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    match (min, max) {
        (Some(l), Some(h)) if l != h => format!("∈ [{}, {}]", f(l), f(h)),
        (Some(l), None) => format!("≥ {}", f(l)),
        (None, Some(h)) => format!("≤ {}", f(h)),
        _ => fmt_bounds(min, max),
    }
}

pub fn evaluate_per_call(spec: &PerCallSpec, env: &Env) -> Outcome {
    let (min, max) = (env.resolve(&spec.min), env.resolve(&spec.max));
    let bound = fmt_tight_bounds(min, max);
    let events = match env.evidence.trace(&spec.stream) {
        Ok(ev) => ev,
        Err(why) => return Outcome::missing(why, bound),
    };
    let reported = match env.evidence.number(&spec.reported) {
        Ok(x) => x,
        Err(why) => return Outcome::missing(why, bound),
    };
    let all = calls(events);
    let (mean, n) = match recorded_mean(&all, &spec.variant, &spec.field) {
        Ok(m) => m,
        Err(why) => return Outcome::missing(why, bound),
    };
    let who = spec.variant.as_deref().unwrap_or("step");
    let (r, measured, zh, en) = match &spec.relative_to {
        None => {
            let r = reported / mean;
            (
                r,
                format!("{} ({} / {})", fmt_ratio(r), fmt_num(reported), fmt_num(mean)),
                format!(
                    "{} = {}，评分器从它看到被记录的 {n} 次 {who} 调用得到每次 {}（{}）：比值 {}",
                    spec.reported,
                    fmt_num(reported),
                    fmt_num(mean),
                    spec.field,
                    fmt_ratio(r)
                ),
                format!(
                    "{} = {}; the grader's {} of the {n} {who} calls it saw recorded is {} each: ratio {}",
                    spec.reported,
                    fmt_num(reported),
                    spec.field,
                    fmt_num(mean),
                    fmt_ratio(r)
                ),
            )
        }
        Some(other) => {
            let theirs = match env.evidence.number(&other.reported) {
                Ok(x) => x,
                Err(why) => return Outcome::missing(why, bound),
            };
            let over = Some(other.variant.clone());
            let (mean_over, _) = match recorded_mean(&all, &over, &spec.field) {
                Ok(m) => m,
                Err(why) => return Outcome::missing(why, bound),
            };
            let (said, saw) = (reported / theirs, mean / mean_over);
            let r = said / saw;
            let (a, b) = (&spec.reported, &other.reported);
            (
                r,
                format!("{} ({} / {})", fmt_ratio(r), fmt_ratio(said), fmt_ratio(saw)),
                format!(
                    "{a} / {b} = {}，评分器在记录结果中读到的 {who} / {} 为 {}：两者之比 {}",
                    fmt_ratio(said),
                    other.variant,
                    fmt_ratio(saw),
                    fmt_ratio(r)
                ),
                format!(
                    "{a} / {b} = {}; in the recorded results the grader read {who} / {} = {}: ratio {}",
                    fmt_ratio(said),
                    other.variant,
                    fmt_ratio(saw),
                    fmt_ratio(r)
                ),
            )
        }
    };
    let pass = within(r, min, max);
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
