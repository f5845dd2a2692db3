//! `break_even`: the grader computes, in Rust, the answer to each break-even case the scenario
//! recorded and compares it with the submission's (lesson 05). A case is a `case` event with
//! `eager_step_s`, `compiled_first_s`, `compiled_step_s` and `answer` (an integer, `null` for
//! None, or a string saying what came back instead: another type, an exception, a hang). A
//! `skipped` event is a case the scenario did not ask (lesson 05's measured case when its answer
//! exceeds `max_n` steps: README); it counts as neither right nor wrong, once Rust confirms the
//! answer really is beyond `max_n`.
use super::{fmt_num, Env, Outcome};
use crate::spec::rubric::BreakEvenSpec;
use crate::text;
use serde_json::Value;

/// The smallest `n ≥ 1` with `first + (n - 1)·step ≤ n·eager`, or `None` when no n exists.
///
/// `first ≤ eager` → 1 (the first call is already no dearer). Otherwise the inequality reads
/// `first - step ≤ n·(eager - step)`: it never holds when the compiled step is equal or slower
/// (`step ≥ eager`); else the answer is `⌈(first - step)/(eager - step)⌉`, corrected by evaluating
/// the inequality itself, so equality at the boundary counts as breaking even.
pub fn break_even(eager: f64, first: f64, step: f64) -> Option<u64> {
    if ![eager, first, step].iter().all(|x| x.is_finite()) {
        return None;
    }
    let holds = |n: u64| first + (n as f64 - 1.0) * step <= n as f64 * eager;
    if holds(1) {
        return Some(1);
    }
    if step >= eager {
        return None;
    }
    let q = ((first - step) / (eager - step)).ceil();
    if q >= 9.0e15 {
        return None; // beyond exact integers: treat as never
    }
    let mut n = (q as u64).max(1);
    while n > 1 && holds(n - 1) {
        n -= 1;
    }
    while !holds(n) {
        n += 1;
    }
    Some(n)
}

fn num(e: &crate::observations::Event, key: &str) -> Option<f64> {
    e.fields.get(key).and_then(Value::as_f64)
}

fn show(v: Option<u64>) -> String {
    v.map_or("None".to_string(), |n| fmt_num(n as f64))
}

/// The submission's answer as text: `None`, an integer, or what came back instead.
fn shown_answer(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "None".into(),
        Some(Value::String(s)) => s.clone(),
        Some(x) => x.as_f64().map_or_else(|| x.to_string(), fmt_num),
    }
}

fn right(answer: Option<&Value>, expected: Option<u64>) -> bool {
    match (answer, expected) {
        (None | Some(Value::Null), None) => true,
        (Some(Value::Number(n)), Some(k)) => n.as_u64() == Some(k) || n.as_f64() == Some(k as f64),
        _ => false,
    }
}

