//! `answer`: a recorded answer (string, number or bool) is one of the accepted ones, or (`same_as`)
//! the truth the grader recorded for this run in another metric (an answer drawn per grading).
use super::{Env, Outcome};
use crate::spec::rubric::AnswerSpec;
use crate::text;
use serde_json::Value;

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn evaluate(spec: &AnswerSpec, env: &Env) -> Outcome {
    let truth;
    let expected: &[String] = match &spec.same_as {
        Some(key) => match env.evidence.metric(key) {
            Ok(v) => {
                truth = [shown(v)];
                &truth
            }
            Err(why) => return Outcome::missing(why, format!("= {key}")),
        },
        None => &spec.expected,
    };
    let bound = if expected.len() == 1 {
        format!("= {}", expected[0])
    } else {
        format!("∈ {{{}}}", expected.join(", "))
    };
    let value = match env.evidence.metric(&spec.metric) {
        Ok(v) => v,
        Err(why) => return Outcome::missing(why, bound.clone()),
    };
    let got = shown(value);
    let pass = expected.iter().any(|e| e == &got);
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
