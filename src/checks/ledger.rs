//! `ledger`: a submission's memory ledgers equal the grader's, entry by entry, to the byte.
//!
//! Rows are events of traces (`batch`, `seq_len`, `optimizer` and the entries; an entry the
//! submission returned as something other than a number is absent and `<entry>_error` says what
//! it was, so only the criteria comparing that entry fail; lesson 03). The
//! grader's rows (`expected`) fix the grid: every one of them must have exactly one row of the
//! submission (`actual`) with the same batch and seq_len, and no other row may appear. The truth
//! for each entry is computed here in Rust from the model's shape (`exercise.yaml` `model:`,
//! float32 TinyGPT):
//!   params          4 B × every parameter's element count
//!   grads           the same (after backward every parameter has a gradient of its shape)
//!   optimizer_state Adam: exp_avg + exp_avg_sq (2 × params) + one 0-dim float32 `step` per
//!                   parameter (4 B each); SGD with momentum: one momentum_buffer (1 × params);
//!                   less the row's `dropped_state` (lesson 03: the state the drawn parameter
//!                   without a gradient and the drawn one left out of the optimizer do not have)
//!   activations     the grader's own measurement in its row (bytes of the distinct storages saved
//!                   for backward during the forward, parameters excluded), taken before the
//!                   submission was imported (the lesson's scenario.py, `before_submission`);
//!                   it includes the row's tag (`tag` in the row: a tensor of the grader's every
//!                   forward saves, its size drawn per call and shape), which `activation_bytes` does not
//!                   know: the closed form explains the growth, it is not the answer
//! The shape itself is drawn from the seed (`exercise.yaml` `model_draw:`, `Exercise::model_for`),
//! so `env.exercise.model` is the shape this grading used.
//!
//! With `steps:` (event traces), a row counts only if it was measured: the grader saw a whole
//! training step (`step` + its `step_done`, then `opt_step` of that case's optimizer) at the
//! row's batch and seq_len, on the case the grader handed over for it (its model, its inputs, its
//! optimizer), in the call that returned it (`whole_steps`). Rows filled in from parameter shapes
//! after a forward-only or `no_grad` forward, interpolated, cached from another call, run on a
//! case of the submission's choosing (another case's model, tokens of its own), or whose
//! optimizer never stepped are not. A row's `optimizer_state` must moreover equal the bytes the
//! grader read of the optimizer's state at that step (`opt_step`'s `state`): the lesson leaves a
//! drawn parameter per row out of the optimizer (it has a gradient and no state), so state priced
//! from the gradients is wrong, and so is any number not read off `optimizer.state` (red team 5).
use super::{fmt_num, Env, Outcome};
use crate::i18n::Text;
use crate::observations::Event;
use crate::spec::rubric::LedgerSpec;
use crate::spec::ModelConfig;
use crate::text;
use crate::workload::parameter_shapes;
use std::collections::{BTreeMap, BTreeSet};

/// Bytes of TinyGPT's float32 parameters, and how many parameter tensors it has.
pub fn param_bytes(cfg: &ModelConfig) -> (i64, i64) {
    let shapes = parameter_shapes(cfg);
    let elems: i64 = shapes.iter().map(|(_, s)| s.iter().product::<i64>()).sum();
    (4 * elems, shapes.len() as i64)
}

/// Bytes of an optimizer's state after its first step, or None for an unknown optimizer.
pub fn optimizer_state_bytes(cfg: &ModelConfig, optimizer: &str) -> Option<i64> {
    let (p, n) = param_bytes(cfg);
    match optimizer {
        "adam" => Some(2 * p + 4 * n),
        "sgd_momentum" => Some(p),
        _ => None,
    }
}

