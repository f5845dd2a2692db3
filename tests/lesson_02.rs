//! Lesson 02 (`02-profiler`): (a) the `ranking` check kind and the rubric on recorded observations,
//! pure Rust, exact and fast; (b) end to end: the real binary on the solution, the starter and
//! every fixture of `tests/fixtures/02-profiler/`, each failing exactly the criteria listed in its
//! `expected.yaml`, verdict tables snapshotted with insta.
mod support;
use grade::checks::{self, evaluate, profiler, Env, Status};
use grade::observations::{Event, Evidence, Observations};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::lesson::{check, why, Lesson};

const ID: &str = "02-profiler";
const L: Lesson = Lesson(ID);
/// Criteria `grade check` cannot show on CPU (they apply only on CUDA).
const UNPROVABLE: [&str; 1] = ["cuda_activity"];

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

/// A trace of `op` rows: (name, self_us, calls).
fn ops(rows: &[(&str, f64, Option<i64>)]) -> Vec<Event> {
    rows.iter()
        .map(|(n, t, c)| {
            Event::new("op")
                .with("name", *n)
                .with("self_us", *t)
                .with("calls", c.map(Value::from).unwrap_or(Value::Null))
        })
        .collect()
}

fn evidence(traces: &[(&str, Vec<Event>)]) -> Evidence {
    let mut ev = Evidence::default();
    for (k, v) in traces {
        ev.obs.traces.insert(k.to_string(), v.clone());
    }
    ev
}

const GRADER: [(&str, f64, Option<i64>); 5] = [
    ("aten::mm", 108594.0, Some(57)),
    ("aten::addmm", 58901.0, Some(24)),
    ("aten::bmm", 21092.0, Some(36)),
    ("aten::gelu_backward", 19376.0, Some(6)),
    ("aten::matmul", 8357.0, Some(15)),
];

// ------------------------------------------------------------------------------ ranking, exact

#[test]
fn ranking_exact_passes_on_the_same_list_to_float_precision() {
    let mine: Vec<_> = GRADER[..3]
        .iter()
        .map(|&(n, t, c)| (n, t * (1.0 + 1e-9), c))
        .collect();
    let ev = evidence(&[("a", ops(&mine)), ("e", ops(&GRADER[..3]))]);
    let out = run(
        "{ranking: {actual: a, expected: e, fields: {self_us: 1.0e-6, calls: 0}}}",
        &ev,
    );
    assert!(out.pass, "{:?}", out.why);
    assert_eq!(out.measured.en, "3/3 names match");
}

#[test]
fn ranking_exact_fails_on_order_and_shows_both_lists() {
    let mine = [GRADER[0], GRADER[2], GRADER[1]];
    let ev = evidence(&[("a", ops(&mine)), ("e", ops(&GRADER[..3]))]);
    let out = run("{ranking: {actual: a, expected: e}}", &ev);
    assert!(!out.pass);
    assert!(
        out.why
            .en
            .starts_with("#2 is aten::bmm, expected aten::addmm."),
        "{}",
        out.why.en
    );
    assert!(out
        .why
        .en
        .contains("yours: 1. aten::mm; 2. aten::bmm; 3. aten::addmm"));
    assert!(out
        .why
        .en
        .contains("grader's: 1. aten::mm; 2. aten::addmm; 3. aten::bmm"));
    assert!(out.why.zh.contains("第 2 名是 aten::bmm，应为 aten::addmm"));
}

#[test]
fn ranking_exact_fails_on_length_and_on_self_time() {
    let ev = evidence(&[("a", ops(&GRADER[..3])), ("e", ops(&GRADER))]);
    let out = run("{ranking: {actual: a, expected: e}}", &ev);
    assert!(!out.pass);
    assert!(out.why.en.contains("3 entries listed, expected 5"));

    let mine = [
        GRADER[0],
        ("aten::addmm", 58901.0 * 1.01, Some(24)),
        GRADER[2],
    ];
    let ev = evidence(&[("a", ops(&mine)), ("e", ops(&GRADER[..3]))]);
    let out = run(
        "{ranking: {actual: a, expected: e, fields: {self_us: 1.0e-6}}}",
        &ev,
    );
    assert!(!out.pass);
    assert!(out
        .why
        .en
        .contains("`self_us` differs (beyond tolerance): aten::addmm"));
}

