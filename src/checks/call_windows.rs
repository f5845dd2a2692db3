//! `call_windows`: the numbers a per-call timer returned (lesson 05's `time_calls`: `first_s` for the
//! first call, `steady_s` for each later one) are the windows its own clock reads put around each
//! call, rebuilt from the values the driver recorded (`measurement.rs`: any two reads of one clock
//! around that call alone, equal within the clock's resolution at the values read), and the calls
//! made are `1 + calls` (every entry into `fn` counts: a call that raised inside it is a call made,
//! a hidden warm-up on an input that makes the model raise too). Nothing here depends on how fast
//! the machine was: a reported number either is the duration between two recorded clock reads
//! around its call, or it is not. With `idle:`, a window must also be its call: its seconds on the
//! grader's cost clock outside the handed-over `fn()` and `sync()` calls (their `call` stamps) at
//! most `max_s + max_share × busy` — a sleep or a spin after `fn` returns, before the closing read,
//! makes any number "its window" (issue 38, round 4). Run-queue waits are not on that clock. One
//! steady window per stream may exceed it (a stall of the machine's, not the submission's: a
//! quiet CI run once showed 5.5 ms in one compiled window of fifty): one window cannot move the
//! steady median, and the mean rule still counts it, so padding it buys nothing; `first_s`'s
//! window, which is the first call's number alone, is always held. The median and mean rules
//! (`median_s`) are over the steady windows only: the first one holds the compile.
use super::{fmt_num, Env, Outcome};
use crate::measurement::{Measurement, Source};
use crate::observations::Absent;
use crate::spec::rubric::{CallWindowsSpec, IdleSpec};
use crate::text;

/// Steady windows a stream must have before one of them may be a stall (see the module's doc).
const MIN_STEADY_TO_EXCUSE: usize = 10;

/// What one stream shows: calls matched, calls made, problems (zh, en).
struct Found {
    matched: usize,
    made: usize,
    bad: Vec<(String, String)>,
    /// the median of the steady windows' own seconds (outside the handed-over calls), when the
    /// rule has a median clause: the margin a passing stream had, shown beside its count
    own_median: Option<f64>,
}

