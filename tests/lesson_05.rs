//! Lesson 05 `05-compile`: (a) the `break_even` check kind and the rubric on recorded
//! observations, pure Rust, exact and fast; (b) end to end, `grade check 05-compile` (the real
//! binary) over the solution, the starter and every fixture of tests/fixtures/05-compile/, each
//! failing exactly what expected.yaml says, verdict tables snapshotted with insta. The end-to-end runs really compile
//! TinyGPT: they share the persistent inductor cache (`.cache/inductor`), so only the first run on
//! a machine pays a cold compile.
mod support;
use grade::checks::break_even::break_even;
use grade::checks::{self, evaluate, Env, Status};
use grade::observations::{Event, Evidence, Observations};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use support::lesson::{check, root, sorted, Lesson};

const ID: &str = "05-compile";
const L: Lesson = Lesson(ID);
/// Criteria that compare tensors: recorded observations carry no tensors, so these are judged end
/// to end only.
const TENSOR_CRITERIA: [&str; 2] = ["compiled_agrees", "shapes_agree"];

// ------------------------------------------------------------------------ break_even itself

#[test]
fn break_even_follows_the_definition() {
    // the README's example: 3 + 4·0.5 = 5 = 5·1.0, equality breaks even
    assert_eq!(break_even(1.0, 3.0, 0.5), Some(5));
    // one step short of equality needs one more
    assert_eq!(break_even(1.0, 3.0 + 1.0 / 1024.0, 0.5), Some(6));
    // a first call no dearer than eager: 1, whatever the steady step
    assert_eq!(break_even(1.0, 1.0, 2.0), Some(1));
    assert_eq!(break_even(1.0, 0.5, 0.25), Some(1));
    // compiled step equal to or slower than eager, first call dearer: never
    assert_eq!(break_even(1.0, 2.0, 1.0), None);
    assert_eq!(break_even(1.0, 2.0, 1.5), None);
    // large n (exactly at equality in real arithmetic: 70 + 69990·0.009 = 69991·0.01)
    assert_eq!(break_even(0.01, 70.0, 0.009), Some(69_991));
    // not a number: never
    assert_eq!(break_even(f64::NAN, 1.0, 0.5), None);
}

#[test]
fn break_even_is_the_smallest_n_by_brute_force() {
    // every case on a grid of multiples of 1/8 (exact in binary), against a plain search
    let grid: Vec<f64> = (1..=24).map(|k| k as f64 / 8.0).collect();
    for &e in &grid {
        for &c in &grid {
            for &f in &grid {
                let brute = (1..=1_000u64).find(|&n| f + (n as f64 - 1.0) * c <= n as f64 * e);
                assert_eq!(break_even(e, f, c), brute, "e={e} f={f} c={c}");
            }
        }
    }
}

fn case(e: f64, f: f64, c: f64, answer: Value) -> Event {
    let mut ev = Event::new("case");
    ev.fields.insert("eager_step_s".into(), json!(e));
    ev.fields.insert("compiled_first_s".into(), json!(f));
    ev.fields.insert("compiled_step_s".into(), json!(c));
    ev.fields.insert("answer".into(), answer);
    ev
}

fn judge_cases(cases: Vec<Event>) -> checks::Outcome {
    let ex = L.exercise();
    let mut ev = Evidence::default();
    ev.obs.traces.insert("be".into(), cases);
    evaluate(
        &check("{break_even: {stream: be}}"),
        &Env {
            evidence: &ev,
            exercise: &ex,
        },
    )
}

#[test]
fn break_even_check_accepts_right_answers_and_names_wrong_ones() {
    let right = judge_cases(vec![
        case(1.0, 3.0, 0.5, json!(5)),
        case(1.0, 2.0, 1.5, Value::Null),
        case(1.0, 0.5, 2.0, json!(1)),
    ]);
    assert!(right.pass, "{:?}", right.why.en);
    assert_eq!(right.measured.en, "3/3 cases right");

    let o = judge_cases(vec![
        case(1.0, 3.0, 0.5, json!(6)),
        case(
            1.0,
            2.0,
            1.0,
            json!("raised ZeroDivisionError: float division by zero"),
        ),
        case(1.0, 2.0, 1.5, json!(1)),
        case(1.0, 0.5, 2.0, Value::Null),
    ]);
    assert!(!o.pass);
    assert_eq!(o.measured.en, "0/4 cases right");
    let why = &o.why.en;
    assert!(
        why.contains(
            "returned 6, expected 5 (exactly equal there: equality counts as breaking even)"
        ),
        "{why}"
    );
    assert!(why.contains("returned raised ZeroDivisionError"), "{why}");
    assert!(
        why.contains(
            "returned 1, expected None (the compiled step is no faster than eager: it never pays)"
        ),
        "{why}"
    );
    assert!(why.ends_with("None when there is none"), "{why}");
    assert!(why.contains("… (+1)"), "{why}");
}

#[test]
fn break_even_check_without_cases_fails() {
    let o = judge_cases(vec![]);
    assert!(!o.pass);
    assert!(o.why.en.contains("no break_even case"));
}

