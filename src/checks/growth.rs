//! `growth`: the growth law the student answered for one axis of a sweep equals the law the
//! grader reads off its own rows (lesson 03: activations against batch and seq_len).
//!
//! Rows are trace events with integer fields. For each value of `group_by` the rows give points
//! (axis, value); the law is the degree of the polynomial through them, found exactly with
//! divided differences in rational arithmetic: `constant` (all first differences 0), `linear`
//! (all second differences 0), `quadratic` (all third differences 0), … A degree is only decided
//! when one more point than it needs confirms it (3 points for linear, 4 for quadratic); every
//! group must agree. The report lists every row, so the verdict explains itself. `whose:` says
//! whether the rows are the grader's sweep or the student's own (lesson 03 judges the answer
//! against both: a law copied from the hints fails when the student's own sweep decides another
//! law, decides none, or has no rows). With `less:`,
//! each row's value is first reduced by a field of the row at the same point of another trace
//! (lesson 03: the grader's tag of that row, drawn per row, part of an honest measurement but of
//! no law); a row at a point that trace lacks is left out. With `steps:` (the `ledger` check's
//! evidence, `whole_steps`), a row is believed only when the grader saw a whole training step at
//! its shape in the call that returned it; the others are left out of the fit and named.
use super::ledger::whole_steps;
use super::{fmt_num, Env, Outcome};
use crate::i18n::Text;
use crate::observations::Event;
use crate::spec::rubric::{GrowthSpec, Whose};
use crate::text;
use std::collections::{BTreeMap, BTreeSet};

/// An exact fraction (denominator > 0, reduced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frac {
    pub num: i128,
    pub den: i128,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs().max(1)
    } else {
        gcd(b, a % b)
    }
}

