//! `step_time`: the time per step a submission reports against the grader's own clock over the
//! same steps, inside the same timed windows. The grader stamps each observed step with its own
//! clock where it begins and where backward reaches the embedding (`t` of `step`/`step_done`,
//! `lib.StepObserver`), so both numbers come from the same seconds of the same run: a busy
//! machine stretches both alike, and the ratio stays near 1 (a window holds its step plus a
//! little: `zero_grad`, `sync`, the last of backward).
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::measurement::Measurement;
use crate::spec::rubric::StepTimeSpec;
use crate::text;
use serde_json::Value;

pub fn evaluate(spec: &StepTimeSpec, env: &Env) -> Outcome {
    let bound = fmt_bounds(Some(spec.min), Some(spec.max));
    let mut parts = Vec::new();
    let mut bad = Vec::new();
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
        let stamp = |pos: usize| events.get(pos)?.fields.get("t").and_then(Value::as_f64);
        let mut grader: Vec<f64> = m
            .timed_of(&case.variant)
            .iter()
            .filter_map(|iv| {
                iv.steps
                    .iter()
                    .map(|&k| {
                        let s = &m.steps[k];
                        Some(stamp(s.end?)? - stamp(s.start)?)
                    })
                    .sum::<Option<f64>>()
                    .map(|d| d / iv.steps.len().max(1) as f64)
            })
            .collect();
        let label = format!("{}.{}", case.stream, case.variant);
        if grader.is_empty() {
            bad.push(label.clone());
            parts.push(format!("{label}: —"));
            continue;
        }
        grader.sort_by(|a, b| a.total_cmp(b));
        let med = grader[grader.len() / 2];
        let ratio = reported / med;
        if !within(ratio, Some(spec.min), Some(spec.max)) {
            bad.push(label.clone());
        }
        parts.push(format!(
            "{label}: {} ({} / {})",
            fmt_num(ratio),
            fmt_num(reported),
            fmt_num(med)
        ));
    }
    let measured = parts.join("; ");
    if bad.is_empty() {
        Outcome::new(
            true,
            measured,
            bound,
            text!(
                "报告的单步耗时与评分器在同一计时窗口内、用自己的时钟测得的步骤耗时相符",
                "the reported time per step agrees with the grader's own clock over the same steps in the same timed windows"
            ),
        )
    } else {
        let which = bad.join(", ");
        Outcome::new(
            false,
            measured,
            bound,
            text!(
                format!("{which}：报告的单步耗时与评分器在同一计时窗口内测得的不符（或没有计时窗口）：数字不是从这些窗口测出来的"),
                format!("{which}: the reported time per step does not agree with the grader's own clock over the same steps in the same timed windows (or there are none): the number was not measured from those windows")
            ),
        )
    }
}