#[test]
fn a_skipped_measured_case_passes_only_when_really_beyond_the_limit() {
    let skipped = |e: f64, f: f64, c: f64| {
        Event::new("skipped")
            .with("eager_step_s", e)
            .with("compiled_first_s", f)
            .with("compiled_step_s", c)
            .with("max_n", 100_000)
    };
    // nearly equal steps: 30 s of compile at 1e-7 s saved per step is 3e8 steps
    let o = judge_cases(vec![skipped(0.0050001, 30.0, 0.005)]);
    assert!(o.pass, "{:?}", o.why.en);
    assert!(o.why.en.contains("not asked"), "{}", o.why.en);
    // a case within the limit must have been asked: skipping it is not a pass
    let o = judge_cases(vec![skipped(1.0, 3.0, 0.5)]);
    assert!(!o.pass);
    assert!(o.why.en.contains("was skipped although"), "{}", o.why.en);
}

// -------------------------------------------------------------------- call_windows

/// A `time_calls` trace: `calls + 1` calls, each between two clock reads (`reads[k]`,
/// `reads[k + 1]` when chained, else a pair per call) with a sync before each read.
fn timed_calls(durations: &[f64]) -> Vec<Event> {
    let mut ev = Vec::new();
    let mut t = 100.0;
    for (k, d) in durations.iter().enumerate() {
        ev.push(Event::new("sync"));
        ev.push(
            Event::new("timer")
                .with("clock", "perf_counter")
                .with("v", t),
        );
        ev.push(Event::new("step").with("id", k as i64));
        ev.push(Event::new("step_done").with("id", k as i64));
        ev.push(Event::new("sync"));
        t += d;
        ev.push(
            Event::new("timer")
                .with("clock", "perf_counter")
                .with("v", t),
        );
        t += 0.5; // time between calls, outside every window
    }
    ev
}

fn judge_call_windows(
    events: Vec<Event>,
    first: f64,
    steady: &[f64],
    calls: usize,
) -> checks::Outcome {
    let ex = L.exercise();
    let mut ev = Evidence::default();
    ev.obs.traces.insert("real.eager".into(), events);
    ev.obs
        .metrics
        .insert("real.eager.first_s".into(), json!(first));
    ev.obs
        .metrics
        .insert("real.eager.steady_s".into(), json!(steady));
    evaluate(
        &check(&format!(
            "{{call_windows: {{stream: real.eager, calls: {calls}}}}}"
        )),
        &Env {
            evidence: &ev,
            exercise: &ex,
        },
    )
}

#[test]
fn call_windows_ties_every_number_to_its_window() {
    // multiples of 1/64: exact in binary, so the rebuilt windows are exact
    let d = [3.0, 0.015625, 0.03125, 0.015625, 0.046875];
    let right = judge_call_windows(timed_calls(&d), d[0], &d[1..], 4);
    assert!(right.pass, "{:?}", right.why.en);
    assert_eq!(right.measured.en, "matching their window 5/5");

    // the real steady times halved: every one differs from its window, named with both numbers
    let halved: Vec<f64> = d[1..].iter().map(|x| x / 2.0).collect();
    let o = judge_call_windows(timed_calls(&d), d[0], &halved, 4);
    assert!(!o.pass);
    assert!(
        o.why.en.contains(
            "steady_s[0] = 0.007812 s, but your clock reads around call 2 are 0.01562 s apart"
        ),
        "{}",
        o.why.en
    );

    // one extra call (a warm-up) and a steady list one short of `calls`
    let o = judge_call_windows(timed_calls(&d), d[0], &d[1..], 5);
    assert!(!o.pass);
    assert!(
        o.why
            .en
            .contains("fn was called 5 times; the contract says 1 + calls = 6"),
        "{}",
        o.why.en
    );
    assert!(
        o.why
            .en
            .contains("steady_s has 4 entries; expected calls = 5"),
        "{}",
        o.why.en
    );
}

/// Issue 39: chained `time.time()` stamps differenced with np.diff. Near 1.7e9 s a value resolves
/// ~0.24 µs (one unit in its last place), and the recorded value may come back a unit off through
/// JSON: each number equals its call's window to the clock's resolution at the values read, not
/// to a tolerance relative to the (small) duration. A number off by more than that still fails.
#[test]
fn call_windows_allow_for_the_clock_resolution_at_the_values_read() {
    let base = 1.7e9_f64;
    let ulp = |v: f64| f64::from_bits(v.to_bits() + 1) - v;
    let mut stamps = vec![base];
    for d in [2.5, 0.0021, 0.0019, 0.0023] {
        let last = *stamps.last().unwrap();
        stamps.push(last + d);
    }
    let mut ev = Vec::new();
    ev.push(Event::new("sync"));
    ev.push(
        Event::new("timer")
            .with("clock", "time")
            .with("v", stamps[0]),
    );
    for k in 0..4 {
        ev.push(Event::new("step").with("id", k as i64));
        ev.push(Event::new("step_done").with("id", k as i64));
        ev.push(Event::new("sync"));
        ev.push(
            Event::new("timer")
                .with("clock", "time")
                .with("v", stamps[k + 1]),
        );
    }
    let diffs: Vec<f64> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    // the student's values a unit off the recorded ones (each stamp's last bit)
    let off: Vec<f64> = stamps
        .windows(2)
        .map(|w| (w[1] + ulp(w[1])) - w[0])
        .collect();
    for numbers in [&diffs, &off] {
        let o = judge_call_windows(ev.clone(), numbers[0], &numbers[1..], 3);
        assert!(o.pass, "{}", o.why.en);
    }
    let shaved: Vec<f64> = diffs.iter().map(|d| d - 1e-5).collect();
    let o = judge_call_windows(ev, shaved[0], &shaved[1..], 3);
    assert!(!o.pass, "10 µs off is not the clock's resolution");
}

