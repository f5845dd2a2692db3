//! The pictures each lesson's recorded evidence allows (drawn from `Observed`, never from new
//! runs); a lesson whose record lacks what a picture needs (a starter, a crash) gets none of it.
use super::charts::{self, Chart};
use crate::i18n::Lang;
use crate::report::evidence::Observed;

fn t(lang: Lang, zh: &str, en: &str) -> String {
    match lang {
        Lang::Zh => zh.into(),
        Lang::En => en.into(),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// Every chart of `exercise` its evidence allows, in reading order.
pub fn charts(exercise: &str, ev: &Observed, lang: Lang) -> Vec<Chart> {
    let mut out = Vec::new();
    match exercise {
        "01-metrics" => lesson01(ev, lang, &mut out),
        "02-profiler" => lesson02(ev, lang, &mut out),
        "03-memory" => lesson03(ev, lang, &mut out),
        "04-checkpoint" => lesson04(ev, lang, &mut out),
        "05-compile" => lesson05(ev, lang, &mut out),
        "06-sync" => lesson06(ev, lang, &mut out),
        _ => {}
    }
    out
}

fn lesson01(ev: &Observed, lang: Lang, out: &mut Vec<Chart>) {
    let mut series = Vec::new();
    let mut lines = Vec::new();
    for run in ["run1", "run2"] {
        if let Some(s) = ev.list(&format!("real.{run}.samples")) {
            series.push((
                t(
                    lang,
                    &format!("你的计时窗口 {run}"),
                    &format!("your windows {run}"),
                ),
                s.iter()
                    .enumerate()
                    .map(|(i, v)| ((i + 1) as f64, v * 1e3))
                    .collect(),
            ));
        }
        if let Some(m) = ev.num(&format!("real.{run}.grader_median_s")) {
            lines.push((
                t(
                    lang,
                    &format!("评分器中位数 {run}"),
                    &format!("grader's median {run}"),
                ),
                m * 1e3,
            ));
        }
    }
    if !series.is_empty() {
        out.push(charts::points(
            &t(
                lang,
                "真实训练步：你的计时窗口与评分器的测量",
                "Real step: your timed windows beside the grader's",
            ),
            &t(lang, "窗口", "window"),
            "ms",
            &series,
            false,
            &lines,
        ));
    }
    let shapes: Vec<(String, f64, f64, f64, f64)> = ["short", "base", "small"]
        .iter()
        .filter_map(|s| {
            let k = |f: &str| ev.num(&format!("shapes.{s}.{f}"));
            Some((
                format!("{s} ({}×{})", k("batch")?, k("seq_len")?),
                k("steps_per_s")?,
                k("tokens_per_s")?,
                k("batch")?,
                k("seq_len")?,
            ))
        })
        .collect();
    if let Some(base) = shapes.iter().find(|s| s.0.starts_with("base")).cloned() {
        let cats: Vec<String> = shapes.iter().map(|s| s.0.clone()).collect();
        let mut c = charts::bars(
            &t(
                lang,
                "不同形状下的 steps/s 与 tokens/s（相对 base）",
                "steps/s and tokens/s across shapes (relative to base)",
            ),
            &t(lang, "相对 base", "relative to base"),
            &cats,
            &[
                (
                    "steps/s".into(),
                    shapes.iter().map(|s| s.1 / base.1).collect(),
                ),
                (
                    "tokens/s".into(),
                    shapes.iter().map(|s| s.2 / base.2).collect(),
                ),
            ],
            false,
        );
        c.head = vec![
            t(lang, "形状 (batch×seq_len)", "shape (batch×seq_len)"),
            "steps/s".into(),
            "tokens/s".into(),
            t(lang, "steps/s 相对 base", "steps/s vs base"),
            t(lang, "tokens/s 相对 base", "tokens/s vs base"),
        ];
        c.rows = shapes
            .iter()
            .map(|s| {
                vec![
                    s.0.clone(),
                    charts::fmt(s.1),
                    charts::fmt(s.2),
                    charts::fmt(s.1 / base.1),
                    charts::fmt(s.2 / base.2),
                ]
            })
            .collect();
        out.push(c);
    }
}

fn ops(ev: &Observed, key: &str) -> Vec<(String, f64)> {
    ev.rows(key)
        .iter()
        .filter_map(|r| {
            Some((
                r.get("name")?.as_str()?.to_string(),
                r.get("self_us")?.as_f64()? / 1e3,
            ))
        })
        .collect()
}

fn lesson02(ev: &Observed, lang: Lang, out: &mut Vec<Chart>) {
    let yours = ops(ev, "top_ops.run1.top5");
    let grader: Vec<_> = ops(ev, "reference.top").into_iter().take(5).collect();
    if yours.is_empty() && grader.is_empty() {
        return;
    }
    let mut names: Vec<String> = yours.iter().map(|o| o.0.clone()).collect();
    for (n, _) in &grader {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let get = |l: &[(String, f64)], n: &str| l.iter().find(|o| o.0 == n).map_or(0.0, |o| o.1);
    out.push(charts::bars(
        &t(
            lang,
            "耗时最多的算子：你的 top_ops 与评分器的（self time）",
            "Top operators: your top_ops beside the grader's (self time)",
        ),
        "ms",
        &names,
        &[
            (
                t(lang, "你的", "yours"),
                names.iter().map(|n| get(&yours, n)).collect(),
            ),
            (
                t(lang, "评分器", "grader's"),
                names.iter().map(|n| get(&grader, n)).collect(),
            ),
        ],
        false,
    ));
}

fn lesson03(ev: &Observed, lang: Lang, out: &mut Vec<Chart>) {
    let parts = ["params", "grads", "optimizer_state", "activations"];
    let mut cats = Vec::new();
    let mut cols: Vec<Vec<f64>> = vec![Vec::new(); parts.len()];
    for opt in ["sgd", "adam"] {
        for (who, zh, en) in [("ledger", "你的", "yours"), ("grader", "评分器", "grader")] {
            let vals: Option<Vec<f64>> = parts
                .iter()
                .map(|p| ev.num(&format!("{who}.{opt}.{p}")))
                .collect();
            if let Some(vals) = vals {
                cats.push(format!("{opt} {}", t(lang, zh, en)));
                for (i, v) in vals.iter().enumerate() {
                    cols[i].push(v / MIB);
                }
            }
        }
    }
    if !cats.is_empty() {
        out.push(charts::bars(
            &t(
                lang,
                "显存账本（堆叠）：你的与评分器的",
                "Memory ledger (stacked): yours beside the grader's",
            ),
            "MiB",
            &cats,
            &parts
                .iter()
                .zip(cols)
                .map(|(p, c)| (p.to_string(), c))
                .collect::<Vec<_>>(),
            true,
        ));
    }
    // the sweep: activations against one axis, a line per value of the other
    let rows = ev.rows("sweep.student");
    let field = |r: &std::collections::BTreeMap<String, serde_json::Value>, k: &str| {
        r.get(k).and_then(|v| v.as_f64())
    };
    for (x, per, zh, en) in [
        (
            "seq_len",
            "batch",
            "激活随 seq_len 增长（每个 batch 一条线）",
            "Activations against seq_len (a line per batch)",
        ),
        (
            "batch",
            "seq_len",
            "激活随 batch 增长（每个 seq_len 一条线）",
            "Activations against batch (a line per seq_len)",
        ),
    ] {
        let mut groups: Vec<(f64, Vec<(f64, f64)>)> = Vec::new();
        for r in rows {
            let (Some(g), Some(xv), Some(a)) =
                (field(r, per), field(r, x), field(r, "activations"))
            else {
                continue;
            };
            match groups.iter_mut().find(|(k, _)| *k == g) {
                Some((_, pts)) => pts.push((xv, a / MIB)),
                None => groups.push((g, vec![(xv, a / MIB)])),
            }
        }
        if groups.is_empty() {
            continue;
        }
        let series: Vec<(String, Vec<(f64, f64)>)> = groups
            .into_iter()
            .map(|(g, mut pts)| {
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("{per}={g}"), pts)
            })
            .collect();
        let answer = ev.text(&format!("growth.{x}")).unwrap_or("—");
        out.push(charts::points(
            &format!(
                "{} — {}: {answer}",
                t(lang, zh, en),
                t(lang, "你的回答", "your answer")
            ),
            x,
            "MiB",
            &series,
            true,
            &[],
        ));
    }
}

fn lesson04(ev: &Observed, lang: Lang, out: &mut Vec<Chart>) {
    let cats = vec![t(lang, "关 off", "off"), t(lang, "开 on", "on")];
    let pair = |f: &dyn Fn(&str) -> String, scale: f64| -> Option<Vec<f64>> {
        Some(vec![ev.num(&f("off"))? * scale, ev.num(&f("on"))? * scale])
    };
    let mut bytes = Vec::new();
    if let Some(v) = pair(&|x| format!("numerics.{x}.activation_bytes"), 1.0 / MIB) {
        bytes.push((t(lang, "评分器测量", "grader-measured"), v));
    }
    if let Some(v) = pair(&|x| format!("compare.run1.{x}.activation_bytes"), 1.0 / MIB) {
        bytes.push((t(lang, "你的 compare()", "your compare()"), v));
    }
    if !bytes.is_empty() {
        out.push(charts::bars(
            &t(
                lang,
                "为反向保存的激活：检查点 关 vs 开",
                "Activations saved for backward: checkpointing off vs on",
            ),
            "MiB",
            &cats,
            &bytes,
            false,
        ));
    }
    let mut time = Vec::new();
    if let Some(v) = pair(&|x| format!("timing.{x}.median_s"), 1e3) {
        time.push((t(lang, "评分器中位数", "grader's median"), v));
    }
    if let Some(v) = pair(&|x| format!("compare.run1.{x}.step_s"), 1e3) {
        time.push((t(lang, "你的 compare()", "your compare()"), v));
    }
    if !time.is_empty() {
        out.push(charts::bars(
            &t(
                lang,
                "单步耗时：检查点 关 vs 开",
                "Step time: checkpointing off vs on",
            ),
            "ms",
            &cats,
            &time,
            false,
        ));
    }
}

fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

fn lesson05(ev: &Observed, lang: Lang, out: &mut Vec<Chart>) {
    let get = |v: &str| -> Option<(f64, f64)> {
        let first = ev.num(&format!("real.{v}.first_s"))?;
        let steady = ev
            .num(&format!("real.{v}.step_s"))
            .or_else(|| median(&ev.list(&format!("real.{v}.steady_s"))?))?;
        Some((first, steady))
    };
    let (Some(eager), Some(compiled)) = (get("eager"), get("compiled")) else {
        return;
    };
    out.push(charts::bars(
        &t(
            lang,
            "第一次调用 vs 稳定调用（你的 time_calls）",
            "First call vs steady calls (your time_calls)",
        ),
        "s",
        &[
            t(lang, "第一次", "first"),
            t(lang, "稳定（中位数）", "steady (median)"),
        ],
        &[
            ("eager".into(), vec![eager.0, eager.1]),
            ("compiled".into(), vec![compiled.0, compiled.1]),
        ],
        false,
    ));
    // cumulative time of n calls; compiling pays from the break-even n on
    let even = (eager.1 > compiled.1).then(|| {
        let n = (compiled.0 - compiled.1) / (eager.1 - compiled.1);
        n.ceil().max(1.0)
    });
    let last = even.map_or(50.0, |n| (n * 2.0).clamp(10.0, 1e7));
    let xs: Vec<f64> = (0..=20)
        .map(|i| 1.0 + (last - 1.0) * i as f64 / 20.0)
        .collect();
    let line = |(first, step): (f64, f64)| -> Vec<(f64, f64)> {
        xs.iter()
            .map(|&n| (n.round(), first + (n.round() - 1.0) * step))
            .collect()
    };
    let title = match even {
        Some(n) => format!(
            "{} {}",
            t(
                lang,
                "n 次调用的累计耗时；盈亏平衡点 n =",
                "Cumulative time of n calls; break-even at n ="
            ),
            n
        ),
        None => t(
            lang,
            "n 次调用的累计耗时；编译永远不划算",
            "Cumulative time of n calls; compiling never pays",
        ),
    };
    out.push(charts::points(
        &title,
        "n",
        "s",
        &[
            ("eager".into(), line(eager)),
            ("compiled".into(), line(compiled)),
        ],
        true,
        &[],
    ));
}

fn lesson06(ev: &Observed, lang: Lang, out: &mut Vec<Chart>) {
    let runs = ["short", "long"];
    // per step where the exercise's params say how many steps each run took
    let steps: Option<Vec<f64>> = runs
        .iter()
        .map(|r| ev.param(&format!("{r}_steps")).filter(|s| *s > 0.0))
        .collect();
    for (what, zh, en) in [
        ("readbacks", "读回次数", "Read-backs"),
        (
            "factories",
            "循环里创建的常量",
            "Constants created in the loop",
        ),
    ] {
        let col = |who: &str| -> Option<Vec<f64>> {
            runs.iter()
                .enumerate()
                .map(|(i, r)| {
                    let n = ev.num(&format!("{who}.{r}.{what}"))?;
                    Some(steps.as_ref().map_or(n, |s| n / s[i]))
                })
                .collect()
        };
        let (Some(base), Some(yours)) = (col("baseline"), col("train")) else {
            continue;
        };
        let cats: Vec<String> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| match &steps {
                Some(s) => format!("{r} ({} steps)", s[i]),
                None => r.to_string(),
            })
            .collect();
        let (per_zh, per_en) = if steps.is_some() {
            ("每步", "per step")
        } else {
            ("每次运行", "per run")
        };
        out.push(charts::bars(
            &format!(
                "{}: {}",
                t(
                    lang,
                    &format!("{zh}（{per_zh}）"),
                    &format!("{en} {per_en}")
                ),
                t(lang, "基线 vs 你的 train()", "baseline vs your train()")
            ),
            &t(lang, per_zh, per_en),
            &cats,
            &[
                (t(lang, "基线", "baseline"), base),
                (t(lang, "你的", "yours"), yours),
            ],
            false,
        ));
    }
}
