//! `step_time`: the time per step a submission reports against the grader's own clock over the
//! same steps, inside the same timed windows. The grader stamps each observed step with its own
//! clock where it begins and where backward reaches the embedding (`t` of `step`/`step_done`,
//! `lib.StepObserver`), so both come from the same seconds of the same run and a busy machine
//! stretches both alike. Any honest statistic of the windows (median, mean, even the minimum)
//! lies between `min ×` the shortest and `max ×` the longest of the grader's durations (a window
//! holds its step plus a little: `zero_grad`, `sync`, the last of backward); a made-up number
//! does not. A variant with no timed window is left to the criteria that count windows.
use super::{fmt_num, within, Env, Outcome};
use crate::measurement::{close_to, median_range, Interval, Measurement};
use crate::spec::rubric::StepTimeSpec;
use crate::text;

pub fn evaluate(spec: &StepTimeSpec, env: &Env) -> Outcome {
    let bound = text!(
        format!(
            "报告值 ∈ [{} × 最短, {} × 最长]（评分器时钟，同一窗口）",
            fmt_num(spec.min),
            fmt_num(spec.max)
        ),
        format!(
            "reported ∈ [{} × shortest, {} × longest] (the grader's clock, same windows)",
            fmt_num(spec.min),
            fmt_num(spec.max)
        )
    );
    let mut parts = Vec::new();
    let mut bad = Vec::new();
    let mut padded = Vec::new();
    // (label, windows, own seconds, median_s, by the mean) of the first variant over the median rule
    let mut padded_median: Option<(String, usize, f64, f64, bool)> = None;
    // (label, what) of the first variant over an asleep rule
    let mut asleep_median: Option<(String, crate::spec::rubric::Asleep)> = None;
    let mut judged = 0;
    for case in &spec.cases {
        let events = match env.evidence.trace(&case.stream) {
            Ok(t) => t,
            Err(why) => return Outcome::missing(why, bound.clone()),
        };
        let reported = match env.evidence.number(&case.metric) {
            Ok(v) => v,
            Err(why) => return Outcome::missing(why, bound.clone()),
        };
        let m = Measurement::read(events, 1);
        // the grader's own seconds per step in each timed window of this variant
        let grader = m.grader_seconds(events, &case.variant);
        let label = format!("{}.{}", case.stream, case.variant);
        // no timed window: what compare_repeats / compare_median judge, not this criterion
        let (Some(lo), Some(hi)) = (
            grader.iter().copied().reduce(f64::min),
            grader.iter().copied().reduce(f64::max),
        ) else {
            parts.push(format!("{label}: — (no timed window)"));
            continue;
        };
        judged += 1;
        if !within(reported, Some(spec.min * lo), Some(spec.max * hi)) {
            bad.push(label.clone());
        }
        // each timed window is its step's time: what it holds outside its whole steps, on the
        // grader's cost clock, is the submission's own (a sleep after the step pads the window
        // and so the median computed from it). The reported number is a median: it moves only
        // when most windows are padded, and a stray pause in a few (a collection, a page fault)
        // moves nothing, so a variant fails when more than half of its windows exceed the bound
        if let Some(idle) = &spec.idle {
            let over_of = |ivs: &[&Interval]| {
                let mut over = Vec::new();
                for (k, iv) in ivs.iter().enumerate() {
                    let Some((secs, busy)) = m.busy_between(iv.open, iv.close) else {
                        continue;
                    };
                    let own = secs - busy;
                    let allowed = idle.max_s + idle.max_share * busy;
                    if own > allowed {
                        over.push((k, secs, busy, own, allowed));
                    }
                }
                over
            };
            let timed = m.timed_of(&case.variant);
            let mut found = None;
            let over = over_of(&timed);
            if 2 * over.len() > timed.len() {
                found = Some((over, timed.len(), false));
            } else {
                // each reading of the windows (one clock's, when the call read two:
                // `Measurement::window_readings`) is held alone too, whether or not the reported
                // median agrees with it: a second clock closed late around every step is half of
                // all windows, and its median is the padded one (red team 21); the union of a
                // tight clock's windows and a padded one's, half padded, takes any number
                // between the two as its median (red team 22, `04_union_half_padded`)
                for reading in &m.window_readings(&case.variant) {
                    let d: Vec<f64> = reading.iter().filter_map(|iv| iv.duration).collect();
                    let agrees =
                        median_range(&d).is_some_and(|(lo, hi)| close_to(reported, lo, hi));
                    let over = over_of(reading);
                    if 2 * over.len() > reading.len() {
                        found = Some((over, reading.len(), agrees));
                        break;
                    }
                }
            }
            // and the typical window: every window padded just under the per-window allowance
            // passes the rule above, and moves the median by all of it (red team 22's
            // `pad_under_allowance`: 70 % of it after every "off" step, off +40–55 %). The
            // readings' windows are held to the median rule (`IdleSpec::median_over`)
            if found.is_none() && padded_median.is_none() {
                let mut readings = vec![timed.clone()];
                readings.extend(m.window_readings(&case.variant));
                for reading in &readings {
                    let windows: Vec<(f64, f64)> = reading
                        .iter()
                        .filter_map(|iv| m.busy_between(iv.open, iv.close))
                        .map(|(secs, busy)| (secs - busy, busy))
                        .collect();
                    if let (Some((own, by_mean)), Some(limit)) =
                        (idle.median_over(&windows), idle.median_s)
                    {
                        padded_median = Some((label.clone(), windows.len(), own, limit, by_mean));
                        break;
                    }
                }
            }
            if found.is_none() && asleep_median.is_none() {
                let mut readings = vec![timed.clone()];
                readings.extend(m.window_readings(&case.variant));
                for reading in &readings {
                    let asleep: Vec<f64> = (reading.iter())
                        .filter_map(|iv| m.asleep_between(iv.open, iv.close))
                        .collect();
                    if let Some(over) = idle.asleep_over(&asleep) {
                        asleep_median = Some((label.clone(), over));
                        break;
                    }
                }
            }
            if let Some((over, total, reading)) = found {
                let (k, secs, busy, own, allowed) = over[0];
                let n = over.len();
                let (of_zh, of_en) = if reading {
                    (
                        "（报告的中位数来自这些窗口）",
                        " (the windows the reported median comes from)",
                    )
                } else {
                    ("", "")
                };
                padded.push(text!(
                    format!(
                        "{label}：{total} 个计时窗口{of_zh}中有 {n} 个在完整训练步的计算之外花了过多时间；例如第 {} 个（评分器的时钟：{} s，不含等待 CPU 的时间，含本进程其他线程的 CPU 时间）只有 {} s 是训练步的计算，其余 {} s 是你自己的代码或等待（sleep、空转；步里的 sleep 也算），超过允许的 {} s：窗口必须只计时训练步本身",
                        k + 1, fmt_num(secs), fmt_num(busy), fmt_num(own), fmt_num(allowed)
                    ),
                    format!(
                        "{label}: {n} of {total} timed windows{of_en} spent too long on other than their whole steps' work; e.g. window #{} lasted {} s on the grader's clock (time waiting for a CPU left out, CPU time of your process's other threads counted), only {} s of it its step computing; the other {} s were your own code's or asleep (a sleep, a spin, a sleep inside the step), more than the {} s allowed: a window times the step, not idle time after it",
                        k + 1, fmt_num(secs), fmt_num(busy), fmt_num(own), fmt_num(allowed)
                    )
                ));
            }
        }
    }
    let measured = parts.join("; ");
    if judged == 0 {
        return Outcome::new(
            false,
            measured,
            bound,
            text!(
                "没有任何计时窗口：报告的耗时不是测出来的",
                "no timed window at all: the reported times were not measured"
            ),
        );
    }
    if let Some(first) = padded.into_iter().next() {
        return Outcome::new(false, measured, bound, first);
    }
    if let Some((label, over)) = asleep_median {
        return Outcome::new(false, measured, bound, over.why(&label));
    }
    if let (Some((label, n, own, limit, by_mean)), Some(idle)) = (padded_median, &spec.idle) {
        let pct = fmt_num(idle.median_share() * 100.0);
        let (zh, en) = if by_mean {
            ("平均值", "mean")
        } else {
            ("中位数", "median")
        };
        return Outcome::new(
            false,
            measured,
            bound,
            text!(
                format!(
                    "{label}：{n} 个计时窗口里完整训练步之外的时间（评分器的时钟，你自己的代码）{zh}为 {} s，超过允许的 {} s + 训练步时间的 {pct}%：每个窗口都被拉长了（sleep、空转、多余的调用），窗口里只放要计时的步和一次 sync()",
                    fmt_num(own), fmt_num(limit)
                ),
                format!(
                    "{label}: the {en} of the seconds outside their whole steps in the {n} timed windows (the grader's clock: your own code's) is {} s, more than the {} s + {pct} % of the step's time allowed: every window is stretched (a sleep, a spin, extra calls); put only the step timed and one sync() in a window",
                    fmt_num(own), fmt_num(limit)
                )
            ),
        );
    }
    if bad.is_empty() {
        Outcome::new(
            true,
            measured,
            bound,
            text!(
                "报告的单步耗时落在评分器自己的时钟在同一批计时窗口里测得的范围内",
                "the reported time per step lies within what the grader's own clock measured over the same steps in the same timed windows"
            ),
        )
    } else {
        let which = bad.join(", ");
        Outcome::new(
            false,
            measured,
            bound,
            text!(
                format!("{which}：报告的单步耗时不在评分器时钟于同一批计时窗口里测得的范围内：数字不是从这些窗口测出来的"),
                format!("{which}: the reported time per step lies outside what the grader's own clock measured over the same steps in the same timed windows: the number was not measured from those windows")
            ),
        )
    }
}