#[test]
fn call_windows_refuses_a_block_averaged_steady_list() {
    // first call timed alone, then the 4 later calls in one window, divided
    let mut ev = timed_calls(&[3.0]);
    ev.push(
        Event::new("timer")
            .with("clock", "perf_counter")
            .with("v", 200.0),
    );
    for k in 1..5 {
        ev.push(Event::new("step").with("id", k as i64));
        ev.push(Event::new("step_done").with("id", k as i64));
    }
    ev.push(Event::new("sync"));
    ev.push(
        Event::new("timer")
            .with("clock", "perf_counter")
            .with("v", 200.125),
    );
    let o = judge_call_windows(ev, 3.0, &[0.03125; 4], 4);
    assert!(!o.pass);
    assert!(
        o.why.en.contains("call 2 has no timed window of its own"),
        "{}",
        o.why.en
    );
    assert_eq!(o.measured.en, "matching their window 1/5");
}

// ------------------------------------------------------------------------ recorded observations

/// Every criterion's (status, why in English) on these observations.
fn grade_obs(obs: Observations) -> BTreeMap<String, (Status, String)> {
    L.grade_obs(obs)
        .into_iter()
        .map(|v| (v.id, (v.status, v.why.en)))
        .collect()
}

/// Failing criteria, tensor criteria left out (no tensors in a recorded run).
fn failing(v: &BTreeMap<String, (Status, String)>) -> Vec<String> {
    v.iter()
        .filter(|(id, (s, _))| *s == Status::Fail && !TENSOR_CRITERIA.contains(&id.as_str()))
        .map(|(k, _)| k.clone())
        .collect()
}

fn want(name: &str) -> Vec<String> {
    sorted(
        L.expected()[name]
            .iter()
            .filter(|id| !TENSOR_CRITERIA.contains(&id.as_str()))
            .cloned()
            .collect(),
    )
}

#[test]
fn recorded_solution_passes_every_criterion() {
    let v = grade_obs(L.recorded("solution"));
    assert_eq!(v.len(), L.rubric(&L.exercise()).criteria.len());
    assert!(failing(&v).is_empty(), "{v:#?}");
}

/// Red team 26: every call of the compiled model is served by compiled code (a graph ran, no
/// block ran as eager Python); one steady call run eagerly (dynamo past its recompile limit)
/// fails compiled_first_call_slow, whose evidence names the step.
#[test]
fn a_compiled_call_served_by_eager_code_fails() {
    let obs = L.recorded("solution");
    let steps = obs.traces["real.compiled"]
        .iter()
        .filter(|e| e.e == "step_done")
        .collect::<Vec<_>>();
    assert!(!steps.is_empty());
    assert!(
        steps
            .iter()
            .all(|e| e.fields["served"] == serde_json::json!(true)),
        "the solution's compiled calls are all served: {steps:?}"
    );
    let mut obs = obs;
    let e = obs
        .traces
        .get_mut("real.compiled")
        .unwrap()
        .iter_mut()
        .filter(|e| e.e == "step_done")
        .nth(7)
        .unwrap();
    e.fields.insert("served".into(), serde_json::json!(false));
    e.fields.insert("graphs".into(), serde_json::json!(0));
    e.fields.insert("eager_blocks".into(), serde_json::json!(4));
    let v = grade_obs(obs);
    assert_eq!(failing(&v), ["compiled_first_call_slow"]);
    assert!(
        v["compiled_first_call_slow"].1.contains("served=false"),
        "{:?}",
        v["compiled_first_call_slow"].1
    );
}

/// Red team 26: dynamo's settings a submission wrote (at import, or inside time_calls) are not
/// the grader's: its compile and every call of the compiled model run under the settings as they
/// were before the import, and the report names what was set aside.
#[test]
fn dynamo_settings_of_the_submission_never_reach_the_graders_compile() {
    for (name, key) in [
        ("redteam26_config_leak_dynamic", "assume_static_by_default"),
        // `recompile_limit` and its older name `cache_size_limit` are one setting
        ("redteam26_eager_steady_as_compiled", "_limit"),
    ] {
        let report = L.check().report(name);
        let restored = report["evidence"]["metrics"]["real.dynamo_restored"].to_string();
        assert!(restored.contains(key), "{name}: {restored}");
    }
    // the solution sets nothing: none restored (an empty list)
    let solution = L.check().report("solution");
    let restored = &solution["evidence"]["metrics"]["real.dynamo_restored"];
    assert!(
        restored.as_array().is_some_and(|a| a.is_empty()),
        "{restored}"
    );
}

