//! `ratio`: num / den within bounds (time on/off, bytes on/off, student vs grader).
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::spec::rubric::RatioSpec;
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
        return Outcome::missing(
            text!(
                format!("分母 `{}` 为 0", spec.den),
                format!("denominator `{}` is 0", spec.den)
            ),
            bound.clone(),
        );
    }
    let r = num / den;
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
