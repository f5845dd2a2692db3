//! Lesson 03 (03-memory): the `ledger` and `growth` check kinds and the lesson's rubric on recorded
//! observations (pure Rust, exact, fast), and one end-to-end test that grades the solution, the
//! starter and every fixture with the real binary (each must fail exactly the criteria of
//! tests/fixtures/03-memory/expected.yaml; verdict tables are insta snapshots).
mod support;
use grade::checks::growth::{degree, law_name};
use grade::checks::ledger::{activation_bytes, optimizer_state_bytes, param_bytes};
use grade::checks::{self, fmt_num, Env, Status, Verdict};
use grade::observations::{Evidence, Observations};
use grade::runner::Device;
use grade::spec::{Exercise, Rubric};
use serde_json::{json, Value};
use support::lesson::{root, why, Lesson};

const ID: &str = "03-memory";
const L: Lesson = Lesson(ID);
/// The seed tests/recorded/03-memory.*.json were recorded with (`--seed`): it fixes the model's
/// shape (drawn from exercise.yaml `model_draw:`) and the sweep's grid.
const SEED: u64 = 3;

/// The exercise as graded under the recorded seed (its drawn model shape).
fn recorded_exercise() -> Exercise {
    let mut ex = L.exercise();
    ex.model = ex.model_for(SEED);
    ex
}

fn grade_obs(obs: Observations) -> Vec<Verdict> {
    let ex = recorded_exercise();
    let rubric = Rubric::load(&root().join(format!("rubrics/{ID}.yaml")), &ex).unwrap();
    let evidence = Evidence {
        obs,
        ..Default::default()
    };
    checks::grade(
        &rubric,
        &Env {
            evidence: &evidence,
            exercise: &ex,
        },
        Device::Cpu,
    )
}

fn verdict<'a>(vs: &'a [Verdict], id: &str) -> &'a Verdict {
    vs.iter().find(|v| v.id == id).unwrap()
}

/// Failing ids, without step_matches_reference (recorded observations carry no tensors).
fn failing(vs: &[Verdict]) -> Vec<&str> {
    vs.iter()
        .filter(|v| v.status == Status::Fail && v.id != "step_matches_reference")
        .map(|v| v.id.as_str())
        .collect()
}

/// What the draws of the grader's row of ledger call `trace` (`ledger.adam` → `grader.adam`) take
/// off the optimizer's state (negative: the grader's tag in the state adds its bytes).
fn state_taken_off(obs: &Observations, trace: &str) -> i64 {
    let grader = trace.replace("ledger.", "grader.");
    obs.traces[&grader][0].fields["dropped_state"]
        .as_i64()
        .unwrap()
}

fn rows_mut<'a>(obs: &'a mut Observations, trace: &str) -> &'a mut Vec<grade::observations::Event> {
    obs.traces.get_mut(trace).unwrap()
}

// ------------------------------------------------------------------------------ Rust truths

#[test]
fn ledger_truths_from_the_model_shape() {
    let cfg = L.exercise().model;
    // 236,928 float32 parameters in 53 tensors (vocab 256, seq_len 64, d_model 64, 4 blocks)
    assert_eq!(param_bytes(&cfg), (947_712, 53));
    assert_eq!(
        optimizer_state_bytes(&cfg, "adam"),
        Some(2 * 947_712 + 4 * 53)
    );
    assert_eq!(optimizer_state_bytes(&cfg, "sgd_momentum"), Some(947_712));
    assert_eq!(optimizer_state_bytes(&cfg, "rmsprop"), None);
}

#[test]
fn the_shape_is_drawn_from_the_seed() {
    // every grading draws vocab, d_model, n_heads and n_blocks from model_draw (seq_len and batch
    // stay): the same seed gives the same shape, the seeds cover the choices, and no drawn shape
    // has the bytes of the default `model:` one (so a table pasted from it always fails)
    let ex = L.exercise();
    let draw = ex.model_draw.clone().expect("03-memory draws its model");
    assert_eq!(ex.model_for(7), ex.model_for(7));
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..2000u64 {
        let m = ex.model_for(seed);
        assert!(draw.vocab.contains(&m.vocab) && draw.d_model.contains(&m.d_model));
        assert!(draw.n_heads.contains(&m.n_heads) && draw.n_blocks.contains(&m.n_blocks));
        assert_eq!((m.seq_len, m.batch), (ex.model.seq_len, ex.model.batch));
        assert_eq!(m.d_model % m.n_heads, 0);
        seen.insert((m.vocab, m.d_model, m.n_heads, m.n_blocks));
    }
    let all = draw.vocab.len() * draw.d_model.len() * draw.n_heads.len() * draw.n_blocks.len();
    assert_eq!(
        seen.len(),
        all,
        "2000 seeds reach every one of the {all} shapes"
    );
    let default = param_bytes(&ex.model).0;
    for (v, d, h, l) in seen {
        let mut m = ex.model.clone();
        (m.vocab, m.d_model, m.n_heads, m.n_blocks) = (v, d, h, l);
        assert_ne!(param_bytes(&m).0, default, "{m:?}");
        assert_ne!(
            activation_bytes(&m, 4, 64),
            activation_bytes(&ex.model, 4, 64)
        );
    }
}