/// Red team 35: what a submission set around a call it was handed never reaches the call. In the
/// course's Python, on a made-up ctx: no logger makes a record inside a sealed call (a DEBUG
/// handler of the submission's on dynamo's logger, which spun in every record of the grader's
/// compile), the body runs in the environment of before the submission (an empty inductor cache
/// folder set around the compiled first call), a step logger holding what logging never puts
/// there (a parent of the submission's, read in every `getEffectiveLevel()`) is put back whole for
/// the call, named to the integrity gate, and given back after, and nothing of the submission's is
/// freed inside the seal (red team 36: a key of its own in a logger's cache, its generator's
/// `finally` a spin, ran when the seal swept the caches), and torch's fp32 precision settings are
/// as before the submission (red team 37: one made every compile of the grader's cold), and so is
/// dynamo's frame callback (red team 37: the grader's step called from a compiled trampoline; red
/// team 39: unset before any other frame of the grader's, and named to the gate), and inference
/// mode (set aside); a call inside a functorch transform is refused (red team 39's `vmap`). Only
/// the seconds of setting these aside are the submission's (`aside_s`): a seal that set nothing
/// aside charges it none.
#[test]
fn a_sealed_call_runs_without_the_submissions_logging_environment_or_loggers() {
    let root = support::lesson::root();
    let script = r#"
import logging, os, sys, types
sys.path[:0] = ["exercises", "src/driver"]
import lib as grade_lib
seen = []
ctx = types.SimpleNamespace(granted=[0], tamper=seen.append, metric=lambda k, v: seen.append((k, v)),
                            ProbeFailed=RuntimeError, cost_clock=__import__("time").perf_counter)
with grade_lib.sealed(ctx) as plain:  # nothing of the submission's around it: nothing set aside
    pass
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
dynamo = logging.getLogger("torch._dynamo")
dynamo.setLevel(logging.DEBUG)
dynamo.addHandler(Keep())
os.environ["TORCHINDUCTOR_CACHE_DIR"] = "/nowhere"
class Parent:
    level = logging.DEBUG
torch_log = logging.getLogger("torch")
torch_log.__dict__["parent"] = Parent()  # as if written past the course's Python
def spin():
    try:
        yield
    finally:
        records.append("freed")
class Key:
    def __init__(self):
        self.gen = spin()
        next(self.gen)
    def __le__(self, other):
        return False
    def __ge__(self, other):
        return False
graph_log = logging.getLogger("torch.autograd.graph")
graph_log.setLevel(logging.DEBUG)  # set aside for the call, its cache with it
graph_log.isEnabledFor(Key())  # a key of the submission's in that cache: never freed by the grader
import torch
torch.backends.cudnn.fp32_precision = "ieee"  # a key of inductor's cache (red team 37)
fp32 = lambda: torch._C._get_fp32_precision_getter("cuda", "matmul")
frames = torch._C._dynamo.eval_frame
frames.set_eval_frame(False)  # a frame callback of dynamo's ("run only") around the call (red team 37)
with grade_lib.sealed(ctx) as seal:
    dynamo.debug("inside"); dynamo.critical("inside")
    inside = (os.environ.get("TORCHINDUCTOR_CACHE_DIR"), type(torch_log.parent).__name__, graph_log.level, fp32(),
              frames.get_eval_frame_callback())
hook = frames.set_eval_frame(None)
dynamo.debug("after")
print(records, inside, (os.environ.get("TORCHINDUCTOR_CACHE_DIR"), type(torch_log.parent).__name__,
                        graph_log.level, fp32(), hook))
print([s if isinstance(s, tuple) else s.split(" held ")[0] for s in seen])
print("aside_s:", plain.aside_s == 0.0, seal.aside_s > 0.0)
def under_vmap(t):  # a functorch transform around the call: refused (red team 39)
    with grade_lib.sealed(ctx):
        pass
    return t
try:
    torch.vmap(under_vmap)(torch.ones(2))
    refused = False
except RuntimeError as e:
    refused = "vmap" in str(e)
dynamo.debug("after a refusal")  # records again, the seal undone
with torch.inference_mode():  # set aside for the call, not refused: a careful timer may use it
    with grade_lib.sealed(ctx):
        inference = [torch.is_inference_mode_enabled()]
    inference.append(torch.is_inference_mode_enabled())
print("vmap refused:", refused, records[-1], "inference mode inside, after:", inference,
      "named:", any("inside a functorch transform" in str(x) for x in seen))
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
        "['after'] (None, 'RootLogger', 0, 'none', None) ('/nowhere', 'Parent', 10, 'ieee', False)\n\
         [\"a call the grader handed over was made from code dynamo compiled (torch.compile around the call): \
         dynamo would convert the grader's own frames inside it\", \"torch's logger 'torch'\", \
         ('aside.environment', ['TORCHINDUCTOR_CACHE_DIR'])]\n\
         aside_s: True True\n\
         vmap refused: True after a refusal inference mode inside, after: [False, True] named: True"
    );
}

