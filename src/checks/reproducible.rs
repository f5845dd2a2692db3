//! `reproducible`: the same quantities, measured in two runs, agree within a relative tolerance
//! (a quantity is a metric of each run, a ratio of two, or a count of one kind of event in each
//! run's trace). With `measured: true` each run's trace must also hold a whole step: a cached
//! second result agrees with the first but is no second measurement.
use super::{fmt_num, Env, Outcome};
use crate::i18n::Text;
use crate::measurement::Measurement;
use crate::observations::Absent;
use crate::spec::rubric::{Quantity, ReproducibleSpec};
use crate::text;

fn value(env: &Env, run: &str, q: &Quantity) -> Result<f64, Absent> {
    let get = |m: &str| env.evidence.number(&format!("{run}.{m}"));
    if let Some(kind) = &q.count {
        // events of `kind` in the trace the run names, counted here from what was sent
        let events = env.evidence.trace(run)?;
        return Ok(events.iter().filter(|e| e.e == *kind).count() as f64);
    }
    match (&q.metric, &q.ratio) {
        (Some(m), _) => get(m),
        (None, Some([n, d])) => {
            let (n, d) = (get(n)?, get(d)?);
            Ok(if d == 0.0 { f64::NAN } else { n / d })
        }
        (None, None) => Err(Text::same("quantity names neither metric nor ratio").into()),
    }
}

fn name(q: &Quantity) -> String {
    match (&q.metric, &q.ratio, &q.count) {
        (Some(m), ..) => m.clone(),
        (None, Some([n, d]), _) => format!("{n}/{d}"),
        (None, None, Some(kind)) => kind.clone(),
        _ => "?".into(),
    }
}

pub fn evaluate(spec: &ReproducibleSpec, env: &Env) -> Outcome {
    let [a, b] = &spec.runs;
    let bound = spec
        .quantities
        .iter()
        .map(|q| {
            if q.max_rel_diff == 0.0 {
                text!(format!("{}：相等", name(q)), format!("{}: equal", name(q)))
            } else {
                Text::same(format!(
                    "{}: ±{}%",
                    name(q),
                    fmt_num(q.max_rel_diff * 100.0)
                ))
            }
        })
        .fold(Text::default(), |acc, t| {
            if acc.en.is_empty() {
                t
            } else {
                text!(
                    format!("{}；{}", acc.zh, t.zh),
                    format!("{}; {}", acc.en, t.en)
                )
            }
        });
    let mut measured = Vec::new();
    let mut bad = Vec::new();
    if spec.measured {
        for run in [a, b] {
            let events = match env.evidence.trace(run) {
                Ok(ev) => ev,
                Err(why) => return Outcome::missing(why, bound),
            };
            let m = Measurement::read(events, 1);
            if !m.steps.iter().any(|s| s.whole()) {
                // a failed probe explains an empty trace (and blocks this criterion) by itself
                let absent = env.evidence.why_missing(run);
                if absent.probe.is_some() {
                    return Outcome::missing(absent, bound);
                }
                return Outcome::new(
                    false,
                    text!(format!("{run}：0 个完整步骤"), format!("{run}: 0 whole steps")),
                    bound,
                    text!(
                        format!("{run} 什么也没测：其中没有运行任何完整的训练步（把第一次调用的结果缓存起来再返回，不是再测一次）"),
                        format!("{run} measured nothing: no whole training step ran in it (handing back the first call's result, cached, is not measuring again)")
                    ),
                );
            }
        }
    }
    for q in &spec.quantities {
        let (va, vb) = match (value(env, a, q), value(env, b, q)) {
            (Ok(x), Ok(y)) => (x, y),
            (Err(why), _) | (_, Err(why)) => return Outcome::missing(why, bound.clone()),
        };
        // symmetric: the larger over the smaller, minus one (which run comes first does not matter)
        let rel = if va == vb {
            0.0
        } else if va * vb <= 0.0 {
            f64::INFINITY
        } else {
            (va / vb).max(vb / va) - 1.0
        };
        measured.push(format!("{}: {} / {}", name(q), fmt_num(va), fmt_num(vb)));
        if rel.is_nan() || rel > q.max_rel_diff {
            bad.push(format!(
                "{}: {} vs {} ({}% apart)",
                name(q),
                fmt_num(va),
                fmt_num(vb),
                fmt_num(rel * 100.0)
            ));
        }
    }
    let pass = bad.is_empty();
    let why = if pass {
        text!(
            "两次运行的测量结果一致",
            "both runs measured the same within tolerance"
        )
    } else {
        text!(
            format!("两次运行不一致：{}", bad.join("；")),
            format!("the two runs disagree: {}", bad.join("; "))
        )
    };
    Outcome::new(pass, measured.join("; "), bound, why)
}
