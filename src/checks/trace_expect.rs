//! `trace` with `expect:`: the method of a student's measurement, judged as `measurement.rs`
//! reads the trace — same inputs, warm-up, sync, repeats, the reported median, and every returned
//! sample a window the grader saw (each the work timed: the `idle:` clause).
use super::{fmt_num, Env, Outcome};
use crate::i18n::Text;
use crate::measurement::{close_to, median_range, Measurement, Source, Untimed, UNLIKE_MAX};
use crate::observations::Event;
use crate::spec::rubric::{IdleSpec, TracePredicate, TraceSpec};
use crate::text;

/// `excuse_one`: one window of this stream may exceed the `idle:` clause's per-window allowance
/// (`trace::evaluate` grants it to one stream of a check's many windows: a stall of the machine's).
pub(super) fn predicate(
    p: TracePredicate,
    spec: &TraceSpec,
    stream: &str,
    events: &[Event],
    env: &Env,
    excuse_one: bool,
) -> Outcome {
    let per = env.resolve(&spec.per).unwrap_or(1.0).max(1.0) as usize;
    let m = match &spec.clock {
        Some(clock) => Measurement::read(&Measurement::only_clock(events, clock), per),
        None => Measurement::read(events, per),
    };
    if !m.steps.iter().any(|s| s.whole()) {
        let absent = env.evidence.why_missing(stream);
        if absent.probe.is_some() {
            return Outcome::missing(absent, "—");
        }
        return Outcome::missing(no_whole_step(&m), "—");
    }
    let variants = spec.variants.clone().unwrap_or_else(|| m.variants());
    let need = env.resolve(&spec.min).unwrap_or(1.0);
    // the numbers the call returned, when the rubric names them: the windows they come from are
    // the ones held to the method's rules
    let returned = match &spec.samples {
        Some(keys) => match returned_numbers(env, stream, &keys.names()) {
            Ok(xs) => Some(xs),
            Err(why) if p == TracePredicate::Samples => return Outcome::missing(why, "—"),
            Err(_) => None,
        },
        None => None,
    };
    let held = |v: &str| returned.as_deref().and_then(|xs| m.held(v, xs));
    match p {
        TracePredicate::SameInputs => same_inputs(&m),
        TracePredicate::OutputsRead => outputs_read(events),
        TracePredicate::Warmup => warmup(&m, &variants, need, &held),
        TracePredicate::Synced => synced(&m, &variants, &held),
        TracePredicate::Repeats => repeats(&m, &variants, need, per, &held),
        TracePredicate::Median => median(&m, &variants, spec, stream, env),
        TracePredicate::Samples => samples(
            &m,
            &variants,
            returned.as_deref().unwrap_or(&[]),
            spec.idle.as_ref(),
            excuse_one,
        ),
    }
}

/// The numbers a call returned, `{stream}.{key}` for each key in order: a list metric, or a
/// number (lesson 05's `first_s` before its `steady_s`).
pub(super) fn returned_numbers(
    env: &Env,
    stream: &str,
    keys: &[&str],
) -> Result<Vec<f64>, crate::observations::Absent> {
    let mut out = Vec::new();
    for key in keys {
        let key = format!("{stream}.{key}");
        match env.evidence.number(&key) {
            Ok(x) => out.push(x),
            Err(_) => out.extend(super::series::list(env, &key)?),
        }
    }
    Ok(out)
}