#[test]
fn a_bad_model_draw_is_a_spec_error() {
    // every drawn shape must be a valid model: a d_model some n_heads does not divide is refused
    // at load time, with the line
    let dir = std::env::temp_dir()
        .join(format!("grade-lesson03-draw-{}", std::process::id()))
        .join(ID);
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = std::fs::read_to_string(root().join("exercises").join(ID).join("exercise.yaml"))
        .unwrap()
        .replace("d_model: [48, 56, 64]", "d_model: [48, 56, 90]");
    std::fs::write(dir.join("exercise.yaml"), yaml).unwrap();
    let err = Exercise::load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("d_model 90 is not divisible by n_heads 4"),
        "{err}"
    );
    std::fs::remove_dir_all(dir.parent().unwrap()).ok();
}

#[test]
fn rust_truths_equal_what_python_measured() {
    // the solution's Python ledgers (recorded) agree with the Rust truths for the drawn shape:
    // two independent accounts
    let obs = L.recorded("solution");
    let cfg = recorded_exercise().model;
    assert_ne!(
        cfg,
        L.exercise().model,
        "the recorded seed drew another shape"
    );
    for (trace, opt) in [("ledger.adam", "adam"), ("ledger.sgd", "sgd_momentum")] {
        let row = &obs.traces[trace][0];
        // and the grader's own parameter in the case's model (`head.grader_tag`, drawn per row)
        let grader = trace.replace("ledger.", "grader.");
        let extra = obs.traces[&grader][0].fields["params_extra"]
            .as_i64()
            .unwrap();
        assert!(extra > 0, "{trace}: no grader's parameter");
        assert_eq!(row.fields["params"], json!(param_bytes(&cfg).0 + extra));
        assert_eq!(row.fields["grads"], json!(param_bytes(&cfg).0));
        // the state also holds the grader's tag (drawn per row: its bytes are the grader row's
        // negative `dropped_state`, nothing being taken off in the first ledgers)
        let tag = -state_taken_off(&obs, trace);
        assert!(tag > 0, "{trace}: no tag in the optimizer's state");
        assert_eq!(
            row.fields["optimizer_state"],
            json!(optimizer_state_bytes(&cfg, opt).unwrap() + tag)
        );
    }
}

#[test]
fn activation_formula_equals_every_measured_row() {
    // the grader's saved_tensors_hooks measurement (Python) and the op-by-op formula (Rust) agree
    // on every row it recorded (single ledgers, the repeated ledger's case and the whole sweep),
    // once the tag of the grader's that each row's forwards save (`tag`, drawn per row) is
    // taken off; the submission's rows are held to these by the ledger check
    let obs = L.recorded("solution");
    let cfg = recorded_exercise().model;
    let mut n = 0;
    let mut tags = std::collections::BTreeSet::new();
    for trace in [
        "grader.adam",
        "grader.sgd",
        "grader.adam_again",
        "sweep.grader",
    ] {
        for r in &obs.traces[trace] {
            let (b, t) = (
                r.fields["batch"].as_i64().unwrap(),
                r.fields["seq_len"].as_i64().unwrap(),
            );
            let tag = r.fields["tag"].as_i64().unwrap();
            assert!(
                tag > 4 * cfg.d_model,
                "{trace}: a tag's storage is larger than its view"
            );
            tags.insert(tag);
            assert_eq!(
                r.fields["activations"].as_i64().unwrap() - tag,
                activation_bytes(&cfg, b, t),
                "{trace} B={b} T={t}"
            );
            n += 1;
        }
    }
    assert_eq!(n, 3 + 12);
    // drawn per row (each call and shape): one row's measurement prices no other
    assert_eq!(tags.len(), 3 + 12, "one tag per row: {tags:?}");
    // the repeated ledger's case is another shape than the first
    let (first, again) = (
        &obs.traces["grader.adam"][0],
        &obs.traces["grader.adam_again"][0],
    );
    assert_ne!(
        (&first.fields["batch"], &first.fields["seq_len"]),
        (&again.fields["batch"], &again.fields["seq_len"])
    );
    // the laws, read off the formula: linear in B (slope a·T² + b·T), quadratic in T
    assert_eq!(activation_bytes(&L.exercise().model, 4, 64), 5_675_556);
}

// ---------------------------------------------------------------------------------- growth

