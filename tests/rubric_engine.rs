//! Pure-Rust tests of the rubric engine: each check kind on hand-made and recorded observations.
//! Fast and exact: no Python, no timing.
mod support;
use grade::checks::{self, close, evaluate, Env, Status};
use grade::i18n::Text;
use grade::observations::{Event, Evidence, Observations, ProbeRecord};
use grade::runner::Device;
use grade::spec::rubric::{Check, TraceSpec};
use serde_json::json;
use std::collections::BTreeMap;
use support::lesson::{check, Lesson};
use tch::{Kind, Tensor};

const L: Lesson = Lesson("04-checkpoint");

fn with_metrics(pairs: &[(&str, serde_json::Value)]) -> Evidence {
    let mut ev = Evidence::default();
    for (k, v) in pairs {
        ev.obs.metrics.insert(k.to_string(), v.clone());
    }
    ev
}

fn run(check_yaml: &str, ev: &Evidence) -> checks::Outcome {
    let ex = L.exercise();
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
    assert_eq!(out.measured.en, "0.3 (30 / 100)");
}

#[test]
fn ratio_with_zero_denominator_fails_with_reason() {
    let ev = with_metrics(&[("p.a", json!(1)), ("p.b", json!(0))]);
    let out = run("{ratio: {num: p.a, den: p.b, max: 1}}", &ev);
    assert!(!out.pass);
    assert!(out.why.en.contains("is 0"));
    // with `when_zero`, the reason is the rubric's words for "nothing was measured"
    let out = run(
        "{ratio: {num: p.a, den: p.b, max: 1, when_zero: {zh: 没有测量, en: nothing measured}}}",
        &ev,
    );
    assert!(!out.pass);
    assert_eq!(
        (out.why.zh.as_str(), out.why.en.as_str()),
        ("没有测量", "nothing measured")
    );
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
    assert_eq!(out.measured.en, "—");
}

// ---------------------------------------------------------------------------------------- trace
// Traces as the driver writes them (see src/measurement.rs): `step`/`step_done` per training step,
// `fwd_end` naming its variant, `timer` reads with the value returned, `sync`.

/// Builds a compare() trace; the virtual clock advances by each step's cost.
#[derive(Default)]
struct T {
    events: Vec<Event>,
    now: f64,
    next: i64,
    /// Stamp each step's start and end on the grader's cost clock (`c`), as lesson 04's observer.
    cost_stamps: bool,
}

impl T {
    fn step_on(&mut self, variant: &str, cost: f64, idx: &str, targets: &str) -> &mut Self {
        let id = self.next;
        self.next += 1;
        let mut start = Event::new("step")
            .with("id", id)
            .with("inputs", json!({"idx": idx, "targets": targets}));
        if self.cost_stamps {
            start = start.with("c", self.now);
        }
        self.events.push(start);
        self.events.push(
            Event::new("fwd_end")
                .with("id", id)
                .with("variant", variant),
        );
        self.now += cost;
        let mut done = Event::new("step_done").with("id", id);
        if self.cost_stamps {
            done = done.with("c", self.now);
        }
        self.events.push(done);
        self
    }
    fn step(&mut self, variant: &str, cost: f64) -> &mut Self {
        self.step_on(variant, cost, "batch", "batch")
    }
    /// A forward with no backward (measuring bytes): not a step.
    fn forward_only(&mut self, variant: &str) -> &mut Self {
        let id = self.next;
        self.next += 1;
        self.events.push(
            Event::new("step")
                .with("id", id)
                .with("inputs", json!({"idx": "batch", "targets": "batch"})),
        );
        self.events.push(
            Event::new("fwd_end")
                .with("id", id)
                .with("variant", variant),
        );
        self
    }
    fn sync(&mut self) -> &mut Self {
        self.events.push(Event::new("sync"));
        self
    }
    fn read(&mut self) -> &mut Self {
        self.events.push(
            Event::new("timer")
                .with("clock", "perf_counter")
                .with("v", self.now),
        );
        self
    }
    fn read_ns(&mut self) -> &mut Self {
        let ns = (self.now * 1e9).round() as i64;
        self.events.push(
            Event::new("timer")
                .with("clock", "perf_counter")
                .with("v", ns as f64 / 1e9)
                .with("ns", ns),
        );
        self
    }
    /// `sync(); t0 = clock(); step(); sync(); t1 = clock()` for each cost.
    fn timed(&mut self, variant: &str, costs: &[f64]) -> &mut Self {
        for &c in costs {
            self.sync().read().step(variant, c).sync().read();
        }
        self
    }
}

const OFF: [f64; 5] = [0.010, 0.011, 0.030, 0.009, 0.012]; // median 0.011, mean 0.0144
const ON: [f64; 5] = [0.020, 0.021, 0.019, 0.050, 0.022]; // median 0.021

/// The contract's pattern: per variant 2 warm-up steps, then 5 timed steps.
fn good() -> T {
    let mut t = T::default();
    for (v, costs) in [("off", OFF), ("on", ON)] {
        t.step(v, 0.5).step(v, 0.5).timed(v, &costs).forward_only(v);
    }
    t
}

fn trace_evidence(runs: &[(&str, &T)], reported: &[(&str, f64)]) -> Evidence {
    let mut e = Evidence::default();
    for (name, t) in runs {
        e.obs.traces.insert(name.to_string(), t.events.clone());
        for (v, x) in reported {
            e.obs.metrics.insert(format!("{name}.{v}.step_s"), json!(x));
        }
    }
    e
}

fn predicate_on(
    p: &str,
    extra: &str,
    runs: &[(&str, &T)],
    reported: &[(&str, f64)],
) -> checks::Outcome {
    let names: Vec<&str> = runs.iter().map(|(n, _)| *n).collect();
    run(
        &format!(
            "{{trace: {{stream: [{}], expect: {p}, variants: [off, on], report: step_s{extra}}}}}",
            names.join(", ")
        ),
        &trace_evidence(runs, reported),
    )
}

fn predicate(p: &str, t: &T) -> checks::Outcome {
    predicate_on(
        p,
        ", min: 2",
        &[("compare.run1", t)],
        &[("off", 0.011), ("on", 0.021)],
    )
}

const PREDICATES: [&str; 5] = ["same_inputs", "warmup", "synced", "repeats", "median"];