fn judge(stream: &str, spec: &CallWindowsSpec, env: &Env) -> Result<Found, Absent> {
    let events = env.evidence.trace(stream)?;
    // `S.first_s`: a number, or a one-element list (the simulated device's form)
    let key = format!("{stream}.first_s");
    let first = match env.evidence.number(&key) {
        Ok(x) => x,
        Err(why) => match super::series::list(env, &key).as_deref() {
            Ok([x]) => *x,
            _ => return Err(why),
        },
    };
    let steady = super::series::list(env, &format!("{stream}.steady_s"))?;
    let m = Measurement::read(events, 1);
    let calls: Vec<usize> = (0..m.steps.len()).filter(|&k| m.steps[k].whole()).collect();
    // every entry into fn is a call made: one that raised before returning (a stray) too
    let entered = m.steps.len();
    let raised: Vec<String> = (0..entered)
        .filter(|&k| !m.steps[k].whole())
        .map(|k| (k + 1).to_string())
        .collect();
    let mut bad = Vec::new();
    if let Some(want) = env.resolve(&spec.calls) {
        let want = want as usize;
        if entered != want + 1 {
            let (zh, en) = if raised.is_empty() {
                (String::new(), String::new())
            } else {
                (
                    format!(
                        "（其中 {} 次在 fn 里抛出异常：第 {} 次）",
                        raised.len(),
                        raised.join("、")
                    ),
                    format!(
                        " ({} of them raised inside fn: call {})",
                        raised.len(),
                        raised.join(", ")
                    ),
                )
            };
            bad.push((
                format!("fn 被调用 {entered} 次{zh}，应为 1 + calls = {}", want + 1),
                format!(
                    "fn was called {entered} times{en}; the contract says 1 + calls = {}",
                    want + 1
                ),
            ));
        }
        if steady.len() != want {
            bad.push((
                format!("steady_s 有 {} 项，应为 calls = {want}", steady.len()),
                format!(
                    "steady_s has {} entries; expected calls = {want}",
                    steady.len()
                ),
            ));
        }
    }
    let mut matched = 0;
    // each matched window's (own, busy) seconds, the least stretched reading of it (the median rule)
    let mut windows = Vec::new();
    // seconds asleep of the steady windows (the asleep rules), and of every window that gives
    // its number, the first call's too (the one-window rule)
    let mut asleep = Vec::new();
    let mut asleep_all = Vec::new();
    // the one steady window a stall may have stretched (see the module's doc)
    let mut excused = steady.len() < MIN_STEADY_TO_EXCUSE;
    for (j, &k) in calls.iter().enumerate() {
        let (name, reported) = match j {
            0 => ("first_s".to_string(), Some(first)),
            _ => (format!("steady_s[{}]", j - 1), steady.get(j - 1).copied()),
        };
        let Some(reported) = reported else { continue };
        // a call on an input of another shape (a slice of the batch: red team 20) times other work
        if !m.steps[k].on_given_inputs() {
            if bad.len() < 4 {
                bad.push((
                    format!("第 {} 次调用的输入形状不是交给你的那批 x 的（例如切片）：{name} 计的是别的工作", j + 1),
                    format!("call {} was fed a tensor of another shape than the x handed over (a slice): {name} times other work", j + 1),
                ));
            }
            continue;
        }
        // any two reads of one clock around this call alone, to the clock's resolution at the
        // values read (chained `time.time()` stamps differenced with np.diff: ~0.24 µs)
        let own = m.sources_of(&[k]);
        let giving: Vec<_> = own.iter().filter(|s| s.gives(reported, 1.0)).collect();
        let stretched = match &spec.idle {
            None => None,
            // a pair that gives the number and holds no more of the submission's time than allowed
            Some(idle) => match giving.iter().map(|s| stretch(&m, s, idle)).min_by(|a, b| {
                a.map(|x| x.2 - x.3)
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.map(|x| x.2 - x.3).unwrap_or(f64::INFINITY))
            }) {
                None => None,
                Some(Some(x)) if x.2 <= x.3 => None,
                Some(x) => Some(x),
            },
        };
        let stall = match stretched {
            Some(Some((_, busy, own, allowed)))
                if j > 0 && !excused && own - allowed <= IdleSpec::MAX_STALL_S =>
            {
                excused = true;
                Some((own, busy))
            }
            _ => None,
        };
        if let Some(window) = stall {
            matched += 1;
            windows.push(window);
            continue;
        }
        if !giving.is_empty() && stretched.is_none() {
            matched += 1;
            // the least asleep of the windows that give the number: the benefit of the doubt
            asleep_all.extend(
                (giving.iter())
                    .filter_map(|s| m.asleep_between(s.open, s.close))
                    .reduce(f64::min),
            );
            // the median and mean rules are over the steady windows: `first_s`'s holds the
            // compile, whose large negative excess (own − share × busy) pulled the mean far below
            // its limit, so padding half of the compiled windows passed it (red team 21)
            if let Some(idle) = spec.idle.as_ref().filter(|i| i.median_s.is_some() && j > 0) {
                let least = giving
                    .iter()
                    .filter_map(|s| Some((stretch(&m, s, idle)?, s)))
                    .map(|((_, busy, own, _), s)| (own, busy, m.asleep_between(s.open, s.close)))
                    .min_by(|a, b| {
                        (a.0 - idle.median_share() * a.1)
                            .total_cmp(&(b.0 - idle.median_share() * b.1))
                    });
                if let Some((own, busy, slept)) = least {
                    windows.push((own, busy));
                    asleep.extend(slept);
                }
            }
            continue;
        }
        if bad.len() >= 4 {
            continue;
        }
        if !giving.is_empty() {
            bad.push(match stretched.flatten() {
                None => (
                    format!("第 {} 次调用的计时窗口没有评分器自己的时间戳，无法核对窗口里是不是只有这次调用", j + 1),
                    format!(
                        "call {}'s window carries none of the grader's own stamps: whether it timed that call alone cannot be checked",
                        j + 1
                    ),
                ),
                Some((secs, busy, own, allowed)) => (
                    format!(
                        "{name} 的计时窗口（评分器的时钟：{} s，不含等待 CPU 的时间，含本进程其他线程的 CPU 时间）里只有 {} s 在运行交给你的 fn()/sync()，其余 {} s 是你自己的代码（sleep、空转）：超过允许的 {} s",
                        fmt_num(secs), fmt_num(busy), fmt_num(own), fmt_num(allowed)
                    ),
                    format!(
                        "{name}'s window lasted {} s on the grader's clock (time waiting for a CPU left out, CPU time of your process's other threads counted), only {} s of it inside the fn()/sync() calls handed over; the other {} s were your own code's (a sleep, a spin), more than the {} s allowed",
                        fmt_num(secs), fmt_num(busy), fmt_num(own), fmt_num(allowed)
                    ),
                ),
            });
            continue;
        }
        // the innermost pair: the call's own window when its reads are consecutive
        let nearest = own
            .iter()
            .max_by_key(|s| (s.open, std::cmp::Reverse(s.close)))
            .and_then(|s| s.duration);
        bad.push(match nearest {
            None => (
                format!(
                    "第 {} 次调用没有只包含它自己的计时窗口（{name} = {} s 从哪里来？）",
                    j + 1,
                    fmt_num(reported)
                ),
                format!(
                    "call {} has no timed window of its own (where does {name} = {} s come from?)",
                    j + 1,
                    fmt_num(reported)
                ),
            ),
            Some(d) => (
                format!(
                    "{name} = {} s，但你的时钟读数在第 {} 次调用前后相差 {} s",
                    fmt_num(reported),
                    j + 1,
                    fmt_num(d)
                ),
                format!(
                    "{name} = {} s, but your clock reads around call {} are {} s apart",
                    fmt_num(reported),
                    j + 1,
                    fmt_num(d)
                ),
            ),
        });
    }
    let own_median = (!windows.is_empty()
        && spec.idle.as_ref().is_some_and(|i| i.median_s.is_some()))
    .then(|| {
        let mut own: Vec<f64> = windows.iter().map(|w| w.0).collect();
        own.sort_by(f64::total_cmp);
        own[own.len() / 2]
    });
    let median = spec
        .idle
        .as_ref()
        .and_then(|i| Some((i.median_over(&windows)?, i.median_s?, i.median_share())));
    if let Some(((own, by_mean), limit, share)) = median {
        let (zh, en) = if by_mean {
            ("平均值", "mean")
        } else {
            ("中位数", "median")
        };
        bad.push((
            format!(
                "{} 个计时窗口里你自己的代码（窗口中交给你的 fn()/sync() 之外）的时间{zh}为 {} s，超过允许的 {} s + 调用时间的 {}%：窗口被拉长了（sleep、空转、gc.collect()），窗口里只放这次调用和 sync()",
                windows.len(), fmt_num(own), fmt_num(limit), share * 100.0
            ),
            format!(
                "the {en} of your own code's seconds in the {} timed windows (outside the fn()/sync() calls handed over) is {} s, more than the {} s + {} % of the calls' time allowed: the windows are stretched (a sleep, a spin, a gc.collect()); put only the call and sync() in a window",
                windows.len(), fmt_num(own), fmt_num(limit), share * 100.0
            ),
        ));
    }
    if let Some(idle) = spec.idle.as_ref() {
        // every window that gives its number, the first call's too, to the one-window bound;
        // the steady ones to the median
        if let Some(over) = idle
            .asleep_in_one(&asleep_all)
            .or_else(|| idle.asleep_over(&asleep))
        {
            let why = over.why("");
            bad.push((why.zh.to_string(), why.en.to_string()));
        }
    }
    Ok(Found {
        matched,
        made: entered,
        bad,
        own_median,
    })
}

