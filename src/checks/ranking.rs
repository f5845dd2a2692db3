//! `ranking`: a ranked list the submission produced (e.g. its top operators) against the grader's
//! own list. Both are traces of `{e: op, name, <fields>}` events, best first. Exact mode (no
//! `min_overlap`): the same names in the same order and the same length. Overlap mode: at least
//! `min_overlap` of the submission's names appear among the grader's first `within`, and with
//! `leader` the two lists start with the same name. In both modes, with `fields`, every name the
//! submission lists is one of the grader's and its fields agree within their relative tolerance
//! (0 = exactly): a name the grader's list lacks has nothing to agree with, and an empty list
//! shows no field at all, so neither passes (issue 38: a figure is believed only when the grader
//! saw it, not because nothing contradicts it). A name listed twice fails either mode (one row per
//! op: red team 12). A failure shows the two lists side by side.
use super::{fmt_num, Env, Outcome};
use crate::i18n::Text;
use crate::observations::Event;
use crate::spec::rubric::RankingSpec;
use crate::text;
use serde_json::Value;

struct Row {
    name: String,
    fields: Vec<(String, Option<f64>)>,
}

fn rows(events: &[Event], fields: &[&str]) -> Vec<Row> {
    events
        .iter()
        .filter(|e| e.e == "op")
        .map(|e| Row {
            name: e.field_str("name").unwrap_or("?").to_string(),
            fields: fields
                .iter()
                .map(|f| (f.to_string(), e.fields.get(*f).and_then(Value::as_f64)))
                .collect(),
        })
        .collect()
}