#[test]
fn the_contracts_pattern_passes_every_predicate() {
    for p in PREDICATES {
        let out = predicate(p, &good());
        assert!(out.pass, "{p}: {} ({})", out.why.en, out.measured.en);
    }
    assert_eq!(predicate("warmup", &good()).measured.en, "off: 2, on: 2");
    assert_eq!(predicate("repeats", &good()).measured.en, "off: 5, on: 5");
}

#[test]
fn a_forward_without_backward_is_not_a_warmup_step() {
    let mut t = T::default();
    for (v, costs) in [("off", OFF), ("on", ON)] {
        t.forward_only(v).timed(v, &costs); // bytes measured first, no warm-up loop
    }
    let out = predicate("warmup", &t);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "off: 0, on: 0");
}

#[test]
fn an_extra_clock_read_shifts_nothing() {
    let mut t = T::default();
    t.read(); // a log line at the start of compare()
    for (v, costs) in [("off", OFF), ("on", ON)] {
        t.step(v, 0.5)
            .step(v, 0.5)
            .timed(v, &costs)
            .read()
            .forward_only(v);
    }
    for p in PREDICATES {
        let out = predicate(p, &t);
        assert!(out.pass, "{p}: {} ({})", out.why.en, out.measured.en);
    }
    assert_eq!(predicate("repeats", &t).measured.en, "off: 5, on: 5");
}

/// `clock: profiler`: the windows the contract defines (lesson 02's profiler recordings,
/// `profiler#N`) are the timed ones; a perf_counter pair logging how long the warm-up took does not
/// turn the warm-up calls into timed calls (issue 18). Without any read of that clock, the
/// submission's own windows count.
#[test]
fn a_contract_clock_ignores_a_logged_warmup() {
    let mark = |t: &mut T, n: usize| {
        t.events.push(
            Event::new("timer")
                .with("clock", format!("profiler#{n}"))
                .with("v", t.now),
        );
    };
    let mut t = T::default();
    for (n, v) in [(1, "off"), (2, "on")] {
        t.read().step(v, 0.5).step(v, 0.5).read(); // how long the warm-up took, for a log
        mark(&mut t, n);
        t.step(v, 0.01).step(v, 0.01).step(v, 0.01);
        mark(&mut t, n);
    }
    let check = |extra: &str| {
        run(
            &format!(
                "{{trace: {{stream: verify, expect: warmup, min: 1, variants: [off, on]{extra}}}}}"
            ),
            &trace_evidence(&[("verify", &t)], &[]),
        )
    };
    let plain = check("");
    assert!(!plain.pass, "the logged pair is taken for a timed window");
    let defined = check(", clock: profiler");
    assert!(defined.pass, "{}", defined.why.en);
    assert_eq!(defined.measured.en, "off: 2, on: 2");
    // no profiler window at all: the submission's own timing is judged
    let mut bare = T::default();
    for v in ["off", "on"] {
        bare.step(v, 0.5)
            .step(v, 0.5)
            .sync()
            .read()
            .step(v, 0.01)
            .sync()
            .read();
    }
    let out = run(
        "{trace: {stream: verify, expect: warmup, min: 1, variants: [off, on], clock: profiler}}",
        &trace_evidence(&[("verify", &bare)], &[]),
    );
    assert!(out.pass, "{}", out.why.en);
}

#[test]
fn chained_timestamps_count_every_repeat() {
    let mut t = T::default();
    for (v, costs) in [("off", OFF), ("on", ON)] {
        t.step(v, 0.5).step(v, 0.5).sync().read();
        for c in costs {
            t.step(v, c).sync().read();
        }
    }
    for p in PREDICATES {
        let out = predicate(p, &t);
        assert!(out.pass, "{p}: {} ({})", out.why.en, out.measured.en);
    }
    assert_eq!(predicate("repeats", &t).measured.en, "off: 5, on: 5");
}

#[test]
fn interleaved_variants_and_ns_clocks_are_read_exactly() {
    let mut t = T::default();
    for v in ["off", "on"] {
        t.step(v, 0.5).step(v, 0.5);
    }
    for k in 0..5 {
        for (v, costs) in [("off", OFF), ("on", ON)] {
            t.sync().read_ns().step(v, costs[k]).sync().read_ns();
        }
    }
    for p in PREDICATES {
        let out = predicate(p, &t);
        assert!(out.pass, "{p}: {} ({})", out.why.en, out.measured.en);
    }
}

/// Issue 39: a window is any two reads of one clock that enclose the steps, identified by the
/// number the submission reports: `sync(); t0 = clock(); (step(); log(clock())) × 3; sync();
/// t1 = clock()` reporting `(t1 - t0) / 3` has reads inside every window, and is right.
#[test]
fn reads_inside_a_window_break_nothing() {
    let mut t = T::default();
    t.step("x", 0.5).step("x", 0.5);
    let mut samples = Vec::new();
    for k in 0..4 {
        t.sync().read();
        let t0 = t.now;
        for i in 0..3 {
            t.step("x", 0.01 * (1 + k + i) as f64).read(); // a progress stamp, no sync
        }
        t.sync().read();
        samples.push((t.now - t0) / 3.0);
    }
    let mut ev = trace_evidence(&[("r", &t)], &[]);
    ev.obs.metrics.insert("r.samples".into(), json!(samples));
    for (p, extra) in [
        ("samples", ""),
        ("synced", ""),
        ("warmup", ", min: 2"),
        ("repeats", ", min: 4"),
    ] {
        let out = run(
            &format!("{{trace: {{stream: r, expect: {p}, per: 3, samples: samples{extra}}}}}"),
            &ev,
        );
        assert!(out.pass, "{p}: {} ({})", out.why.en, out.measured.en);
    }
    // a number no pair of reads gives is still caught
    ev.obs.metrics.insert(
        "r.samples".into(),
        json!([samples[0] / 2.0, samples[1], samples[2], samples[3]]),
    );
    let out = run(
        "{trace: {stream: r, expect: samples, per: 3, samples: samples}}",
        &ev,
    );
    assert!(!out.pass);
}

