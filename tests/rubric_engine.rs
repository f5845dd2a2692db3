//! Pure-Rust tests of the rubric engine: each check kind on hand-made and recorded observations.
//! Fast and exact: no Python, no timing.
use grade::checks::{self, close, evaluate, Env, Status};
use grade::i18n::Text;
use grade::observations::{Event, Evidence, Observations, ProbeRecord};
use grade::runner::Device;
use grade::spec::rubric::{Check, TraceSpec};
use grade::spec::{Exercise, Rubric};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tch::{Kind, Tensor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn exercise() -> Exercise {
    Exercise::load(&root().join("exercises/04-checkpoint")).unwrap()
}

fn rubric(ex: &Exercise) -> Rubric {
    Rubric::load(&root().join("rubrics/04-checkpoint.yaml"), ex).unwrap()
}

fn recorded(name: &str) -> Observations {
    let path = root().join(format!("tests/recorded/04-checkpoint.{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn with_metrics(pairs: &[(&str, serde_json::Value)]) -> Evidence {
    let mut ev = Evidence::default();
    for (k, v) in pairs {
        ev.obs.metrics.insert(k.to_string(), v.clone());
    }
    ev
}

fn check(yaml: &str) -> Check {
    #[derive(serde::Deserialize)]
    struct W {
        #[serde(with = "serde_yaml::with::singleton_map_recursive")]
        check: Check,
    }
    serde_yaml::from_str::<W>(&format!("check: {yaml}"))
        .unwrap()
        .check
}

fn run(check_yaml: &str, ev: &Evidence) -> checks::Outcome {
    let ex = exercise();
    evaluate(
        &check(check_yaml),
        &Env {
            evidence: ev,
            exercise: &ex,
        },
    )
}

// ---------------------------------------------------------------------------------------- close

#[test]
fn close_uses_assert_close_defaults_per_dtype() {
    assert_eq!(close::default_tolerance(Kind::Float), (1.3e-6, 1e-5));
    assert_eq!(close::default_tolerance(Kind::Half), (1e-3, 1e-5));
    assert_eq!(close::default_tolerance(Kind::BFloat16), (1.6e-2, 1e-5));
    assert_eq!(close::default_tolerance(Kind::Double), (1e-7, 1e-7));
    assert_eq!(close::default_tolerance(Kind::Int64), (0.0, 0.0));
}

#[test]
fn close_reports_count_greatest_differences_and_where() {
    let e = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).view([2, 3]);
    let a = Tensor::from_slice(&[1.0f32, 2.0 + 1e-6, 3.5, 4.0, 5.0, 6.1]).view([2, 3]);
    let c = close::compare(&a, &e, None).unwrap();
    assert_eq!(c.numel, 6);
    assert_eq!(
        c.mismatched, 2,
        "2+1e-6 is within atol 1e-5, 3.5 and 6.1 are not"
    );
    assert!((c.max_abs - 0.5).abs() < 1e-6);
    assert_eq!(c.max_abs_at, vec![0, 2]);
    assert!((c.max_rel - 0.5 / 3.0).abs() < 1e-6);
    assert_eq!(c.max_rel_at, vec![0, 2]);
}

#[test]
fn close_treats_nan_as_mismatch_and_equal_infinities_as_close() {
    let e = Tensor::from_slice(&[f32::INFINITY, 1.0, f32::NAN]);
    let a = Tensor::from_slice(&[f32::INFINITY, 1.0, f32::NAN]);
    assert_eq!(close::compare(&a, &e, None).unwrap().mismatched, 1);
}

#[test]
fn close_refuses_dtype_and_shape_mismatches() {
    let e = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
    assert!(close::compare(&e.to_kind(Kind::Double), &e, None)
        .unwrap_err()
        .contains("dtype"));
    assert!(close::compare(&e.view([3, 1]), &e, None)
        .unwrap_err()
        .contains("shape"));
}

#[test]
fn close_compares_integers_exactly() {
    let e = Tensor::from_slice(&[1i64, 2, 3]);
    let a = Tensor::from_slice(&[1i64, 2, 4]);
    assert_eq!(close::compare(&a, &e, None).unwrap().mismatched, 1);
}

fn groups(actual: &[(&str, Tensor)], expected: &[(&str, Tensor)]) -> Evidence {
    let mut ev = Evidence::default();
    for (n, t) in actual {
        ev.tensors.insert(format!("sub/x/{n}"), t.shallow_clone());
    }
    for (n, t) in expected {
        ev.tensors.insert(format!("ref/x/{n}"), t.shallow_clone());
    }
    ev
}

#[test]
fn close_group_passes_and_fails_on_the_worst_tensor() {
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
    let ev = groups(
        &[("a", t.copy()), ("b", t.copy())],
        &[("a", t.copy()), ("b", t.copy())],
    );
    let out = run("{close: {actual: sub/x, expected: ref/x}}", &ev);
    assert!(out.pass, "{out:?}");

    let ev = groups(
        &[("a", t.copy()), ("b", &t + 1.0)],
        &[("a", t.copy()), ("b", t.copy())],
    );
    let out = run("{close: {actual: sub/x, expected: ref/x}}", &ev);
    assert!(!out.pass);
    assert!(
        out.why.en.contains("worst b: 3/3 mismatched"),
        "{}",
        out.why.en
    );
}

#[test]
fn close_group_names_missing_gradients() {
    let t = Tensor::from_slice(&[1.0f32]);
    let ev = groups(
        &[("grad/w1", t.copy())],
        &[("grad/w1", t.copy()), ("grad/w2", t.copy())],
    );
    let out = run("{close: {actual: sub/x, expected: ref/x}}", &ev);
    assert!(!out.pass);
    assert!(
        out.why
            .en
            .contains("1 tensors missing (gradient None?): grad/w2"),
        "{}",
        out.why.en
    );
}

#[test]
fn close_explicit_tolerance_overrides_defaults() {
    let e = Tensor::from_slice(&[1.0f32]);
    let ev = groups(&[("v", &e + 0.01)], &[("v", e.copy())]);
    assert!(!run("{close: {actual: sub/x, expected: ref/x}}", &ev).pass);
    assert!(
        run(
            "{close: {actual: sub/x, expected: ref/x, rtol: 0.0, atol: 0.1}}",
            &ev
        )
        .pass
    );
}

// --------------------------------------------------------------------------------- ratio, range

#[test]
fn ratio_checks_both_bounds() {
    let ev = with_metrics(&[("p.a", json!(30)), ("p.b", json!(100))]);
    assert!(run("{ratio: {num: p.a, den: p.b, max: 0.5}}", &ev).pass);
    assert!(!run("{ratio: {num: p.a, den: p.b, max: 0.2}}", &ev).pass);
    assert!(!run("{ratio: {num: p.a, den: p.b, min: 0.31}}", &ev).pass);
    let out = run("{ratio: {num: p.a, den: p.b, min: 0.3, max: 0.3}}", &ev);
    assert!(out.pass);
    assert_eq!(out.measured, "0.3 (30 / 100)");
}

#[test]
fn ratio_with_zero_denominator_fails_with_reason() {
    let ev = with_metrics(&[("p.a", json!(1)), ("p.b", json!(0))]);
    let out = run("{ratio: {num: p.a, den: p.b, max: 1}}", &ev);
    assert!(!out.pass);
    assert!(out.why.en.contains("is 0"));
}

#[test]
fn range_resolves_references_into_exercise_yaml() {
    let ev = with_metrics(&[("p.n", json!(4))]);
    assert!(
        run(
            "{range: {metric: p.n, min: $model.n_blocks, max: $model.n_blocks}}",
            &ev
        )
        .pass
    );
    assert!(!run("{range: {metric: p.n, min: $params.repeats}}", &ev).pass);
}

#[test]
fn missing_metric_explains_the_failed_probe() {
    let mut ev = with_metrics(&[]);
    ev.obs.probes.insert(
        "compare".into(),
        ProbeRecord {
            ok: false,
            error: Some("NotImplementedError: TODO".into()),
            seconds: None,
        },
    );
    let out = run("{range: {metric: compare.run1.off.step_s, min: 0}}", &ev);
    assert!(!out.pass);
    assert_eq!(
        out.why.en,
        "probe `compare` failed: NotImplementedError: TODO"
    );
    assert_eq!(out.measured, "—");
}

// ---------------------------------------------------------------------------------------- trace

fn embed(input: &str) -> Event {
    Event::new("embed").with("input", input)
}
fn ev(e: &str) -> Event {
    Event::new(e)
}

/// A good compare() trace: per variant, `warmup` untimed steps then `repeats` synced windows.
fn good_trace(warmup: usize, repeats: usize) -> Vec<Event> {
    let mut t = Vec::new();
    for on in [false, true] {
        let step = |t: &mut Vec<Event>| {
            t.push(embed("batch"));
            if on {
                t.extend((0..4).map(|_| ev("ckpt")));
            }
        };
        for _ in 0..warmup {
            step(&mut t);
        }
        for _ in 0..repeats {
            t.push(ev("sync"));
            t.push(ev("timer"));
            step(&mut t);
            t.push(ev("sync"));
            t.push(ev("timer"));
        }
    }
    t
}

fn trace_evidence(events: Vec<Event>) -> Evidence {
    let mut e = Evidence::default();
    e.obs.traces.insert("compare.run1".into(), events);
    e
}

fn predicate(p: &str, events: Vec<Event>) -> checks::Outcome {
    run(
        &format!("{{trace: {{stream: compare.run1, expect: {p}, min: 5}}}}"),
        &trace_evidence(events),
    )
}

#[test]
fn a_good_trace_passes_every_predicate() {
    for p in ["same_inputs", "warmup", "synced", "repeats"] {
        let out = predicate(p, good_trace(2, 5));
        assert!(out.pass, "{p}: {out:?}");
    }
}

#[test]
fn trace_steps_know_their_variant() {
    let steps = checks::trace::steps(&good_trace(1, 1));
    let variants: Vec<&str> = steps.iter().map(|s| s.variant).collect();
    assert_eq!(variants, ["off", "off", "on", "on"]);
}

#[test]
fn no_warmup_is_caught_per_variant() {
    let mut t = good_trace(2, 5);
    // drop the two warm-up steps of "on": the embeds (and their ckpts) right after the off windows
    let first_on = t.iter().position(|e| e.e == "ckpt").unwrap() - 1;
    t.drain(first_on..first_on + 10);
    let out = predicate("warmup", t);
    assert!(!out.pass);
    assert_eq!(out.measured, "off: 2 warm-up, on: 0 warm-up");
    assert!(out.why.en.contains("the first step of on was timed"));
}

#[test]
fn missing_sync_before_the_closing_clock_read_is_caught() {
    let mut t = good_trace(1, 3);
    // remove the sync right before one closing timer read
    let i = t
        .iter()
        .enumerate()
        .filter(|(_, e)| e.e == "timer")
        .nth(1)
        .unwrap()
        .0;
    assert_eq!(t[i - 1].e, "sync");
    t.remove(i - 1);
    let out = predicate("synced", t);
    assert!(!out.pass);
    assert_eq!(out.measured, "5/6 timed windows synced");
}

#[test]
fn untimed_trace_fails_warmup_and_sync_with_a_reason() {
    let t: Vec<Event> = good_trace(2, 5)
        .into_iter()
        .filter(|e| e.e != "timer")
        .collect();
    for p in ["warmup", "synced"] {
        let out = predicate(p, t.clone());
        assert!(!out.pass);
        assert!(
            out.why.en.contains("no timing observed"),
            "{p}: {}",
            out.why.en
        );
    }
}

#[test]
fn other_inputs_are_caught() {
    let mut t = good_trace(1, 2);
    for e in t.iter_mut().filter(|e| e.e == "embed").skip(3) {
        *e = embed("other1");
    }
    let out = predicate("same_inputs", t);
    assert!(!out.pass);
    assert_eq!(out.measured, "3/6 steps on the batch");
}

#[test]
fn too_few_repeats_are_caught() {
    let out = predicate("repeats", good_trace(1, 1));
    assert!(!out.pass);
    assert_eq!(out.measured, "off: 1, on: 1");
}

#[test]
fn an_empty_trace_fails() {
    assert!(!predicate("same_inputs", vec![]).pass);
}

#[test]
fn count_compares_with_model_references() {
    let mut e = Evidence::default();
    e.obs.traces.insert(
        "numerics.on_forward".into(),
        (0..8).map(|_| ev("ckpt")).collect(),
    );
    let ex = exercise();
    let spec = TraceSpec {
        stream: "numerics.on_forward".into(),
        count: Some("ckpt".into()),
        expect: None,
        equals: Some(grade::spec::Operand::Ref("$model.n_blocks".into())),
        min: None,
        max: None,
    };
    let out = evaluate(
        &Check::Trace(spec),
        &Env {
            evidence: &e,
            exercise: &ex,
        },
    );
    assert!(!out.pass);
    assert_eq!(out.measured, "8");
    assert_eq!(out.bound, "ckpt = 4");
}

// ------------------------------------------------------------------------ answer, reproducible

#[test]
fn answer_accepts_any_listed_value() {
    let ev = with_metrics(&[("q.a", json!("tokens_per_s"))]);
    assert!(run("{answer: {metric: q.a, expected: [tokens_per_s]}}", &ev).pass);
    assert!(!run("{answer: {metric: q.a, expected: [steps_per_s]}}", &ev).pass);
}

#[test]
fn reproducible_compares_metrics_and_ratios_across_runs() {
    let ev = with_metrics(&[
        ("c.run1.on.b", json!(100)),
        ("c.run2.on.b", json!(100)),
        ("c.run1.on.s", json!(2.0)),
        ("c.run1.off.s", json!(1.0)),
        ("c.run2.on.s", json!(2.8)),
        ("c.run2.off.s", json!(1.0)),
    ]);
    let yaml = |tol: f64| {
        format!(
            "{{reproducible: {{runs: [c.run1, c.run2], quantities: [{{metric: on.b, max_rel_diff: 0}}, {{ratio: [on.s, off.s], max_rel_diff: {tol}}}]}}}}"
        )
    };
    assert!(run(&yaml(0.5), &ev).pass);
    let out = run(&yaml(0.3), &ev);
    assert!(!out.pass);
    assert!(
        out.why.en.contains("on.s/off.s: 2 vs 2.8 (40% apart)"),
        "{}",
        out.why.en
    );
}

#[test]
fn all_needs_every_part() {
    let ev = with_metrics(&[("p.a", json!(1)), ("p.b", json!(2))]);
    assert!(
        run(
            "{all: [{range: {metric: p.a, max: 1}}, {range: {metric: p.b, max: 2}}]}",
            &ev
        )
        .pass
    );
    let out = run(
        "{all: [{range: {metric: p.a, max: 1}}, {range: {metric: p.b, max: 1}}]}",
        &ev,
    );
    assert!(!out.pass);
    assert!(out.why.en.starts_with("p.b = 2 is not"), "{}", out.why.en);
}

// --------------------------------------------------------------------- the rubric, recorded runs

fn grade_recorded(obs: Observations) -> BTreeMap<String, Status> {
    let ex = exercise();
    let r = rubric(&ex);
    let ev = Evidence {
        obs,
        tensors: BTreeMap::new(),
        run_failure: None,
    };
    checks::grade(
        &r,
        &Env {
            evidence: &ev,
            exercise: &ex,
        },
        Device::Cpu,
    )
    .into_iter()
    .map(|v| (v.id, v.status))
    .collect()
}

/// Criteria graded from metrics and traces alone (the recorded files hold no tensors).
const NON_TENSOR: [&str; 11] = [
    "activation_bytes_halved",
    "step_time_cost",
    "one_checkpoint_per_block",
    "no_checkpoint_in_inference",
    "compare_same_inputs",
    "compare_warmup",
    "compare_sync",
    "compare_repeats",
    "compare_bytes_agree",
    "compare_time_agrees",
    "instruments_intact",
];

#[test]
fn recorded_solution_run_passes_every_non_tensor_criterion() {
    let v = grade_recorded(recorded("solution"));
    for id in NON_TENSOR {
        assert_eq!(v[id], Status::Pass, "{id}");
    }
    assert_eq!(v["compare_reproducible"], Status::Pass);
    assert_eq!(v["peak_memory_drops"], Status::Skip);
}

#[test]
fn recorded_solution_with_a_patched_clock_fails_integrity() {
    let mut obs = recorded("solution");
    obs.metrics
        .insert("integrity.tampered".into(), json!("time.perf_counter"));
    assert_eq!(grade_recorded(obs)["instruments_intact"], Status::Fail);
}

#[test]
fn recorded_solution_with_a_second_checkpoint_per_block_fails_granularity() {
    let mut obs = recorded("solution");
    let t = obs.traces.get_mut("numerics.on_forward").unwrap();
    let doubled: Vec<Event> = t.iter().flat_map(|e| [e.clone(), e.clone()]).collect();
    *t = doubled;
    assert_eq!(
        grade_recorded(obs)["one_checkpoint_per_block"],
        Status::Fail
    );
}

#[test]
fn recorded_starter_run_fails_everything_it_touches() {
    let v = grade_recorded(recorded("starter"));
    for (id, status) in &v {
        let expect = match id.as_str() {
            "peak_memory_drops" => Status::Skip,
            "instruments_intact" => Status::Pass,
            _ => Status::Fail,
        };
        assert_eq!(*status, expect, "{id}");
    }
}

#[test]
fn a_failed_run_fails_every_criterion_with_its_reason() {
    let ex = exercise();
    let r = rubric(&ex);
    let ev = Evidence {
        obs: recorded("solution"),
        tensors: BTreeMap::new(),
        run_failure: Some(Text::same("the submission timed out")),
    };
    for v in checks::grade(
        &r,
        &Env {
            evidence: &ev,
            exercise: &ex,
        },
        Device::Cpu,
    ) {
        if v.id == "peak_memory_drops" {
            continue;
        }
        assert_eq!(v.status, Status::Fail, "{}", v.id);
        assert_eq!(v.why.en, "the submission timed out");
    }
}

#[test]
fn cuda_only_criteria_apply_on_cuda() {
    let ex = exercise();
    let r = rubric(&ex);
    let mut obs = recorded("solution");
    obs.metrics
        .insert("memory.off.peak_bytes".into(), json!(1000));
    obs.metrics
        .insert("memory.on.peak_bytes".into(), json!(400));
    let ev = Evidence {
        obs,
        tensors: BTreeMap::new(),
        run_failure: None,
    };
    let v = checks::grade(
        &r,
        &Env {
            evidence: &ev,
            exercise: &ex,
        },
        Device::Cuda,
    );
    let peak = v.iter().find(|v| v.id == "peak_memory_drops").unwrap();
    assert_eq!(peak.status, Status::Pass);
}

#[test]
fn number_formatting_is_readable() {
    assert_eq!(checks::fmt_num(11334148.0), "11,334,148");
    assert_eq!(checks::fmt_num(0.5), "0.5");
    assert_eq!(checks::fmt_num(0.116812), "0.1168");
    assert_eq!(checks::fmt_num(1.5e-9), "1.500e-9");
    assert_eq!(checks::fmt_bounds(Some(0.5), Some(2.0)), "∈ [0.5, 2]");
}