/// ... and graded end to end: red team 35's environment was set aside (the evidence names it),
/// and the grader's batch carrying dynamo's marks was run as the grader's own copy.
#[test]
fn red_team_35s_environment_and_marks_never_reach_the_graders_calls() {
    let metrics = |name: &str| L.check().report(name)["evidence"]["metrics"].clone();
    let env = metrics("redteam35_env_cold_cache");
    let aside = env["aside.environment"].to_string();
    assert!(aside.contains("TORCHINDUCTOR_CACHE_DIR"), "{aside}");
    let marks = metrics("redteam35_mark_dynamic_input");
    assert!(
        marks["real.compiled.marked_inputs_set_aside"].as_u64() > Some(0),
        "{}",
        marks["real.compiled.marked_inputs_set_aside"]
    );
    let solution = metrics("solution");
    assert!(
        solution["aside.environment"].is_null(),
        "{}",
        solution["aside.environment"]
    );
    assert_eq!(solution["real.compiled.marked_inputs_set_aside"], 0);
}

#[test]
fn recorded_starter_fails_what_expected_yaml_says() {
    let v = grade_obs(L.recorded("starter"));
    assert_eq!(failing(&v), want("starter"));
    assert!(v["first_call_alone"]
        .1
        .contains("NotImplementedError: TODO: time_calls("));
}

/// A recorded fixture fails exactly its expected criteria, and `id`'s reason contains `says`.
fn recorded_fixture(name: &str, id: &str, says: &str) {
    let v = grade_obs(L.recorded(name));
    assert_eq!(failing(&v), want(name), "{name}: {v:#?}");
    assert!(v[id].1.contains(says), "{name}: {id} says {:?}", v[id].1);
}

#[test]
fn recorded_first_in_steady_is_named() {
    recorded_fixture(
        "first_in_steady",
        "steady_after_first",
        "the steady list has one extra entry, the first (compiling) call",
    );
}

#[test]
fn recorded_no_sync_is_named() {
    recorded_fixture(
        "no_sync",
        "first_call_alone",
        "that is the first call read without sync()",
    );
    recorded_fixture(
        "no_sync",
        "steady_after_first",
        "every entry is only the launch overhead",
    );
}

/// Its recording: the `sim`, `break_even` and `real` parts from a grading before lesson 05's
/// compile watch existed; its `shapes.*` part (the same `compile_for_shapes` as the solution's)
/// copied from the solution's recording, because re-recording it timed out (900 s) at load 38;
/// its audit (no finding: `src/driver/audit.py` on the fixture) likewise.
#[test]
fn recorded_warmup_before_first_is_named() {
    recorded_fixture(
        "warmup_before_first",
        "first_call_alone",
        "an untimed call first",
    );
}

#[test]
fn recorded_never_none_shows_the_case() {
    recorded_fixture("never_none", "break_even_exact", "expected None");
}

fn set(obs: &mut Observations, key: &str, v: Value) {
    assert!(obs.metrics.contains_key(key), "no metric {key}");
    obs.metrics.insert(key.into(), v);
}

#[test]
fn whole_block_averages_are_named() {
    let mut obs = L.recorded("solution");
    let alt = obs.metrics["sim.mistake.block"].clone();
    set(&mut obs, "sim.steady_s", alt);
    let v = grade_obs(obs);
    assert_eq!(v["steady_after_first"].0, Status::Fail);
    assert!(v["steady_after_first"]
        .1
        .contains("timed as one block and divided"));
}

/// Red team 15: a compiled model that no backend compiled (a compiler stance, dynamo's cache
/// limits at 0) is no compiled model, however slow its first call was made to look.
#[test]
fn a_compiled_model_nothing_compiled_fails() {
    let mut obs = L.recorded("solution");
    set(&mut obs, "real.compiles_during", json!(0));
    let v = grade_obs(obs);
    assert_eq!(v["compiled_first_call_slow"].0, Status::Fail);
    assert!(
        v["compiled_first_call_slow"]
            .1
            .contains("real.compiles_during"),
        "{}",
        v["compiled_first_call_slow"].1
    );
}