impl Frac {
    pub fn int(v: i128) -> Frac {
        Frac { num: v, den: 1 }
    }
    fn new(num: i128, den: i128) -> Frac {
        let g = gcd(num, den) * den.signum();
        Frac {
            num: num / g,
            den: den / g,
        }
    }
    fn sub(self, o: Frac) -> Frac {
        Frac::new(self.num * o.den - o.num * self.den, self.den * o.den)
    }
    fn div_int(self, d: i128) -> Frac {
        Frac::new(self.num, self.den * d)
    }
    pub fn is_zero(self) -> bool {
        self.num == 0
    }
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// The name of a polynomial degree.
pub fn law_name(degree: usize) -> String {
    match degree {
        0 => "constant".into(),
        1 => "linear".into(),
        2 => "quadratic".into(),
        3 => "cubic".into(),
        d => format!("degree {d}"),
    }
}

/// The degree of the polynomial through `points` (distinct x) and its leading coefficient, or
/// `Err(k)` when the points cannot decide: at least degree `k`, more points needed.
pub fn degree(points: &[(i64, i64)]) -> Result<(usize, Frac), usize> {
    let mut pts = points.to_vec();
    pts.sort();
    pts.dedup_by_key(|p| p.0); // one point per x (rows are matched to the grid elsewhere)
    let xs: Vec<i128> = pts.iter().map(|p| p.0 as i128).collect();
    let mut level: Vec<Frac> = pts.iter().map(|p| Frac::int(p.1 as i128)).collect();
    // level k holds the k-th divided differences; the degree is the smallest d whose (d+1)-th
    // differences are all zero (and exist)
    for d in 0..pts.len() {
        let next: Vec<Frac> = (0..level.len().saturating_sub(1))
            .map(|i| level[i + 1].sub(level[i]).div_int(xs[i + d + 1] - xs[i]))
            .collect();
        if next.is_empty() {
            return Err(d);
        }
        if next.iter().all(|f| f.is_zero()) {
            return Ok((d, level[0]));
        }
        level = next;
    }
    Err(pts.len())
}

fn int(ev: &Event, key: &str) -> Option<i64> {
    ev.fields.get(key).and_then(serde_json::Value::as_i64)
}

pub fn evaluate(spec: &GrowthSpec, env: &Env) -> Outcome {
    let (axis, by, value) = (&spec.axis, &spec.group_by, &spec.value);
    let answer = match env.evidence.metric(&spec.answer) {
        Ok(serde_json::Value::String(s)) => s.clone(),
        Ok(other) => other.to_string(),
        Err(why) => return Outcome::missing(why, "—"),
    };
    let rows = match env.evidence.trace(&spec.rows) {
        Ok(r) => r,
        Err(why) => return Outcome::missing(why, "—"),
    };
    // (group_by, axis) -> the amount taken off that row's value (`less:`)
    let less: Option<BTreeMap<(i64, i64), i64>> = match &spec.less {
        None => None,
        Some(l) => match env.evidence.trace(&l.rows) {
            Ok(off) => Some(
                off.iter()
                    .filter_map(|r| Some(((int(r, by)?, int(r, axis)?), int(r, &l.value)?)))
                    .collect(),
            ),
            Err(why) => return Outcome::missing(why, "—"),
        },
    };
    // the shapes of the rows' whole steps the grader saw in the call that returned them
    let credited = match &spec.steps {
        None => None,
        Some(streams) => {
            let mut traces = Vec::new();
            for name in streams.names() {
                match env.evidence.trace(name) {
                    Ok(t) => traces.push(t),
                    Err(why) => return Outcome::missing(why, "—"),
                }
            }
            Some(
                whole_steps(traces)
                    .remove(&spec.rows)
                    .map(|s| s.whole.into_keys().collect::<BTreeSet<_>>())
                    .unwrap_or_default(),
            )
        }
    };
    let mut unstepped: Vec<String> = Vec::new();
    // group_by value -> points (axis, value)
    let mut groups: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for r in rows {
        if let Some(steps) = &credited {
            let shape = (
                int(r, "batch").unwrap_or(-1),
                int(r, "seq_len").unwrap_or(-1),
            );
            if !steps.contains(&shape) {
                unstepped.push(format!("B={} T={}", shape.0, shape.1));
                continue;
            }
        }
        let off = |g: i64, x: i64| match &less {
            None => Some(0),
            Some(m) => m.get(&(g, x)).copied(),
        };
        match (int(r, by), int(r, axis), int(r, value)) {
            (Some(g), Some(x), Some(y)) => match off(g, x) {
                Some(o) => groups.entry(g).or_default().push((x, y - o)),
                // a row at a point the grader has no row for (off the grid: the ledger check's)
                // has no amount to take off: it is left out of the fit
                None => {}
            },
            _ => {
                let why = Text::same(format!(
                    "{}: a row lacks integer {by}/{axis}/{value}",
                    spec.rows
                ));
                return Outcome::missing(why, "—");
            }
        }
    }
    let mut laws = Vec::new();
    let mut lines = Vec::new();
    for (g, pts) in &mut groups {
        pts.sort();
        let listed = pts
            .iter()
            .map(|(x, y)| format!("{x}→{}", fmt_num(*y as f64)))
            .collect::<Vec<_>>()
            .join(", ");
        let law = match degree(pts) {
            Ok((d, lead)) => {
                let term = match d {
                    0 => String::new(),
                    1 => format!(" ≈ {}·{axis}", fmt_num(lead.to_f64())),
                    _ => format!(" ≈ {}·{axis}^{d}", fmt_num(lead.to_f64())),
                };
                let law = law_name(d);
                lines.push(format!(
                    "{by}={g}: {listed} ({law}{}{})",
                    term,
                    if d > 0 { " + …" } else { "" }
                ));
                Some(law)
            }
            Err(k) => {
                lines.push(format!("{by}={g}: {listed} (≥ degree {k}: too few points)"));
                None
            }
        };
        laws.push(law);
    }
    let bound = match &spec.less {
        None => text!(
            format!("GROWTH['{axis}'] = {value} 的增长规律"),
            format!("GROWTH['{axis}'] = how {value} grows")
        ),
        Some(l) => text!(
            format!(
                "GROWTH['{axis}'] = {value}（减去每行的 {}）的增长规律",
                l.value
            ),
            format!(
                "GROWTH['{axis}'] = how {value} (less each row's {}) grows",
                l.value
            )
        ),
    };
    let fitted: Option<&String> = match laws.first() {
        Some(Some(l)) if laws.iter().all(|x| x.as_ref() == Some(l)) => Some(l),
        _ => None,
    };
    let mut table = lines.join("; ");
    let mut table_zh = table.clone();
    if !unstepped.is_empty() {
        let n = unstepped.len();
        let shown = unstepped[..n.min(4)].join(" · ") + if n > 4 { " · …" } else { "" };
        table_zh = format!(
            "{table_zh}（{n} 行不算：评分器在返回它们的调用中没有看到该形状的完整训练步：{shown}）"
        );
        table = format!(
            "{table} ({n} {} left out: the grader saw no whole training step at their shape in the call that returned them: {shown})",
            if n == 1 { "row" } else { "rows" }
        );
    }
    let (sweep_zh, sweep_en) = match spec.whose {
        Whose::Grader => ("评分器的扫描".to_string(), "the grader's sweep".to_string()),
        Whose::Student => (
            format!("你的 sweep()（{}）", spec.rows),
            format!("your own sweep() ({})", spec.rows),
        ),
    };
    let Some(law) = fitted else {
        // rows of the student's own that decide no law fail (issue 38): the answer must be read
        // off a sweep of one's own, and rows that decide nothing (a wrong measurement, rows made
        // up beside a law copied from the hints) are no sweep to read it from
        return Outcome::new(
            false,
            Text::same(answer),
            bound,
            text!(
                format!("{sweep_zh}无法确定 {value} 随 {axis} 的增长规律：{table_zh}"),
                format!("{sweep_en} does not decide how {value} grows with {axis}: {table}")
            ),
        );
    };
    let pass = &answer == law;
    let why = if pass {
        text!(
            format!("{sweep_zh}中 {value} 随 {axis} 呈 {law} 增长，与回答一致：{table_zh}"),
            format!("{value} grows as {law} in {axis} in {sweep_en}, as answered: {table}")
        )
    } else {
        text!(
            format!("回答 {answer}，但{sweep_zh}中 {value} 随 {axis} 呈 {law} 增长：{table_zh}"),
            format!(
                "answered {answer}, but in {sweep_en} {value} grows as {law} in {axis}: {table}"
            )
        )
    };
    Outcome::new(
        pass,
        text!(
            format!("回答 {answer}，拟合 {law}"),
            format!("answer {answer}, fit {law}")
        ),
        bound,
        why,
    )
}