#[test]
fn degree_is_exact() {
    let pts =
        |f: &dyn Fn(i64) -> i64, xs: &[i64]| xs.iter().map(|&x| (x, f(x))).collect::<Vec<_>>();
    let xs = [8, 16, 32, 64];
    assert_eq!(degree(&pts(&|_| 7, &xs)).unwrap().0, 0);
    assert_eq!(
        degree(&pts(&|x| 3 * x + 100, &xs)).unwrap().0,
        1,
        "affine is linear"
    );
    let (d, lead) = degree(&pts(&|x| 5 * x * x + 3 * x + 1, &xs)).unwrap();
    assert_eq!(
        (d, lead.to_f64()),
        (2, 5.0),
        "leading coefficient of a quadratic"
    );
    assert_eq!(degree(&pts(&|x| x * x * x, &[1, 2, 3, 4, 5])).unwrap().0, 3);
    // unsorted and duplicate-free points give the same answer
    assert_eq!(degree(&[(4, 12), (1, 3), (2, 6)]).unwrap().0, 1);
    // three points cannot confirm a quadratic: at least degree 2, more points needed
    assert_eq!(degree(&pts(&|x| x * x, &[1, 2, 3])), Err(2));
    // off by one byte is no longer a low-degree polynomial
    assert!(degree(&[(8, 100), (16, 200), (32, 401)]).is_err());
    assert_eq!(law_name(1), "linear");
    assert_eq!(law_name(2), "quadratic");
}

/// The recorded grader sweep's grid: sorted distinct batches and seq_lens.
fn grid(obs: &Observations) -> (Vec<i64>, Vec<i64>) {
    let rows = &obs.traces["sweep.grader"];
    let axis = |k: &str| {
        let mut v: Vec<i64> = rows.iter().map(|r| r.fields[k].as_i64().unwrap()).collect();
        v.sort();
        v.dedup();
        v
    };
    (axis("batch"), axis("seq_len"))
}

#[test]
fn grader_sweep_is_linear_in_batch_and_quadratic_in_seq_len() {
    let obs = L.recorded("solution");
    let rows = &obs.traces["sweep.grader"];
    let (bs, ts) = grid(&obs);
    assert_eq!(
        (bs.len(), ts.len(), rows.len()),
        (3, 4, 12),
        "a 3 × 4 grid drawn from the seed"
    );
    let v = |b: i64, t: i64| {
        &rows
            .iter()
            .find(|r| r.fields["batch"] == json!(b) && r.fields["seq_len"] == json!(t))
            .unwrap()
            .fields
    };
    // each row less its tag (drawn per row: part of the measurement, of no law)
    let v = |b: i64, t: i64| {
        let f = v(b, t);
        f["activations"].as_i64().unwrap() - f["tag"].as_i64().unwrap()
    };
    for &t in &ts {
        let pts: Vec<(i64, i64)> = bs.iter().map(|&b| (b, v(b, t))).collect();
        assert_eq!(degree(&pts).unwrap().0, 1);
    }
    for &b in &bs {
        let pts: Vec<(i64, i64)> = ts.iter().map(|&t| (t, v(b, t))).collect();
        assert_eq!(degree(&pts).unwrap().0, 2);
    }
}

// ------------------------------------------------------------------------- rubric, recorded

#[test]
fn a_cached_rerun_fails_reproducible() {
    // the repeated ledger runs its step but returns the first call's entries: its case is
    // another shape with another tag, so the cached activations are not the grader's
    let mut obs = L.recorded("solution");
    let first = obs.traces["ledger.adam"][0].fields["activations"].clone();
    rows_mut(&mut obs, "ledger.adam_again")[0]
        .fields
        .insert("activations".into(), first);
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["ledger_reproducible"]);
    let why = &verdict(&vs, "ledger_reproducible").why.en;
    assert!(
        why.contains("ledger.adam_again B=") && why.contains("activations"),
        "{why}"
    );
}

#[test]
fn an_entry_wrong_the_first_time_is_judged_again_too() {
    // a method that is wrong on the first case (activations off) is wrong on the repeated case
    // too, and both say so (issue 38, round 4: skipping it let a first call 4 B off make the
    // repeat's cached number pass as measured again)
    let mut obs = L.recorded("solution");
    for trace in ["ledger.adam", "ledger.adam_again"] {
        let row = &mut rows_mut(&mut obs, trace)[0];
        let a = row.fields["activations"].as_i64().unwrap();
        row.fields.insert("activations".into(), json!(a + 8));
    }
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["activations_exact", "ledger_reproducible"]);
    let why = &verdict(&vs, "ledger_reproducible").why.en;
    assert!(
        why.contains("ledger.adam_again B=") && why.contains("activations"),
        "{why}"
    );
}

/// `trace` without the `step_done` events of the steps whose forward ran at (b, t).
fn drop_steps_at(obs: &mut Observations, trace: &str, b: i64, t: i64) -> usize {
    let events = rows_mut(obs, trace);
    let mut ids = Vec::new();
    let mut at = false;
    for e in events.iter() {
        match e.e.as_str() {
            "shape" => {
                at =
                    e.fields["batch"].as_i64() == Some(b) && e.fields["seq_len"].as_i64() == Some(t)
            }
            "step" if at => {
                ids.push(e.fields["id"].clone());
                at = false;
            }
            _ => {}
        }
    }
    events.retain(|e| !(e.e == "step_done" && ids.contains(&e.fields["id"])));
    ids.len()
}

