//! `step_ratio`: the steps a call timed are the contract's steps. Their cost, one variant against
//! the other (lesson 04: checkpointing on over off), is what the grader's own steps cost: the
//! median of the grader's cost-clock seconds of each variant's timed steps (`step_calls`: where
//! the observer saw a step begin to where its backward ended; time waiting for a CPU left out),
//! their ratio over the ratio the grader measured on steps it ran itself (`timing.on_over_off`,
//! pairs timed back to back). Work added inside one variant's steps (extra matmuls tied into the
//! loss, anomaly detection, fewer threads) is no padding outside the step, which `step_time`'s
//! idle clause sees; it changes what the step costs, and so this ratio. A ratio of two medians
//! each call takes at its own moments moves with the machine's load: one variant's block of steps
//! run while the machine was slowest bends it (0.71–1.46 beside two busy loops over 78 honest
//! gradings; once in 266 more, with two gradings at a time beside them, 0.45 in one call and
//! 0.98 in the other, 2026-12-06). So the call nearest the grader's ratio is held to the band, and
//! every call to a wider one: work that bends the ratio by less stays unseen (issue 38).
use super::{fmt_num, within, Env, Outcome};
use crate::measurement::{median_range, Measurement};
use crate::spec::rubric::StepRatioSpec;
use crate::text;

pub fn evaluate(spec: &StepRatioSpec, env: &Env) -> Outcome {
    let bound = text!(
        format!(
            "{}/{}（评分器时钟下各自计时步的中位数）÷ {}：最接近的一次 ∈ [{}, {}]，每次 ∈ [{}, {}]",
            spec.num, spec.den, spec.against, fmt_num(spec.min), fmt_num(spec.max),
            fmt_num(spec.each_min), fmt_num(spec.each_max)
        ),
        format!(
            "{}/{} (medians of their timed steps on the grader's clock) ÷ {}: the nearest call ∈ [{}, {}], every call ∈ [{}, {}]",
            spec.num, spec.den, spec.against, fmt_num(spec.min), fmt_num(spec.max),
            fmt_num(spec.each_min), fmt_num(spec.each_max)
        )
    );
    let own = match env.evidence.number(&spec.against) {
        Ok(x) if x > 0.0 => x,
        Ok(x) => {
            return Outcome::new(
                false,
                fmt_num(x),
                bound,
                text!(
                    format!("评分器自己的 {} 不是正数：无法比较", spec.against),
                    format!(
                        "the grader's own {} is not positive: nothing to compare with",
                        spec.against
                    )
                ),
            )
        }
        Err(why) => return Outcome::missing(why, bound),
    };
    let median = |xs: &[f64]| median_range(xs).map(|(lo, hi)| (lo + hi) / 2.0);
    let mut parts = Vec::new();
    let mut judged: Vec<(String, f64, f64, f64)> = Vec::new();
    for stream in &spec.streams {
        let events = match env.evidence.trace(stream) {
            Ok(t) => t,
            Err(why) => return Outcome::missing(why, bound),
        };
        let m = Measurement::read(events, 1);
        // a variant with no timed step stamped: what the criteria that count windows judge
        let (Some(num), Some(den)) = (
            median(&m.step_costs(&spec.num)),
            median(&m.step_costs(&spec.den)),
        ) else {
            parts.push(format!("{stream}: —"));
            continue;
        };
        if den <= 0.0 {
            parts.push(format!("{stream}: —"));
            continue;
        }
        let q = num / den / own;
        parts.push(format!(
            "{stream}: {} ÷ {} = {}",
            fmt_num(num / den),
            fmt_num(own),
            fmt_num(q)
        ));
        judged.push((stream.clone(), num, den, q));
    }
    let measured = parts.join("; ");
    // every call within the wide band; the one nearest the grader's ratio within the band
    let nearest = judged
        .iter()
        .min_by(|a, b| a.3.ln().abs().total_cmp(&b.3.ln().abs()));
    let bad = judged
        .iter()
        .find(|j| !within(j.3, Some(spec.each_min), Some(spec.each_max)))
        .or(nearest.filter(|j| !within(j.3, Some(spec.min), Some(spec.max))));
    let Some((stream, num, den, q)) = bad.cloned() else {
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                format!("每次调用里计时的步，{}/{} 与评分器自己运行的步相符：计时的就是契约里的那一步", spec.num, spec.den),
                format!("in each call the steps timed cost, {} against {}, what the grader's own steps do: the steps timed are the contract's step", spec.num, spec.den)
            ),
        );
    };
    let (n, d) = (&spec.num, &spec.den);
    Outcome::new(
        false,
        measured,
        bound,
        text!(
            format!(
                "{stream}：评分器的时钟下，你计时的 {n} 步中位数 {} s、{d} 步 {} s，{n}/{d} 是评分器自己运行同样两种步时的 {} 倍：计时的步里多做了（或少做了）契约之外的工作（额外的计算、anomaly 检测、改线程数……），比较的不是两种方案本身",
                fmt_num(num), fmt_num(den), fmt_num(q)
            ),
            format!(
                "{stream}: on the grader's clock your timed {n} steps took {} s (median) and {d} steps {} s: {n}/{d} is {}× what it is when the grader runs the same two steps itself. The steps timed did work the contract's step does not (extra computation, anomaly detection, another thread count…) or skipped some: the comparison is not of the two variants",
                fmt_num(num), fmt_num(den), fmt_num(q)
            )
        ),
    )
}