/// Red team 6's `clockspin_pad`: thousands of clock reads after each window's last step, before
/// its closing sync and read. The windows are still found from the reads at the ends of each gap
/// (where a window opens or closes): pairing every read of a gap with every read of the next
/// took minutes per grading (`GAP_ENDS` in src/measurement.rs).
#[test]
fn thousands_of_reads_in_a_gap_still_find_the_windows_quickly() {
    let mut t = T::default();
    t.step("x", 0.5).step("x", 0.5);
    let mut samples = Vec::new();
    for k in 0..6 {
        t.sync().read();
        let t0 = t.now;
        t.step("x", 0.01 * (1 + k) as f64);
        for _ in 0..3000 {
            t.read(); // the padding
        }
        t.sync().read();
        samples.push(t.now - t0);
    }
    let mut ev = trace_evidence(&[("r", &t)], &[]);
    ev.obs.metrics.insert("r.samples".into(), json!(samples));
    let out = run(
        "{trace: {stream: r, expect: samples, per: 1, samples: samples}}",
        &ev,
    );
    assert!(out.pass, "{} ({})", out.why.en, out.measured.en);
}

/// Issue 39: `samples:` may name several metrics read in order as one list (lesson 05's `first_s`
/// then `steady_s`): only the windows those numbers come from are held to the sync rule, so a log
/// line's stamps of another clock (the first one after work the grader queued, unsynced) are no
/// window; without `samples:` every window of every clock is held.
#[test]
fn a_read_no_returned_number_comes_from_is_no_window() {
    let mut t = T::default();
    t.events.push(Event::new("work")); // the input still being copied
    let log = |t: &mut T| {
        t.events.push(
            Event::new("timer")
                .with("clock", "time")
                .with("v", 1.7e9 + t.now),
        );
    };
    let mut took = Vec::new();
    for k in 0..4 {
        log(&mut t);
        t.sync().read();
        let t0 = t.now;
        t.step("", if k == 0 { 2.0 } else { 0.01 }).sync().read();
        took.push(t.now - t0);
    }
    log(&mut t);
    let mut ev = trace_evidence(&[("sim", &t)], &[]);
    ev.obs
        .metrics
        .insert("sim.first_s".into(), json!([took[0]]));
    ev.obs
        .metrics
        .insert("sim.steady_s".into(), json!(took[1..]));
    let held = run(
        "{trace: {stream: sim, expect: synced, samples: [first_s, steady_s]}}",
        &ev,
    );
    assert!(held.pass, "{}", held.why.en);
    assert_eq!(held.measured.en, "4/4 timed windows synced");
    let all = run("{trace: {stream: sim, expect: synced}}", &ev);
    assert!(
        !all.pass,
        "the log stamps' own windows are held without samples:"
    );
    let exact = run(
        "{trace: {stream: sim, expect: samples, samples: [first_s, steady_s]}}",
        &ev,
    );
    assert!(exact.pass, "{}", exact.why.en);
}

#[test]
fn a_window_of_two_steps_is_not_a_repeat_of_one() {
    let mut t = T::default();
    for v in ["off", "on"] {
        t.step(v, 0.5).step(v, 0.5);
        for _ in 0..5 {
            t.sync().read().step(v, 0.01).step(v, 0.01).sync().read();
        }
        t.forward_only(v); // bytes: without it, on's warm-up between two reads would look timed
    }
    let out = predicate("repeats", &t);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "off: 0, on: 0");
    assert!(
        out.why.en.contains("one timed window held 2 steps"),
        "{}",
        out.why.en
    );
    // where the contract says two steps per repeat, the same trace is right
    let per2 = predicate_on("repeats", ", min: 5, per: 2", &[("compare.run1", &t)], &[]);
    assert!(per2.pass, "{}", per2.why.en);
    // and warm-up/sync are still judged on the block timings
    assert!(predicate("warmup", &t).pass);
    assert!(predicate("synced", &t).pass);
}

#[test]
fn the_reported_number_must_be_the_median_of_the_windows() {
    let t = good();
    let mean = OFF.iter().sum::<f64>() / 5.0;
    for (reported, says) in [
        (mean, "(that is their mean)"),
        (0.009, "(that is their minimum)"),
        (0.0115, "median of its 5 timed windows is 0.011 s"),
    ] {
        let out = predicate_on(
            "median",
            "",
            &[("compare.run1", &t)],
            &[("off", reported), ("on", 0.021)],
        );
        assert!(!out.pass, "{reported}");
        assert!(out.why.en.contains(says), "{}", out.why.en);
    }
}

/// Windows kept only around some steps of the timing: the slow "off" steps timed, the fast ones
/// run in the middle of it with no window (their reads skipped, or glued to the next step), make
/// the median of the windows that were kept a number chosen after the fact (red team 22).
/// `torch.utils.benchmark.Timer.timeit(number=1)` runs two untimed steps before each timed
/// one: a pattern fixed before anything ran, which passes.
#[test]
fn windows_chosen_after_the_fact_are_no_median_but_a_fixed_pattern_is() {
    // each number: the steps between two reads (1: a window; 2: a step glued to the next)
    let with = |pairs: &[usize]| {
        let mut t = T::default();
        for v in ["off", "on"] {
            t.step(v, 0.5).step(v, 0.5);
            let mut k = 0;
            for &n in pairs {
                t.sync().read();
                for _ in 0..n {
                    t.step(v, if v == "off" { OFF[k % 5] } else { ON[k % 5] });
                    k += 1;
                }
                t.sync().read();
            }
        }
        t
    };
    let reported = |t: &T, off: f64, on: f64| {
        predicate_on(
            "median",
            "",
            &[("compare.run1", t)],
            &[("off", off), ("on", on)],
        )
    };
    // off: 0.011 and 0.030 glued into one pair of reads, 0.009 and 0.012 too; the rest reported
    let chosen = with(&[1, 2, 2, 1, 1, 1]);
    let out = reported(&chosen, 0.0105, 0.021);
    assert!(!out.pass);
    assert!(out.why.en.contains("4 off forward(s)"), "{}", out.why.en);
    assert!(
        out.why.en.contains("follows no fixed pattern"),
        "{}",
        out.why.en
    );
    // one pair glued in the middle is no pattern either
    let out = reported(&with(&[1, 1, 2, 1, 1]), 0.011, 0.021);
    assert!(out.why.en.contains("2 off forward(s)"), "{}", out.why.en);
    // a period holding two timed steps: its first instance can be picked, then repeated blindly
    let out = reported(&with(&[1, 1, 2, 1, 1, 2, 1, 1, 2]), 0.011, 0.021);
    assert!(
        out.why.en.contains("follows no fixed pattern"),
        "{}",
        out.why.en
    );
    // two untimed steps before every timed one (a timer's own warm-up): steps 3, 6, 9 timed
    let fixed = with(&[2, 1, 2, 1, 2, 1]);
    let out = reported(&fixed, 0.010, 0.020);
    assert!(out.pass, "{}", out.why.en);
}