#[test]
fn ranking_fields_catch_missing_and_wrong_call_counts() {
    let mine = [
        ("aten::mm", 108594.0, None),
        ("aten::addmm", 58901.0, Some(23)),
        ("aten::bmm", 21092.0, Some(36)),
    ];
    let ev = evidence(&[("a", ops(&mine)), ("e", ops(&GRADER))]);
    let out = run(
        "{ranking: {actual: a, expected: e, min_overlap: 0, fields: {calls: 0}}}",
        &ev,
    );
    assert!(!out.pass);
    assert!(
        out.why.en.contains("no `calls` for aten::mm"),
        "{}",
        out.why.en
    );
    assert!(out
        .why
        .en
        .contains("`calls` differs (must be equal): aten::addmm 23 ≠ 24"));
    // issue 38, round 4: with fields, a name the grader does not list has nothing to agree
    // with, and an empty list shows no field at all: neither passes
    let spec = "{ranking: {actual: a, expected: e, min_overlap: 0, fields: {calls: 0}}}";
    let other = [GRADER[0], ("aten::linear", 1.0, Some(99))];
    let out = run(spec, &evidence(&[("a", ops(&other)), ("e", ops(&GRADER))]));
    assert!(!out.pass);
    assert!(
        out.why
            .en
            .starts_with("aten::linear not in the grader's list: no `calls` to check it against."),
        "{}",
        out.why.en
    );
    let out = run(spec, &evidence(&[("a", ops(&[])), ("e", ops(&GRADER))]));
    assert!(!out.pass);
    assert!(
        out.why
            .en
            .starts_with("nothing listed: no `calls` to check."),
        "{}",
        out.why.en
    );
    assert!(out.why.zh.starts_with("什么也没有列出"), "{}", out.why.zh);
    // without fields an empty list is judged by the overlap alone
    assert!(
        run(
            "{ranking: {actual: a, expected: e, min_overlap: 0}}",
            &evidence(&[("a", ops(&[])), ("e", ops(&GRADER))])
        )
        .pass
    );
}

/// A long list of the grader's (a whole profile's rows) shows, on failure, only the rows named.
#[test]
fn ranking_shows_a_long_grader_list_by_the_rows_named() {
    let mut long: Vec<(String, f64, Option<i64>)> = GRADER
        .iter()
        .map(|&(n, t, c)| (n.to_string(), t, c))
        .collect();
    for k in 0..20 {
        long.push((format!("aten::op{k}"), 10.0, Some(1)));
    }
    let long: Vec<(&str, f64, Option<i64>)> =
        long.iter().map(|(n, t, c)| (n.as_str(), *t, *c)).collect();
    let mine = [("aten::bmm", 21092.0, Some(35))];
    let out = run(
        "{ranking: {actual: a, expected: e, min_overlap: 0, fields: {calls: 0}}}",
        &evidence(&[("a", ops(&mine)), ("e", ops(&long))]),
    );
    assert!(!out.pass);
    assert!(
        out.why
            .en
            .ends_with("grader's: 3. aten::bmm (calls=36) (of 25 rows, only those you listed)"),
        "{}",
        out.why.en
    );
}

// ---------------------------------------------------------------------------- ranking, overlap

#[test]
fn ranking_overlap_counts_names_within_the_graders_first_n() {
    let mine = [GRADER[0], ("aten::copy_", 30000.0, Some(90)), GRADER[3]];
    let ev = evidence(&[("a", ops(&mine)), ("e", ops(&GRADER))]);
    let pass = run(
        "{ranking: {actual: a, expected: e, min_overlap: 2, within: 5}}",
        &ev,
    );
    assert!(pass.pass, "{:?}", pass.why);
    assert_eq!(pass.measured.en, "2/3 among the grader's first 5");
    let fail = run(
        "{ranking: {actual: a, expected: e, min_overlap: 2, within: 3}}",
        &ev,
    );
    assert!(!fail.pass);
    assert!(fail
        .why
        .en
        .starts_with("only 1 (aten::mm) among the grader's first 3; at least 2 needed."));
}

#[test]
fn ranking_leader_must_match_when_asked() {
    let mine = [GRADER[1], GRADER[0], GRADER[2]];
    let ev = evidence(&[("a", ops(&mine)), ("e", ops(&GRADER))]);
    assert!(run("{ranking: {actual: a, expected: e, min_overlap: 3}}", &ev).pass);
    let out = run(
        "{ranking: {actual: a, expected: e, min_overlap: 3, leader: true}}",
        &ev,
    );
    assert!(!out.pass);
    assert!(out
        .why
        .en
        .contains("the first is aten::addmm, the grader's first is aten::mm"));
}

#[test]
fn ranking_reports_a_missing_list() {
    let ev = evidence(&[("e", ops(&GRADER))]);
    let out = run("{ranking: {actual: a, expected: e}}", &ev);
    assert!(!out.pass);
    assert_eq!(out.measured.en, "—");
}

#[test]
fn ranking_spec_errors() {
    for (yaml, msg) in [
        (
            "{ranking: {actual: a, expected: e, within: 5}}",
            "within/leader need min_overlap",
        ),
        (
            "{ranking: {actual: a, expected: e, fields: {calls: -1}}}",
            "the tolerance must be a number ≥ 0",
        ),
    ] {
        let err = L.rubric_error(yaml);
        assert!(err.contains(msg), "{err}");
    }
}

// ------------------------------------------------- profiler windows read as timed windows