/// A window's seconds on the grader's cost clock, those inside the handed-over calls, the rest
/// (the submission's own) and what `idle` allows of it; `None` without the grader's stamps.
fn stretch(m: &Measurement, s: &Source, idle: &IdleSpec) -> Option<(f64, f64, f64, f64)> {
    let (secs, busy) = m.busy(s)?;
    Some((secs, busy, secs - busy, idle.max_s + idle.max_share * busy))
}

pub fn evaluate(spec: &CallWindowsSpec, env: &Env) -> Outcome {
    let bound = text!(
        "每个数值 = 它那次调用的计时窗口；调用 1 + calls 次",
        "each number = its call's timed window; 1 + calls calls"
    );
    let names = spec.stream.names();
    let many = names.len() > 1;
    let mut measured = Vec::new();
    let mut bad_zh = Vec::new();
    let mut bad_en = Vec::new();
    let mut has_own = false; // some stream showed its median own time (the median clause)
    for name in names {
        let found = match judge(name, spec, env) {
            Ok(f) => f,
            Err(why) => return Outcome::missing(why, bound),
        };
        let short = name.rsplit('.').next().unwrap_or(name);
        has_own |= found.own_median.is_some();
        let own = found
            .own_median
            .map(|s| format!(" ({} ms)", fmt_num(s * 1e3)))
            .unwrap_or_default();
        measured.push(if many {
            format!("{short}: {}/{}{own}", found.matched, found.made)
        } else {
            format!("{}/{}{own}", found.matched, found.made)
        });
        for (zh, en) in found.bad {
            bad_zh.push(if many { format!("{short}：{zh}") } else { zh });
            bad_en.push(if many { format!("{short}: {en}") } else { en });
        }
    }
    let measured = text!(
        format!(
            "与窗口相符 {}{}",
            measured.join(", "),
            if has_own {
                "（括号内：窗口里你自己代码时间的中位数）"
            } else {
                ""
            }
        ),
        format!(
            "matching their window {}{}",
            measured.join(", "),
            if has_own {
                " (in brackets: the median of your own code's time in a window)"
            } else {
                ""
            }
        )
    );
    if bad_en.is_empty() {
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                "每个返回的数值都是你的时钟读数在那次调用前后的差（由评分器记录的读数重建）",
                "every number returned is the time between your clock reads around that call (rebuilt from the reads the grader recorded)"
            ),
        );
    }
    Outcome::new(
        false,
        measured,
        bound,
        text!(
            format!(
                "{}。每个数值都应是它那一次调用单独的计时窗口",
                bad_zh.join("；")
            ),
            format!(
                "{}. Each number must be the timed window of its own call",
                bad_en.join("; ")
            )
        ),
    )
}