/// Every returned number is seconds per step of a timed window, in window order: rebuilt here
/// from the clock values the grader recorded, exactly (to float precision) as on the simulated
/// device. A number no window gives (halved, averaged over calls, scaled by a patched clock, made
/// up) fails, whatever band it would lie in.
fn samples(
    m: &Measurement,
    variants: &[String],
    xs: &[f64],
    idle: Option<&IdleSpec>,
    excuse_one: bool,
) -> Outcome {
    let per = m.per as f64;
    let n = xs.len();
    if n == 0 {
        return Outcome::new(
            false,
            text!("0 个样本", "0 samples"),
            "",
            text!(
                "measure() 没有返回任何样本",
                "measure() returned no samples"
            ),
        );
    }
    let mut stop: Option<(usize, Option<f64>)> = None;
    let mut padded: Option<Outcome> = None;
    for v in variants {
        let got = m.sources(v, xs, |x, s| s.gives(x, per));
        if let (Some(src), Some(idle)) = (&got.sources, idle) {
            if let Some(out) = idle_windows(m, src, idle, excuse_one) {
                padded.get_or_insert(out);
                continue;
            }
        }
        // the samples are the steps timed, all of them: windows left out of the samples amid
        // them, in no fixed pattern, were chosen after the fact (compare_median's rule)
        if let Some(src) = &got.sources {
            let untimed = m.untimed_between(v, variants, src.iter().flat_map(|s| s.steps.clone()));
            if let Some((zh, en)) = untimed_why(m, v, &untimed) {
                padded.get_or_insert(Outcome::new(
                    false,
                    text!(format!("{n}/{n} 来自窗口"), format!("{n}/{n} from windows")),
                    "",
                    text!(zh, en),
                ));
                continue;
            }
        }
        if got.sources.is_some() {
            return Outcome::new(
                true,
                text!(format!("{n}/{n} 来自窗口"), format!("{n}/{n} from windows")),
                "",
                text!(
                    format!("返回的 {n} 个样本依次等于各计时窗口的秒数 ÷ {}（由评分器记录的时钟读数重建）", fmt_num(per)),
                    format!("all {n} returned samples equal their timed windows' seconds ÷ {} in order (rebuilt from the clock values the grader recorded)", fmt_num(per))
                ),
            );
        }
        if let Some(u) = got.first_unmatched {
            if stop.is_none_or(|(k, _)| u.0 > k) {
                stop = Some(u);
            }
        }
    }
    if let Some(out) = padded {
        return out;
    }
    if m.windows().is_empty() {
        return no_window_of_per(m, xs);
    }
    let (k, window) = stop.unwrap_or((0, None));
    let x = xs[k];
    let (shown_zh, shown_en) = match window {
        Some(w) if x != 0.0 => (
            format!(
                "，下一个计时窗口是每步 {} s（它的 {:.3} 倍）",
                fmt_num(w),
                w / x
            ),
            format!(
                "; the next timed window is {} s per step ({:.3}× it)",
                fmt_num(w),
                w / x
            ),
        ),
        Some(w) => (
            format!("，下一个计时窗口是每步 {} s", fmt_num(w)),
            format!("; the next timed window is {} s per step", fmt_num(w)),
        ),
        None => (
            "，之后没有计时窗口了".to_string(),
            "; no timed window is left".to_string(),
        ),
    };
    Outcome::new(
        false,
        text!(format!("{k}/{n} 来自窗口"), format!("{k}/{n} from windows")),
        "",
        text!(
            format!(
                "第 {} 个样本 {} s 不是任何（按顺序的）计时窗口的秒数 ÷ {}{shown_zh}。样本必须是你计时的窗口本身：评分器由它记录的时钟读数重建每个窗口",
                k + 1,
                fmt_num(x),
                fmt_num(per)
            ),
            format!(
                "sample #{} ({} s) is no timed window's seconds ÷ {} (in order){shown_en}. A sample must be the window you timed: the grader rebuilds every window from the clock values it recorded",
                k + 1,
                fmt_num(x),
                fmt_num(per)
            )
        ),
    )
}

