//! `trace`: judgements over observed event traces. `count` and `each` read events directly
//! (checkpoint calls per forward, syncs); `expect:` predicates (`trace_expect.rs`) judge a
//! student's measurement. A check naming several streams (`[compare.run1, compare.run2]`) must
//! hold in every one, and their outcomes are said together here.
use super::trace_expect::{predicate, returned_numbers};
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::i18n::Text;
use crate::observations::{Absent, Event};
use crate::spec::rubric::{TracePredicate, TraceSpec};
use crate::text;
use serde_json::Value;

pub fn evaluate(spec: &TraceSpec, env: &Env) -> Outcome {
    let bound = bound_of(spec, env);
    let mut streams = Vec::new();
    for name in spec.stream.names() {
        match env.evidence.trace(name) {
            Ok(events) => streams.push((name, events)),
            // `so_far`: a call that never began recorded nothing, and did nothing to count
            Err(_) if spec.so_far => streams.push((name, &[])),
            Err(why) => return Outcome::missing(why, bound),
        }
    }
    match (&spec.count, &spec.each, spec.expect) {
        (Some(kind), _, _) => count(spec, kind, &streams, env, bound),
        (None, Some(field), _) => each(spec, field, &streams, env, bound),
        (None, None, Some(p)) => {
            let mut outs: Vec<(&str, Outcome)> = streams
                .iter()
                .map(|(name, events)| (*name, predicate(p, spec, name, events, env, false)))
                .collect();
            excuse_one_stall(p, spec, &streams, env, &mut outs);
            combine(outs, bound)
        }
        (None, None, None) => Outcome::missing(
            text!(
                "trace 检查缺少 count、each 或 expect",
                "trace check has none of count, each, expect"
            ),
            bound,
        ),
    }
}

/// The windows a check must see before one of them may be a stall (as `call_windows.rs` excuses
/// one steady window of a stream).
const MIN_WINDOWS_TO_EXCUSE: usize = 10;

/// `expect: samples` with an `idle:` clause over many windows: one window of all of them may
/// exceed the per-window allowance — a stall the kernel does not bill as a wait for a CPU (a
/// hypervisor's, memory reclaim; 5.7 ms in one of 36 windows of a careful lesson 01 submission on a
/// loaded machine) cannot move a median, and the median rule still counts it. Only when exactly one
/// stream fails, and passes with one window excused; two stretched windows fail as before; and
/// never in a stream where the submission slept (a `sleep` event: the driver's `time.sleep`), whose
/// stretched window is its own doing, not the machine's (red team 18: 40 ms in one window of 36),
/// nor a window over its allowance by more than `IdleSpec::MAX_STALL_S` (red team 21: a spin of a
/// quarter second, no `sleep` event).
fn excuse_one_stall(
    p: TracePredicate,
    spec: &TraceSpec,
    streams: &[(&str, &[Event])],
    env: &Env,
    outs: &mut [(&str, Outcome)],
) {
    if p != TracePredicate::Samples || spec.idle.is_none() {
        return;
    }
    let Some(keys) = &spec.samples else { return };
    let windows: usize = streams
        .iter()
        .filter_map(|(name, _)| returned_numbers(env, name, &keys.names()).ok())
        .map(|xs| xs.len())
        .sum();
    let failed: Vec<usize> = (0..outs.len()).filter(|&i| !outs[i].1.pass).collect();
    if windows < MIN_WINDOWS_TO_EXCUSE || failed.len() != 1 {
        return;
    }
    let i = failed[0];
    let (name, events) = streams[i];
    if events.iter().any(|e| e.e == "sleep") {
        return;
    }
    let again = predicate(p, spec, name, events, env, true);
    if again.pass {
        outs[i].1 = again;
    }
}

/// `(min, max)` of a check: `equals` as both, else `min`/`max`; `Err` when a `$metric.` bound
/// was not recorded (its probe failed).
fn bounds(spec: &TraceSpec, env: &Env) -> Result<(Option<f64>, Option<f64>), Absent> {
    Ok(match env.bound(&spec.equals)? {
        Some(v) => (Some(v), Some(v)),
        None => (env.bound(&spec.min)?, env.bound(&spec.max)?),
    })
}