pub fn evaluate(spec: &BreakEvenSpec, env: &Env) -> Outcome {
    let bound = text!(
        "每个用例与评分器的计算一致",
        "every case equals the grader's answer"
    );
    let mut total = 0usize;
    let mut skipped = Vec::new();
    let mut wrong_zh = Vec::new();
    let mut wrong_en = Vec::new();
    let mut left_out: Option<(String, String)> = None;
    let names = spec.stream.names().into_iter().map(|n| (n, false));
    for (name, measured) in names.chain(spec.measured.as_deref().map(|n| (n, true))) {
        let events = match env.evidence.trace(name) {
            Ok(ev) => ev,
            Err(why) if measured && why.probe.is_some() => {
                left_out = Some((
                    format!("（实测用例没有生成：{}）", why.why.zh),
                    format!(" (no measured case: {})", why.why.en),
                ));
                continue;
            }
            Err(why) => return Outcome::missing(why, bound),
        };
        for e in events.iter().filter(|e| e.e == "skipped") {
            let n = match (
                num(e, "eager_step_s"),
                num(e, "compiled_first_s"),
                num(e, "compiled_step_s"),
            ) {
                (Some(eager), Some(first), Some(step)) => break_even(eager, first, step),
                _ => None,
            };
            let max_n = num(e, "max_n").unwrap_or(f64::INFINITY);
            match n {
                Some(n) if n as f64 > max_n => skipped.push(n),
                _ => {
                    // the scenario skipped a case it should have asked: the grader's fault, said
                    wrong_zh.push(format!("{name} 的用例被跳过，但答案并不超过 {max_n} 步"));
                    wrong_en.push(format!(
                        "a case of {name} was skipped although its answer is within {max_n} steps"
                    ));
                }
            }
        }
        for e in events.iter().filter(|e| e.e == "case") {
            total += 1;
            let (Some(eager), Some(first), Some(step)) = (
                num(e, "eager_step_s"),
                num(e, "compiled_first_s"),
                num(e, "compiled_step_s"),
            ) else {
                wrong_zh.push(format!("{name} 的用例缺少输入数值"));
                wrong_en.push(format!("a case of {name} lacks its inputs"));
                continue;
            };
            let expected = break_even(eager, first, step);
            let answer = e.fields.get("answer");
            if right(answer, expected) {
                continue;
            }
            let (ez, ee) = match expected {
                None if step >= eager => (
                    "（编译后每步不比 eager 快，永远回不了本）",
                    " (the compiled step is no faster than eager: it never pays)",
                ),
                Some(n) if n > 1 && first + (n as f64 - 1.0) * step == n as f64 * eager => (
                    "（恰好相等，相等也算回本）",
                    " (exactly equal there: equality counts as breaking even)",
                ),
                Some(1) if first <= eager => (
                    "（首次调用本身就不比 eager 贵）",
                    " (the first call is already no dearer than eager)",
                ),
                _ => ("", ""),
            };
            let got = shown_answer(answer);
            // exact values (shortest round-trip form): the student can replay the case
            let args =
                format!("eager_step_s={eager}, compiled_first_s={first}, compiled_step_s={step}");
            wrong_zh.push(format!(
                "break_even({args}) 返回 {got}，应为 {}{ez}",
                show(expected)
            ));
            wrong_en.push(format!(
                "break_even({args}) returned {got}, expected {}{ee}",
                show(expected)
            ));
        }
    }
    if total == 0 && wrong_en.is_empty() && !skipped.is_empty() {
        let n = fmt_num(skipped[0] as f64);
        return Outcome::new(
            true,
            text!("未询问", "not asked"),
            bound,
            text!(
                format!("实测的两种步长几乎相等：回本要 {n} 步，超出契约的上限，这个用例不询问（README）"),
                format!("the measured step times are nearly equal: breaking even takes {n} steps, beyond the contract's limit, so this case is not asked (README)")
            ),
        );
    }
    if total == 0 && wrong_en.is_empty() {
        return Outcome::missing(
            text!(
                "没有记录到 break_even 用例",
                "no break_even case was recorded"
            ),
            bound,
        );
    }
    let bad = wrong_en.len();
    let measured = text!(
        format!("{}/{total} 个用例正确", total.saturating_sub(bad)),
        format!("{}/{total} cases right", total.saturating_sub(bad))
    );
    if bad == 0 {
        let (note_zh, note_en) = left_out.unwrap_or_default();
        let (skip_zh, skip_en) = match skipped.first() {
            Some(&n) => (
                format!("；实测用例要 {} 步才回本，超出上限，未询问（README）", fmt_num(n as f64)),
                format!("; the measured case needs {} steps, beyond the limit, so it was not asked (README)", fmt_num(n as f64)),
            ),
            None => (String::new(), String::new()),
        };
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                format!("全部 {total} 个用例都等于评分器在 Rust 中算出的答案{note_zh}{skip_zh}"),
                format!("all {total} cases equal the answer the grader computed in Rust{note_en}{skip_en}")
            ),
        );
    }
    let more = |n: usize| {
        if n > 3 {
            format!(" … (+{})", n - 3)
        } else {
            String::new()
        }
    };
    let zh = wrong_zh
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join("；")
        + &more(bad);
    let en = wrong_en
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ")
        + &more(bad);
    Outcome::new(
        false,
        measured,
        bound,
        text!(
            format!("{bad} 个用例错误：{zh}。定义：最小的 n ≥ 1 使 compiled_first_s + (n-1)·compiled_step_s ≤ n·eager_step_s，不存在时为 None"),
            format!("{bad} cases wrong: {en}. Definition: the smallest n ≥ 1 with compiled_first_s + (n-1)·compiled_step_s ≤ n·eager_step_s, None when there is none")
        ),
    )
}
