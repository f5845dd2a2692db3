//! `ratio`: num / den within bounds (time on/off, bytes on/off, student vs grader).
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::spec::rubric::{PerRatio, RatioSpec};
use crate::text;

pub fn evaluate(spec: &RatioSpec, env: &Env) -> Outcome {
    let (min, max) = (env.resolve(&spec.min), env.resolve(&spec.max));
    let bound = fmt_bounds(min, max);
    let (num, den) = match (
        env.evidence.number(&spec.num),
        env.evidence.number(&spec.den),
    ) {
        (Ok(n), Ok(d)) => (n, d),
        (Err(why), _) | (_, Err(why)) => return Outcome::missing(why, bound.clone()),
    };
    if den == 0.0 {
        let why = spec.when_zero.clone().unwrap_or_else(|| {
            text!(
                format!("分母 `{}` 为 0", spec.den),
                format!("denominator `{}` is 0", spec.den)
            )
        });
        return Outcome::missing(why, bound.clone());
    }
    let r = num / den;
    if let Some(per) = &spec.per {
        return per_ratio(spec, per, r, env);
    }
    let pass = within(r, min, max);
    let measured = format!("{} ({} / {})", fmt_num(r), fmt_num(num), fmt_num(den));
    let why = if pass {
        text!(
            format!("{} / {} = {}，满足 {bound}", spec.num, spec.den, fmt_num(r)),
            format!("{} / {} = {} is {bound}", spec.num, spec.den, fmt_num(r))
        )
    } else {
        text!(
            format!(
                "{} / {} = {}，不满足 {bound}",
                spec.num,
                spec.den,
                fmt_num(r)
            ),
            format!(
                "{} / {} = {} is not {bound}",
                spec.num,
                spec.den,
                fmt_num(r)
            )
        )
    };
    Outcome::new(pass, measured, bound, why)
}

/// (num/den) / (per.num/per.den) within bounds: one ratio relative to another.
fn per_ratio(spec: &RatioSpec, per: &PerRatio, r: f64, env: &Env) -> Outcome {
    let (min, max) = (env.resolve(&spec.min), env.resolve(&spec.max));
    let bound = fmt_bounds(min, max);
    let other = match (env.evidence.number(&per.num), env.evidence.number(&per.den)) {
        (Ok(a), Ok(b)) if a != 0.0 && b != 0.0 => a / b,
        (Err(why), _) | (_, Err(why)) => return Outcome::missing(why, bound),
        _ => {
            return Outcome::missing(
                text!(
                    format!("`{}` 或 `{}` 为 0", per.num, per.den),
                    format!("`{}` or `{}` is 0", per.num, per.den)
                ),
                bound,
            )
        }
    };
    let q = r / other;
    let pass = within(q, min, max);
    let measured = format!("{} ({} / {})", fmt_num(q), fmt_num(r), fmt_num(other));
    let (a, b) = (
        format!("{} / {}", spec.num, spec.den),
        format!("{} / {}", per.num, per.den),
    );
    let why = if pass {
        text!(
            format!("({a}) ÷ ({b}) = {}，满足 {bound}", fmt_num(q)),
            format!("({a}) ÷ ({b}) = {} is {bound}", fmt_num(q))
        )
    } else {
        text!(
            format!("({a}) ÷ ({b}) = {}，不满足 {bound}", fmt_num(q)),
            format!("({a}) ÷ ({b}) = {} is not {bound}", fmt_num(q))
        )
    };
    Outcome::new(pass, measured, bound, why)
}