fn bound_of(spec: &TraceSpec, env: &Env) -> Text {
    let (min, max) = bounds(spec, env).unwrap_or((None, None));
    let per = env.resolve(&spec.per).unwrap_or(1.0);
    match (&spec.count, &spec.each, spec.expect) {
        (Some(kind), ..) => {
            // the filter, when there is one: `call (prof=true) ≤ 0`
            let kind = match where_text(spec) {
                f if f.is_empty() => kind.clone(),
                f => format!("{kind} ({f})"),
            };
            match &spec.sum {
                Some(field) => Text::same(format!("{kind} {field} {}", fmt_bounds(min, max))),
                None => Text::same(format!("{kind} {}", fmt_bounds(min, max))),
            }
        }
        (None, Some(field), _) => text!(
            format!("每次：{field} {}", fmt_bounds(min, max)),
            format!("each: {field} {}", fmt_bounds(min, max))
        ),
        (None, None, Some(p)) => {
            let n = fmt_num(min.unwrap_or(1.0));
            match p {
                TracePredicate::SameInputs => text!("全部", "all"),
                TracePredicate::Warmup => text!(format!("每种 ≥ {n}"), format!("≥ {n} each")),
                TracePredicate::Synced => text!("全部", "all"),
                TracePredicate::Repeats if per == 1.0 => {
                    text!(format!("每种 ≥ {n}"), format!("≥ {n} each"))
                }
                TracePredicate::Repeats => text!(
                    format!("每种 ≥ {n}（每个 {} 步）", fmt_num(per)),
                    format!("≥ {n} each ({} steps per window)", fmt_num(per))
                ),
                TracePredicate::Median => text!("报告 = 中位数", "reported = median"),
                TracePredicate::Samples => text!(
                    format!("= 窗口 ÷ {}（逐个）", fmt_num(per)),
                    format!("= window ÷ {} (each)", fmt_num(per))
                ),
                TracePredicate::OutputsRead => text!(
                    "读过同一输入上两个 step 的输出",
                    "both steps' outputs on one input read"
                ),
            }
        }
        _ => Text::same("—"),
    }
}

/// Bytes of the dotted segments every name shares at its start (`shapes.` of `shapes.r0.base` and
/// `shapes.r1.small`; none of one name alone).
fn common_prefix<'a>(mut names: impl Iterator<Item = &'a str>) -> usize {
    let Some(first) = names.next() else { return 0 };
    let mut keep = first.len();
    for n in names {
        keep = first
            .bytes()
            .zip(n.bytes())
            .take(keep)
            .take_while(|(a, b)| a == b)
            .count();
    }
    first[..keep].rfind('.').map_or(0, |i| i + 1)
}