#[test]
fn unmeasured_sweep_points_fail_the_sweep() {
    // a grid point whose forward was never followed by its loss's backward (a forward only, a
    // no_grad forward, or no case run at all): its row is not a measured step
    let mut obs = L.recorded("solution");
    let (bs, ts) = grid(&obs);
    assert_eq!(drop_steps_at(&mut obs, "sweep.calls", bs[1], ts[2]), 1);
    let vs = grade_obs(obs);
    // growth_laws fits only the rows sweep_matches credits with a whole step (red team 5): one
    // row left out leaves its groups too few points to decide a law
    assert_eq!(failing(&vs), vec!["sweep_matches", "growth_laws"]);
    let growth = &verdict(&vs, "growth_laws").why.en;
    assert!(
        growth.contains("1 row left out") && growth.contains(&format!("B={} T={}", bs[1], ts[2])),
        "{growth}"
    );
    let why = &verdict(&vs, "sweep_matches").why.en;
    assert!(
        why.contains(&format!(
            "B={}, T={}: the grader saw no whole training step",
            bs[1], ts[2]
        )),
        "{why}"
    );
    // the single ledgers: a call without its whole step fails one_update (the first calls) or
    // ledger_reproducible (the repeated call)
    for (trace, criterion) in [
        ("ledger.sgd", "one_update"),
        ("ledger.adam_again", "ledger_reproducible"),
    ] {
        let mut obs = L.recorded("solution");
        let row = &obs.traces[trace][0];
        let (b, t) = (
            row.fields["batch"].as_i64().unwrap(),
            row.fields["seq_len"].as_i64().unwrap(),
        );
        // the calls' steps at (4, 64) are two (adam, sgd): drop them all, then keep the other's
        let dropped = drop_steps_at(&mut obs, "ledger.calls", b, t);
        assert!(dropped >= 1, "{trace}");
        let vs = grade_obs(obs);
        assert!(
            failing(&vs).contains(&criterion),
            "{trace}: {:?}",
            failing(&vs)
        );
    }
}

#[test]
fn a_step_off_its_case_is_no_step_of_the_row() {
    // a forward on another case's model, or on tokens of the submission's own, is sent as
    // `shape {.., case: false}`: its backward makes no row of the grid measured
    let mut obs = L.recorded("solution");
    let (bs, ts) = grid(&obs);
    let mut marked = 0;
    for e in rows_mut(&mut obs, "sweep.calls").iter_mut() {
        if e.e == "shape"
            && e.fields["batch"].as_i64() == Some(bs[0])
            && e.fields["seq_len"].as_i64() == Some(ts[1])
        {
            assert_eq!(
                e.fields["case"],
                json!(true),
                "the solution runs on its cases"
            );
            e.fields.insert("case".into(), json!(false));
            marked += 1;
        }
    }
    assert_eq!(marked, 1);
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), vec!["sweep_matches", "growth_laws"]);
    let why = &verdict(&vs, "sweep_matches").why.en;
    assert!(
        why.contains(&format!(
            "B={}, T={}: the grader saw no whole training step",
            bs[0], ts[1]
        )) && why.contains("on that row's case"),
        "{why}"
    );
}

/// `trace` without its `opt_step` events at (b, t) (of every call).
fn drop_opt_steps_at(obs: &mut Observations, trace: &str, b: i64, t: i64) -> usize {
    let events = rows_mut(obs, trace);
    let before = events.len();
    events.retain(|e| {
        !(e.e == "opt_step"
            && e.fields["batch"].as_i64() == Some(b)
            && e.fields["seq_len"].as_i64() == Some(t))
    });
    before - events.len()
}

#[test]
fn a_step_without_its_optimizer_step_is_no_whole_step() {
    // red team 5 (redteam5_sweep_no_optimizer_step): the forward and the loss's backward ran, but
    // the case's optimizer never stepped (no `opt_step` from the grader's step post-hook): the
    // row is not measured, and growth_laws does not fit it
    let mut obs = L.recorded("solution");
    let (bs, ts) = grid(&obs);
    assert_eq!(drop_opt_steps_at(&mut obs, "sweep.calls", bs[2], ts[0]), 1);
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), vec!["sweep_matches", "growth_laws"]);
    let why = &verdict(&vs, "sweep_matches").why.en;
    assert!(
        why.contains(&format!("B={}, T={}: the grader saw the forward and the loss's backward, but no optimizer.step()", bs[2], ts[0])),
        "{why}"
    );
    // the repeated ledger: its grads and optimizer_state are believed only from a whole step of
    // that call (grads too since red team 20: a forward and backward with no step is no ledger)
    let mut obs = L.recorded("solution");
    let row = &obs.traces["ledger.adam_again"][0];
    let (b, t) = (
        row.fields["batch"].as_i64().unwrap(),
        row.fields["seq_len"].as_i64().unwrap(),
    );
    assert_eq!(drop_opt_steps_at(&mut obs, "ledger.calls", b, t), 1);
    let vs = grade_obs(obs);
    assert_eq!(
        failing(&vs),
        vec![
            "grads_exact",
            "optimizer_state_exact",
            "ledger_reproducible"
        ]
    );
}