/// The scenario marks each recording window with two reads of its own clock (`profiler#N`), so
/// the shared measurement model reads warm-up as whole calls before the first recorded one, and
/// the gap between two windows (different clocks) times nothing. (The rubric no longer judges
/// warm-up by these windows: `verify_warmup` is `phase: before_recorded`, below.)
fn verify_trace(candidate_warmup: usize) -> Vec<Event> {
    let mut ev = Vec::new();
    let mut id = 0i64;
    let mut call = |ev: &mut Vec<Event>, role: &str| {
        ev.push(
            Event::new("step")
                .with("id", id)
                .with("variant", role)
                .with("inputs", json!({"x": "batch"})),
        );
        ev.push(Event::new("step_done").with("id", id));
        id += 1;
    };
    let mark = |ev: &mut Vec<Event>, n: u32, v: f64| {
        ev.push(
            Event::new("timer")
                .with("clock", format!("profiler#{n}"))
                .with("v", v),
        )
    };
    for _ in 0..2 {
        call(&mut ev, "baseline");
    }
    mark(&mut ev, 1, 1.0);
    for _ in 0..3 {
        call(&mut ev, "baseline");
    }
    mark(&mut ev, 1, 2.0);
    for _ in 0..candidate_warmup {
        call(&mut ev, "candidate");
    }
    mark(&mut ev, 2, 3.0);
    for _ in 0..3 {
        call(&mut ev, "candidate");
    }
    mark(&mut ev, 2, 4.0);
    ev
}

#[test]
fn profiler_windows_make_warmup_visible() {
    let spec = "{trace: {stream: v, expect: warmup, min: 1, variants: [baseline, candidate]}}";
    let ok = run(spec, &evidence(&[("v", verify_trace(2))]));
    assert!(ok.pass, "{:?}", ok.why);
    assert_eq!(ok.measured.en, "baseline: 2, candidate: 2");
    let cold = run(spec, &evidence(&[("v", verify_trace(0))]));
    assert!(!cold.pass);
    assert_eq!(cold.measured.en, "baseline: 2, candidate: 0");
    let same = run(
        "{trace: {stream: v, expect: same_inputs}}",
        &evidence(&[("v", verify_trace(1))]),
    );
    assert!(same.pass, "{:?}", same.why);
}

// ------------------------------------------- phases and per-call times, from observed events

fn step(id: i64, variant: &str, active: bool) -> Event {
    Event::new("step")
        .with("id", id)
        .with("variant", variant)
        .with("active", active)
}

fn done(id: i64, op_us: f64) -> Event {
    Event::new("step_done").with("id", id).with("op_us", op_us)
}

/// The grader found call `id`'s work in a recording's results (sent as the recording stops).
fn rec(id: i64) -> Event {
    Event::new("recorded").with("id", id).with("ops", 4)
}

fn switch(s: &str) -> Event {
    Event::new("profiler").with("switch", s)
}

/// A schedule wait=1, warmup=1, active=3: the phase of each step follows the switches.
fn scheduled() -> Vec<Event> {
    let mut ev = vec![step(0, "train", false), done(0, 0.0), switch("prepare")];
    ev.extend([step(1, "train", false), done(1, 0.0), switch("enable")]);
    for k in 2..5 {
        ev.extend([step(k, "train", true), done(k, 0.0)]);
    }
    ev.extend([switch("disable"), rec(2), rec(3), rec(4)]);
    ev.extend([step(5, "train", false), done(5, 0.0)]);
    ev
}

#[test]
fn phase_comes_from_the_order_of_the_profilers_switch_events() {
    let calls = profiler::calls(&scheduled());
    let phases: Vec<&str> = calls.iter().map(|c| c.phase).collect();
    assert_eq!(
        phases,
        ["none", "warmup", "record", "record", "record", "none"]
    );
    let spec = "{phase: {stream: [r1, r2], phase: warmup, min: 1}}";
    let ok = run(spec, &evidence(&[("r1", scheduled()), ("r2", scheduled())]));
    assert!(ok.pass, "{:?}", ok.why);
    assert_eq!(ok.measured.en, "r1: 1, r2: 1");
    // no schedule: prepare and enable back to back; a `phase` field on a step (a forged flag)
    // is not read
    let mut plain = vec![
        step(0, "train", false).with("phase", "warmup"),
        done(0, 0.0),
        switch("prepare"),
        switch("enable"),
    ];
    for k in 1..4 {
        plain.extend([step(k, "train", true), done(k, 0.0)]);
    }
    plain.extend([switch("disable"), rec(1), rec(2), rec(3)]);
    let out = run(spec, &evidence(&[("r1", scheduled()), ("r2", plain)]));
    assert!(!out.pass);
    assert!(
        out.why.en.starts_with(
            "r2: 0 whole steps in the profiler's warmup phase, expected ≥ 1 (each step: none record·rec record·rec record·rec;"
        ),
        "{}",
        out.why.en
    );
    assert!(out.why.zh.contains("warmup 阶段"));
    // a step that never finished is not a whole step
    let cut = vec![switch("prepare"), step(0, "train", false)];
    let out = run(
        "{phase: {stream: c, phase: warmup, min: 1}}",
        &evidence(&[("c", cut)]),
    );
    assert!(!out.pass);
}