/// The first of `sources` (the windows the samples came from, in order) whose time outside the
/// handed-over calls, on the grader's cost clock, exceeds what `idle` allows: a window stretched
/// by a sleep or a spin after its last `sync()` makes any number "its window". `None` when all
/// hold. Run-queue waits are not on that clock, so a loaded machine stretches nothing here; a
/// stall the kernel does not bill as a wait (a hypervisor's, reclaim) does: with `excuse_one`,
/// the first window over the per-window allowance is let through (the median rule still counts it).
fn idle_windows(
    m: &Measurement,
    sources: &[Source],
    idle: &IdleSpec,
    mut excuse_one: bool,
) -> Option<Outcome> {
    let n = sources.len();
    let mut windows = Vec::new(); // (own, busy) of each window: the median rule
    let mut asleep = Vec::new(); // seconds asleep of each window: the asleep rule
    for (k, s) in sources.iter().enumerate() {
        let Some((secs, busy)) = m.busy(s) else {
            return Some(Outcome::new(
                false,
                text!(format!("{k}/{n} 来自窗口"), format!("{k}/{n} from windows")),
                "",
                text!(
                    format!("第 {} 个样本的计时窗口没有评分器自己的时间戳，无法核对窗口里做的是不是交给你的工作", k + 1),
                    format!("sample #{}'s window carries none of the grader's own stamps: whether it timed the work handed over cannot be checked", k + 1)
                ),
            ));
        };
        let own = secs - busy;
        windows.push((own, busy));
        asleep.extend(m.asleep_between(s.open, s.close));
        let allowed = idle.max_s + idle.max_share * busy;
        if own > allowed
            && own - allowed <= IdleSpec::MAX_STALL_S
            && std::mem::take(&mut excuse_one)
        {
            continue;
        }
        if own > allowed {
            return Some(Outcome::new(
                false,
                text!(format!("{k}/{n} 来自窗口"), format!("{k}/{n} from windows")),
                "",
                text!(
                    format!(
                        "第 {} 个样本的计时窗口（评分器的时钟：{} s，不含等待 CPU 的时间，含本进程其他线程的 CPU 时间）里只有 {} s 在运行交给你的 step()/sync()，其余 {} s 是你自己的代码（sleep、空转）：超过允许的 {} s。样本必须是计时的工作本身，不能用空闲时间把窗口拉长",
                        k + 1, fmt_num(secs), fmt_num(busy), fmt_num(own), fmt_num(allowed)
                    ),
                    format!(
                        "sample #{}'s window lasted {} s on the grader's clock (time waiting for a CPU left out, CPU time of your process's other threads counted), only {} s of it inside the step()/sync() calls handed over; the other {} s were your own code's (a sleep, a spin), more than the {} s allowed. A sample is the work timed, not a window stretched with idle time",
                        k + 1, fmt_num(secs), fmt_num(busy), fmt_num(own), fmt_num(allowed)
                    )
                ),
            ));
        }
    }
    // one slow window is noise; every window padded by less than `max_s` is not (red team 6:
    // a 1.6 ms sleep in each window, under the 2 ms a single window may hold)
    if let (Some((own, by_mean)), Some(limit)) = (idle.median_over(&windows), idle.median_s) {
        let pct = fmt_num(idle.median_share() * 100.0);
        let (zh, en) = if by_mean {
            ("平均值", "mean")
        } else {
            ("中位数", "median")
        };
        return Some(Outcome::new(
            false,
            text!(format!("{n}/{n} 来自窗口"), format!("{n}/{n} from windows")),
            "",
            text!(
                format!(
                    "{n} 个计时窗口里你自己的代码（交给你的 step()/sync() 之外，包括不等待任何工作的多余 sync()）的时间{zh}为 {} s，超过允许的 {} s + 调用时间的 {pct}%：每个窗口都被拉长了（sleep、空转、多余的调用），窗口里只放要计时的步和一次 sync()",
                    fmt_num(own), fmt_num(limit)
                ),
                format!(
                    "the {en} of your own code's seconds in the {n} timed windows (outside the step()/sync() calls handed over; a sync() with no work before it counts as yours) is {} s, more than the {} s + {pct} % of the calls' time allowed: every window is stretched (a sleep, a spin, extra calls); put only the steps timed and one sync() in a window",
                    fmt_num(own), fmt_num(limit)
                )
            ),
        ));
    }
    if let Some(over) = idle.asleep_over(&asleep) {
        return Some(Outcome::new(
            false,
            text!(format!("{n}/{n} 来自窗口"), format!("{n}/{n} from windows")),
            "",
            over.why(""),
        ));
    }
    None
}