#[test]
fn an_optimizer_step_of_another_call_steps_no_row() {
    // an optimizer handed over in another call (`opt_step {call}`) is no step of this call's case,
    // even at the same shape (the Adam and SGD ledgers share theirs)
    let mut obs = L.recorded("solution");
    let mut moved = 0;
    for e in rows_mut(&mut obs, "ledger.calls").iter_mut() {
        if e.e == "opt_step" && e.fields["call"] == json!("ledger.sgd") {
            e.fields.insert("call".into(), json!("ledger.adam"));
            moved += 1;
        }
    }
    assert_eq!(moved, 1);
    let vs = grade_obs(obs);
    // (grads_exact and activations_exact too: a row's grads and activations are believed only
    // from a whole step's call)
    assert_eq!(
        failing(&vs),
        vec![
            "grads_exact",
            "optimizer_state_exact",
            "activations_exact",
            "one_update"
        ]
    );
}

#[test]
fn optimizer_state_is_believed_as_the_grader_read_it() {
    // red team 5 (redteam5_ledger_state_from_grads): the state the grader's step post-hook read
    // of `optimizer.state` is what the row must say; in the repeated case and the sweep a drawn
    // parameter is left out of the optimizer (a gradient, no state), so the reading is the
    // shapes' bytes less that row's `dropped_state`, and a price of the gradients is not
    let obs = L.recorded("solution");
    let ex = recorded_exercise();
    let read = |call: &str| -> Vec<(i64, i64, i64)> {
        let trace = if call == "sweep.student" {
            "sweep.calls"
        } else {
            "ledger.calls"
        };
        obs.traces[trace]
            .iter()
            .filter(|e| e.e == "opt_step" && e.fields["call"] == json!(call))
            .map(|e| {
                let f = |k: &str| e.fields[k].as_i64().unwrap();
                (f("batch"), f("seq_len"), f("state"))
            })
            .collect()
    };
    for (call, grader) in [
        ("ledger.adam_again", "grader.adam_again"),
        ("sweep.student", "sweep.grader"),
    ] {
        let readings = read(call);
        assert_eq!(readings.len(), obs.traces[grader].len(), "{call}");
        for r in &obs.traces[grader] {
            let f = |k: &str| r.fields[k].as_i64().unwrap();
            let opt = r.fields["optimizer"].as_str().unwrap();
            let want = optimizer_state_bytes(&ex.model, opt).unwrap() - f("dropped_state");
            assert!(
                readings.contains(&(f("batch"), f("seq_len"), want)),
                "{call} {r:?}"
            );
            // more than the dropped parameter's: one with a gradient has none either
            let (p, n) = param_bytes(&ex.model);
            let grads = p - f("dropped_grad");
            let priced = if opt == "adam" {
                2 * grads + 4 * (n - 1)
            } else {
                grads
            };
            assert_ne!(want, priced, "{call} {r:?}");
        }
    }
    // a row equal to the shapes' truth but not to what the grader read fails
    let mut obs = L.recorded("solution");
    let reading = obs.traces["ledger.calls"]
        .iter()
        .find(|e| e.e == "opt_step" && e.fields["call"] == json!("ledger.sgd"))
        .unwrap()
        .fields["state"]
        .as_i64()
        .unwrap();
    for e in rows_mut(&mut obs, "ledger.calls").iter_mut() {
        if e.e == "opt_step" && e.fields["call"] == json!("ledger.sgd") {
            e.fields.insert("state".into(), json!(reading + 4));
        }
    }
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), vec!["optimizer_state_exact"]);
    let why = &verdict(&vs, "optimizer_state_exact").why.en;
    assert!(why.contains("but the grader read"), "{why}");
}