/// Issue 38: a step counts as recorded only where the grader found its work in a recording's
/// results (`recorded`), not where torch's flag was on (collection paused under it); a warm-up
/// step is one during which nothing recorded.
#[test]
fn recorded_means_seen_in_the_results_and_warmup_means_nothing_recording() {
    let recorded = "{phase: {stream: r, phase: record, equals: 3}}";
    assert!(run(recorded, &evidence(&[("r", scheduled())])).pass);
    // collection paused for the second and third recorded steps: the flag stays on, the results
    // hold one step
    let paused: Vec<Event> = scheduled()
        .into_iter()
        .filter(|e| !(e.e == "recorded" && e.fields["id"] != json!(2)))
        .collect();
    let out = run(recorded, &evidence(&[("r", paused)]));
    assert!(!out.pass);
    assert_eq!(out.measured.en, "r: 1");
    assert!(
        out.why
            .en
            .contains("(each step: none warmup record·rec record·on record·on none;"),
        "{}",
        out.why.en
    );
    // a `recorded` event for a call that never finished counts nothing
    let cut = vec![
        switch("enable"),
        step(0, "train", true),
        switch("disable"),
        rec(0),
    ];
    assert_eq!(
        profiler::in_phase(&profiler::calls(&cut), "record", &None),
        0
    );
    // a step in the profiler's warm-up phase while something recorded is no warm-up
    let mut hot = scheduled();
    hot[3] = step(1, "train", true);
    let out = run(
        "{phase: {stream: r, phase: warmup, min: 1}}",
        &evidence(&[("r", hot)]),
    );
    assert!(!out.pass, "{:?}", out.why);
}

/// Issue 38, round 4: a step whose work is in a recording counts as recorded whatever phase it
/// began in (a recording switched on inside a warm-up step) and is then no warm-up; a step a
/// recording holds part of (a recording stopped inside it) counts against an upper bound.
#[test]
fn recorded_work_is_no_warmup_and_part_of_a_step_is_not_exactly() {
    // the warm-up step's work ended up in the recording (enabled from inside it)
    let mut inside = scheduled();
    inside.push(rec(1));
    let warm = run(
        "{phase: {stream: r, phase: warmup, min: 1}}",
        &evidence(&[("r", inside.clone())]),
    );
    assert!(!warm.pass, "{:?}", warm.why);
    assert!(
        warm.why
            .en
            .contains("(each step: none warmup·rec record·rec"),
        "{}",
        warm.why.en
    );
    let exact = "{phase: {stream: r, phase: record, equals: 3}}";
    let out = run(exact, &evidence(&[("r", inside)]));
    assert!(!out.pass);
    assert_eq!(out.measured.en, "r: 4");
    // a fourth step the recording stopped inside: part of its work recorded
    let mut extra = scheduled();
    extra.push(Event::new("recorded_part").with("id", 5).with("ops", 2));
    let out = run(exact, &evidence(&[("r", extra.clone())]));
    assert!(!out.pass);
    assert_eq!(out.measured.en, "r: 3 + 1 part");
    assert!(
        out.why.en.starts_with(
            "r: the recorded results hold part of the work of 1 more step(s) besides 3 whole ones, expected = 3"
        ),
        "{}",
        out.why.en
    );
    assert!(out.why.en.contains("none·part"), "{}", out.why.en);
    // a lower bound alone (verify's "at least 3") is not held to partly recorded calls
    assert!(
        run(
            "{phase: {stream: r, phase: record, min: 3}}",
            &evidence(&[("r", extra)])
        )
        .pass
    );
}

/// verify's warm-up: whole calls made with nothing recording before the first call of the
/// variant the grader saw recorded, wherever anyone's windows fall.
#[test]
fn warmup_is_what_ran_unrecorded_before_the_first_recorded_call() {
    let spec =
        |v: &str| format!("{{phase: {{stream: v, phase: before_recorded, variant: {v}, min: 1}}}}");
    // two warm-up calls of each, then each profiled
    let mut ev = Vec::new();
    for (k, role) in [
        (0, "baseline"),
        (1, "baseline"),
        (2, "candidate"),
        (3, "candidate"),
    ] {
        ev.extend([step(k, role, false), done(k, 1.0)]);
    }
    ev.push(switch("enable"));
    for k in 4..7 {
        ev.extend([step(k, "baseline", true), done(k, 1.0)]);
    }
    ev.extend([switch("disable"), rec(4), rec(5), rec(6), switch("enable")]);
    for k in 7..10 {
        ev.extend([step(k, "candidate", true), done(k, 1.0)]);
    }
    ev.extend([switch("disable"), rec(7), rec(8), rec(9)]);
    for role in ["baseline", "candidate"] {
        let out = run(&spec(role), &evidence(&[("v", ev.clone())]));
        assert!(out.pass, "{role}: {:?}", out.why);
        assert_eq!(out.measured.en, format!("v {role}: 2"));
    }
    // the cold first call of both, recorded in one profile of its own ("the warm-up"), then three
    // of each: a cold call recorded is no warm-up
    let mut cold = vec![switch("enable")];
    cold.extend([
        step(0, "baseline", true),
        done(0, 9.0),
        step(1, "candidate", true),
        done(1, 9.0),
    ]);
    cold.extend([switch("disable"), rec(0), rec(1), switch("enable")]);
    for k in 2..5 {
        cold.extend([step(k, "baseline", true), done(k, 1.0)]);
    }
    cold.extend([switch("disable"), rec(2), rec(3), rec(4)]);
    let out = run(&spec("baseline"), &evidence(&[("v", cold.clone())]));
    assert!(!out.pass);
    assert_eq!(out.measured.en, "v baseline: 0");
    assert!(
        out.why
            .en
            .contains("before the first call the grader saw recorded (warm-up)"),
        "{}",
        out.why.en
    );
    // a call under a paused profiler (flag on, nothing recorded) is no warm-up either
    let mut paused = vec![switch("enable"), step(0, "baseline", true), done(0, 9.0)];
    paused.extend([
        step(1, "baseline", true),
        done(1, 1.0),
        switch("disable"),
        rec(1),
    ]);
    assert!(!run(&spec("baseline"), &evidence(&[("v", paused)])).pass);
    // nothing recorded at all (no profile, a stopwatch): no profile to warm up for, every call
    // made with nothing recording counts (the criteria counting recorded calls fail); no call,
    // no warm-up
    let none = vec![step(0, "baseline", false), done(0, 1.0)];
    assert!(run(&spec("baseline"), &evidence(&[("v", none)])).pass);
    assert!(!run(&spec("baseline"), &evidence(&[("v", vec![])])).pass);
}