/// A fixed pattern whose timed steps alone are made slower (state changed around the windows:
/// caches swept, a profiler on; red team 24) times something else than the step: each timed
/// step is held to the untimed one run right before it, on the grader's cost clock.
#[test]
fn a_fixed_pattern_whose_timed_steps_alone_cost_more_is_no_median() {
    let with = |dearer: f64| {
        let mut t = T {
            cost_stamps: true,
            ..T::default()
        };
        for (v, c) in [("off", 0.010), ("on", 0.015)] {
            t.step(v, c).step(v, c);
            for _ in 0..5 {
                // a timer's own warm-up: two steps between one pair of reads, then one timed
                t.sync().read().step(v, c).step(v, c).sync().read();
                t.sync().read().step(v, c * dearer).sync().read();
            }
        }
        t
    };
    let judged = |t: &T, off: f64, on: f64| {
        predicate_on(
            "median",
            "",
            &[("compare.run1", t)],
            &[("off", off), ("on", on)],
        )
    };
    let out = judged(&with(1.0), 0.010, 0.015);
    assert!(out.pass, "{}", out.why.en);
    let out = judged(&with(2.0), 0.020, 0.030);
    assert!(!out.pass);
    assert!(
        out.why.en.contains("each timed step took 2×"),
        "{}",
        out.why.en
    );
}

/// The steps a call timed cost, on over off, what the grader's own steps do: "off" steps made
/// four times dearer inside the step (extra work tied into the loss, anomaly detection: red teams
/// 6, 21, 22) are no padding around the step, and bend that ratio.
#[test]
fn steps_made_dearer_inside_one_variant_bend_the_ratio_of_its_steps() {
    let call = |off: f64| {
        let mut t = T {
            cost_stamps: true,
            ..T::default()
        };
        for (v, c) in [("off", off), ("on", 0.015)] {
            t.step(v, c).step(v, c).timed(v, &[c; 5]);
        }
        t
    };
    let check = "{step_ratio: {streams: [compare.run1], num: 'on', den: 'off', \
                 against: timing.on_over_off, min: 0.5, max: 2.0, each_min: 0.33, each_max: 3.0}}";
    let judged = |t: &T| {
        let mut e = trace_evidence(&[("compare.run1", t)], &[]);
        e.obs
            .metrics
            .insert("timing.on_over_off".into(), json!(1.5));
        run(check, &e)
    };
    let honest = judged(&call(0.010));
    assert!(honest.pass, "{}", honest.why.en);
    let dearer = judged(&call(0.040));
    assert!(!dearer.pass);
    assert!(
        dearer.why.en.contains("is 0.25× what it is"),
        "{}",
        dearer.why.en
    );
    // two calls: one bent by load (0.45) beside one near the grader's ratio passes; a call
    // outside the wide band fails whatever the other did
    let two = "{step_ratio: {streams: [compare.run1, compare.run2], num: 'on', den: 'off', \
               against: timing.on_over_off, min: 0.5, max: 2.0, each_min: 0.33, each_max: 3.0}}";
    let both = |a: &T, b: &T| {
        let mut e = trace_evidence(&[("compare.run1", a), ("compare.run2", b)], &[]);
        e.obs
            .metrics
            .insert("timing.on_over_off".into(), json!(1.5));
        run(two, &e)
    };
    let out = both(&call(0.010), &call(0.022));
    assert!(out.pass, "{}", out.why.en);
    let out = both(&call(0.010), &call(0.050));
    assert!(!out.pass);
    assert!(out.why.en.starts_with("compare.run2:"), "{}", out.why.en);
}

#[test]
fn an_even_count_accepts_any_value_between_the_middle_windows() {
    let mut t = T::default();
    for v in ["off", "on"] {
        t.step(v, 0.5)
            .step(v, 0.5)
            .timed(v, &[0.010, 0.012, 0.020, 0.030]);
    }
    for x in [0.012, 0.016, 0.020] {
        let out = predicate_on(
            "median",
            "",
            &[("compare.run1", &t)],
            &[("off", x), ("on", x)],
        );
        assert!(out.pass, "{x}: {}", out.why.en);
    }
    let out = predicate_on(
        "median",
        "",
        &[("compare.run1", &t)],
        &[("off", 0.021), ("on", 0.016)],
    );
    assert!(!out.pass);
}

#[test]
fn other_targets_are_caught_not_only_other_idx() {
    let mut t = T::default();
    t.step("off", 0.5).step("off", 0.5).timed("off", &OFF);
    t.step_on("on", 0.5, "batch", "other")
        .step_on("on", 0.5, "batch", "other");
    let out = predicate("same_inputs", &t);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "7/9 steps on the same input");
    assert!(out.why.en.contains("targets ×2"), "{}", out.why.en);
}

/// Lesson 02: the submission picks the input, so each step sends its input's fingerprint (`fp`)
/// as it begins and the label is given here, against the first step's: no reference input is
/// kept in the submission's process.
#[test]
fn fingerprints_are_labelled_against_the_first_step() {
    let steps = |fps: &[&str]| {
        let mut t = T::default();
        for (k, fp) in fps.iter().enumerate() {
            let id = k as i64;
            t.events.push(
                Event::new("step")
                    .with("id", id)
                    .with("variant", if k % 2 == 0 { "baseline" } else { "candidate" })
                    .with("fp", json!({ "x": fp })),
            );
            t.events.push(Event::new("step_done").with("id", id));
        }
        t
    };
    let out = predicate("same_inputs", &steps(&["a", "a", "a", "a"]));
    assert!(out.pass, "{}", out.why.en);
    assert_eq!(out.why.en, "every step ran on the same input (x)");
    let out = predicate("same_inputs", &steps(&["a", "b", "a", "c"]));
    assert!(!out.pass);
    assert_eq!(out.measured.en, "2/4 steps on the same input");
    assert!(out.why.en.contains("(x ×2)"), "{}", out.why.en);
}