#[test]
fn a_row_priced_from_another_rows_tag_fails_the_sweep() {
    // one measured row teaches the tag of that row only: the others' activations from the
    // closed form plus that tag are off by the difference of the two rows' tags
    let cfg = recorded_exercise().model;
    let mut obs = L.recorded("solution");
    let grader = obs.traces["sweep.grader"].clone();
    let first_tag = grader[0].fields["tag"].as_i64().unwrap();
    for r in rows_mut(&mut obs, "sweep.student").iter_mut() {
        let (b, t) = (
            r.fields["batch"].as_i64().unwrap(),
            r.fields["seq_len"].as_i64().unwrap(),
        );
        r.fields.insert(
            "activations".into(),
            json!(activation_bytes(&cfg, b, t) + first_tag),
        );
    }
    let vs = grade_obs(obs);
    // and the rows, each less its own tag, decide no law: growth_laws fails too (own rows that
    // decide none are no sweep to read the answer from)
    assert_eq!(failing(&vs), vec!["sweep_matches", "growth_laws"]);
    // growth is fitted with each row's tag taken off: the grader's rows and the solution's
    // decide the laws exactly although every row carries a tag of its own
    let vs = grade_obs(L.recorded("solution"));
    let g = verdict(&vs, "growth_laws");
    assert!(g.why.en.contains("quadratic"), "{}", g.why.en);
}

#[test]
fn recorded_solution_passes() {
    let vs = grade_obs(L.recorded("solution"));
    assert_eq!(failing(&vs), Vec::<&str>::new());
    let cuda_only = ["peak_covers_step", "peak_is_allocated", "peak_reproducible"];
    for v in &vs {
        assert_eq!(
            v.status == Status::Skip,
            cuda_only.contains(&v.id.as_str()),
            "{}",
            v.id
        );
    }
    let g = verdict(&vs, "growth_laws");
    let (bs, ts) = grid(&L.recorded("solution"));
    let first = format!("seq_len={}: {}→", ts[0], bs[0]);
    assert!(
        g.why.en.contains(&first),
        "per-row numbers shown: {}",
        g.why.en
    );
    assert!(g.why.en.contains("quadratic"), "{}", g.why.en);
}

#[test]
fn recorded_starter_fails_readably() {
    let vs = grade_obs(L.recorded("starter"));
    let want = [
        "params_exact",
        "grads_exact",
        "optimizer_state_exact",
        "activations_exact",
        "one_update",
        "sweep_matches",
        "growth_laws",
        "ledger_reproducible",
        // no empty_cache call is no proof when the probes that call the submission stopped at once
        "no_empty_cache",
        "peak_none_on_cpu",
    ];
    assert_eq!(failing(&vs), want);
    let why = &verdict(&vs, "params_exact").why.en;
    assert!(why.contains("NotImplementedError"), "{why}");
}

#[test]
fn a_wrong_entry_fails_with_both_numbers() {
    let cfg = recorded_exercise().model;
    let mut obs = L.recorded("solution");
    // the grader's activations: the formula plus the tag its forwards saved in that call
    let tag = obs.traces["grader.sgd"][0].fields["tag"].as_i64().unwrap();
    let (p, a) = (param_bytes(&cfg).0, activation_bytes(&cfg, 4, 64) + tag);
    let row = &mut rows_mut(&mut obs, "ledger.sgd")[0];
    row.fields.insert("activations".into(), json!(a + 4096));
    row.fields.insert("grads".into(), json!(0));
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["grads_exact", "activations_exact"]);
    let v = verdict(&vs, "activations_exact");
    let (got, want) = (fmt_num((a + 4096) as f64), fmt_num(a as f64));
    assert_eq!(v.measured.en, format!("{got} ≠ {want}"));
    let line = format!("ledger.sgd B=4, T=64 activations: {got} ≠ grader's {want} (+4,096)");
    assert!(v.why.en.contains(&line), "{}", v.why.en);
    let g = verdict(&vs, "grads_exact");
    let p = fmt_num(p as f64);
    assert!(
        g.why.en.contains(&format!("0 ≠ grader's {p} (−{p})")),
        "{}",
        g.why.en
    );
    assert!(g.why.zh.contains(&format!("≠ 评分器 {p}")), "{}", g.why.zh);
}

#[test]
fn one_badly_typed_entry_fails_only_what_compares_it() {
    // an entry that is not a number (the scenario leaves it out and says why in `<entry>_error`)
    // fails the criteria comparing that entry, not the whole ledger
    let mut obs = L.recorded("solution");
    let why = "memory_ledger(...)['grads'] is dict ({'tok_emb.weight': 1}), not a number";
    for run in ["adam", "adam_again"] {
        obs.metrics.remove(&format!("ledger.{run}.grads"));
        let row = &mut rows_mut(&mut obs, &format!("ledger.{run}"))[0];
        row.fields.remove("grads");
        row.fields.insert("grads_error".into(), json!(why));
    }
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["grads_exact", "ledger_reproducible"]);
    let g = verdict(&vs, "grads_exact");
    assert!(
        g.why
            .en
            .contains(&format!("ledger.adam B=4, T=64 grads: {why}")),
        "{}",
        g.why.en
    );
}

#[test]
fn two_updates_fail_one_update_only() {
    // a warm-up training step (or backward twice) before the measured one: the grader saw two
    // backward passes and Adam's step counter at 2 (the updated weights, compared in libtorch,
    // are judged by step_matches_reference, which recorded observations carry no tensors for)
    let mut obs = L.recorded("solution");
    obs.metrics.insert("ledger.adam.backwards".into(), json!(2));
    obs.metrics.insert("ledger.adam.adam_step".into(), json!(2));
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["one_update"]);
    let why = &verdict(&vs, "one_update").why.en;
    assert!(why.contains("ledger.adam.adam_step = 2"), "{why}");
}