/// Two warm-up calls (slow), then three recorded calls of 90, 100, 110 µs; a fourth call made
/// under the profiler while collection was paused (flag on, not in the results) takes 900 µs.
fn verified() -> Vec<Event> {
    let mut ev = vec![
        step(0, "baseline", false),
        done(0, 900.0),
        step(1, "baseline", false),
        done(1, 900.0),
        switch("prepare"),
        switch("enable"),
    ];
    for (k, t) in [(2, 90.0), (3, 100.0), (4, 110.0)] {
        ev.extend([step(k, "baseline", true), done(k, t)]);
    }
    ev.extend([step(6, "baseline", true), done(6, 900.0)]);
    ev.extend([switch("disable"), rec(2), rec(3), rec(4)]);
    ev.extend([step(5, "candidate", true), done(5, 7.0)]);
    ev
}

#[test]
fn per_call_holds_the_report_to_the_graders_timing_of_the_recorded_calls() {
    let spec = |x: f64| {
        let mut ev = evidence(&[("v", verified())]);
        ev.obs.metrics.insert("r".into(), json!(x));
        let out = run(
            "{per_call: {stream: v, variant: baseline, field: op_us, reported: r, min: 0.5, max: 2}}",
            &ev,
        );
        (out.pass, out.measured.en, out.why.en)
    };
    let (pass, measured, why) = spec(100.0);
    assert!(pass, "{why}");
    assert_eq!(measured, "1.000000 (100 / 100)");
    assert!(
        why.contains("the grader's op_us of the 3 baseline calls it saw recorded is 100 each"),
        "{why}"
    );
    // the total of the three calls, or a warm-up call's time
    assert!(!spec(300.0).0);
    assert!(!spec(900.0).0);
    assert!(spec(60.0).0 && !spec(40.0).0);
    // no recorded call of the variant: nothing to compare with
    let mut ev = evidence(&[("v", verified())]);
    ev.obs.metrics.insert("r".into(), json!(7.0));
    let out = run(
        "{per_call: {stream: v, variant: other, field: op_us, reported: r, max: 2}}",
        &ev,
    );
    assert!(!out.pass);
    assert!(out
        .why
        .en
        .contains("the grader saw no other call recorded in a profiler's results"));
}

/// Issue 38: warm-up is the returned recording's own. The call returns its last recording (the
/// scenario refuses any other object), so a warm-up step ran after the last `prepare` before
/// that recording's `enable`, and before the enable; a spare profiler's prepare, before the
/// recording's own or after the recording, warms nothing up.
#[test]
fn warmup_is_the_returned_recordings_own() {
    let spec = "{phase: {stream: r, phase: warmup, min: 1}}";
    let cold = |k0: i64| {
        let mut ev = vec![switch("prepare"), switch("enable")];
        for k in k0..k0 + 3 {
            ev.extend([step(k, "train", true), done(k, 0.0)]);
        }
        ev.extend([switch("disable"), rec(k0), rec(k0 + 1), rec(k0 + 2)]);
        ev
    };
    // a step under a spare profiler, prepared and never used, then a schedule-less recording
    let mut before = vec![switch("prepare"), step(0, "train", false), done(0, 0.0)];
    before.extend(cold(1));
    // the cold recording first, then a spare profiler prepared and one step under it
    let mut after = cold(0);
    after.extend([switch("prepare"), step(3, "train", false), done(3, 0.0)]);
    for (name, ev) in [("before", before), ("after", after)] {
        let out = run(spec, &evidence(&[("r", ev.clone())]));
        assert!(!out.pass, "{name}");
        let phases: Vec<&str> = profiler::calls(&ev).iter().map(|c| c.phase).collect();
        assert!(
            phases.contains(&"prepared") && !phases.contains(&"warmup"),
            "{name}: {phases:?}"
        );
    }
    // a schedule whose profiler records twice (repeat=2): the warm-up of the last recording counts
    let mut twice = scheduled();
    twice.extend([
        switch("prepare"),
        step(6, "train", false),
        done(6, 0.0),
        switch("enable"),
    ]);
    for k in 7..10 {
        twice.extend([step(k, "train", true), done(k, 0.0)]);
    }
    twice.extend([switch("disable"), rec(7), rec(8), rec(9)]);
    let calls = profiler::calls(&twice);
    let phases: Vec<&str> = calls.iter().map(|c| c.phase).collect();
    assert_eq!(phases[1], "prepared");
    assert_eq!(phases[6], "warmup");
    assert!(run(spec, &evidence(&[("r", twice)])).pass);
    // a recording never stopped: nothing it returns was warmed up
    let open = vec![
        switch("prepare"),
        step(0, "train", false),
        done(0, 0.0),
        switch("enable"),
    ];
    assert!(!run(spec, &evidence(&[("r", open)])).pass);
}