/// Issue 38, round 4: the fingerprint again as each step ends (`step_done {fp}`): an input that
/// was the first step's as the step began but not as it ended (rewritten while the step computed
/// on it) is not the same input.
#[test]
fn an_input_changed_inside_the_step_is_another_input() {
    let mut t = T::default();
    for (k, end) in ["a", "a", "z", "a"].iter().enumerate() {
        let id = k as i64;
        t.events.push(
            Event::new("step")
                .with("id", id)
                .with("variant", if k % 2 == 0 { "baseline" } else { "candidate" })
                .with("fp", json!({ "x": "a" })),
        );
        t.events.push(
            Event::new("step_done")
                .with("id", id)
                .with("fp", json!({ "x": end })),
        );
    }
    let out = predicate("same_inputs", &t);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "3/4 steps on the same input");
}

#[test]
fn a_missing_sync_before_either_read_is_caught() {
    let mut t = good();
    // drop the sync() before the closing read of the first timed off step
    let pos = t
        .events
        .iter()
        .position(|e| e.e == "step_done" && e.fields["id"] == 2)
        .unwrap();
    t.events.remove(pos + 1);
    let out = predicate("synced", &t);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "9/10 timed windows synced");
    assert!(
        out.why.en.contains("0 opening, 1 closing"),
        "{}",
        out.why.en
    );
    // no sync at all: every window is flagged, and the other predicates still read the timing
    let mut t = good();
    t.events.retain(|e| e.e != "sync");
    assert_eq!(
        predicate("synced", &t).measured.en,
        "0/10 timed windows synced"
    );
    assert!(predicate("repeats", &t).pass);
    assert!(predicate("warmup", &t).pass);
}

/// Device work the grader queued before handing over (a `work` event: no step, no call) makes a
/// first clock read without `sync()` an unsynced one; with nothing queued the same read is fine.
#[test]
fn queued_device_work_needs_a_sync_before_the_first_read() {
    let trace = |queued: bool| {
        let mut t = T::default();
        if queued {
            t.events.push(Event::new("work"));
        }
        t.read().step("off", OFF[0]).sync().read(); // no sync() before the first read
        t.timed("off", &OFF[1..]).timed("on", &ON);
        t
    };
    let out = predicate("synced", &trace(false));
    assert!(out.pass, "{}", out.why.en);
    assert_eq!(out.measured.en, "10/10 timed windows synced");
    let out = predicate("synced", &trace(true));
    assert!(!out.pass);
    assert_eq!(out.measured.en, "9/10 timed windows synced");
    assert!(
        out.why.en.contains("1 opening, 0 closing"),
        "{}",
        out.why.en
    );
}

#[test]
fn every_run_is_judged_and_named() {
    let good = good();
    let cached = T::default(); // the second call returned a cached result: no steps at all
    for p in PREDICATES {
        let out = predicate_on(
            p,
            ", min: 2",
            &[("compare.run1", &good), ("compare.run2", &cached)],
            &[("off", 0.011), ("on", 0.021)],
        );
        assert!(!out.pass, "{p}");
        assert!(
            out.why.en.starts_with("run2: no whole training step"),
            "{p}: {}",
            out.why.en
        );
    }
}

#[test]
fn streams_are_named_by_what_sets_them_apart_and_alike_ones_said_once() {
    let good = good();
    // runs of several rounds share their last segment: each is named past the common prefix
    let out = predicate_on(
        "warmup",
        ", min: 2",
        &[("shapes.r0.base", &good), ("shapes.r1.base", &T::default())],
        &[("off", 0.011), ("on", 0.021)],
    );
    assert!(!out.pass);
    assert!(out.why.en.starts_with("r1.base: "), "{}", out.why.en);
    // every run measured the same: said once, with the count
    let out = predicate_on(
        "synced",
        "",
        &[
            ("shapes.r0.base", &good),
            ("shapes.r1.base", &good),
            ("shapes.r2.base", &good),
        ],
        &[("off", 0.011), ("on", 0.021)],
    );
    assert!(out.pass, "{}", out.why.en);
    assert!(
        out.measured.en.starts_with("each of 3 calls: "),
        "{}",
        out.measured.en
    );
}

#[test]
fn a_failed_probe_blocks_instead_of_explaining_twice() {
    let mut e = trace_evidence(&[("compare.run1", &T::default())], &[]);
    e.obs.probes.insert(
        "compare".into(),
        ProbeRecord {
            ok: false,
            error: Some("NotImplementedError: TODO".into()),
            seconds: None,
        },
    );
    let out = run("{trace: {stream: compare.run1, expect: warmup}}", &e);
    assert!(!out.pass);
    assert_eq!(out.blocked_by.as_deref(), Some("compare"));
    assert!(out.why.en.contains("NotImplementedError: TODO"));
}

#[test]
fn cuda_event_windows_use_elapsed_time_and_need_no_host_sync() {
    let mut t = T::default();
    let mut id = 0;
    for (v, costs) in [("off", OFF), ("on", ON)] {
        t.step(v, 0.5).step(v, 0.5);
        for c in costs {
            t.events.push(
                Event::new("timer")
                    .with("clock", "cuda_event")
                    .with("id", id),
            );
            t.step(v, c);
            t.events.push(
                Event::new("timer")
                    .with("clock", "cuda_event")
                    .with("id", id + 1),
            );
            t.events.push(
                Event::new("elapsed")
                    .with("a", id)
                    .with("b", id + 1)
                    .with("v", c),
            );
            id += 2;
        }
    }
    for p in PREDICATES {
        let out = predicate(p, &t);
        assert!(out.pass, "{p}: {} ({})", out.why.en, out.measured.en);
    }
}

fn forward(probe: &str, checkpointing: bool, grad: bool, ckpt: i64) -> Event {
    Event::new("forward")
        .with("probe", probe)
        .with("checkpointing", checkpointing)
        .with("flag_from", "grader")
        .with("grad", grad)
        .with("ckpt", ckpt)
}