#[test]
fn a_rerun_without_a_step_is_not_reproduced() {
    // memory_ledger() returning a cached dict the second time: the entries are identical, but
    // the grader saw no training step in that call
    let mut obs = L.recorded("solution");
    obs.metrics
        .insert("ledger.adam_again.backwards".into(), json!(0));
    obs.metrics
        .insert("ledger.adam_again.adam_step".into(), json!(0));
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["ledger_reproducible"]);
}

#[test]
fn growth_is_judged_on_the_students_own_sweep_too() {
    // GROWTH right for the grader's sweep, but the student's own rows grow otherwise (here:
    // activations that do not depend on seq_len): an answer not read off one's own sweep fails
    // (each row carries the grader's tag of that row, drawn per row; the fit takes it off)
    let mut obs = L.recorded("solution");
    let grader = obs.traces["sweep.grader"].clone();
    for r in rows_mut(&mut obs, "sweep.student") {
        let b = r.fields["batch"].as_i64().unwrap();
        let tag = grader
            .iter()
            .find(|g| {
                g.fields["batch"] == r.fields["batch"] && g.fields["seq_len"] == r.fields["seq_len"]
            })
            .unwrap()
            .fields["tag"]
            .as_i64()
            .unwrap();
        r.fields.insert("activations".into(), json!(1000 * b + tag));
    }
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["sweep_matches", "growth_laws"]);
    let why = &verdict(&vs, "growth_laws").why.en;
    assert!(
        why.contains("answered quadratic, but in your own sweep() (sweep.student) activations grows as constant in seq_len"),
        "{why}"
    );
}

#[test]
fn growth_needs_a_sweep_of_ones_own() {
    // no rows of one's own (sweep() returned []): an answer copied from the hints fails
    let mut obs = L.recorded("solution");
    rows_mut(&mut obs, "sweep.student").clear();
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["sweep_matches", "growth_laws"]);
}

#[test]
fn optimizer_state_truth_follows_the_optimizer() {
    // Adam's state (with `step`) reported for the SGD case is wrong, and vice versa
    let cfg = recorded_exercise().model;
    let mut obs = L.recorded("solution");
    let adam = obs.traces["ledger.adam"][0].fields["optimizer_state"].clone();
    rows_mut(&mut obs, "ledger.sgd")[0]
        .fields
        .insert("optimizer_state".into(), adam);
    let (adam_tag, sgd_tag) = (
        -state_taken_off(&obs, "ledger.adam"),
        -state_taken_off(&obs, "ledger.sgd"),
    );
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["optimizer_state_exact"]);
    let line = format!(
        "{} ≠ grader's {}",
        fmt_num((optimizer_state_bytes(&cfg, "adam").unwrap() + adam_tag) as f64),
        fmt_num((param_bytes(&cfg).0 + sgd_tag) as f64)
    );
    assert!(verdict(&vs, "optimizer_state_exact").why.en.contains(&line));
}

#[test]
fn sweep_rows_must_cover_the_grid_once() {
    let mut obs = L.recorded("solution");
    let (bs, ts) = grid(&obs);
    let rows = rows_mut(&mut obs, "sweep.student");
    let at =
        |r: &grade::observations::Event| (r.fields["batch"].clone(), r.fields["seq_len"].clone());
    let (p0, p1) = ((json!(bs[0]), json!(ts[0])), (json!(bs[1]), json!(ts[1])));
    let dup = rows.iter().find(|r| at(r) == p0).unwrap().clone();
    rows.retain(|r| at(r) != p1); // one grid point missing
    rows.push(dup); // another twice
    let mut extra = rows[1].clone();
    extra.fields.insert("batch".into(), json!(99));
    rows.push(extra); // and one off the grid
    let vs = grade_obs(obs);
    // growth_laws also reads the law off the student's own rows: these decide none (the extra
    // row breaks the polynomial), so the answer was read off no sweep of one's own
    assert_eq!(failing(&vs), ["sweep_matches", "growth_laws"]);
    let why = &verdict(&vs, "sweep_matches").why.en;
    let has = |s: String| assert!(why.contains(&s), "{s} not in: {why}");
    has(format!(
        "sweep.student has 2 rows for B={}, T={} (expected 1)",
        bs[0], ts[0]
    ));
    has(format!(
        "sweep.student has 0 rows for B={}, T={} (expected 1)",
        bs[1], ts[1]
    ));
    has("extra row B=99".to_string());
}