/// Issue 38: a verify call's figure is the op's self time in the call's own recording (the
/// grader's parse, on the `recorded` event), held tightly; `relative_to` holds a reported ratio
/// (candidate over baseline: what `faster` follows) to the ratio of the grader's figures.
#[test]
fn per_call_reads_the_recorded_self_time_and_the_speed_up() {
    let mut ev = vec![
        step(0, "baseline", false),
        done(0, 900.0),
        switch("prepare"),
        switch("enable"),
    ];
    for k in 1..4 {
        ev.extend([step(k, "baseline", true), done(k, 600.0)]);
    }
    ev.push(switch("disable"));
    for (k, t) in [(1, 90.0), (2, 100.0), (3, 110.0)] {
        ev.push(rec(k).with("variant", "baseline").with("self_us", t));
    }
    ev.extend([
        step(4, "candidate", false),
        done(4, 99.0),
        switch("prepare"),
        switch("enable"),
    ]);
    for k in 5..7 {
        ev.extend([step(k, "candidate", true), done(k, 99.0)]);
    }
    ev.push(switch("disable"));
    for (k, t) in [(5, 20.0), (6, 30.0)] {
        ev.push(rec(k).with("variant", "candidate").with("self_us", t));
    }
    let check = |b: f64, c: f64, yaml: &str| {
        let mut e = evidence(&[("v", ev.clone())]);
        e.obs.metrics.insert("b".into(), json!(b));
        e.obs.metrics.insert("c".into(), json!(c));
        run(yaml, &e)
    };
    let own = "{per_call: {stream: v, variant: baseline, field: self_us, reported: b, min: 0.9999, max: 1.0001}}";
    // the recorded event's self time, not the grader's clock (step_done's op_us of 600)
    let out = check(100.0, 25.0, own);
    assert!(out.pass, "{:?}", out.why);
    assert_eq!(out.bound.en, "∈ [0.9999, 1.0001]");
    // off by 1%: a host clock's figure, or one pasted from an earlier call of the same work
    assert!(!check(101.0, 25.0, own).pass);
    let ratio = "{per_call: {stream: v, variant: candidate, field: self_us, reported: c, relative_to: {variant: baseline, reported: b}, min: 0.9999, max: 1.0001}}";
    assert!(check(100.0, 25.0, ratio).pass);
    // totals of three baseline and two candidate calls: the speed-up is not the profile's
    assert!(!check(300.0, 50.0, ratio).pass);
    // both scaled alike (the same number of calls of each): the speed-up still is
    assert!(check(300.0, 75.0, ratio).pass);
    // a speed-up of exactly 4 from call counts, not times
    assert!(!check(100.0, 100.0 / 4.0 * 1.01, ratio).pass);
    // no recorded call of the other variant: nothing to compare with
    let none = "{per_call: {stream: v, variant: candidate, field: self_us, reported: c, relative_to: {variant: other, reported: b}, min: 0.9999, max: 1.0001}}";
    assert!(!check(100.0, 25.0, none).pass);
}

#[test]
fn profiler_spec_errors() {
    for (yaml, msg) in [
        (
            "{phase: {stream: s, phase: warm, min: 1}}",
            "`warm` is none of warmup, record, none, before_recorded",
        ),
        (
            "{phase: {stream: s, phase: warmup}}",
            "give at least one of min / max",
        ),
        (
            "{per_call: {stream: s, field: f, reported: r}}",
            "give at least one of min / max",
        ),
    ] {
        let err = L.rubric_error(yaml);
        assert!(err.contains(msg), "{yaml}: {err}");
    }
}

/// Red team 5: `outputs_close` is believed only when the submission read (`output_read`, sent as
/// it happened) a baseline output and a candidate output made on one input (the fingerprints each
/// step sent as it began and ended all equal); an answer pasted from the call order reads none.
#[test]
fn outputs_read_needs_both_outputs_on_one_input() {
    let fp = |x: &str| json!({"x": x});
    let call = |k: i64, variant: &str, begin: &str, end: &str| {
        [
            step(k, variant, false).with("fp", fp(begin)),
            done(k, 1.0).with("fp", fp(end)),
        ]
    };
    let read = |k: i64, variant: &str| {
        Event::new("output_read")
            .with("id", k)
            .with("variant", variant)
    };
    let spec = "{trace: {stream: v, expect: outputs_read}}";
    let judge = |ev: Vec<Event>| run(spec, &evidence(&[("v", ev)]));
    let mut base: Vec<Event> = Vec::new();
    base.extend(call(0, "baseline", "a", "a"));
    base.extend(call(1, "candidate", "a", "a"));
    base.extend(call(2, "candidate", "b", "b"));
    // none read: the by-order answer
    let out = judge(base.clone());
    assert!(!out.pass);
    assert!(
        out.why.en.starts_with("neither step's output was read"),
        "{}",
        out.why.en
    );
    assert_eq!(out.measured.en, "outputs read: baseline 0, candidate 0");
    // both read on one input (torch.allclose(baseline_step(x), candidate_step(x)))
    let mut both = base.clone();
    both.extend([read(0, "baseline"), read(1, "candidate")]);
    assert!(judge(both).pass);
    // one side only, or the two on different inputs
    let mut one = base.clone();
    one.push(read(0, "baseline"));
    assert!(judge(one)
        .why
        .en
        .starts_with("no candidate output was read"));
    let mut apart = base.clone();
    apart.extend([read(0, "baseline"), read(2, "candidate")]);
    let out = judge(apart);
    assert!(!out.pass);
    assert!(
        out.why.en.contains("made on different inputs"),
        "{}",
        out.why.en
    );
    // an input changed while its step ran made no output of that input
    let mut changed: Vec<Event> = Vec::new();
    changed.extend(call(0, "baseline", "a", "a"));
    changed.extend(call(1, "candidate", "a", "c"));
    changed.extend([read(0, "baseline"), read(1, "candidate")]);
    assert!(!judge(changed).pass);
}