#[test]
fn each_holds_a_field_of_every_selected_event() {
    let mut e = Evidence::default();
    e.obs.traces.insert(
        "forwards.numerics".into(),
        vec![
            forward("numerics", true, true, 4),
            forward("numerics", false, true, 0),
        ],
    );
    e.obs.traces.insert(
        "forwards.no_input_grad".into(),
        vec![forward("no_input_grad", true, true, 0)],
    );
    e.obs.traces.insert(
        "forwards.inference".into(),
        vec![forward("inference", true, false, 0)],
    );
    let per_block = "{trace: {stream: [forwards.numerics, forwards.no_input_grad, forwards.inference], each: ckpt, where: {checkpointing: true, grad: true}, equals: $model.n_blocks}}";
    let out = run(per_block, &e);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "2 events: ckpt ∈ {0, 4}");
    assert_eq!(out.bound.en, "each: ckpt = 4");
    assert!(
        out.why.en.contains("1× 0 in forwards.no_input_grad"),
        "{}",
        out.why.en
    );
    let inference = "{trace: {stream: [forwards.numerics, forwards.inference], each: ckpt, where: {grad: false}, equals: 0}}";
    assert!(run(inference, &e).pass);
    // nothing selected is a failure, not a vacuous pass
    let none = "{trace: {stream: forwards.inference, each: ckpt, where: {grad: true}, equals: 0}}";
    assert!(!run(none, &e).pass);
}

#[test]
fn count_compares_with_model_references() {
    let mut e = Evidence::default();
    e.obs
        .traces
        .insert("s".into(), (0..8).map(|_| Event::new("ckpt")).collect());
    let ex = L.exercise();
    let spec: TraceSpec =
        serde_yaml::from_str("{stream: s, count: ckpt, equals: $model.n_blocks}").unwrap();
    let out = evaluate(
        &Check::Trace(spec),
        &Env {
            evidence: &e,
            exercise: &ex,
        },
    );
    assert!(!out.pass);
    assert_eq!(out.measured.en, "8");
    assert_eq!(out.bound.en, "ckpt = 4");
}

#[test]
fn count_compares_with_a_number_the_run_recorded_and_fails_without_it() {
    // lesson 05's calls_exact: fn's `step` events against the count the probe drew and recorded
    let steps = |n: usize| (0..n).map(|_| Event::new("step")).collect::<Vec<_>>();
    let yaml = "{trace: {stream: sim, count: step, equals: $metric.sim.calls_expected}}";
    let mut e = with_metrics(&[("sim.calls_expected", json!(27))]);
    e.obs.traces.insert("sim".into(), steps(27));
    let out = run(yaml, &e);
    assert!(out.pass, "{}", out.why.en);
    assert_eq!(out.bound.en, "step = 27");
    e.obs.traces.insert("sim".into(), steps(28));
    let out = run(yaml, &e);
    assert!(!out.pass);
    assert_eq!(out.why.en, "sim: 28 `step` events, expected = 27");
    // the recorded count missing (its probe failed): a failure naming it, never "no bound"
    let mut e = Evidence::default();
    e.obs.traces.insert("sim".into(), steps(3));
    let out = run(yaml, &e);
    assert!(!out.pass);
    assert!(out.why.en.contains("sim.calls_expected"), "{}", out.why.en);
}

#[test]
fn a_count_can_total_a_field_of_its_events() {
    // lesson 06's generate_d2h_bytes: the bytes of every read-back, as each was sent, in all
    let read = |bytes: serde_json::Value| {
        let mut e = Event::new("readback");
        e.fields.insert("bytes".into(), bytes);
        e
    };
    let yaml = "{trace: {stream: g, count: readback, sum: bytes, max: $metric.g.max}}";
    let mut e = with_metrics(&[("g.max", json!(256))]);
    e.obs.traces.insert(
        "g".into(),
        vec![read(json!(120)), Event::new("sync"), read(json!(8))],
    );
    let out = run(yaml, &e);
    assert!(out.pass, "{}", out.why.en);
    assert_eq!(out.measured.en, "128");
    assert_eq!(out.bound.en, "readback bytes ≤ 256");
    assert_eq!(out.why.en, "g: bytes 128 in all over 2 `readback` events");
    e.obs.traces.get_mut("g").unwrap().push(read(json!(4096)));
    let out = run(yaml, &e);
    assert!(!out.pass);
    assert_eq!(
        out.why.en,
        "g: bytes 4,224 in all over 3 `readback` events, expected ≤ 256"
    );
    // an event without the field is a failure that says so, never a smaller total
    e.obs.traces.insert("g".into(), vec![read(json!("x"))]);
    let out = run(yaml, &e);
    assert!(!out.pass);
    assert!(out.why.en.contains("no numeric `bytes`"), "{}", out.why.en);
}

// ------------------------------------------------------------------------ answer, reproducible

#[test]
fn answer_accepts_any_listed_value() {
    let ev = with_metrics(&[("q.a", json!("tokens_per_s"))]);
    assert!(run("{answer: {metric: q.a, expected: [tokens_per_s]}}", &ev).pass);
    assert!(!run("{answer: {metric: q.a, expected: [steps_per_s]}}", &ev).pass);
}

#[test]
fn answer_same_as_holds_the_answer_to_the_truth_recorded_for_the_run() {
    // lesson 02's verify(): each call's truth is drawn per grading, and recorded beside the answer
    let ev = with_metrics(&[
        ("v.call1.outputs_close", json!(false)),
        ("v.call1.truth.outputs_close", json!(false)),
        ("v.call2.outputs_close", json!(false)),
        ("v.call2.truth.outputs_close", json!(true)),
    ]);
    let yes = run(
        "{answer: {metric: v.call1.outputs_close, same_as: v.call1.truth.outputs_close}}",
        &ev,
    );
    assert!(yes.pass, "{}", yes.why.en);
    let no = run(
        "{answer: {metric: v.call2.outputs_close, same_as: v.call2.truth.outputs_close}}",
        &ev,
    );
    assert!(!no.pass);
    assert!(no.why.en.contains("expected = true"), "{}", no.why.en);
    // no truth recorded: the grader did not say, so nothing is believed
    let none = run(
        "{answer: {metric: v.call1.outputs_close, same_as: v.call3.truth.outputs_close}}",
        &ev,
    );
    assert!(!none.pass);
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

/// Every verdict of lesson 04's rubric on recorded observations (no tensors), on `device`.
fn verdicts_recorded(obs: Observations, device: Device) -> Vec<checks::Verdict> {
    let ex = L.exercise();
    let r = L.rubric(&ex);
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
        device,
    )
}

