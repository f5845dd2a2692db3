//! `trace`: predicates over an observed event trace (checkpoint calls, syncs, clock reads, steps).
//!
//! A step starts at each `embed` event (the model's embedding ran); it is an "on" step when a
//! `ckpt` event happens before the next step starts. Clock reads pair up into timed windows
//! (read 1 opens, read 2 closes, …), the pattern `t0 = perf_counter(); step(); sync(); t1 = …`.
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::observations::Event;
use crate::spec::rubric::{TracePredicate, TraceSpec};
use crate::text;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub pos: usize,
    pub variant: &'static str,
    pub input: String,
}

pub fn steps(events: &[Event]) -> Vec<Step> {
    let starts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.e == "embed")
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &pos)| {
            let end = starts.get(k + 1).copied().unwrap_or(events.len());
            let on = events[pos..end].iter().any(|e| e.e == "ckpt");
            Step {
                pos,
                variant: if on { "on" } else { "off" },
                input: events[pos].field_str("input").unwrap_or("?").to_string(),
            }
        })
        .collect()
}

/// (open, close) positions of timed windows.
pub fn windows(events: &[Event]) -> Vec<(usize, usize)> {
    let reads: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.e == "timer")
        .map(|(i, _)| i)
        .collect();
    reads.chunks_exact(2).map(|w| (w[0], w[1])).collect()
}

fn in_window(pos: usize, wins: &[(usize, usize)]) -> bool {
    wins.iter().any(|&(a, b)| a < pos && pos < b)
}

pub fn evaluate(spec: &TraceSpec, env: &Env) -> Outcome {
    let events = match env.evidence.trace(&spec.stream) {
        Ok(ev) => ev,
        Err(why) => {
            let bound = match (&spec.count, spec.expect) {
                (Some(k), _) => format!("{k} count"),
                (_, Some(p)) => format!("{p:?}"),
                _ => "—".into(),
            };
            return Outcome::missing(why, bound);
        }
    };
    match (&spec.count, spec.expect) {
        (Some(kind), _) => count(spec, kind, events, env),
        (None, Some(p)) => predicate(p, spec, events, env),
        (None, None) => Outcome::missing(
            text!(
                "trace 检查缺少 count 或 expect",
                "trace check has neither count nor expect"
            ),
            "—".into(),
        ),
    }
}

fn count(spec: &TraceSpec, kind: &str, events: &[Event], env: &Env) -> Outcome {
    let n = events.iter().filter(|e| e.e == kind).count() as f64;
    let (min, max) = match env.resolve(&spec.equals) {
        Some(v) => (Some(v), Some(v)),
        None => (env.resolve(&spec.min), env.resolve(&spec.max)),
    };
    let bound = format!("{kind} {}", fmt_bounds(min, max));
    let pass = within(n, min, max);
    let why = if pass {
        text!(
            format!("{}：{kind} 事件 {} 次", spec.stream, fmt_num(n)),
            format!("{}: {} `{kind}` events", spec.stream, fmt_num(n))
        )
    } else {
        text!(
            format!(
                "{}：{kind} 事件 {} 次，应为 {}",
                spec.stream,
                fmt_num(n),
                fmt_bounds(min, max)
            ),
            format!(
                "{}: {} `{kind}` events, expected {}",
                spec.stream,
                fmt_num(n),
                fmt_bounds(min, max)
            )
        )
    };
    Outcome {
        pass,
        measured: fmt_num(n),
        bound,
        why,
    }
}

