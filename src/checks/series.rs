//! `series`: a list of numbers the submission returned equals the grader's list, element by
//! element, within a relative tolerance (0 = identical). Lesson 01 hands `measure()` a simulated
//! device whose true per-step costs the grader knows, so the samples can be held to the truth. When
//! they are wrong, the rubric's `diagnose` lists (what known mistakes return on that same device)
//! name the mistake the numbers show; otherwise the first differing element is reported.
use super::{Env, Outcome};
use crate::i18n::Text;
use crate::observations::Absent;
use crate::spec::rubric::SeriesSpec;
use crate::text;
use serde_json::Value;

/// A number with 7 significant digits (enough to see a difference in the 7th place).
pub fn precise(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if (1e-3..1e7).contains(&a) {
        let digits = (6 - a.log10().floor() as i32).clamp(0, 9) as usize;
        return trim(format!("{x:.digits$}"));
    }
    let s = format!("{x:.6e}");
    match s.split_once('e') {
        Some((m, e)) => format!("{}e{e}", trim(m.to_string())),
        None => s,
    }
}

/// The list of numbers under `key`.
pub fn list(env: &Env, key: &str) -> Result<Vec<f64>, Absent> {
    let v = env.evidence.metric(key)?;
    let bad = || -> Absent {
        text!(
            format!("`{key}` 不是数值列表：{}", short(v)),
            format!("`{key}` is not a list of numbers: {}", short(v))
        )
        .into()
    };
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|x| x.as_f64().ok_or_else(bad))
        .collect()
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

fn values(k: usize) -> String {
    if k == 1 {
        "1 value".into()
    } else {
        format!("{k} values")
    }
}

/// |a - e| ≤ tol · |e| (exact equality when tol is 0).
pub fn rel_close(a: f64, e: f64, tol: f64) -> bool {
    a == e || (a - e).abs() <= tol * e.abs()
}

fn same(a: &[f64], e: &[f64], tol: f64) -> bool {
    a.len() == e.len() && a.iter().zip(e).all(|(x, y)| rel_close(*x, *y, tol))
}

struct One {
    pass: bool,
    measured: Text,
    why: Text,
}

fn judge(spec: &SeriesSpec, env: &Env, prefix: Option<&str>) -> Result<One, Absent> {
    let key = |k: &str| match prefix {
        Some(p) => format!("{p}.{k}"),
        None => k.to_string(),
    };
    let ek = key(&spec.expected);
    let expected = list(env, &ek)?;
    let actual = list(env, &key(&spec.actual))?;
    let tol = spec.max_rel_diff;
    let n = expected.len();
    if same(&actual, &expected, tol) {
        return Ok(One {
            pass: true,
            measured: text!(format!("{n}/{n} 相等"), format!("{n}/{n} equal")),
            why: text!(
                format!("全部 {n} 个值都等于 {ek}"),
                format!("all {n} values equal {ek}")
            ),
        });
    }
    let good = actual
        .iter()
        .zip(&expected)
        .filter(|(a, e)| rel_close(**a, **e, tol))
        .count();
    let measured = if actual.len() == n {
        text!(format!("{good}/{n} 相等"), format!("{good}/{n} equal"))
    } else {
        text!(
            format!("{} 个值，应为 {n} 个", actual.len()),
            format!("{}, expected {n}", values(actual.len()))
        )
    };
    let shown = |xs: &[f64]| {
        let mut s: Vec<String> = xs.iter().take(4).map(|x| precise(*x)).collect();
        if xs.len() > 4 {
            s.push("…".into());
        }
        format!("[{}]", s.join(", "))
    };
    let facts = text!(
        format!("返回 {}，{ek} 为 {}", shown(&actual), shown(&expected)),
        format!("returned {}, {ek} is {}", shown(&actual), shown(&expected))
    );
    for d in &spec.diagnose {
        if let Ok(alt) = list(env, &key(&d.metric)) {
            if same(&actual, &alt, tol.max(1e-9)) {
                return Ok(One {
                    pass: false,
                    measured,
                    why: text!(
                        format!("{}（{}）", d.why.zh, facts.zh),
                        format!("{} ({})", d.why.en, facts.en)
                    ),
                });
            }
        }
    }
    let why = if actual.len() != n {
        text!(
            format!("返回了 {} 个值，应为 {n} 个；{}", actual.len(), facts.zh),
            format!(
                "returned {} where {n} were due; {}",
                values(actual.len()),
                facts.en
            )
        )
    } else {
        let i = actual
            .iter()
            .zip(&expected)
            .position(|(a, e)| !rel_close(*a, *e, tol))
            .unwrap_or(0);
        text!(
            format!(
                "{} 个值与 {ek} 不符，第一个是第 {} 个：{}，应为 {}",
                n - good,
                i + 1,
                precise(actual[i]),
                precise(expected[i])
            ),
            format!(
                "{} of {n} values differ from {ek}, first #{}: {} where {} was due",
                n - good,
                i + 1,
                precise(actual[i]),
                precise(expected[i])
            )
        )
    };
    Ok(One {
        pass: false,
        measured,
        why,
    })
}

pub fn evaluate(spec: &SeriesSpec, env: &Env) -> Outcome {
    let bound = if spec.max_rel_diff == 0.0 {
        text!(
            format!("= {}（完全相同）", spec.expected),
            format!("= {} (identical)", spec.expected)
        )
    } else {
        text!(
            format!(
                "= {}（相对误差 ≤ {}）",
                spec.expected,
                precise(spec.max_rel_diff)
            ),
            format!(
                "= {} (relative error ≤ {})",
                spec.expected,
                precise(spec.max_rel_diff)
            )
        )
    };
    let prefixes: Vec<Option<&str>> = match &spec.runs {
        Some(runs) => runs.iter().map(|r| Some(r.as_str())).collect(),
        None => vec![None],
    };
    let many = prefixes.len() > 1;
    let mut measured = (Vec::new(), Vec::new());
    let mut bad = (Vec::new(), Vec::new());
    for p in prefixes {
        let one = match judge(spec, env, p) {
            Ok(one) => one,
            Err(why) => return Outcome::missing(why, bound),
        };
        let tag = |t: &Text| match (many, p) {
            (true, Some(p)) => text!(format!("{p}：{}", t.zh), format!("{p}: {}", t.en)),
            _ => t.clone(),
        };
        let m = tag(&one.measured);
        measured.0.push(m.zh);
        measured.1.push(m.en);
        if !one.pass {
            let w = tag(&one.why);
            bad.0.push(w.zh);
            bad.1.push(w.en);
        }
    }
    let measured = Text::new(measured.0.join("；"), measured.1.join("; "));
    if bad.1.is_empty() {
        let why = text!(
            format!("每个值都等于 {}", spec.expected),
            format!("every value equals {}", spec.expected)
        );
        return Outcome::new(true, measured, bound, why);
    }
    Outcome::new(
        false,
        measured,
        bound,
        Text::new(bad.0.join("；"), bad.1.join("; ")),
    )
}