#[test]
fn nanosecond_rounding_passes_and_a_wrong_value_fails() {
    let mut obs = L.recorded("solution");
    let mut xs: Vec<f64> = obs.metrics["sim.steady_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    xs[0] += 1e-9; // a `_ns` clock's rounding
    set(&mut obs, "sim.steady_s", json!(xs.clone()));
    assert_eq!(grade_obs(obs.clone())["steady_after_first"].0, Status::Pass);
    xs[1] *= 1.01;
    set(&mut obs, "sim.steady_s", json!(xs));
    assert_eq!(grade_obs(obs)["steady_after_first"].0, Status::Fail);
}

/// The recorded solution's `shapes.dynamo` trace, edited by `f`.
fn with_dynamo(f: impl FnOnce(&mut Vec<Event>)) -> BTreeMap<String, (Status, String)> {
    let mut obs = L.recorded("solution");
    f(obs
        .traces
        .get_mut("shapes.dynamo")
        .expect("a shapes.dynamo trace"));
    grade_obs(obs)
}

#[test]
fn recorded_solution_compiles_one_graph_that_serves_every_shape() {
    let obs = L.recorded("solution");
    let tr = &obs.traces["shapes.dynamo"];
    let graphs: Vec<&Event> = tr.iter().filter(|e| e.e == "graph").collect();
    assert_eq!(graphs.len(), 1, "{tr:?}");
    assert_eq!(graphs[0].field_str("frame"), Some("forward"));
    assert!(
        graphs[0].fields["ops"].as_u64().unwrap() > 20,
        "{:?}",
        graphs[0]
    );
    let calls: Vec<&Event> = tr.iter().filter(|e| e.e == "call").collect();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|e| e.fields["compiled"] == json!(true)));
}

#[test]
fn a_recompile_storm_fails_with_the_count() {
    let v = with_dynamo(|tr| {
        let g = tr.iter().find(|e| e.e == "graph").unwrap().clone();
        tr.extend([g.clone(), g.clone(), g]);
    });
    assert_eq!(v["no_recompile_storm"].0, Status::Fail);
    assert!(
        v["no_recompile_storm"]
            .1
            .contains("4 `graph` events, expected ∈ [1, 2]"),
        "{}",
        v["no_recompile_storm"].1
    );
}

#[test]
fn a_graph_break_fails_however_dynamo_files_it() {
    // a resume frame (torch 2.13 counts a data-dependent branch under counters["unimplemented"],
    // not counters["graph_break"]; the grader sees the frame dynamo resumes in)
    let v = with_dynamo(|tr| {
        tr.push(
            Event::new("graph_break")
                .with("frame", "torch_dynamo_resume_in_forward_at_9")
                .with("why", "dynamo resumed after a graph break"),
        )
    });
    assert_eq!(v["no_recompile_storm"].0, Status::Fail);
    assert!(
        v["no_recompile_storm"]
            .1
            .contains("1 `graph_break` events, expected ≤ 0"),
        "{}",
        v["no_recompile_storm"].1
    );
}

#[test]
fn eager_calls_fail_whatever_was_compiled() {
    // the eager model handed back (a forged counter changes nothing the grader reads): no graph,
    // no compiled region in any call
    let v = with_dynamo(|tr| tr.retain(|e| e.e != "graph"));
    assert_eq!(v["no_recompile_storm"].0, Status::Fail);
    assert!(v["no_recompile_storm"].1.contains("0 `graph` events"));
    // a graph compiled on the side, but eager code served the calls
    let v = with_dynamo(|tr| {
        for e in tr.iter_mut().filter(|e| e.e == "call") {
            e.fields.insert("compiled".into(), json!(false));
        }
    });
    assert_eq!(v["no_recompile_storm"].0, Status::Fail);
    assert!(
        v["no_recompile_storm"]
            .1
            .contains("0 `call` events (compiled=true), expected = 4"),
        "{}",
        v["no_recompile_storm"].1
    );
}

#[test]
fn a_patched_dynamo_watch_fails() {
    let mut obs = L.recorded("solution");
    set(
        &mut obs,
        "shapes.watch",
        json!("patched in compile_for_shapes()"),
    );
    let v = grade_obs(obs);
    assert_eq!(v["no_recompile_storm"].0, Status::Fail);
    assert!(v["no_recompile_storm"]
        .1
        .contains("patched in compile_for_shapes()"));
}

#[test]
fn a_bare_tensor_from_f_fails_shapes_agree() {
    let mut obs = L.recorded("solution");
    set(&mut obs, "shapes.returns", json!("Tensor"));
    let v = grade_obs(obs);
    assert_eq!(v["shapes_agree"].0, Status::Fail);
    assert!(
        v["shapes_agree"]
            .1
            .contains("shapes.returns is Tensor; expected = (Tensor, None)"),
        "{}",
        v["shapes_agree"].1
    );
}

