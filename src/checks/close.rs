//! `close`: tensor closeness with `torch.testing.assert_close` semantics, computed in tch.
//! Per-dtype default tolerances; mismatched-element count, greatest absolute and relative
//! difference and where, for the worst tensor of a group.
use super::{fmt_num, Env, Outcome};
use crate::spec::rubric::CloseSpec;
use crate::text;
use tch::{Kind, Tensor};

/// `torch.testing.assert_close` defaults (rtol, atol); other dtypes compare exactly.
pub fn default_tolerance(kind: Kind) -> (f64, f64) {
    match kind {
        Kind::Half => (1e-3, 1e-5),
        Kind::BFloat16 => (1.6e-2, 1e-5),
        Kind::Float => (1.3e-6, 1e-5),
        Kind::Double => (1e-7, 1e-7),
        _ => (0.0, 0.0),
    }
}

/// How far `actual` is from `expected`.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub numel: i64,
    pub mismatched: i64,
    pub max_abs: f64,
    pub max_abs_at: Vec<i64>,
    pub max_rel: f64,
    pub max_rel_at: Vec<i64>,
    pub rtol: f64,
    pub atol: f64,
}

fn unravel(mut flat: i64, shape: &[i64]) -> Vec<i64> {
    let mut idx = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[i] = flat % d;
            flat /= d;
        }
    }
    idx
}

/// Compare two tensors; Err says why they are not comparable (dtype, shape).
pub fn compare(
    actual: &Tensor,
    expected: &Tensor,
    tol: Option<(f64, f64)>,
) -> Result<Comparison, String> {
    if actual.kind() != expected.kind() {
        return Err(format!(
            "dtype {:?} vs expected {:?}",
            actual.kind(),
            expected.kind()
        ));
    }
    if actual.size() != expected.size() {
        return Err(format!(
            "shape {:?} vs expected {:?}",
            actual.size(),
            expected.size()
        ));
    }
    let (rtol, atol) = tol.unwrap_or_else(|| default_tolerance(expected.kind()));
    let shape = expected.size();
    let numel = expected.numel() as i64;
    if numel == 0 {
        return Ok(Comparison {
            numel,
            mismatched: 0,
            max_abs: 0.0,
            max_abs_at: vec![],
            max_rel: 0.0,
            max_rel_at: vec![],
            rtol,
            atol,
        });
    }
    let _guard = tch::no_grad_guard();
    let float = expected.is_floating_point();
    let (a, e) = if float {
        (actual.shallow_clone(), expected.shallow_clone())
    } else {
        (actual.to_kind(Kind::Double), expected.to_kind(Kind::Double))
    };
    let diff = (&a - &e).abs();
    // close: equal (covers matching infinities) or within atol + rtol·|expected|; NaN never close
    let close = a
        .eq_tensor(&e)
        .logical_or(&diff.le_tensor(&(e.abs() * rtol + atol)));
    let mismatched = numel - close.sum(Kind::Int64).int64_value(&[]);
    let finite_diff = diff.nan_to_num(f64::INFINITY, None, None).flatten(0, -1);
    let abs_at = finite_diff.argmax(None, false).int64_value(&[]);
    let max_abs = finite_diff.double_value(&[abs_at]);
    let rel = (&diff / e.abs()).nan_to_num(0.0, None, None).flatten(0, -1);
    let rel = rel.where_self(&diff.flatten(0, -1).gt(0.0), &rel.zeros_like());
    let rel_at = rel.argmax(None, false).int64_value(&[]);
    let max_rel = rel.double_value(&[rel_at]);
    Ok(Comparison {
        numel,
        mismatched,
        max_abs,
        max_abs_at: unravel(abs_at, &shape),
        max_rel,
        max_rel_at: unravel(rel_at, &shape),
        rtol,
        atol,
    })
}