/// All streams pass → pass; otherwise the failing streams' reasons, each named by what sets it
/// apart from the others (`r0.base` of `shapes.r0.base`, `shapes.r1.base`, …). Streams that all
/// measured the same are said once, with their count.
fn combine(outs: Vec<(&str, Outcome)>, bound: Text) -> Outcome {
    let many = outs.len() > 1;
    let common = common_prefix(outs.iter().map(|(n, _)| *n));
    let tag = |name: &str, t: &Text| {
        if many {
            let short = name.get(common..).filter(|s| !s.is_empty()).unwrap_or(name);
            text!(format!("{short}：{}", t.zh), format!("{short}: {}", t.en))
        } else {
            t.clone()
        }
    };
    let join = |parts: Vec<Text>| {
        Text::new(
            parts
                .iter()
                .map(|t| t.zh.as_str())
                .collect::<Vec<_>>()
                .join("；"),
            parts
                .iter()
                .map(|t| t.en.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    };
    let alike = many && outs.windows(2).all(|w| w[0].1.measured == w[1].1.measured);
    let pass = outs.iter().all(|(_, o)| o.pass);
    let measured = if alike {
        let (k, t) = (outs.len(), &outs[0].1.measured);
        text!(
            format!("{k} 次调用，每次：{}", t.zh),
            format!("each of {k} calls: {}", t.en)
        )
    } else {
        join(outs.iter().map(|(n, o)| tag(n, &o.measured)).collect())
    };
    let why = if pass {
        outs.first().map(|(_, o)| o.why.clone()).unwrap_or_default()
    } else {
        join(
            outs.iter()
                .filter(|(_, o)| !o.pass)
                .map(|(n, o)| tag(n, &o.why))
                .collect(),
        )
    };
    Outcome {
        pass,
        measured,
        bound,
        why,
        blocked_by: outs.iter().find_map(|(_, o)| o.blocked_by.clone()),
    }
}

fn matches(spec: &TraceSpec, e: &Event) -> bool {
    let Some(filter) = &spec.filter else {
        return true;
    };
    filter.iter().all(|(k, want)| {
        let (Some(k), Ok(want)) = (k.as_str(), serde_json::to_value(want)) else {
            return false;
        };
        e.fields.get(k) == Some(&want)
    })
}

fn where_text(spec: &TraceSpec) -> String {
    spec.filter
        .as_ref()
        .map(|f| {
            f.iter()
                .map(|(k, v)| {
                    let v = serde_json::to_value(v).unwrap_or(Value::Null);
                    format!("{}={v}", k.as_str().unwrap_or("?"))
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn count(
    spec: &TraceSpec,
    kind: &str,
    streams: &[(&str, &[Event])],
    env: &Env,
    bound: Text,
) -> Outcome {
    let counted: Vec<&Event> = streams
        .iter()
        .flat_map(|(_, ev)| ev.iter())
        .filter(|e| e.e == kind && matches(spec, e))
        .collect();
    // `sum: FIELD`: the total of that field over the counted events (bytes read back, say)
    let n = match &spec.sum {
        None => counted.len() as f64,
        Some(field) => {
            let mut total = 0.0;
            for e in &counted {
                match e.fields.get(field).and_then(serde_json::Value::as_f64) {
                    Some(v) => total += v,
                    None => {
                        return Outcome::missing(
                            text!(
                                format!("一个 {kind} 事件没有数值字段 {field}"),
                                format!("a `{kind}` event has no numeric `{field}`")
                            ),
                            bound,
                        )
                    }
                }
            }
            total
        }
    };
    let (min, max) = match bounds(spec, env) {
        Ok(b) => b,
        Err(why) => return Outcome::missing(why, bound),
    };
    // an upper bound only ("no empty_cache call") proves nothing over a stream whose probe did
    // not finish: the submission's code stopped before it could do what is counted (a starter)
    if min.is_none() && max.is_some() && !spec.so_far {
        for (name, _) in streams {
            let absent = env.evidence.why_missing(name);
            if absent.probe.is_some() {
                return Outcome::missing(absent, bound);
            }
        }
    }
    let names = streams
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    let pass = within(n, min, max);
    // the filter, when there is one: `0 `call` events (profiling_start=true)`
    let filter = match where_text(spec) {
        f if f.is_empty() => f,
        f => format!(" ({f})"),
    };
    let k = counted.len();
    let what = match &spec.sum {
        None => text!(
            format!("{names}：{kind}{filter} 事件 {} 次", fmt_num(n)),
            format!("{names}: {} `{kind}` events{filter}", fmt_num(n))
        ),
        Some(field) => text!(
            format!(
                "{names}：{k} 次 {kind}{filter} 事件的 {field} 合计 {}",
                fmt_num(n)
            ),
            format!(
                "{names}: {field} {} in all over {k} `{kind}` events{filter}",
                fmt_num(n)
            )
        ),
    };
    let why = if pass {
        what
    } else {
        text!(
            format!("{}，应为 {}", what.zh, fmt_bounds(min, max)),
            format!("{}, expected {}", what.en, fmt_bounds(min, max))
        )
    };
    Outcome::new(pass, fmt_num(n), bound, why)
}

/// Every selected event's numeric `field` within bounds (e.g. checkpoint calls per forward).
fn each(
    spec: &TraceSpec,
    field: &str,
    streams: &[(&str, &[Event])],
    env: &Env,
    bound: Text,
) -> Outcome {
    let (min, max) = match env.resolve(&spec.equals) {
        Some(v) => (Some(v), Some(v)),
        None => (env.resolve(&spec.min), env.resolve(&spec.max)),
    };
    let mut total = 0usize;
    let mut values: Vec<f64> = Vec::new();
    let mut bad: Vec<(String, f64, usize)> = Vec::new(); // (stream, value, how many)
    for (name, events) in streams {
        for e in events.iter().filter(|e| matches(spec, e)) {
            total += 1;
            let v = e
                .fields
                .get(field)
                .and_then(Value::as_f64)
                .unwrap_or(f64::NAN);
            if !values.iter().any(|x| x.total_cmp(&v).is_eq()) {
                values.push(v);
            }
            if !within(v, min, max) {
                match bad
                    .iter_mut()
                    .find(|(s, x, _)| s == name && x.total_cmp(&v).is_eq())
                {
                    Some(entry) => entry.2 += 1,
                    None => bad.push((name.to_string(), v, 1)),
                }
            }
        }
    }
    let filter = where_text(spec);
    if total == 0 {
        return Outcome::missing(
            text!(
                format!("没有观察到符合条件（{filter}）的事件"),
                format!("no event matched ({filter})")
            ),
            bound,
        );
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let shown = values
        .iter()
        .map(|v| fmt_num(*v))
        .collect::<Vec<_>>()
        .join(", ");
    let measured = text!(
        format!("{total} 次：{field} ∈ {{{shown}}}"),
        format!("{total} events: {field} ∈ {{{shown}}}")
    );
    if bad.is_empty() {
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                format!(
                    "全部 {total} 次（{filter}）的 {field} 都满足 {}",
                    fmt_bounds(min, max)
                ),
                format!(
                    "all {total} events ({filter}) have {field} {}",
                    fmt_bounds(min, max)
                )
            ),
        );
    }
    let list_zh = bad
        .iter()
        .map(|(s, v, n)| format!("{s} 中 {n} 次为 {}", fmt_num(*v)))
        .collect::<Vec<_>>()
        .join("，");
    let list_en = bad
        .iter()
        .map(|(s, v, n)| format!("{n}× {} in {s}", fmt_num(*v)))
        .collect::<Vec<_>>()
        .join(", ");
    Outcome::new(
        false,
        measured,
        bound,
        text!(
            format!(
                "{field} 应为 {}（{filter}），实际：{list_zh}",
                fmt_bounds(min, max)
            ),
            format!(
                "{field} must be {} ({filter}); observed {list_en}",
                fmt_bounds(min, max)
            )
        ),
    )
}