/// Bytes saved for backward by one forward + loss of TinyGPT (float32, dropout 0) on a batch of
/// `b` sequences of `t` tokens, derived op by op for torch 2.13 (each storage once, parameters
/// excluded). Not a truth the rubric uses (that is the grader's own measurement, which sees any
/// change in torch or the model); tests/lesson_03.rs holds the two equal, so the growth laws have
/// a written-out reason:
///   per block and token  ln1 input + mean/rstd, ln1 output, qkv output (q, k, v are views of it),
///                        attention output, ln2 input + mean/rstd, ln2 output, fc output, GELU
///                        output: 64·d + 16 bytes
///   per block and row    softmax output B × H × T × T float32 (also the input of att @ v)
///   per token            ln_f input + mean/rstd, ln_f output, log_softmax output (4·V), targets
///                        and idx (int64): 8·d + 4·V + 24
///   per sequence         idx's extra column (lesson 03's idx is a view of a B × (T+1) token
///                        tensor, as LM inputs are: its storage holds one more int64 per row)
///   per batch            the causal mask ~mask[:T, :T] (bool, per block), positions (int64 T),
///                        nll_loss's total_weight (4)
pub fn activation_bytes(cfg: &ModelConfig, b: i64, t: i64) -> i64 {
    let (d, v, l, h) = (cfg.d_model, cfg.vocab, cfg.n_blocks, cfg.n_heads);
    b * (4 * l * h * t * t + t * (l * (64 * d + 16) + 8 * d + 4 * v + 24) + 8)
        + l * t * t
        + 8 * t
        + 4
}

/// What the grader saw of one call's steps (`whole_steps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The (batch, seq_len) of every whole training step, with the bytes of the optimizer's
    /// state the grader read at the last optimizer step of that case after its backward.
    pub whole: BTreeMap<(i64, i64), Option<i64>>,
    /// Shapes whose forward and backward the grader saw with no optimizer step of that case after
    /// them (a sweep that never steps: red team 5), to say so.
    pub no_update: BTreeSet<(i64, i64)>,
    /// Per shape, the bytes the submission's saved-tensors hooks were handed in a whole forward
    /// at that shape on that row's case (`hooked {batch, seq_len, bytes}`, sent by the scenario
    /// after the call: `lib.hooked_forwards`): a row's `activations` are believed only as one of
    /// them (red team 6: the closed form plus the grader's draws, each spied on its own).
    pub hooked: BTreeMap<(i64, i64), BTreeSet<i64>>,
}

/// Every whole training step the grader saw, per call. In each trace, a `call {call}` event
/// opens a call (the next `call` event or the trace's end closes it); inside it, the scenario's
/// `shape {batch, seq_len, case}` comes right before its forward's `step {id}`, and that step's
/// forward and backward are done when its `step_done {id}` (the loss the model returned went
/// through backward) comes in the same call. The step is whole when, after that, the optimizer
/// handed over with that case is stepped in the same call: `opt_step {call, batch, seq_len,
/// state}`, sent by the grader's step post-hook (the case's call and shape; `state`, the bytes of
/// the optimizer's state it read there). A step's shape is the one its forward ran at, whatever
/// the rows say; a forward with `case: false` (not on a case handed over in that call, with that
/// case's own inputs: another case's model, tokens of the submission's own) is no step, and an
/// optimizer of another call's case steps no row of this one.
pub fn whole_steps<'a>(traces: impl IntoIterator<Item = &'a [Event]>) -> BTreeMap<String, Seen> {
    let mut out: BTreeMap<String, Seen> = BTreeMap::new();
    for trace in traces {
        let mut call: Option<String> = None;
        let mut shape: Option<(i64, i64)> = None;
        let mut started: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        let mut seen = Seen::default();
        let mut backed: BTreeSet<(i64, i64)> = BTreeSet::new();
        let mut close = |call: &Option<String>, seen: &mut Seen, backed: &mut BTreeSet<_>| {
            seen.no_update = backed
                .iter()
                .filter(|s| !seen.whole.contains_key(s))
                .copied()
                .collect();
            if let Some(c) = call {
                let all = out.entry(c.clone()).or_default();
                all.whole.append(&mut seen.whole);
                all.no_update.append(&mut seen.no_update);
                for (shape, bytes) in std::mem::take(&mut seen.hooked) {
                    all.hooked.entry(shape).or_default().extend(bytes);
                }
            }
            *seen = Seen::default();
            backed.clear();
        };
        for ev in trace {
            let id = || ev.fields.get("id").map(|v| v.to_string());
            match ev.e.as_str() {
                "call" => {
                    close(&call, &mut seen, &mut backed);
                    call = ev.field_str("call").map(str::to_string);
                    (shape, started) = (None, BTreeMap::new());
                }
                // a forward on something other than a case of this call with that case's own
                // inputs (`case: false`) is no step of any row
                "shape" if ev.fields.get("case") == Some(&serde_json::Value::Bool(false)) => {
                    shape = None
                }
                "shape" => shape = int(ev, "batch").zip(int(ev, "seq_len")),
                "step" => {
                    if let (Some(s), Some(id)) = (shape.take(), id()) {
                        started.insert(id, s);
                    }
                }
                "step_done" => {
                    if let Some(s) = id().and_then(|id| started.get(&id)) {
                        backed.insert(*s);
                    }
                }
                "hooked" => {
                    if let Some(s) = int(ev, "batch").zip(int(ev, "seq_len")) {
                        let bytes = ev.fields.get("bytes").and_then(serde_json::Value::as_array);
                        let set = seen.hooked.entry(s).or_default();
                        set.extend(
                            bytes
                                .into_iter()
                                .flatten()
                                .filter_map(serde_json::Value::as_i64),
                        );
                    }
                }
                // the optimizer of a case of this call stepped after that case's backward
                "opt_step" if call.is_some() && ev.field_str("call") == call.as_deref() => {
                    if let Some(s) = int(ev, "batch").zip(int(ev, "seq_len")) {
                        if backed.contains(&s) {
                            seen.whole.insert(s, int(ev, "state"));
                        }
                    }
                }
                _ => {}
            }
        }
        close(&call, &mut seen, &mut backed);
    }
    out
}