/// No window of exactly `per` whole steps: say what the clock reads did enclose (one window of
/// every step is the chapter's single timing), and whether the first sample is such a window's
/// mean; `no_timing` when they enclose no step at all.
fn no_window_of_per(m: &Measurement, xs: &[f64]) -> Outcome {
    let clean: Vec<&crate::measurement::Interval> =
        m.intervals.iter().filter(|iv| iv.partial == 0).collect();
    if clean.is_empty() {
        return no_timing();
    }
    let mut sizes: Vec<usize> = clean.iter().map(|iv| iv.steps.len()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let sizes = sizes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join("/");
    let per = m.per;
    let mean = xs.first().and_then(|&x| {
        clean.iter().find_map(|iv| {
            let n = iv.steps.len();
            let d = iv.duration?;
            (n > per && close_to(x, d / n as f64, d / n as f64)).then_some(n)
        })
    });
    let (mean_zh, mean_en) = match mean {
        Some(n) => (
            format!("；第 1 个样本是一个 {n} 步窗口 ÷ {n}：一次计时的平均值，不是 repeats 个样本"),
            format!("; sample #1 is a window of {n} steps ÷ {n}: the mean of one timing, not `repeats` samples"),
        ),
        None => (String::new(), String::new()),
    };
    Outcome::new(
        false,
        text!(
            format!("0 个窗口恰好 {per} 步"),
            format!("0 windows of exactly {per} step(s)")
        ),
        "",
        text!(
            format!("没有一个计时窗口恰好包含 {per} 个完整的步骤：{} 个窗口分别包含 {sizes} 步{mean_zh}。每个样本应是一个 steps_per_repeat 步的窗口 ÷ steps_per_repeat", clean.len()),
            format!("no timed window holds exactly {per} whole step(s): {} window(s) held {sizes} step(s){mean_en}. Each sample is one window of steps_per_repeat steps ÷ steps_per_repeat", clean.len())
        ),
    )
}

/// "No whole training step", and what the backwards that began at a loss missed, when some did.
fn no_whole_step(m: &Measurement) -> Text {
    let Some(u) = m.undone.first() else {
        return text!(
            "没有观察到完整的训练步（前向 + loss + 反向）",
            "no whole training step (forward, loss, backward) was observed"
        );
    };
    let n = m.undone.len();
    let mut zh = Vec::new();
    let mut en = Vec::new();
    if !u.embedding {
        zh.push("没有从 loss 一路反传到嵌入层".to_string());
        en.push("did not go from the loss back to the embedding".to_string());
    }
    if !u.loss {
        zh.push("开始时的梯度不是 loss 的梯度（例如 (logits * 0).sum() 或 logits.sum()：loss 要是交叉熵）".to_string());
        en.push("began with no loss's gradient (`(logits * 0).sum()` or `logits.sum()`, say: the loss is the cross-entropy)".to_string());
    }
    if u.ran < u.layers {
        zh.push(format!(
            "前向只在整个 batch 上运行了模型 {} 层中的 {} 层",
            u.layers, u.ran
        ));
        en.push(format!(
            "ran {} of the model's {} layers on the whole batch in the forward",
            u.ran, u.layers
        ));
    }
    if u.back < u.ran.min(u.layers) || u.layers == 0 {
        zh.push(format!(
            "只反传经过了前向中运行的 {} 层中的 {} 层",
            u.ran, u.back
        ));
        en.push(format!(
            "went back through {} of the {} layers the forward ran",
            u.back, u.ran
        ));
    }
    if u.grads < u.params {
        zh.push(format!(
            "{} 个参数中有 {} 个没有由 autograd 累加梯度（手工赋值的 .grad 不算）",
            u.params,
            u.params - u.grads
        ));
        en.push(format!(
            "left {} of the {} parameters without a gradient autograd accumulated (a `.grad` assigned by hand is none)",
            u.params - u.grads,
            u.params
        ));
    }
    if u.lowp > 0 {
        zh.push(format!(
            "前向中有 {} 次层运行在 autocast 下或输入不是 float32（一步按 float32 计算）",
            u.lowp
        ));
        en.push(format!(
            "ran {} layer(s) under autocast or on an input not in float32 in the forward (a step computes in float32)",
            u.lowp
        ));
    }
    text!(
        format!(
            "没有观察到完整的训练步：{n} 次从模型 loss 开始的反向传播不完整（第一次：{}）。一个训练步是 loss.backward() 经过每个块、为每个参数算出梯度",
            zh.join("，")
        ),
        format!(
            "no whole training step was observed: {n} backward(s) from the model's loss were incomplete (the first {}). A training step is loss.backward() through every block, computing every parameter's gradient",
            en.join(", ")
        )
    )
}

fn no_timing() -> Outcome {
    Outcome::missing(
        text!(
            "没有观察到计时：没有一对读时钟的调用夹住训练步（README 列出了认可的时钟）",
            "no timing observed: no two clock reads enclose a step (README lists the clocks that count)"
        ),
        "—",
    )
}

fn same_inputs(m: &Measurement) -> Outcome {
    let n = m.steps.len();
    // the inputs the steps were labelled on (`idx`, `targets` of a training step; lesson 02's `x`)
    let mut names: Vec<&str> = m
        .steps
        .iter()
        .flat_map(|s| s.inputs.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        names = vec!["idx", "targets"];
    }
    let mut off: Vec<String> = Vec::new();
    for name in &names {
        let k = m
            .steps
            .iter()
            .filter(|s| s.inputs.get(*name).map(String::as_str) != Some("batch"))
            .count();
        if k > 0 {
            off.push(format!("{name} ×{k}"));
        }
    }
    let good = m
        .steps
        .iter()
        .filter(|s| {
            names
                .iter()
                .all(|k| s.inputs.get(*k).map(String::as_str) == Some("batch"))
        })
        .count();
    let all = names.join(", ");
    let measured = text!(
        format!("{good}/{n} 步用同一输入"),
        format!("{good}/{n} steps on the same input")
    );
    if good == n {
        return Outcome::new(
            true,
            measured,
            "",
            text!(
                format!("每一步都用同一输入（{all}）"),
                format!("every step ran on the same input ({all})")
            ),
        );
    }
    let off = off.join(", ");
    Outcome::new(
        false,
        measured,
        "",
        text!(
            format!("{} 步没有用同一输入（{off}）：两种方案必须在同一输入（{all}）上比较", n - good),
            format!("{} steps ran on other inputs ({off}): both variants must be compared on the same input ({all})", n - good)
        ),
    )
}

/// Red team 5: an answer about two steps' outputs agreeing is believed only when the submission
/// read an output of each (`output_read {id, variant}`, sent as it happened) and the two steps ran
/// on one input: the fingerprint each `step` event sent as it began, and its `step_done` as it
/// ended, all equal. An answer pasted from the order of the calls reads no output.
fn outputs_read(events: &[Event]) -> Outcome {
    use serde_json::Value;
    use std::collections::BTreeMap;
    // step id → (variant, fingerprint as it began, as it ended)
    let mut steps: BTreeMap<i64, (String, Option<&Value>, Option<&Value>)> = BTreeMap::new();
    let mut read: Vec<i64> = Vec::new();
    for e in events {
        let Some(id) = e.fields.get("id").and_then(Value::as_i64) else {
            continue;
        };
        match e.e.as_str() {
            "step" => {
                let variant = e.field_str("variant").unwrap_or("").to_string();
                steps.insert(id, (variant, e.fields.get("fp"), None));
            }
            "step_done" => {
                if let Some(s) = steps.get_mut(&id) {
                    s.2 = e.fields.get("fp");
                }
            }
            "output_read" if !read.contains(&id) => read.push(id),
            _ => {}
        }
    }
    // the input each read output was made on (None: the input changed while the step ran)
    let made_on = |variant: &str| -> Vec<Option<&Value>> {
        read.iter()
            .filter_map(|id| steps.get(id))
            .filter(|(v, ..)| v == variant)
            .map(|(_, a, b)| if a.is_some() && a == b { *a } else { None })
            .collect()
    };
    let (base, cand) = (made_on("baseline"), made_on("candidate"));
    let measured = text!(
        format!(
            "读过的输出：baseline {} 个，candidate {} 个",
            base.len(),
            cand.len()
        ),
        format!(
            "outputs read: baseline {}, candidate {}",
            base.len(),
            cand.len()
        )
    );
    let same = base
        .iter()
        .flatten()
        .any(|b| cand.iter().flatten().any(|c| b == c));
    if same {
        return Outcome::new(
            true,
            measured,
            "",
            text!(
                "读过同一输入上 baseline 与 candidate 的输出",
                "the baseline's and the candidate's outputs on one input were read"
            ),
        );
    }
    let why = match (base.is_empty(), cand.is_empty()) {
        (true, true) => text!(
            "两个 step 的输出都没有被读过：outputs_close 只有在比较过输出（例如 torch.allclose(baseline_step(x), candidate_step(x))）之后才可信",
            "neither step's output was read: outputs_close is believed only when the outputs were compared (e.g. torch.allclose(baseline_step(x), candidate_step(x)))"
        ),
        (true, false) => text!(
            "baseline 的输出没有被读过：outputs_close 要比较两个 step 在同一输入上的输出",
            "no baseline output was read: outputs_close compares both steps' outputs on one input"
        ),
        (false, true) => text!(
            "candidate 的输出没有被读过：outputs_close 要比较两个 step 在同一输入上的输出",
            "no candidate output was read: outputs_close compares both steps' outputs on one input"
        ),
        (false, false) => text!(
            "读过的 baseline 与 candidate 输出不是同一输入上的：outputs_close 要比较两个 step 在同一输入上的输出",
            "the baseline and candidate outputs read were made on different inputs: outputs_close compares both steps' outputs on one input"
        ),
    };
    Outcome::new(false, measured, "", why)
}

/// The sources of a variant's returned numbers, when the rubric names them and each has one.
type Held<'a> = dyn Fn(&str) -> Option<Vec<Source>> + 'a;

fn warmup(m: &Measurement, variants: &[String], need: f64, held: &Held) -> Outcome {
    let timed: Vec<&String> = variants
        .iter()
        .filter(|v| !m.timed_of(v).is_empty())
        .collect();
    if timed.is_empty() {
        return no_timing();
    }
    let counts: Vec<(&String, usize)> = timed
        .iter()
        .map(|v| match held(v) {
            Some(src) => (*v, m.warmup_before(v, &src)),
            None => (*v, m.warmup_of(v)),
        })
        .collect();
    let measured = Text::same(
        counts
            .iter()
            .map(|(v, n)| format!("{v}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let cold: Vec<String> = counts
        .iter()
        .filter(|(_, n)| (*n as f64) < need)
        .map(|(v, n)| format!("{v} ({n})"))
        .collect();
    if cold.is_empty() {
        return Outcome::new(
            true,
            measured,
            "",
            text!(
                "每种方案计时前都先预热",
                "each variant warmed up before it was timed"
            ),
        );
    }
    let cold = cold.join(", ");
    let need = fmt_num(need);
    Outcome::new(
        false,
        measured,
        "",
        text!(
            format!("计时前的不计时完整步不足 {need} 个：{cold}。首步包含一次性开销（分配、缓存），应先预热"),
            format!("fewer than {need} whole untimed steps before timing: {cold}. First steps carry one-off costs (allocation, caches): warm up first")
        ),
    )
}

fn synced(m: &Measurement, variants: &[String], held: &Held) -> Outcome {
    // (clock, opening read, closing read) of every window held to the rule
    let mut ivs: Vec<(String, usize, usize)> = Vec::new();
    for v in variants {
        let reads: Vec<(String, usize, usize)> = match held(v) {
            Some(src) => src
                .into_iter()
                .map(|s| (s.clock, s.open, s.close))
                .collect(),
            None => m
                .timed_of(v)
                .into_iter()
                .map(|iv| (iv.clock.clone(), iv.open, iv.close))
                .collect(),
        };
        for r in reads {
            if !ivs.contains(&r) {
                ivs.push(r);
            }
        }
    }
    if ivs.is_empty() {
        return no_timing();
    }
    let (mut bad_open, mut bad_close, mut bad) = (0, 0, 0);
    for (clock, open, close) in &ivs {
        let (o, c) = m.synced_reads(clock, *open, *close);
        bad_open += usize::from(!o);
        bad_close += usize::from(!c);
        bad += usize::from(!(o && c));
    }
    let n = ivs.len();
    let measured = text!(
        format!("{}/{n} 个计时窗口已同步", n - bad),
        format!("{}/{n} timed windows synced", n - bad)
    );
    if bad == 0 {
        return Outcome::new(
            true,
            measured,
            "",
            text!(
                "每次读时钟前都同步了设备",
                "the device was synced before every clock read"
            ),
        );
    }
    Outcome::new(
        false,
        measured,
        "",
        text!(
            format!("{bad} 个计时窗口读时钟前没有 sync()（开始 {bad_open} 次，结束 {bad_close} 次）：GPU 异步执行，测到的是排队时间"),
            format!("{bad} timed windows read the clock without sync() first ({bad_open} opening, {bad_close} closing reads): on a GPU that times the queue, not the work")
        ),
    )
}

fn repeats(m: &Measurement, variants: &[String], need: f64, per: usize, held: &Held) -> Outcome {
    // a repeat is another group of steps timed: windows of several clocks around the same steps
    // are one timing read several times (red team 7: three clocks made 3 steps 9 windows)
    fn distinct<'a>(groups: impl Iterator<Item = &'a Vec<usize>>) -> usize {
        let mut seen: Vec<&Vec<usize>> = Vec::new();
        for g in groups {
            if !seen.contains(&g) {
                seen.push(g);
            }
        }
        seen.len()
    }
    let counts: Vec<(&String, usize)> = variants
        .iter()
        .map(|v| match held(v) {
            Some(src) => (v, distinct(src.iter().map(|s| &s.steps))),
            None => (v, distinct(m.windows_of(v).into_iter().map(|iv| &iv.steps))),
        })
        .collect();
    let measured = Text::same(
        counts
            .iter()
            .map(|(v, n)| format!("{v}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let short: Vec<String> = counts
        .iter()
        .filter(|(_, n)| (*n as f64) < need)
        .map(|(v, n)| format!("{v} ({n})"))
        .collect();
    if short.is_empty() {
        return Outcome::new(
            true,
            measured,
            "",
            text!(
                "重复计时足够，可取中位数",
                "enough timed repeats to take a median"
            ),
        );
    }
    let short = short.join(", ");
    let need = fmt_num(need);
    // what the timing looked like instead: one block of many steps, or none at all
    let blocks: Vec<usize> = m
        .intervals
        .iter()
        .map(|iv| iv.steps.len())
        .filter(|&n| n != per)
        .collect();
    let (hint_zh, hint_en) = match blocks.iter().max() {
        Some(&n) if n > per => (
            format!("；有一个计时窗口包含 {n} 步：应每 {per} 步单独计时"),
            format!("; one timed window held {n} steps: time each {per}-step repeat on its own"),
        ),
        _ => (String::new(), String::new()),
    };
    Outcome::new(
        false,
        measured,
        "",
        text!(
            format!("计时窗口（每个恰好 {per} 个完整步）少于 {need} 个：{short}{hint_zh}。单次计时不可复现，应取多次的中位数"),
            format!("fewer than {need} timed windows of exactly {per} whole step(s): {short}{hint_en}. A single timing does not reproduce; take the median of several")
        ),
    )
}

fn median(
    m: &Measurement,
    variants: &[String],
    spec: &TraceSpec,
    stream: &str,
    env: &Env,
) -> Outcome {
    let report = spec.report.as_deref().unwrap_or("step_s");
    let mut measured = Vec::new();
    let mut bad_zh = Vec::new();
    let mut bad_en = Vec::new();
    for v in variants {
        let key = format!("{stream}.{v}.{report}");
        let reported = match env.evidence.number(&key) {
            Ok(x) => x,
            Err(why) => return Outcome::missing(why, ""),
        };
        // a median of the steps timed, all of them: a step of this variant amid its timing with
        // no window of its own, out of any fixed pattern, was taken out of the measurement after
        // the fact
        let untimed = m.untimed_between(
            v,
            variants,
            m.windows_of(v).iter().flat_map(|iv| iv.steps.clone()),
        );
        if let Some((zh, en)) = untimed_why(m, v, &untimed) {
            measured.push(format!("{v}: {} / —", fmt_num(reported)));
            bad_zh.push(zh);
            bad_en.push(en);
            continue;
        }
        // the median of every window, or of the windows one reading of the call's clocks gives
        // (each clock's own; one per group of steps): `Measurement::window_readings`
        let readings: Vec<Vec<f64>> = m
            .window_readings(v)
            .iter()
            .map(|ivs| ivs.iter().filter_map(|iv| iv.duration).collect())
            .collect();
        let agrees = readings
            .iter()
            .filter_map(|d| median_range(d))
            .find(|&(lo, hi)| close_to(reported, lo, hi));
        if let Some((lo, hi)) = agrees {
            let med = (lo + hi) / 2.0;
            measured.push(format!("{v}: {} / {}", fmt_num(reported), fmt_num(med)));
            continue;
        }
        let durations = &readings[0];
        let n = durations.len();
        let Some((lo, hi)) = median_range(durations) else {
            measured.push(format!("{v}: {} / —", fmt_num(reported)));
            bad_zh.push(format!(
                "{v} 没有可用的计时窗口，无法核对报告的 {}",
                fmt_num(reported)
            ));
            bad_en.push(format!(
                "{v} has no timed window to check the reported {} against",
                fmt_num(reported)
            ));
            continue;
        };
        let med = (lo + hi) / 2.0;
        measured.push(format!("{v}: {} / {}", fmt_num(reported), fmt_num(med)));
        let mean = durations.iter().sum::<f64>() / n as f64;
        let min = durations.iter().copied().fold(f64::INFINITY, f64::min);
        let max = durations.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (is_zh, is_en) = if close_to(reported, mean, mean) {
            ("（这是平均值）", " (that is their mean)")
        } else if close_to(reported, min, min) {
            ("（这是最小值）", " (that is their minimum)")
        } else if close_to(reported, max, max) {
            ("（这是最大值）", " (that is their maximum)")
        } else {
            ("", "")
        };
        bad_zh.push(format!(
            "{v} 报告 {} s{is_zh}，但它的 {n} 个计时窗口的中位数是 {} s（范围 {}–{} s）",
            fmt_num(reported),
            fmt_num(med),
            fmt_num(min),
            fmt_num(max)
        ));
        bad_en.push(format!(
            "{v} reports {} s{is_en}, but the median of its {n} timed windows is {} s (range {}–{} s)",
            fmt_num(reported),
            fmt_num(med),
            fmt_num(min),
            fmt_num(max)
        ));
    }
    let measured = text!(
        format!("报告/中位数 {}", measured.join(", ")),
        format!("reported/median {}", measured.join(", "))
    );
    if bad_en.is_empty() {
        return Outcome::new(
            true,
            measured,
            "",
            text!(
                "报告的数值就是计时窗口的中位数（由评分器记录的时钟读数重建）",
                "the reported numbers are the medians of the timed windows (rebuilt from the clock values the grader recorded)"
            ),
        );
    }
    Outcome::new(
        false,
        measured,
        "",
        text!(bad_zh.join("；"), bad_en.join("; ")),
    )
}

/// Why a variant's timing is not the median of its steps (`Measurement::untimed_between`), in
/// Chinese and English; `None` when it is.
fn untimed_why(m: &Measurement, v: &str, untimed: &Untimed) -> Option<(String, String)> {
    match untimed {
        Untimed::None => None,
        Untimed::Chosen(ks) => {
            let n = ks.len();
            let id = m.steps[ks[0]].id;
            Some((
                format!("{v} 在第一个和最后一个计时窗口之间有 {n} 次前向没有自己的计时窗口（例如第 {id} 步；反向中途出错、被标为其他变体的也算），而且计时的步不是在同一种完整步中等间隔选出的：中位数要取所有计时的步（每一步，或固定每隔几步），不能事后挑选"),
                format!("{n} {v} forward(s) between its first and last timed windows have no window of their own (e.g. step {id}; one whose backward raised, or labelled another variant, included), and which steps were timed follows no fixed pattern of whole steps: the median is over the steps timed (every step, or every k-th), not chosen after the fact"),
            ))
        }
        Untimed::Unlike { ratio } => {
            let x = fmt_num(UNLIKE_MAX);
            Some((
                format!("{v} 按固定间隔计时，但评分器的时钟下每个计时的步是紧挨在它前面、不计时的同一种步的 {} 倍（中位数），超出 1/{x}–{x}：计时的步和其余的步做的不是同样的工作（计时前后改变了状态：清缓存、开 profiler……）", fmt_num(*ratio)),
                format!("{v} is timed in a fixed pattern, but on the grader's clock each timed step took {}× the untimed step of the same variant right before it (median), outside 1/{x}–{x}: the steps timed did other work than the rest (state changed around the windows: caches swept, a profiler on…)", fmt_num(*ratio)),
            ))
        }
    }
}