fn grade_recorded(obs: Observations) -> BTreeMap<String, Status> {
    verdicts_recorded(obs, Device::Cpu)
        .into_iter()
        .map(|v| (v.id, v.status))
        .collect()
}

/// Criteria graded from metrics and traces alone (the recorded files hold no tensors).
const NON_TENSOR: [&str; 13] = [
    "activation_bytes_halved",
    "step_time_cost",
    "one_checkpoint_per_block",
    "no_checkpoint_in_inference",
    "no_checkpoint_when_off",
    "compare_same_inputs",
    "compare_warmup",
    "compare_sync",
    "compare_repeats",
    "compare_median",
    "compare_bytes_agree",
    "compare_time_agrees",
    "instruments_intact",
];

#[test]
fn recorded_solution_run_passes_every_non_tensor_criterion() {
    let v = grade_recorded(L.recorded("solution"));
    for id in NON_TENSOR {
        assert_eq!(v[id], Status::Pass, "{id}");
    }
    assert_eq!(v["compare_reproducible"], Status::Pass);
    assert_eq!(v["peak_memory_drops"], Status::Skip);
}

#[test]
fn recorded_solution_with_a_patched_clock_fails_integrity() {
    let mut obs = L.recorded("solution");
    obs.metrics
        .insert("integrity.tampered".into(), json!("time.perf_counter"));
    assert_eq!(grade_recorded(obs)["instruments_intact"], Status::Fail);
}

#[test]
fn recorded_solution_with_a_second_checkpoint_per_block_fails_granularity() {
    let mut obs = L.recorded("solution");
    for e in obs.traces.get_mut("forwards.numerics").unwrap() {
        if e.fields["checkpointing"] == true {
            e.fields.insert("ckpt".into(), json!(8));
        }
    }
    assert_eq!(
        grade_recorded(obs)["one_checkpoint_per_block"],
        Status::Fail
    );
}

/// Steps fed an input of another shape than the batch handed over (a slice: red team 20's
/// `timed_steps_on_half_batch`) are no timed windows: the repeats and the median have none, and
/// the inputs are not the same; every other criterion of the recorded run still passes.
#[test]
fn recorded_solution_timed_on_a_slice_has_no_windows() {
    let mut obs = L.recorded("solution");
    let mut relabelled = 0;
    for e in obs.traces.get_mut("compare.run1").unwrap() {
        if e.e == "step" {
            if let Some(inputs) = e.fields.get_mut("inputs").and_then(|v| v.as_object_mut()) {
                inputs.insert("idx".into(), json!("shape"));
                relabelled += 1;
            }
        }
    }
    assert!(relabelled > 0);
    let v = grade_recorded(obs);
    for id in NON_TENSOR {
        let want = match id {
            "compare_same_inputs" | "compare_repeats" | "compare_median" => Status::Fail,
            _ => Status::Pass,
        };
        assert_eq!(v[id], want, "{id}");
    }
}

/// `compare.run1` with a second clock (`monotonic`) read inside "on" windows: around every one
/// (`all`), its windows 1 ms longer than the perf_counter ones around the same step; else around
/// the three fastest only, as long as theirs. The reported "on" `step_s` is that clock's median.
fn with_second_clock(all: bool) -> Observations {
    with_second_clock_reporting(all, false)
}

/// `with_second_clock`, reporting (`union`) the median of every "on" window of both clocks
/// together instead: the steps the second clock timed count twice.
fn with_second_clock_reporting(all: bool, union: bool) -> Observations {
    let mut obs = L.recorded("solution");
    let trace = obs.traces.get_mut("compare.run1").unwrap();
    let perf = |e: &Event| e.e == "timer" && e.fields["clock"] == json!("perf_counter");
    let v = |e: &Event| e.fields["v"].as_f64().unwrap();
    // the "on" windows: two consecutive perf_counter reads around one step whose forward was "on"
    let reads: Vec<usize> = (0..trace.len()).filter(|&i| perf(&trace[i])).collect();
    let mut on: Vec<(usize, usize)> = reads
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|&(a, b)| {
            let inner = &trace[a..b];
            inner.iter().filter(|e| e.e == "step_done").count() == 1
                && inner
                    .iter()
                    .any(|e| e.e == "fwd_end" && e.fields["variant"] == json!("on"))
        })
        .collect();
    assert!(on.len() >= 7, "{} on windows", on.len());
    let mut durations: Vec<f64> = if union {
        on.iter()
            .map(|&(a, b)| v(&trace[b]) - v(&trace[a]))
            .collect()
    } else {
        Vec::new()
    };
    if !all {
        on.sort_by(|x, y| {
            (v(&trace[x.1]) - v(&trace[x.0])).total_cmp(&(v(&trace[y.1]) - v(&trace[y.0])))
        });
        on.truncate(3);
    }
    on.sort();
    let extra = if all { 0.001 } else { 0.0 };
    for &(a, b) in on.iter().rev() {
        let (open, close) = (v(&trace[a]), v(&trace[b]) + extra);
        durations.push(close - open);
        let read = |x: f64| {
            let mut e = Event::new("timer");
            e.fields.insert("clock".into(), json!("monotonic"));
            e.fields.insert("v".into(), json!(x));
            e
        };
        trace.insert(b, read(close));
        trace.insert(a + 1, read(open));
    }
    durations.sort_by(f64::total_cmp);
    let n = durations.len();
    let median = (durations[(n - 1) / 2] + durations[n / 2]) / 2.0;
    obs.metrics
        .insert("compare.run1.on.step_s".into(), json!(median));
    obs
}

/// A median of one clock's windows alone is the variant's only when that clock timed every group
/// of steps some window timed (red team 20: a second clock read around the fastest "on" steps
/// only, its median reported): such a reading over every window passes, over the three fastest
/// fails.
#[test]
fn a_clock_that_timed_only_some_steps_gives_no_median() {
    assert_eq!(
        grade_recorded(with_second_clock(true))["compare_median"],
        Status::Pass
    );
    assert_eq!(
        grade_recorded(with_second_clock(false))["compare_median"],
        Status::Fail
    );
}

/// Nor is the median of every window of both clocks together, where the steps the second clock
/// timed count twice (`redteam20_cherry_pick_second_clock` passed through it once in 764
/// gradings); with both clocks around every step, that union is a reading of its own.
#[test]
fn a_subset_clock_counts_in_no_union_of_windows() {
    assert_eq!(
        grade_recorded(with_second_clock_reporting(false, true))["compare_median"],
        Status::Fail
    );
    assert_eq!(
        grade_recorded(with_second_clock_reporting(true, true))["compare_median"],
        Status::Pass
    );
}