fn int(ev: &Event, key: &str) -> Option<i64> {
    ev.fields.get(key).and_then(serde_json::Value::as_i64)
}

fn at(row: &Event) -> String {
    format!(
        "B={}, T={}",
        int(row, "batch").map_or("?".into(), |v| v.to_string()),
        int(row, "seq_len").map_or("?".into(), |v| v.to_string())
    )
}

/// The grader's value of `entry` for the grid point of its row `truth`.
fn expected(env: &Env, truth: &Event, entry: &str) -> Result<i64, String> {
    let cfg = &env.exercise.model;
    match entry {
        // and the grader's own parameter in the case's model (lesson 03: `params_extra`, drawn
        // per row; used by no forward, so it has no gradient and no state)
        "params" => Ok(param_bytes(cfg).0 + int(truth, "params_extra").unwrap_or(0)),
        // less what the row's drawn parameter without a gradient does not have (lesson 03: the
        // repeated ledger and the sweep; 0 where no parameter was drawn)
        "grads" => Ok(param_bytes(cfg).0 - int(truth, "dropped_grad").unwrap_or(0)),
        "optimizer_state" => {
            let opt = truth.field_str("optimizer").unwrap_or("?");
            optimizer_state_bytes(cfg, opt)
                .map(|b| b - int(truth, "dropped_state").unwrap_or(0))
                .ok_or(format!("unknown optimizer `{opt}`"))
        }
        _ => int(truth, entry).ok_or(format!("the grader's row has no `{entry}`")),
    }
}

