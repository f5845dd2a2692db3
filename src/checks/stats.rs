//! `stats`: a summary the submission computed from samples (median, 90th percentile, steps/s,
//! tokens/s) equals the grader's own computation from the same recorded samples. Python only
//! records the inputs (`P.samples`, `P.batch`, `P.seq_len`) and the submission's answers; the
//! numbers are recomputed here. A wrong answer is matched against the usual mistakes (a mean, a
//! nearest-rank percentile, tokens from the batch alone, …) so the message says which it is.
use super::series::{list, precise, rel_close};
use super::{Env, Outcome};
use crate::i18n::Text;
use crate::observations::Absent;
use crate::spec::rubric::{Stat, StatsSpec};
use crate::text;

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// The median: the middle value, or the mean of the two middle values for an even count.
pub fn median(xs: &[f64]) -> f64 {
    let v = sorted(xs);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if !n.is_multiple_of(2) {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Percentile `q` (0–100) at fractional rank `h` of the sorted values, interpolated linearly.
fn at_rank(v: &[f64], h: f64) -> f64 {
    let n = v.len();
    let h = h.clamp(0.0, (n - 1) as f64);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// `numpy.percentile(xs, q)` with its default linear method (= `statistics.quantiles(...,
/// method="inclusive")`): rank h = (n − 1)·q/100, interpolated between its neighbours.
pub fn percentile(xs: &[f64], q: f64) -> f64 {
    let v = sorted(xs);
    if v.is_empty() {
        return f64::NAN;
    }
    at_rank(&v, (v.len() - 1) as f64 * q / 100.0)
}

/// Known wrong answers for one case: (value, what it is).
fn mistakes(stat: Stat, xs: &[f64], batch: f64, seq_len: f64, m: &[f64]) -> Vec<(f64, Text)> {
    let v = sorted(xs);
    let n = v.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let mut out = Vec::new();
    match stat {
        Stat::Median => {
            out.push((
                mean,
                text!(
                    "这是平均值，不是中位数（离群值会拉偏平均值）",
                    "that is the mean, not the median (outliers drag a mean)"
                ),
            ));
            if n.is_multiple_of(2) {
                out.push((v[n / 2 - 1], text!("这是较小的中间值：偶数个样本的中位数是两个中间值的平均", "that is the lower middle value: for an even count the median is the mean of the two middle values")));
                out.push((v[n / 2], text!("这是较大的中间值：偶数个样本的中位数是两个中间值的平均", "that is the upper middle value: for an even count the median is the mean of the two middle values")));
            }
            out.push((
                xs[n / 2],
                text!(
                    "这是未排序样本的中间元素：先排序",
                    "that is the middle element of the unsorted samples: sort first"
                ),
            ));
            out.push((v[0], text!("这是最小值", "that is the minimum")));
        }
        Stat::P90 => {
            let rank = ((0.9 * n as f64).ceil() as usize).clamp(1, n) - 1;
            out.push((v[rank], text!("这是最近秩（nearest-rank）分位数：应在相邻两个值之间线性插值（numpy.percentile 的默认方法）", "that is the nearest-rank percentile: interpolate linearly between the neighbours (numpy.percentile's default)")));
            let excl = (n as f64 + 1.0) * 0.9 - 1.0;
            out.push((at_rank(&v, excl), text!("这是 statistics.quantiles 默认的 method='exclusive'：应使用 method='inclusive'（与 numpy 默认一致）", "that is statistics.quantiles' default method='exclusive': use method='inclusive' (numpy's default)")));
            let h = (n - 1) as f64 * 0.9;
            out.push((
                v[h.floor() as usize],
                text!(
                    "这是向下取整的秩（'lower'）：应线性插值",
                    "that is the rank rounded down ('lower'): interpolate linearly"
                ),
            ));
            out.push((
                v[(h.ceil() as usize).min(n - 1)],
                text!(
                    "这是向上取整的秩（'higher'）：应线性插值",
                    "that is the rank rounded up ('higher'): interpolate linearly"
                ),
            ));
            out.push((
                at_rank(xs, h),
                text!(
                    "这是在未排序的样本上插值：先排序",
                    "that interpolates the unsorted samples: sort first"
                ),
            ));
            out.push((v[n - 1], text!("这是最大值", "that is the maximum")));
        }
        Stat::Within => {}
        Stat::StepsPerS => {
            out.push((
                1.0 / mean,
                text!(
                    "这是 1/平均值：应为 1/中位数",
                    "that is 1/mean: use 1/median"
                ),
            ));
            for &m in m {
                out.push((
                    m,
                    text!(
                        "这是中位数本身（秒/步），没有取倒数",
                        "that is the median itself (seconds per step), not its inverse"
                    ),
                ));
            }
        }
        Stat::TokensPerS => {
            for &m in m {
                out.push((
                    batch / m,
                    text!(
                        "这是只按 batch 计算的：每步的 token 数是 batch × seq_len",
                        "that counts the batch only: a step holds batch × seq_len tokens"
                    ),
                ));
                out.push((
                    seq_len / m,
                    text!(
                        "这是只按 seq_len 计算的：每步的 token 数是 batch × seq_len",
                        "that counts seq_len only: a step holds batch × seq_len tokens"
                    ),
                ));
                out.push((
                    1.0 / m,
                    text!(
                        "这是 steps/s，不是 tokens/s",
                        "that is steps/s, not tokens/s"
                    ),
                ));
                out.push((
                    batch * seq_len * m,
                    text!(
                        "乘以了中位数：应除以中位数",
                        "multiplied by the median: divide by it"
                    ),
                ));
            }
            out.push((
                batch * seq_len / mean,
                text!(
                    "这是按平均值算的：应按中位数",
                    "that uses the mean: use the median"
                ),
            ));
        }
    }
    out
}

pub fn key(stat: Stat) -> &'static str {
    match stat {
        Stat::Median => "median_s",
        Stat::P90 => "p90_s",
        Stat::StepsPerS => "steps_per_s",
        Stat::TokensPerS => "tokens_per_s",
        Stat::Within => "median_s",
    }
}

struct Case {
    pass: bool,
    got: f64,
    want: f64,
    why: Option<Text>,
}

fn judge(spec: &StatsSpec, env: &Env, case: &str) -> Result<Case, Absent> {
    let xs = list(env, &format!("{case}.samples"))?;
    let got = env.evidence.number(&format!("{case}.{}", key(spec.stat)))?;
    if xs.is_empty() {
        return Err(Text::same(format!("{case}.samples is empty")).into());
    }
    let true_median = median(&xs);
    if spec.stat == Stat::Within {
        let v = sorted(&xs);
        let tol = spec.max_rel_diff;
        let (lo, hi) = (v[0] * (1.0 - tol), v[v.len() - 1] * (1.0 + tol));
        return Ok(Case {
            pass: lo <= got && got <= hi,
            got,
            want: true_median,
            why: None,
        });
    }
    let (mut batch, mut seq_len) = (f64::NAN, f64::NAN);
    // the medians a rate may come from: the grader's, or the submission's own median_s
    let mut medians = vec![true_median];
    if matches!(spec.stat, Stat::StepsPerS | Stat::TokensPerS) {
        if let Ok(m) = env.evidence.number(&format!("{case}.median_s")) {
            if m != true_median && m.is_finite() && m > 0.0 {
                medians.push(m);
            }
        }
    }
    if spec.stat == Stat::TokensPerS {
        batch = env.evidence.number(&format!("{case}.batch"))?;
        seq_len = env.evidence.number(&format!("{case}.seq_len"))?;
    }
    let wants: Vec<f64> = match spec.stat {
        Stat::Median => vec![true_median],
        Stat::P90 => vec![percentile(&xs, 90.0)],
        Stat::StepsPerS => medians.iter().map(|m| 1.0 / m).collect(),
        Stat::TokensPerS => medians.iter().map(|m| batch * seq_len / m).collect(),
        Stat::Within => unreachable!("judged above"),
    };
    let tol = spec.max_rel_diff;
    if wants.iter().any(|w| rel_close(got, *w, tol)) {
        return Ok(Case {
            pass: true,
            got,
            want: wants[0],
            why: None,
        });
    }
    let why = mistakes(spec.stat, &xs, batch, seq_len, &medians)
        .into_iter()
        .find(|(v, _)| {
            rel_close(got, *v, tol.max(1e-9)) && !wants.iter().any(|w| rel_close(*v, *w, tol))
        })
        .map(|(_, t)| t);
    Ok(Case {
        pass: false,
        got,
        want: wants[0],
        why,
    })
}

pub fn evaluate(spec: &StatsSpec, env: &Env) -> Outcome {
    let k = key(spec.stat);
    let bound = match spec.stat {
        Stat::Median => text!("= 评分器算的中位数", "= the grader's median"),
        Stat::P90 => text!(
            "= 评分器算的 p90（线性插值）",
            "= the grader's p90 (linear interpolation)"
        ),
        Stat::StepsPerS => Text::same("= 1 / median_s"),
        Stat::TokensPerS => Text::same("= batch × seq_len / median_s"),
        Stat::Within => text!(
            "median_s 在这些样本的最小值与最大值之间",
            "median_s within these samples' range"
        ),
    };
    let n = spec.cases.len();
    let mut bad_zh = Vec::new();
    let mut bad_en = Vec::new();
    for case in &spec.cases {
        let c = match judge(spec, env, case) {
            Ok(c) => c,
            Err(why) => return Outcome::missing(why, bound),
        };
        if c.pass {
            continue;
        }
        let (zh, en) = match &c.why {
            Some(t) => (format!("（{}）", t.zh), format!(" ({})", t.en)),
            None => (String::new(), String::new()),
        };
        bad_zh.push(format!(
            "{case}：{k} = {}{zh}，应为 {}",
            precise(c.got),
            precise(c.want)
        ));
        bad_en.push(format!(
            "{case}: {k} = {}{en}, expected {}",
            precise(c.got),
            precise(c.want)
        ));
    }
    let good = n - bad_en.len();
    let measured = text!(
        format!("{good}/{n} 组一致"),
        format!("{good}/{n} cases agree")
    );
    if bad_en.is_empty() {
        return Outcome::new(
            true,
            measured,
            bound,
            text!(
                format!("{n} 组样本的 {k} 都与评分器自己的计算一致"),
                format!("{k} agrees with the grader's own computation on all {n} sample sets")
            ),
        );
    }
    Outcome::new(
        false,
        measured,
        bound,
        Text::new(bad_zh.join("；"), bad_en.join("; ")),
    )
}
