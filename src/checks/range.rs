//! `range`: one metric within bounds.
use super::{fmt_bounds, fmt_num, within, Env, Outcome};
use crate::spec::rubric::RangeSpec;
use crate::text;

pub fn evaluate(spec: &RangeSpec, env: &Env) -> Outcome {
    let (min, max) = (env.resolve(&spec.min), env.resolve(&spec.max));
    let bound = fmt_bounds(min, max);
    let x = match env.evidence.number(&spec.metric) {
        Ok(x) => x,
        Err(why) => return Outcome::missing(why, bound.clone()),
    };
    let pass = within(x, min, max);
    let why = if pass {
        text!(
            format!("{} = {}，满足 {bound}", spec.metric, fmt_num(x)),
            format!("{} = {} is {bound}", spec.metric, fmt_num(x))
        )
    } else {
        text!(
            format!("{} = {}，不满足 {bound}", spec.metric, fmt_num(x)),
            format!("{} = {} is not {bound}", spec.metric, fmt_num(x))
        )
    };
    Outcome::new(pass, fmt_num(x), bound, why)
}