pub fn evaluate(spec: &LedgerSpec, env: &Env) -> Outcome {
    let entries = spec.entries.join(", ");
    let bound = match (spec.entries.is_empty(), spec.steps.is_some()) {
        (true, _) => text!(
            "每行 = 评分器在该形状看到的完整训练步",
            "each row = a whole step the grader saw at its shape"
        ),
        (false, false) => text!(
            format!("{entries} = 评分器账本（逐字节）"),
            format!("{entries} = the grader's ledger (to the byte)")
        ),
        (false, true) => text!(
            format!("{entries} = 评分器账本（逐字节），每行是评分器看到的一步"),
            format!("{entries} = the grader's ledger (to the byte), each row a measured step")
        ),
    };
    let steps = match &spec.steps {
        None => None,
        Some(streams) => {
            let mut traces = Vec::new();
            for name in streams.names() {
                match env.evidence.trace(name) {
                    Ok(t) => traces.push(t),
                    Err(why) => return Outcome::missing(why, bound),
                }
            }
            Some(whole_steps(traces))
        }
    };
    // the entries the submission got wrong (a number ≠ the grader's) in the `where_right` rows
    let mut wrong_before: BTreeSet<&str> = BTreeSet::new();
    if let Some([mine, theirs]) = &spec.where_right {
        let (rows, truth) = match (env.evidence.trace(mine), env.evidence.trace(theirs)) {
            (Ok(r), Ok(t)) => (r, t),
            (Err(why), _) | (_, Err(why)) => return Outcome::missing(why, bound),
        };
        let key = |r: &Event| (int(r, "batch"), int(r, "seq_len"));
        for t in truth {
            for r in rows.iter().filter(|r| key(r) == key(t)) {
                for entry in &spec.entries {
                    let want = expected(env, t, entry).ok();
                    if let Some(got) = int(r, entry) {
                        if Some(got) != want {
                            wrong_before.insert(entry.as_str());
                        }
                    }
                }
            }
        }
    }
    let (actual, expect) = (spec.actual.names(), spec.expected.names());
    let mut stepped = 0usize;
    let (mut checked, mut bad_zh, mut bad_en) = (0usize, Vec::new(), Vec::new());
    let mut values = Vec::new(); // (value, truth) of every comparison, for the measured column
    let mut first_bad: Option<(i64, i64)> = None;
    for (a_name, e_name) in actual.iter().zip(expect.iter()) {
        let truth = match env.evidence.trace(e_name) {
            Ok(t) => t,
            Err(why) => return Outcome::missing(why, bound),
        };
        let rows = match env.evidence.trace(a_name) {
            Ok(t) => t,
            Err(why) => return Outcome::missing(why, bound),
        };
        let key = |r: &Event| (int(r, "batch"), int(r, "seq_len"));
        for t in truth {
            let mine: Vec<&Event> = rows.iter().filter(|r| key(r) == key(t)).collect();
            if mine.len() != 1 {
                bad_zh.push(format!(
                    "{a_name} 在 {} 有 {} 行（应为 1 行）",
                    at(t),
                    mine.len()
                ));
                bad_en.push(format!(
                    "{a_name} has {} rows for {} (expected 1)",
                    mine.len(),
                    at(t)
                ));
                continue;
            }
            // the optimizer state the grader read at this row's optimizer step (`opt_step`), and
            // the bytes the submission's hooks were handed in a whole forward at the row's shape
            let mut reading: Option<i64> = None;
            let mut hooked: Option<&BTreeSet<i64>> = None;
            if let Some(seen) = &steps {
                let shape = (
                    int(t, "batch").unwrap_or(-1),
                    int(t, "seq_len").unwrap_or(-1),
                );
                let call = seen.get(*a_name);
                hooked = call.and_then(|s| s.hooked.get(&shape));
                if let Some(state) = call.and_then(|s| s.whole.get(&shape)) {
                    stepped += 1;
                    reading = *state;
                } else if call.is_some_and(|s| s.no_update.contains(&shape)) {
                    bad_zh.push(format!(
                        "{a_name} {}：评分器看到了前向与 loss 的反向，但之后这个情形的优化器没有 step()：不是完整训练步，这一行不是测量",
                        at(t)
                    ));
                    bad_en.push(format!(
                        "{a_name} {}: the grader saw the forward and the loss's backward, but no optimizer.step() of that case after them: no whole training step, not a measured row",
                        at(t)
                    ));
                } else {
                    bad_zh.push(format!(
                        "{a_name} {}：这次调用中评分器没有在这个形状、在该行的情形（它的模型、输入与优化器）上看到完整训练步（前向 + loss 反向 + optimizer.step()），这一行不是测量",
                        at(t)
                    ));
                    bad_en.push(format!(
                        "{a_name} {}: the grader saw no whole training step (forward + the loss's backward + optimizer.step()) at that shape, on that row's case (its model, inputs and optimizer), in the call that returned it: not a measured row",
                        at(t)
                    ));
                }
            }
            for entry in &spec.entries {
                if wrong_before.contains(entry.as_str()) {
                    continue; // wrong in the first place: another criterion's
                }
                let want = match expected(env, t, entry) {
                    Ok(v) => v,
                    Err(why) => return Outcome::missing(Text::same(why), bound),
                };
                checked += 1;
                let got = int(mine[0], entry);
                values.push((got, want));
                if let (None, Some(error)) = (got, mine[0].field_str(&format!("{entry}_error"))) {
                    // the submission returned something that is not a number: say what it was
                    let w = fmt_num(want as f64);
                    bad_zh.push(format!("{a_name} {} {entry}：{error}（评分器 {w}）", at(t)));
                    bad_en.push(format!(
                        "{a_name} {} {entry}: {error} (grader's {w})",
                        at(t)
                    ));
                    first_bad.get_or_insert((0, want));
                    continue;
                }
                // optimizer state is believed as read: the row must also be what the grader read
                // of the optimizer at that row's step (red team 5: state priced from the
                // gradients, never read)
                let held = match reading {
                    Some(r) if entry == "optimizer_state" && got.is_some_and(|g| g != r) => Some(r),
                    _ => None,
                };
                // activations are believed as measured: one of the byte counts the submission's
                // saved-tensors hooks were handed in a whole forward at the row's shape in that call
                if entry == "activations" && steps.is_some() && got == Some(want) {
                    let seen_it = got.is_some_and(|g| hooked.is_some_and(|h| h.contains(&g)));
                    if !seen_it {
                        let g = fmt_num(got.unwrap_or(0) as f64);
                        bad_zh.push(format!(
                            "{a_name} {} activations：{g}，但在返回它的调用中，没有哪次该形状的完整前向把这些字节交给你的 saved_tensors_hooks、并由你的代码逐个读出每个 storage 的大小（`untyped_storage().nbytes()`；只有测出来的数才算）",
                            at(t)
                        ));
                        bad_en.push(format!(
                            "{a_name} {} activations: {g}, but no whole forward at that shape in the call that returned it handed those bytes to your saved_tensors_hooks with your code reading each storage's size (`untyped_storage().nbytes()`; only a measured number counts)",
                            at(t)
                        ));
                        first_bad.get_or_insert((got.unwrap_or(0), want));
                        continue;
                    }
                }
                if let (Some(r), true) = (held, got == Some(want)) {
                    let (g, rs) = (fmt_num(got.unwrap_or(0) as f64), fmt_num(r as f64));
                    bad_zh.push(format!(
                        "{a_name} {} {entry}：{g}，但评分器在该行的 optimizer.step() 时读到优化器状态为 {rs}",
                        at(t)
                    ));
                    bad_en.push(format!(
                        "{a_name} {} {entry}: {g}, but the grader read {rs} of optimizer state at that row's optimizer.step()",
                        at(t)
                    ));
                    first_bad.get_or_insert((got.unwrap_or(0), r));
                    continue;
                }
                if got != Some(want) {
                    let g = got.map_or("—".into(), |v| fmt_num(v as f64));
                    let diff = got.map_or(String::new(), |v| {
                        format!(
                            " ({}{})",
                            if v > want { "+" } else { "−" },
                            fmt_num((v - want).abs() as f64)
                        )
                    });
                    let w = fmt_num(want as f64);
                    let (rz, re) = match held {
                        Some(r) => (
                            format!("；评分器在该行的 step 时读到 {}", fmt_num(r as f64)),
                            format!("; the grader read {} at that row's step", fmt_num(r as f64)),
                        ),
                        None => (String::new(), String::new()),
                    };
                    bad_zh.push(format!(
                        "{a_name} {} {entry}：{g} ≠ 评分器 {w}{diff}{rz}",
                        at(t)
                    ));
                    bad_en.push(format!(
                        "{a_name} {} {entry}: {g} ≠ grader's {w}{diff}{re}",
                        at(t)
                    ));
                    first_bad.get_or_insert((got.unwrap_or(0), want));
                }
            }
        }
        for r in rows {
            if !truth.iter().any(|t| key(t) == key(r)) {
                bad_zh.push(format!("{a_name} 多出一行 {}（不在网格中）", at(r)));
                bad_en.push(format!(
                    "{a_name} has an extra row {} (not in the grid)",
                    at(r)
                ));
            }
        }
    }
    let all_same = values.windows(2).all(|w| w[0] == w[1]);
    if bad_en.is_empty() && checked == 0 && stepped > 0 {
        // nothing to compare (no entries, or every one wrong where it was first measured)
        let streams = actual.join(", ");
        let skipped = if wrong_before.is_empty() {
            (String::new(), String::new())
        } else {
            let w: Vec<&str> = wrong_before.iter().copied().collect();
            let w = w.join(", ");
            (
                format!("（{w} 首次即不符，由其他评分项判断）"),
                format!(" ({w} wrong the first time: other criteria judge it)"),
            )
        };
        return Outcome::new(
            true,
            text!(format!("{stepped} 步"), format!("{stepped} steps")),
            bound,
            text!(
                format!("{streams} 的 {stepped} 行都是评分器在该行形状、在返回它的调用中看到的完整训练步{}", skipped.0),
                format!("each of the {stepped} rows of {streams} is a whole training step the grader saw at its shape, in the call that returned it{}", skipped.1)
            ),
        );
    }
    if bad_en.is_empty() && spec.entries.is_empty() {
        if stepped == 0 {
            return Outcome::missing(
                Text::same(format!("{} has no rows", expect.join(", "))),
                bound,
            );
        }
        let streams = actual.join(", ");
        return Outcome::new(
            true,
            text!(format!("{stepped} 步"), format!("{stepped} steps")),
            bound,
            text!(
                format!("{streams} 的 {stepped} 行都是评分器在该行形状、在返回它的调用中看到的完整训练步"),
                format!("each of the {stepped} rows of {streams} is a whole training step the grader saw at its shape, in the call that returned it")
            ),
        );
    }
    if bad_en.is_empty() {
        if checked == 0 {
            return Outcome::missing(
                Text::same(format!("{} has no rows", expect.join(", "))),
                bound,
            );
        }
        let shown: Vec<String> = values
            .iter()
            .map(|(v, _)| fmt_num(v.unwrap_or(0) as f64))
            .collect();
        let measured = match values.first() {
            Some((Some(v), _)) if all_same => Text::same(format!("{} B", fmt_num(*v as f64))),
            _ if checked <= 3 => Text::same(format!("{} B", shown.join(" / "))),
            _ => text!(format!("{checked} 项相等"), format!("{checked} equal")),
        };
        let streams = actual.join(", ");
        return Outcome::new(
            true,
            measured,
            bound,
            if !wrong_before.is_empty() {
                let w: Vec<&str> = wrong_before.iter().copied().collect();
                let w = w.join(", ");
                text!(
                    format!("{streams} 的 {checked} 项与评分器的账本逐字节相等（{w} 首次即不符，由其他评分项判断）"),
                    format!("all {checked} values of {streams} equal the grader's ledger to the byte ({w} wrong the first time: other criteria judge it)")
                )
            } else if steps.is_some() {
                text!(
                    format!("{streams} 的 {checked} 项（{entries}）与评分器的账本逐字节相等，{stepped} 行都是评分器在该形状看到的完整训练步"),
                    format!("all {checked} values ({entries}) of {streams} equal the grader's ledger to the byte; each of its {stepped} rows is a whole training step the grader saw at its shape")
                )
            } else {
                text!(
                    format!("{streams} 的 {checked} 项（{entries}）与评分器的账本逐字节相等"),
                    format!("all {checked} values ({entries}) of {streams} equal the grader's ledger to the byte")
                )
            },
        );
    }
    let n = bad_en.len();
    let measured = match first_bad {
        Some((g, w)) if n == 1 => {
            Text::same(format!("{} ≠ {}", fmt_num(g as f64), fmt_num(w as f64)))
        }
        _ => text!(format!("{n} 处不符"), format!("{n} mismatches")),
    };
    let shown = 4;
    let more = |n: usize| {
        if n > shown {
            format!(" …(+{})", n - shown)
        } else {
            String::new()
        }
    };
    Outcome::new(
        false,
        measured,
        bound,
        text!(
            format!("{}{}", bad_zh[..n.min(shown)].join("；"), more(n)),
            format!("{}{}", bad_en[..n.min(shown)].join("; "), more(n))
        ),
    )
}