// ------------------------------------------------------------------- the rubric, recorded runs

fn grade_obs(obs: Observations) -> BTreeMap<String, Status> {
    L.grade_obs(obs)
        .into_iter()
        .map(|v| (v.id, v.status))
        .collect()
}

fn failing(v: &BTreeMap<String, Status>) -> Vec<String> {
    v.iter()
        .filter(|(_, s)| **s == Status::Fail)
        .map(|(k, _)| k.clone())
        .collect()
}

#[test]
fn recorded_runs_fail_exactly_their_expected_criteria() {
    let want = L.expected();
    for name in [
        "solution",
        "starter",
        "sorted_by_total",
        "whole_run",
        "verify_different_inputs",
    ] {
        let v = grade_obs(L.recorded(name));
        let mut w = want[name].clone();
        w.sort();
        assert_eq!(failing(&v), w, "{name}");
        assert_eq!(v["cuda_activity"], Status::Skip, "{name}");
    }
}

#[test]
fn recorded_solution_profiles_exactly_the_steps_asked_after_a_warmup_step() {
    let obs = L.recorded("solution");
    // the two calls were handed two different step counts, drawn per grading
    let asked = |run: &str| obs.metrics[&format!("{run}.steps")].as_u64().unwrap() as usize;
    assert_ne!(asked("profile.run1"), asked("profile.run2"));
    for run in ["profile.run1", "profile.run2"] {
        let calls = profiler::calls(&obs.traces[run]);
        let active = calls.iter().filter(|c| c.active).count();
        let recorded = calls.iter().filter(|c| c.recorded).count();
        let warm = calls.iter().filter(|c| c.phase == "warmup").count();
        let steps = asked(run);
        assert_eq!((active, recorded, warm), (steps, steps, 1), "{run}");
        // torch's own recording flag, the phase derived from the switches and the grader's
        // record of the results agree
        for c in &calls {
            assert_eq!(c.active, c.phase == "record", "{run}: {c:?}");
            assert_eq!(c.recorded, c.phase == "record", "{run}: {c:?}");
        }
    }
}

