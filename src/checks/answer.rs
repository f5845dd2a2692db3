//! `answer`: a recorded answer (string, number or bool) is one of the accepted ones.
use super::{Env, Outcome};
use crate::spec::rubric::AnswerSpec;
use crate::text;
use serde_json::Value;

pub fn evaluate(spec: &AnswerSpec, env: &Env) -> Outcome {
    let bound = if spec.expected.len() == 1 {
        format!("= {}", spec.expected[0])
    } else {
        format!("∈ {{{}}}", spec.expected.join(", "))
    };
    let value = match env.evidence.metric(&spec.metric) {
        Ok(v) => v,
        Err(why) => return Outcome::missing(why, bound.clone()),
    };
    let got = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let pass = spec.expected.iter().any(|e| e == &got);
    let why = if pass {
        text!(
            format!("{} 为 {got}", spec.metric),
            format!("{} is {got}", spec.metric)
        )
    } else {
        text!(
            format!("{} 为 {got}，应为 {bound}", spec.metric),
            format!("{} is {got}; expected {bound}", spec.metric)
        )
    };
    Outcome::new(pass, got, bound, why)
}