fn predicate(p: TracePredicate, spec: &TraceSpec, events: &[Event], env: &Env) -> Outcome {
    let steps = steps(events);
    let wins = windows(events);
    let no_steps = || {
        Outcome::missing(
            text!("没有观察到任何训练步", "no steps were observed"),
            format!("{p:?}"),
        )
    };
    if steps.is_empty() {
        return no_steps();
    }
    match p {
        TracePredicate::SameInputs => {
            let others: Vec<&Step> = steps.iter().filter(|s| s.input != "batch").collect();
            let measured = format!(
                "{}/{} steps on the batch",
                steps.len() - others.len(),
                steps.len()
            );
            let bound = "every step on the given batch".to_string();
            if others.is_empty() {
                return Outcome {
                    pass: true,
                    measured,
                    bound,
                    why: text!(
                        "所有步骤都用同一批输入",
                        "every step used the batch handed over"
                    ),
                };
            }
            let variants: Vec<&str> = {
                let mut v: Vec<&str> = others.iter().map(|s| s.variant).collect();
                v.dedup();
                v
            };
            Outcome {
                pass: false,
                measured,
                bound,
                why: text!(
                    format!("{} 个步骤用了别的输入（{}）：两种方案必须用同一批输入比较", others.len(), variants.join("/")),
                    format!("{} steps ran on other inputs ({}): both variants must be compared on the same batch", others.len(), variants.join("/"))
                ),
            }
        }
        TracePredicate::Warmup => {
            let bound = "≥ 1 untimed step per variant before its first timed step".to_string();
            if wins.is_empty() {
                return Outcome::missing(
                    text!(
                        "没有观察到计时（time.perf_counter 读数）",
                        "no timing observed (no time.perf_counter reads)"
                    ),
                    bound,
                );
            }
            let mut per: BTreeMap<&str, (usize, bool)> = BTreeMap::new(); // untimed-before-first-timed, seen timed
            for s in &steps {
                let entry = per.entry(s.variant).or_insert((0, false));
                if in_window(s.pos, &wins) {
                    entry.1 = true;
                } else if !entry.1 {
                    entry.0 += 1;
                }
            }
            let measured = per
                .iter()
                .map(|(v, (n, _))| format!("{v}: {n} warm-up"))
                .collect::<Vec<_>>()
                .join(", ");
            let cold: Vec<&str> = per
                .iter()
                .filter(|(_, (n, timed))| *timed && *n == 0)
                .map(|(v, _)| *v)
                .collect();
            if cold.is_empty() {
                Outcome {
                    pass: true,
                    measured,
                    bound,
                    why: text!(
                        "每种方案计时前都先预热",
                        "each variant warmed up before it was timed"
                    ),
                }
            } else {
                Outcome {
                    pass: false,
                    measured,
                    bound,
                    why: text!(
                        format!("{} 的第一步就被计时：没有预热（首步包含一次性开销）", cold.join("/")),
                        format!("the first step of {} was timed: no warm-up (first steps carry one-off costs)", cold.join("/"))
                    ),
                }
            }
        }
        TracePredicate::Synced => {
            let bound = "sync before every clock read around a step".to_string();
            if wins.is_empty() {
                return Outcome::missing(
                    text!(
                        "没有观察到计时（time.perf_counter 读数）",
                        "no timing observed (no time.perf_counter reads)"
                    ),
                    bound,
                );
            }
            let has_sync = |from: usize, to: usize| events[from..to].iter().any(|e| e.e == "sync");
            let mut timed = 0;
            let mut bad = 0;
            for &(open, close) in &wins {
                let inside: Vec<&Step> = steps
                    .iter()
                    .filter(|s| open < s.pos && s.pos < close)
                    .collect();
                let Some(last) = inside.last() else { continue };
                timed += 1;
                let before = steps.iter().rev().find(|s| s.pos < open).map(|s| s.pos);
                let open_ok = before.is_none_or(|b| has_sync(b, open));
                let close_ok = has_sync(last.pos, close);
                if !(open_ok && close_ok) {
                    bad += 1;
                }
            }
            let measured = format!("{}/{} timed windows synced", timed - bad, timed);
            if timed == 0 {
                return Outcome::missing(
                    text!("计时窗口里没有训练步", "no step ran inside a timed window"),
                    bound,
                );
            }
            if bad == 0 {
                Outcome {
                    pass: true,
                    measured,
                    bound,
                    why: text!(
                        "每次读时钟前都同步了设备",
                        "the device was synced before every clock read"
                    ),
                }
            } else {
                Outcome {
                    pass: false,
                    measured,
                    bound,
                    why: text!(
                        format!("{bad} 个计时窗口在读时钟前没有调用 sync()：GPU 异步执行，测到的是排队时间"),
                        format!("{bad} timed windows read the clock without calling sync() first: on a GPU that times the queue, not the work")
                    ),
                }
            }
        }
        TracePredicate::Repeats => {
            let need = env.resolve(&spec.min).unwrap_or(1.0);
            let bound = format!("≥ {} timed windows per variant", fmt_num(need));
            let mut per: BTreeMap<&str, usize> = BTreeMap::from([("off", 0), ("on", 0)]);
            for &(open, close) in &wins {
                let inside: Vec<&Step> = steps
                    .iter()
                    .filter(|s| open < s.pos && s.pos < close)
                    .collect();
                if let Some(first) = inside.first() {
                    if inside.iter().all(|s| s.variant == first.variant) {
                        *per.entry(first.variant).or_default() += 1;
                    }
                }
            }
            let measured = per
                .iter()
                .map(|(v, n)| format!("{v}: {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let short: Vec<&str> = per
                .iter()
                .filter(|(_, n)| (**n as f64) < need)
                .map(|(v, _)| *v)
                .collect();
            if short.is_empty() {
                Outcome {
                    pass: true,
                    measured,
                    bound,
                    why: text!(
                        "重复计时足够，可取中位数",
                        "enough timed repeats to take a median"
                    ),
                }
            } else {
                Outcome {
                    pass: false,
                    measured,
                    bound,
                    why: text!(
                        format!("{} 的计时次数不足：单次计时不可复现，应取多次的中位数", short.join("/")),
                        format!("too few timed repeats for {}: a single timing is not reproducible; take the median of several", short.join("/"))
                    ),
                }
            }
        }
    }
}