#[test]
fn real_numbers_are_tied_to_their_windows() {
    // the recorded solution's real steady times, halved: each is named against its window
    let mut obs = L.recorded("solution");
    let halved: Vec<f64> = obs.metrics["real.compiled.steady_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() / 2.0)
        .collect();
    set(&mut obs, "real.compiled.steady_s", json!(halved));
    let v = grade_obs(obs);
    assert_eq!(v["real_calls_match_windows"].0, Status::Fail);
    assert!(
        v["real_calls_match_windows"]
            .1
            .contains("compiled: steady_s[0] = "),
        "{}",
        v["real_calls_match_windows"].1
    );
}

#[test]
fn a_call_that_raised_inside_fn_is_a_call_made() {
    // a hidden warm-up on an input that makes the model raise: its `step` has no `step_done`
    let mut obs = L.recorded("solution");
    let tr = obs
        .traces
        .get_mut("real.eager")
        .expect("a real.eager trace");
    tr.insert(
        0,
        Event::new("step")
            .with("id", 999)
            .with("inputs", json!({"idx": "other"})),
    );
    let v = grade_obs(obs);
    assert_eq!(v["real_calls_match_windows"].0, Status::Fail);
    assert!(
        v["real_calls_match_windows"]
            .1
            .contains("eager: fn was called 52 times (1 of them raised inside fn: call 1)"),
        "{}",
        v["real_calls_match_windows"].1
    );
}

/// The recorded solution with `secs` of the submission's own time (a sleep) added before the read
/// that closes the window of each call `calls` (0: the first call) of the eager model.
fn with_stretched_windows(calls: &[usize], secs: f64) -> BTreeMap<String, (Status, String)> {
    let mut obs = L.recorded("solution");
    let tr = obs
        .traces
        .get_mut("real.eager")
        .expect("a real.eager trace");
    for &k in calls {
        let done = tr
            .iter()
            .enumerate()
            .filter(|(_, e)| e.e == "step_done")
            .nth(k)
            .map(|(i, _)| i)
            .unwrap();
        let close = (done..tr.len()).find(|&i| tr[i].e == "timer").unwrap();
        assert!(tr[close].fields["c"].is_f64(), "a cost stamp on the read");
        // every later stamp moves with it (the window's own time grows, no other's)
        for e in tr[close..].iter_mut() {
            if let Some(x) = e.fields.get("c").and_then(|v| v.as_f64()) {
                e.fields.insert("c".into(), json!(x + secs));
            }
            for key in ["c0", "c1"] {
                if let Some(x) = e.fields.get(key).and_then(|v| v.as_f64()) {
                    e.fields.insert(key.into(), json!(x + secs));
                }
            }
        }
    }
    grade_obs(obs)
}

#[test]
fn a_window_stretched_with_idle_time_is_not_its_call() {
    // 10 ms of the submission's own time (a sleep) before the read that closes a window: the number
    // is still the two reads' difference, but not that call's timing. One steady window of fifty
    // may be a stall of the machine's (it cannot move the median; the mean rule counts it); two
    // may not, nor the first call's window, which is its number alone
    let one = with_stretched_windows(&[1], 0.01);
    assert_eq!(
        one["real_calls_match_windows"].0,
        Status::Pass,
        "{}",
        one["real_calls_match_windows"].1
    );
    for (calls, says) in [
        (vec![1, 2], "eager: steady_s[1]'s window lasted"),
        (vec![0], "eager: first_s's window lasted"),
    ] {
        let v = with_stretched_windows(&calls, 0.01);
        assert_eq!(v["real_calls_match_windows"].0, Status::Fail, "{calls:?}");
        assert!(
            v["real_calls_match_windows"].1.contains(says),
            "{calls:?}: {}",
            v["real_calls_match_windows"].1
        );
    }
    // the mean rule still holds the one stall: 50 ms of it is more than the windows' mean allows
    let long = with_stretched_windows(&[1], 0.05);
    assert_eq!(long["real_calls_match_windows"].0, Status::Fail);
    assert!(
        long["real_calls_match_windows"]
            .1
            .contains("mean of your own code's seconds"),
        "{}",
        long["real_calls_match_windows"].1
    );
}

#[test]
fn a_measured_case_left_out_when_time_calls_failed() {
    // the real probe failed (a broken time_calls): break_even_exact judges the hidden cases alone
    let mut obs = L.recorded("solution");
    obs.traces.remove("real.break_even");
    if let Some(p) = obs.probes.get_mut("real") {
        *p = serde_json::from_value(
            json!({"ok": false, "error": "TypeError: boom", "seconds": 1.0}),
        )
        .unwrap();
    }
    let v = grade_obs(obs);
    assert_eq!(
        v["break_even_exact"].0,
        Status::Pass,
        "{}",
        v["break_even_exact"].1
    );
    assert!(
        v["break_even_exact"].1.contains("no measured case"),
        "{}",
        v["break_even_exact"].1
    );
}

// ------------------------------------------------------------------------ end to end

fn explain(report: &Value) -> String {
    let mut lines: Vec<String> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "FAIL")
        .map(|v| {
            format!(
                "FAIL {}: {} [{}]",
                v["id"], v["why"]["en"], v["measured"]["en"]
            )
        })
        .collect();
    lines.push(format!("run_failure: {}", report["run_failure"]));
    lines.push(format!("stderr: {}", report["stderr_tail"]));
    lines.join("\n")
}

/// `grade check 05-compile` (the real binary, once; tests/support/lesson.rs): the solution, the
/// starter and every fixture, each failing exactly what tests/fixtures/05-compile/expected.yaml
/// lists (the one place expectations live), every criterion failed by some fixture, every README
/// mistake mapped; each verdict table is a snapshot. One grading per core: every timing
/// criterion here is exact (virtual clock) or a ratio within one run, and they hold at load 10+.
#[test]
fn grade_check_proves_the_lesson() {
    for (name, table) in L.check().assert_proves_the_lesson(&[]) {
        insta::assert_snapshot!(format!("{ID}__{name}"), table);
    }
    // the starter explains itself: its failures name the missing function
    let starter = L.check().report("starter");
    let why = starter["verdicts"][0]["why"]["en"].as_str().unwrap();
    assert!(
        why.contains("NotImplementedError: TODO: time_calls("),
        "{why}"
    );
}