pub fn evaluate(spec: &CloseSpec, env: &Env) -> Outcome {
    let tol = spec.rtol.zip(spec.atol);
    let expected = env.evidence.group(&spec.expected);
    let actual = env.evidence.group(&spec.actual);
    let kind = expected
        .values()
        .next()
        .map(|t| t.kind())
        .unwrap_or(Kind::Float);
    let (rtol, atol) = tol.unwrap_or_else(|| default_tolerance(kind));
    let dtype = match kind {
        Kind::Float => "f32".to_string(),
        Kind::Double => "f64".to_string(),
        Kind::Half => "f16".to_string(),
        Kind::BFloat16 => "bf16".to_string(),
        k => format!("{k:?}"),
    };
    let bound = format!("assert_close {dtype}: rtol {rtol:e}, atol {atol:e}");
    if expected.is_empty() {
        return Outcome::missing(env.evidence.why_missing(&spec.expected), bound.clone());
    }
    if actual.is_empty() {
        return Outcome::missing(env.evidence.why_missing(&spec.actual), bound.clone());
    }
    let mut missing = Vec::new();
    let mut incomparable = Vec::new();
    let mut failing: Vec<(&str, Comparison)> = Vec::new();
    let (mut total, mut worst_abs, mut worst_rel) = (0i64, 0f64, 0f64);
    for (name, e) in &expected {
        let Some(a) = actual.get(name) else {
            missing.push(*name);
            continue;
        };
        match compare(a, e, tol) {
            Err(why) => incomparable.push(format!("{name}: {why}")),
            Ok(c) => {
                total += c.numel;
                worst_abs = worst_abs.max(c.max_abs);
                worst_rel = worst_rel.max(c.max_rel);
                if c.mismatched > 0 {
                    failing.push((name, c));
                }
            }
        }
    }
    let n = expected.len();
    let max_abs = fmt_num(worst_abs);
    let mut measured = text!(
        format!("{n} 个张量，最大 |Δ| {max_abs}"),
        format!("{n} tensors, max |Δ| {max_abs}")
    );
    if missing.is_empty() && incomparable.is_empty() && failing.is_empty() {
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                format!(
                    "{} 与 {} 的 {n} 个张量（{} 个元素）全部在容差内，最大相对差 {}",
                    spec.actual,
                    spec.expected,
                    fmt_num(total as f64),
                    fmt_num(worst_rel)
                ),
                format!(
                    "all {n} tensors ({} elements) of {} are within tolerance of {}; max rel diff {}",
                    fmt_num(total as f64),
                    spec.actual,
                    spec.expected,
                    fmt_num(worst_rel)
                )
            ),
        );
    }
    let mut zh = Vec::new();
    let mut en = Vec::new();
    if !missing.is_empty() {
        let list = short_list(&missing);
        zh.push(format!(
            "缺少 {} 个张量（梯度为 None？）：{list}",
            missing.len()
        ));
        en.push(format!(
            "{} tensors missing (gradient None?): {list}",
            missing.len()
        ));
        measured = text!(
            format!("缺 {}/{n}；{}", missing.len(), measured.zh),
            format!("{} of {n} missing; {}", missing.len(), measured.en)
        );
    }
    if !incomparable.is_empty() {
        let list = incomparable.join("; ");
        zh.push(format!("无法比较：{list}"));
        en.push(format!("not comparable: {list}"));
    }
    if !failing.is_empty() {
        failing.sort_by(|x, y| y.1.max_abs.total_cmp(&x.1.max_abs));
        let (name, c) = &failing[0];
        let detail = format!(
            "{name}: {}/{} mismatched, max |Δ| {} at {:?}, max rel {} at {:?}",
            fmt_num(c.mismatched as f64),
            fmt_num(c.numel as f64),
            fmt_num(c.max_abs),
            c.max_abs_at,
            fmt_num(c.max_rel),
            c.max_rel_at
        );
        zh.push(format!(
            "{} 个张量超出容差，最差的是 {detail}",
            failing.len()
        ));
        en.push(format!(
            "{} tensors out of tolerance; worst {detail}",
            failing.len()
        ));
        measured = text!(
            format!("{}/{n} 个不一致；{}", failing.len(), measured.zh),
            format!("{} of {n} differ; {}", failing.len(), measured.en)
        );
    }
    Outcome::new(false, measured, bound, text!(zh.join("；"), en.join("; ")))
}

fn short_list(names: &[&str]) -> String {
    let shown: Vec<&str> = names.iter().take(4).copied().collect();
    if names.len() > shown.len() {
        format!("{} … (+{})", shown.join(", "), names.len() - shown.len())
    } else {
        shown.join(", ")
    }
}