fn show(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "[]".into();
    }
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let extra: Vec<String> = r
                .fields
                .iter()
                .map(|(k, v)| format!("{k}={}", v.map(fmt_num).unwrap_or_else(|| "—".into())))
                .collect();
            if extra.is_empty() {
                format!("{}. {}", i + 1, r.name)
            } else {
                format!("{}. {} ({})", i + 1, r.name, extra.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The grader's list as a failure shows it: whole when short; a long one (a whole profile's rows)
/// as the rows the submission named, each with its place.
fn shown(actual: &[Row], expected: &[Row]) -> (String, String) {
    const LONG: usize = 12;
    if expected.len() <= LONG {
        let s = show(expected);
        return (s.clone(), s);
    }
    let named: Vec<String> = expected
        .iter()
        .enumerate()
        .filter(|(_, e)| actual.iter().any(|a| a.name == e.name))
        .map(|(i, e)| {
            let one = show(std::slice::from_ref(e));
            format!("{}{}", i + 1, one.strip_prefix('1').unwrap_or(&one))
        })
        .collect();
    let n = expected.len();
    let list = if named.is_empty() {
        "—".to_string()
    } else {
        named.join("; ")
    };
    (
        format!("{list}（共 {n} 行，只列出你列出的）"),
        format!("{list} (of {n} rows, only those you listed)"),
    )
}

/// `|a - b| <= tol * max(|a|, |b|)` (plus a hair for float noise).
fn agree(a: f64, b: f64, tol: f64) -> bool {
    a.is_finite()
        && b.is_finite()
        && (a - b).abs() <= tol * a.abs().max(b.abs()) + 1e-9 * (1.0 + b.abs())
}

pub fn evaluate(spec: &RankingSpec, env: &Env) -> Outcome {
    let fields: Vec<&str> = spec.fields.keys().map(String::as_str).collect();
    let bound = match spec.min_overlap {
        None => text!("名称与顺序完全相同", "same names in the same order"),
        Some(n) => {
            let within = spec
                .within
                .map(|w| format!("{w}"))
                .unwrap_or_else(|| "全部".into());
            let within_en = spec
                .within
                .map(|w| format!("first {w}"))
                .unwrap_or_else(|| "all".into());
            let lead = if spec.leader {
                ("，第一名相同", ", same first")
            } else {
                ("", "")
            };
            text!(
                format!("≥ {n} 个在评分器前 {within} 名中{}", lead.0),
                format!("≥ {n} among the grader's {within_en}{}", lead.1)
            )
        }
    };
    let actual = match env.evidence.trace(&spec.actual) {
        Ok(ev) => rows(ev, &fields),
        Err(why) => return Outcome::missing(why, bound),
    };
    let expected = match env.evidence.trace(&spec.expected) {
        Ok(ev) => rows(ev, &fields),
        Err(why) => return Outcome::missing(why, bound),
    };
    let mut bad_zh: Vec<String> = Vec::new();
    let mut bad_en: Vec<String> = Vec::new();
    // a ranking names each op once (key_averages() has one row per name): the same row listed
    // k times is no k ops found (red team 12: the bottleneck listed three times as a top 3)
    if let Some(twice) = actual
        .iter()
        .enumerate()
        .find(|(i, a)| actual[..*i].iter().any(|b| b.name == a.name))
        .map(|(_, a)| a.name.as_str())
    {
        bad_zh.push(format!(
            "{twice} 被列出了不止一次：排名里每个算子只出现一次"
        ));
        bad_en.push(format!(
            "{twice} is listed more than once: a ranking names each op once"
        ));
    }
    let measured;
    match spec.min_overlap {
        None => {
            let same = actual.len() == expected.len()
                && actual.iter().zip(&expected).all(|(a, e)| a.name == e.name);
            let k = actual
                .iter()
                .zip(&expected)
                .take_while(|(a, e)| a.name == e.name)
                .count();
            measured = text!(
                format!("{}/{} 个名称一致", k, expected.len()),
                format!("{}/{} names match", k, expected.len())
            );
            if actual.len() != expected.len() {
                bad_zh.push(format!(
                    "列出 {} 项，应为 {} 项",
                    actual.len(),
                    expected.len()
                ));
                bad_en.push(format!(
                    "{} entries listed, expected {}",
                    actual.len(),
                    expected.len()
                ));
            }
            if !same {
                if let Some((a, e)) = actual.iter().zip(&expected).find(|(a, e)| a.name != e.name) {
                    bad_zh.push(format!("第 {} 名是 {}，应为 {}", k + 1, a.name, e.name));
                    bad_en.push(format!("#{} is {}, expected {}", k + 1, a.name, e.name));
                }
            }
        }
        Some(need) => {
            let pool: Vec<&str> = expected
                .iter()
                .take(spec.within.unwrap_or(usize::MAX))
                .map(|r| r.name.as_str())
                .collect();
            let hits: Vec<&str> = actual
                .iter()
                .map(|r| r.name.as_str())
                .filter(|n| pool.contains(n))
                .collect();
            measured = text!(
                format!(
                    "{}/{} 个在评分器前 {} 名中",
                    hits.len(),
                    actual.len(),
                    pool.len()
                ),
                format!(
                    "{}/{} among the grader's first {}",
                    hits.len(),
                    actual.len(),
                    pool.len()
                )
            );
            if hits.len() < need {
                bad_zh.push(format!(
                    "只有 {} 个（{}）在评分器的前 {} 名中，至少要 {need} 个",
                    hits.len(),
                    hits.join(", "),
                    pool.len()
                ));
                bad_en.push(format!(
                    "only {} ({}) among the grader's first {}; at least {need} needed",
                    hits.len(),
                    hits.join(", "),
                    pool.len()
                ));
            }
            if spec.leader {
                let (a, e) = (
                    actual.first().map(|r| r.name.as_str()),
                    expected.first().map(|r| r.name.as_str()),
                );
                if a.is_none() || a != e {
                    let (a, e) = (a.unwrap_or("—"), e.unwrap_or("—"));
                    bad_zh.push(format!("第一名是 {a}，评分器的第一名是 {e}"));
                    bad_en.push(format!("the first is {a}, the grader's first is {e}"));
                }
            }
        }
    }
    // with fields: every name listed is one of the grader's, and something is listed
    if !spec.fields.is_empty() {
        let names: Vec<&str> = spec.fields.keys().map(String::as_str).collect();
        let names = names.join("`, `");
        if actual.is_empty() {
            bad_zh.push(format!("什么也没有列出：没有可以核对的 `{names}`"));
            bad_en.push(format!("nothing listed: no `{names}` to check"));
        }
        let unknown: Vec<&str> = actual
            .iter()
            .filter(|a| !expected.iter().any(|e| e.name == a.name))
            .map(|a| a.name.as_str())
            .collect();
        if !unknown.is_empty() {
            bad_zh.push(format!(
                "评分器的列表里没有 {}：它的 `{names}` 无从核对",
                unknown.join(", ")
            ));
            bad_en.push(format!(
                "{} not in the grader's list: no `{names}` to check it against",
                unknown.join(", ")
            ));
        }
    }
    // fields of every name in both lists
    for (field, tol) in &spec.fields {
        let mut missing = Vec::new();
        let mut differ = Vec::new();
        for a in &actual {
            let Some(e) = expected.iter().find(|e| e.name == a.name) else {
                continue;
            };
            let get = |r: &Row| {
                r.fields
                    .iter()
                    .find(|(k, _)| k == field)
                    .and_then(|(_, v)| *v)
            };
            match (get(a), get(e)) {
                (None, _) => missing.push(a.name.clone()),
                (Some(x), Some(y)) if !agree(x, y, *tol) => {
                    differ.push(format!("{} {} ≠ {}", a.name, fmt_num(x), fmt_num(y)))
                }
                _ => {}
            }
        }
        if !missing.is_empty() {
            bad_zh.push(format!("缺少 `{field}`：{}", missing.join(", ")));
            bad_en.push(format!("no `{field}` for {}", missing.join(", ")));
        }
        if !differ.is_empty() {
            let how = if *tol == 0.0 {
                ("应完全相同", "must be equal")
            } else {
                ("超出容差", "beyond tolerance")
            };
            bad_zh.push(format!(
                "`{field}` 不一致（{}）：{}",
                how.0,
                differ.join(", ")
            ));
            bad_en.push(format!(
                "`{field}` differs ({}): {}",
                how.1,
                differ.join(", ")
            ));
        }
    }
    let (theirs_zh, theirs_en) = shown(&actual, &expected);
    let sides = text!(
        format!("你的：{}｜评分器：{}", show(&actual), theirs_zh),
        format!("yours: {} | grader's: {}", show(&actual), theirs_en)
    );
    if bad_en.is_empty() {
        return Outcome::new(true, measured, bound, sides);
    }
    Outcome::new(
        false,
        measured,
        bound,
        Text::new(
            format!("{}。{}", bad_zh.join("；"), sides.zh),
            format!("{}. {}", bad_en.join("; "), sides.en),
        ),
    )
}