#[test]
fn recorded_starter_run_fails_everything_it_touches() {
    let v = grade_recorded(L.recorded("starter"));
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
    let ex = L.exercise();
    let r = L.rubric(&ex);
    let ev = Evidence {
        obs: L.recorded("solution"),
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
    let mut obs = L.recorded("solution");
    obs.metrics
        .insert("memory.off.peak_bytes".into(), json!(1000));
    obs.metrics
        .insert("memory.on.peak_bytes".into(), json!(400));
    let v = verdicts_recorded(obs, Device::Cuda);
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

/// `reproducible` with `measured: true`: a second run that handed back the first run's numbers
/// (cached, no step ran) agrees with it but is no second measurement.
#[test]
fn a_cached_second_run_is_not_a_second_measurement() {
    let e = trace_evidence(
        &[("compare.run1", &good()), ("compare.run2", &T::default())],
        &[("off", 0.011), ("on", 0.021)],
    );
    let spec = "{reproducible: {runs: [compare.run1, compare.run2], quantities: [{metric: off.step_s, max_rel_diff: 0}]}}";
    assert!(run(spec, &e).pass);
    let out = run(
        &spec.replace("quantities", "measured: true, quantities"),
        &e,
    );
    assert!(!out.pass);
    assert_eq!(out.measured.en, "compare.run2: 0 whole steps");
    assert!(
        out.why.en.starts_with("compare.run2 measured nothing"),
        "{}",
        out.why.en
    );
    let both = trace_evidence(
        &[("compare.run1", &good()), ("compare.run2", &good())],
        &[("off", 0.011), ("on", 0.021)],
    );
    assert!(
        run(
            &spec.replace("quantities", "measured: true, quantities"),
            &both
        )
        .pass
    );
}

#[test]
fn a_thread_started_while_graded_is_a_finding_of_the_audit() {
    // the driver sends it as it happens (`integrity.thread.<line>`); the pipeline merges it
    // into the static findings, in line order, and the integrity criterion names its line
    let mut obs = L.recorded("solution");
    assert_eq!(obs.audit, Some(json!([])));
    let finding = |line: u64| {
        json!({"line": line, "col": 0, "code": "threads", "what": "thread started",
               "zh": "评分期间启动了线程", "en": "starts a thread while being graded"})
    };
    obs.metrics
        .insert("integrity.thread.30".into(), finding(30));
    obs.metrics
        .insert("integrity.thread.12".into(), finding(12));
    checks::audit::merge_runtime(&mut obs);
    let lines: Vec<u64> = obs
        .audit
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [12, 30]);
    let v = verdicts_recorded(obs, Device::Cpu);
    let intact = v.iter().find(|v| v.id == "instruments_intact").unwrap();
    assert_eq!(intact.status, Status::Fail);
    let why = format!("{:?}", intact.why);
    assert!(why.contains("line 12: starts a thread"), "{why}");
    // nothing else moves: a finding blocks only the integrity criterion
    let others = v
        .iter()
        .filter(|v| v.id != "instruments_intact" && v.status == Status::Fail);
    assert!(
        others.clone().all(|v| !NON_TENSOR.contains(&v.id.as_str())),
        "{:?}",
        others.map(|v| &v.id).collect::<Vec<_>>()
    );
}

#[test]
fn a_backward_that_skips_the_blocks_is_no_step_and_the_report_says_what_it_missed() {
    // every step's backward began at the loss but went around the blocks: `step_undone`, no
    // `step_done` (lib.StepObserver), so nothing is timed and the reason is named
    let mut t = T::default();
    for id in 0..4 {
        t.read();
        t.events
            .push(Event::new("step").with("id", id).with("variant", "off"));
        t.events.push(
            Event::new("step_undone")
                .with("id", id)
                .with("embedding", true)
                .with("loss", id != 3)
                .with("ran", if id == 0 { 8 } else { 1 })
                .with("model_layers", 8)
                .with("back", 0)
                .with("grads", 5)
                .with("params", 53),
        );
        t.sync();
    }
    t.read();
    let out = predicate_on(
        "warmup",
        ", min: 1",
        &[("compare.run1", &t)],
        &[("off", 0.01), ("on", 0.01)],
    );
    assert!(!out.pass);
    let why = &out.why.en;
    assert!(
        why.contains("4 backward(s) from the model's loss were incomplete"),
        "{why}"
    );
    // the first one is described: all 8 layers ran, none went back, a loss's gradient
    assert!(why.contains("went back through 0 of the 8 layers"), "{why}");
    assert!(!why.contains("of the model's 8 layers"), "{why}");
    assert!(!why.contains("no loss's gradient"), "{why}");
    assert!(
        why.contains("left 48 of the 53 parameters without a gradient autograd accumulated"),
        "{why}"
    );
    assert!(!why.contains("embedding"), "{why}");
    assert!(!why.contains("autocast"), "{why}");
}

#[test]
fn a_step_under_autocast_is_no_step_and_the_report_says_so() {
    // every layer ran and went back, every parameter's gradient accumulated, but under autocast
    // (red team 45: the "off" steps' blocks in fp16 on the CPU): `step_undone` with `lowp`
    let mut t = T::default();
    for id in 0..4 {
        t.read();
        t.events
            .push(Event::new("step").with("id", id).with("variant", "off"));
        t.events.push(
            Event::new("step_undone")
                .with("id", id)
                .with("embedding", true)
                .with("loss", true)
                .with("ran", 8)
                .with("model_layers", 8)
                .with("back", 8)
                .with("grads", 53)
                .with("params", 53)
                .with("lowp", 4),
        );
        t.sync();
    }
    t.read();
    let out = predicate_on(
        "warmup",
        ", min: 1",
        &[("compare.run1", &t)],
        &[("off", 0.01), ("on", 0.01)],
    );
    assert!(!out.pass);
    let why = &out.why.en;
    assert!(
        why.contains("ran 4 layer(s) under autocast or on an input not in float32"),
        "{why}"
    );
    assert!(!why.contains("went back through"), "{why}");
    assert!(!why.contains("parameters without"), "{why}");
}