#[test]
fn a_wrong_growth_answer_fails_and_shows_the_rows() {
    let mut obs = L.recorded("solution");
    obs.metrics
        .insert("growth.seq_len".into(), Value::from("linear"));
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["growth_laws"]);
    let g = verdict(&vs, "growth_laws");
    assert_eq!(
        g.measured.en,
        "answer linear, fit linear; answer linear, fit quadratic; answer linear, fit linear; answer linear, fit quadratic"
    );
    let (bs, ts) = grid(&L.recorded("solution"));
    let head = format!(
        "answered linear, but in the grader's sweep activations grows as quadratic in seq_len: batch={}: {}→",
        bs[0], ts[0]
    );
    assert!(g.why.en.starts_with(&head), "{}", g.why.en);
    assert!(
        g.why
            .en
            .contains("in your own sweep() (sweep.student) activations grows as quadratic"),
        "{}",
        g.why.en
    );
}

#[test]
fn growth_needs_agreeing_groups() {
    // a grader sweep whose groups disagree (one row off by a byte) decides nothing: FAIL, explained
    let mut obs = L.recorded("solution");
    let rows = rows_mut(&mut obs, "sweep.grader");
    let a = rows[0].fields["activations"].as_i64().unwrap();
    rows[0].fields.insert("activations".into(), json!(a + 1));
    let vs = grade_obs(obs);
    let g = verdict(&vs, "growth_laws");
    assert_eq!(g.status, Status::Fail);
    assert!(g.why.en.contains("does not decide"), "{}", g.why.en);
}

#[test]
fn empty_cache_calls_fail() {
    // an empty_cache event sent during a probe fails, whatever the driver's counter says (the
    // submission could reset that counter; the events left the process when they happened)
    let mut obs = L.recorded("solution");
    assert!(obs.traces["ledger.calls"].iter().any(|e| e.e == "step"));
    rows_mut(&mut obs, "sweep.calls").push(grade::observations::Event::new("empty_cache"));
    assert_eq!(failing(&grade_obs(obs)), ["no_empty_cache"]);
    // and the counter alone (it also sees calls made at import, outside any probe)
    let mut obs = L.recorded("solution");
    obs.metrics.insert("calls.empty_cache".into(), json!(3));
    assert_eq!(failing(&grade_obs(obs)), ["no_empty_cache"]);
}

#[test]
fn rubric_rejects_a_bad_ledger_spec() {
    for (yaml, msg) in [
        (
            "{actual: [a, b], expected: [c], entries: [params]}",
            "same number",
        ),
        (
            "{actual: a, expected: c, entries: [weights]}",
            "unknown `weights`",
        ),
        ("{actual: a, expected: c, entries: []}", "at least one"),
    ] {
        let err = L.rubric_error(&format!("{{ledger: {yaml}}}"));
        assert!(err.contains(msg), "{yaml}: {err}");
    }
}

// ------------------------------------------------------------------------------- end to end

/// `grade check 03-memory` (the real binary, once; tests/support/lesson.rs): the solution, the
/// starter and every fixture, each failing exactly what tests/fixtures/03-memory/expected.yaml
/// lists (the one place expectations live), every criterion caught by some fixture, every README
/// mistake mapped; each verdict table is a snapshot.
#[test]
fn grade_check_proves_the_lesson() {
    let tables = L.check().assert_proves_the_lesson(&[
        "peak_covers_step",
        "peak_is_allocated",
        "peak_reproducible",
    ]);
    for (name, table) in tables {
        insta::assert_snapshot!(format!("{ID}__{name}"), table);
    }
    // the starter explains itself: every failure names the missing function
    let why = why(L.check().report("starter"), "params_exact");
    assert!(
        why.contains("NotImplementedError: TODO: memory_ledger"),
        "{why}"
    );
}

/// Red team 25: a sweep of made-up rows, each a real step, that fits the right laws passes
/// growth_laws on its own; its points need sweep_matches (`requires:`). Here the solution's own
/// sweep with every row 8 B over: the laws are the same, the rows match nothing.
#[test]
fn a_law_fitted_to_rows_that_match_nothing_earns_nothing() {
    let mut obs = L.recorded("solution");
    for row in rows_mut(&mut obs, "sweep.student").iter_mut() {
        let a = row.fields["activations"].as_i64().unwrap();
        row.fields.insert("activations".into(), json!(a + 8));
    }
    let vs = grade_obs(obs);
    assert_eq!(failing(&vs), ["sweep_matches"]);
    assert_eq!(verdict(&vs, "growth_laws").requires, ["sweep_matches"]);
    let passed: u32 = vs
        .iter()
        .filter(|v| v.status == Status::Pass)
        .map(|v| v.points)
        .sum();
    let summary = grade::report::Summary::of(&vs);
    assert_eq!(
        summary.points,
        passed - verdict(&vs, "growth_laws").points,
        "growth_laws' points are withheld while sweep_matches fails"
    );
    assert_eq!(
        grade::report::withheld(&vs),
        ["growth_laws (sweep_matches)"]
    );
}