/// Red team 25: `steps` ignored (3 written in) and the two profiles made with different settings.
/// Each run is held to the step count it was handed (two different ones, drawn per grading), and
/// the second run to the first's settings as torch's profiler was handed them.
#[test]
fn each_run_is_held_to_its_own_steps_and_the_first_runs_settings() {
    let mut obs = L.recorded("solution");
    let (a, b) = (
        obs.metrics["profile.run1.steps"].clone(),
        obs.metrics["profile.run2.steps"].clone(),
    );
    // each run recorded the other's count
    obs.metrics.insert("profile.run1.steps".into(), b);
    obs.metrics.insert("profile.run2.steps".into(), a);
    assert_eq!(failing(&grade_obs(obs)), vec!["profiles_exactly_steps"]);
    let mut obs = L.recorded("solution");
    let first = obs.metrics["profile.run1.settings"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(first.contains("with_stack=False"), "{first}");
    let other = first.replace("with_stack=False", "with_stack=True");
    obs.metrics
        .insert("profile.run2.settings".into(), json!(other));
    assert_eq!(failing(&grade_obs(obs)), vec!["profile_reproducible"]);
}

/// Red team 28: `faster` answered from a tell of the candidate's profile, the times reported beside
/// it. Right about the truth is not enough: `faster` must be what the reported times say.
#[test]
fn faster_must_follow_the_times_reported() {
    let mut obs = L.recorded("solution");
    // call 1's answer and its truth both flipped: right about the truth, against its own times
    let flip = |v: &serde_json::Value| json!(!v.as_bool().unwrap());
    let (answer, truth) = (
        flip(&obs.metrics["verify.call1.faster"]),
        flip(&obs.metrics["verify.call1.truth.faster"]),
    );
    obs.metrics.insert("verify.call1.faster".into(), answer);
    obs.metrics
        .insert("verify.call1.truth.faster".into(), truth.clone());
    obs.metrics
        .insert("verify.call1.truth.faster_held".into(), truth);
    assert_eq!(failing(&grade_obs(obs)), vec!["verify_speed"]);
    // and the whole recordings' work, not the same per step and per recording in both
    let mut obs = L.recorded("solution");
    assert_eq!(obs.metrics["profile.whole_linear"], json!("yes"));
    obs.metrics.insert(
        "profile.whole_linear".into(),
        json!("aten::t: 780 in 3 steps, 90 in 2"),
    );
    assert_eq!(failing(&grade_obs(obs)), vec!["profile_reproducible"]);
}

#[test]
fn recorded_solution_profiles_five_calls_of_each_step_and_one_call_fails() {
    let obs = L.recorded("solution");
    for cand in ["call1", "call2", "call3"] {
        let calls = profiler::calls(&obs.traces[&format!("verify.{cand}")]);
        for role in ["baseline", "candidate"] {
            let n = calls
                .iter()
                .filter(|c| c.recorded && c.variant.as_deref() == Some(role))
                .count();
            assert_eq!(n, 5, "{cand} {role}");
        }
    }
    // keep only the first profiled call of each step in the results (collection paused for the
    // others, torch's flag still on): one sample each
    let mut obs = L.recorded("solution");
    for cand in ["call1", "call2", "call3"] {
        let trace = obs.traces.get_mut(&format!("verify.{cand}")).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        trace.retain(|e| {
            e.e != "recorded" || seen.insert(e.field_str("variant").unwrap().to_string())
        });
    }
    let v = grade_obs(obs);
    assert_eq!(v["verify_profiles_several"], Status::Fail);
    assert_eq!(v["verify_warmup"], Status::Pass);
}

#[test]
fn a_wrong_answer_in_a_recorded_run_fails_its_criterion() {
    let mut obs = L.recorded("solution");
    // the call whose candidate was wrong (drawn per grading) answered "close"
    let wrong = (1..=3)
        .map(|n| format!("verify.call{n}"))
        .find(|c| obs.metrics[&format!("{c}.truth.outputs_close")] == json!(false))
        .expect("every grading draws a wrong candidate");
    obs.metrics
        .insert(format!("{wrong}.outputs_close"), json!(true));
    // the per-step time reported as the total of three steps
    let x = obs.metrics["verify.call3.candidate_us"].as_f64().unwrap();
    obs.metrics
        .insert("verify.call3.candidate_us".into(), json!(x * 5.0));
    let v = grade_obs(obs);
    // the speed-up reported (candidate over baseline) is no longer the profile's either
    assert_eq!(
        failing(&v),
        vec!["verify_outputs", "verify_speed", "verify_times_agree"]
    );
}

// ------------------------------------------------------------------------------- end to end

/// `grade check ID` (the real binary, once for this file; tests/support/lesson.rs): the solution,
/// the starter and every fixture, each failing exactly the criteria its expected.yaml entry lists,
/// graded on the warm interpreter one per core; every criterion failed by some fixture, every
/// README mistake mapped. Each verdict table is a snapshot `ID__<name>`.
#[test]
fn grade_check_proves_the_lesson() {
    for (name, table) in L.check().assert_proves_the_lesson(&UNPROVABLE) {
        insta::assert_snapshot!(format!("{ID}__{name}"), table);
    }
}

#[test]
fn starter_fails_with_readable_reasons() {
    let r = L.check().report("starter");
    let why = why(r, "profiles_exactly_steps");
    assert!(
        why.contains("NotImplementedError: TODO: profile_training("),
        "{why}"
    );
}

/// `faster` is held to the truth unless the machine's load could have reversed what the call's
/// profiles show (scenario.py `faster_held`): a step's wait for a CPU is an upper bound on what
/// the load added to its op's self time. The rule itself, run in the course's Python on made-up
/// recordings (self µs per recorded step, waits in seconds).
#[test]
fn faster_is_held_to_what_the_profiles_show_only_where_the_load_explains_it() {
    let root = support::lesson::root();
    let script = r#"
import importlib.util, sys, types
sys.path[:0] = ["exercises", "src/driver"]
import lib as grade_lib
sys.modules["grade_lib"] = grade_lib
spec = importlib.util.spec_from_file_location("s02", "exercises/02-profiler/scenario.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
def rec(b, c):
    credited = [(i, "baseline", {}, 0) for i in range(len(b))] + [(10 + i, "candidate", {}, 1) for i in range(len(c))]
    su = dict(enumerate(b))
    su.update({10 + i: x for i, x in enumerate(c)})
    return types.SimpleNamespace(credited=credited, self_us=su)
print([
    m.faster_held(rec([400] * 3, [100] * 3), {}, True),  # shown as it is
    m.faster_held(rec([400] * 3, [100, 100, 5000]), {}, True),  # reversed, no wait: the truth
    m.faster_held(rec([400] * 3, [100, 100, 5000]), {12: 0.0049}, True),  # reversed by a wait
    m.faster_held(rec([400] * 3, [100, 100, 5000]), {12: 0.0010}, True),  # a wait too short
    m.faster_held(rec([400, 5000, 400], [1600] * 3), {1: 0.0046}, False),  # the baseline waited
    m.faster_held(rec([400, 5000, 400], [1600] * 3), {1: 0.0001}, False),
    m.faster_held(None, {}, False),  # nothing recorded: the truth
])
"#;
    let out = std::process::Command::new(root.join(".venv/bin/python"))
        .arg("-c")
        .arg(script)
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[True, True, False, True, True, False, False]"
    );
}