/// Every fixture file has an entry in expected.yaml and every entry a file.
#[test]
fn every_fixture_is_listed() {
    let files: BTreeSet<String> = std::fs::read_dir(root().join(format!("tests/fixtures/{ID}")))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".py")
                .map(str::to_string)
        })
        .collect();
    let listed: BTreeSet<String> = L
        .expected()
        .into_keys()
        .filter(|k| k != "solution" && k != "starter")
        .collect();
    assert_eq!(files, listed);
}

/// A student's run gets a private copy of the shared compile cache: what it writes there (a
/// planted artefact) never reaches the shared folder other runs load from; a trusted run (the
/// course's own solution) writes the shared folder itself. With the course's Python off
/// (`GRADE_POLICY=off`): it refuses any write into the grader's cache before the sandbox is
/// needed (red team 41; the `redteam41_*` fixtures), so the sandbox is met here on its own.
#[test]
fn a_student_cannot_write_the_shared_compile_cache() {
    let (shared, headers) = course_cache();
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(["exercise", ID, "--device", "cpu", "--format", "json"])
        .arg("--submission")
        .arg(root().join("tests/fixtures/hostile/poison_compile_cache.py"))
        .env("GRADE_ROOT", root())
        .env("GRADE_POLICY", "off")
        .env("GRADE_COMPILE_CACHE", shared.path())
        .env_remove("GRADE_PYTHON")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stderr_tail = report["stderr_tail"].to_string();
    assert!(
        stderr_tail.contains("planted in"),
        "the attack wrote its own copy: {stderr_tail}"
    );
    assert!(
        report["verdicts"][0]["why"]["en"]
            .as_str()
            .unwrap()
            .contains("poison_compile_cache: no answer"),
        "{}",
        explain(&report)
    );
    assert!(
        stderr_tail.contains("h.h.gch"),
        "the attack reached the header: {stderr_tail}"
    );
    assert_untouched(shared.path(), &headers, &stderr_tail);
}

/// The same attack from a class graded by `grade batch`, whose runs fork from a warm interpreter:
/// a student's run forks from the zygote of students' runs, whose sandbox cannot write the shared
/// cache (the course's own runs, in `grade check`, fork from another one that can), so nothing it
/// plants or overwrites reaches the shared folder.
#[test]
fn a_batch_student_cannot_write_the_shared_compile_cache() {
    let (shared, headers) = course_cache();
    let class = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(class.path().join("mallory")).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/hostile/poison_compile_cache.py"),
        class.path().join("mallory/exercise.py"),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(["batch", "--exercise", ID, "--device", "cpu", "--seed", "11"])
        .arg(class.path())
        .arg("--out")
        .arg(out.path())
        .env("GRADE_ROOT", root())
        .env("GRADE_COMPILE_CACHE", shared.path())
        .env_remove("GRADE_PYTHON")
        .env_remove("GRADE_ZYGOTE")
        .env("CI", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the student's run fails ({stderr})"
    );
    let grades: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("grades.json")).unwrap()).unwrap();
    let row = &grades["grades"][0];
    assert_eq!(row["student"], "mallory", "{grades}");
    assert_eq!(row["outcome"], "graded", "{grades}");
    assert_untouched(shared.path(), &headers, &stderr);
}

/// A shared compile cache as the course's runs leave it: a file of theirs and a precompiled header
/// (which a student's run reads in place, a link, where Landlock is). Returns it and its headers'
/// folder.
fn course_cache() -> (tempfile::TempDir, PathBuf) {
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("from-the-course"), "warm").unwrap();
    let headers = shared.path().join("precompiled_headers");
    std::fs::create_dir_all(&headers).unwrap();
    std::fs::write(headers.join("h.h.gch"), "compiled by the course").unwrap();
    (shared, headers)
}

/// `course_cache()` after a student's `poison_compile_cache` run: nothing planted, nothing
/// overwritten (`why`: the run's stderr, for the messages).
fn assert_untouched(shared: &std::path::Path, headers: &std::path::Path, why: &str) {
    let planted: Vec<_> = walk(shared)
        .into_iter()
        .filter(|p| p.ends_with("planted-by-a-student"))
        .collect();
    assert!(
        planted.is_empty(),
        "planted in the shared cache: {planted:?}"
    );
    assert!(
        shared.join("from-the-course").exists(),
        "the shared cache is left as it was ({why})"
    );
    assert_eq!(
        std::fs::read_to_string(headers.join("h.h.gch")).unwrap(),
        "compiled by the course",
        "a student's run wrote the shared precompiled header ({why})"
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            all.extend(walk(&e.path()));
        } else {
            all.push(e.path());
        }
    }
    all
}
