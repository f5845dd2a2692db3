//! Lesson 06 (`06-sync`): (a) the rubric on recorded observations, pure Rust, exact and fast
//! (counts come from the events the instruments sent, so the mutations add or drop events);
//! the grader's greedy decode in tch; (b) the grader's read-back instrument (`grade_lib` HostReads)
//! on every path through which a tensor's value reaches Python or a constant is made (legacy
//! constructors, code built with `exec(compile(...))`, frozen tables), one small Python run; (c) end to
//! end: the real binary on the solution, the starter and every fixture of
//! `tests/fixtures/06-sync/`, each failing exactly the criteria its `expected.yaml` lists, verdict
//! tables snapshotted with insta.
mod support;
use grade::checks::Status;
use grade::observations::{Event, Observations};
use grade::{reference, workload};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;
use support::lesson::{root, why, Lesson};

const ID: &str = "06-sync";
const L: Lesson = Lesson(ID);
/// Criteria `grade check` cannot show on CPU (they apply only on CUDA).
const UNPROVABLE: [&str; 0] = [];
/// Criteria judged on tensors, which `--dump-observations` does not record.
const ON_TENSORS: [&str; 3] = ["generate_matches_reference", "losses_match", "params_match"];

// ------------------------------------------------------------------- the rubric, recorded runs

/// Every verdict on recorded observations, with the timed calls' parameters (tensors the
/// recordings do not hold) equal on both sides, as after a timing whose calls trained.
fn grade_obs(obs: Observations) -> BTreeMap<String, Status> {
    grade_timed(obs, &[1.0, 2.0])
}

/// As `grade_obs`, the submission's timed calls leaving `params` (the baseline's: [1, 2]).
fn grade_timed(obs: Observations, params: &[f32]) -> BTreeMap<String, Status> {
    let tensors = BTreeMap::from([
        (
            "timing/params/baseline/w".to_string(),
            tch::Tensor::from_slice(&[1.0f32, 2.0]),
        ),
        (
            "timing/params/train/w".to_string(),
            tch::Tensor::from_slice(params),
        ),
        // each timed call's forwards, backwards and optimizer steps: the same on both sides
        (
            "timing/work/baseline/w".to_string(),
            tch::Tensor::from_slice(&[4.0f64, 4.0, 4.0]),
        ),
        (
            "timing/work/train/w".to_string(),
            tch::Tensor::from_slice(&[4.0f64, 4.0, 4.0]),
        ),
    ]);
    L.grade_evidence(&L.exercise(), obs, tensors)
        .into_iter()
        .map(|v| (v.id, v.status))
        .collect()
}

/// Failing criteria, leaving out those judged on tensors (not in recorded observations).
fn failing_without_tensors(v: &BTreeMap<String, Status>) -> Vec<String> {
    v.iter()
        .filter(|(k, s)| **s == Status::Fail && !ON_TENSORS.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
        .collect()
}

const RECORDED: [&str; 7] = [
    "solution",
    "starter",
    "item_every_step",
    "python_float_sum",
    "constants_per_step",
    "logits_to_cpu",
    "profiler_wrong_event",
];

#[test]
fn recorded_runs_fail_exactly_their_expected_criteria() {
    let want = L.expected();
    for name in RECORDED {
        let v = grade_obs(L.recorded(name));
        let mut w: Vec<String> = want[name]
            .iter()
            .filter(|c| !ON_TENSORS.contains(&c.as_str()))
            .cloned()
            .collect();
        w.sort();
        assert_eq!(failing_without_tensors(&v), w, "{name}");
        assert_eq!(v["instruments_intact"], Status::Pass, "{name}");
    }
}

fn readbacks<'a>(obs: &'a Observations, stream: &str) -> Vec<&'a Event> {
    obs.traces[stream]
        .iter()
        .filter(|e| e.e == "readback")
        .collect()
}

/// `(op, line)` → how many, for one stream's read-backs.
fn by_site(obs: &Observations, stream: &str) -> BTreeMap<(String, i64), usize> {
    let mut m = BTreeMap::new();
    for e in readbacks(obs, stream) {
        let key = (
            e.field_str("op").unwrap().to_string(),
            e.fields["line"].as_i64().unwrap(),
        );
        *m.entry(key).or_insert(0) += 1;
    }
    m
}

#[test]
fn the_instrument_sees_every_hidden_sync_of_the_baseline_at_its_line() {
    let obs = L.recorded("solution");
    let site = |op: &str, line: i64, n: usize| ((op.to_string(), line), n);
    // exercises/06-sync/baseline.py, 16 steps, a log every 4: `if torch.isnan(loss)`,
    // `loss.item()`, the accuracy's `.item()` every step, the f-string formatting a tensor per log
    assert_eq!(
        by_site(&obs, "host.baseline.long"),
        BTreeMap::from([
            site("__bool__", 22, 16),
            site("item", 26, 16),
            site("item", 28, 16),
            site("__format__", 31, 4),
        ])
    );
    assert_eq!(obs.metrics["baseline.long.factories"], json!(16)); // torch.tensor(...) per step
    assert_eq!(obs.metrics["baseline.short.factories"], json!(8));
    // the starter is the baseline: the same syncs in the student's file, and in generate() the
    // prompt's tolist() plus the whole logits per token
    let starter = L.recorded("starter");
    let gen = by_site(&starter, "host.generate");
    assert_eq!(gen.values().sum::<usize>(), 17);
    assert_eq!(gen.get(&("cpu".into(), 48)), Some(&16));
    assert_eq!(gen.get(&("tolist".into(), 43)), Some(&1));
}

#[test]
fn recorded_solution_reads_back_once_per_log_and_the_tokens_once() {
    let obs = L.recorded("solution");
    for (run, logs) in [("short", 2), ("long", 4)] {
        let rb = readbacks(&obs, &format!("host.train.{run}"));
        assert_eq!(rb.len(), logs, "{run}");
        assert!(rb
            .iter()
            .all(|e| e.field_str("op") == Some("item") && e.fields["bytes"] == json!(4)));
        assert_eq!(
            obs.metrics[&format!("train.{run}.factories")],
            json!(1),
            "{run}"
        ); // the accumulator
        assert_eq!(obs.metrics[&format!("{run}.expected_logs")], json!(logs));
    }
    let gen = readbacks(&obs, "host.generate");
    assert_eq!(gen.len(), 1);
    assert_eq!(gen[0].field_str("op"), Some("tolist"));
    // seq_len 32: 16 new int64 tokens
    assert_eq!(obs.metrics["generate.d2h_bytes"], json!(128));
    assert_eq!(obs.metrics["generate.token_bytes"], json!(128));
    // the profiler: 4 steps, log every 4 → one .item(); the baseline 3 per step + one format
    assert_eq!(obs.metrics["profile.grader.train"], json!(1));
    assert_eq!(obs.metrics["profile.grader.baseline"], json!(13));
    // count_syncs(): the same counts as the grader's own profile of the same jobs, which also
    // read back a drawn number of the grader's own values (drawn apart for each fn since red
    // team 4, `count_syncs.extra_reads.<who>`; one number for both in older recordings)
    for (who, own) in [("baseline", 13), ("train", 1)] {
        let extra = obs
            .metrics
            .get(&format!("count_syncs.extra_reads.{who}"))
            .unwrap_or_else(|| &obs.metrics["count_syncs.extra_reads"])
            .as_i64()
            .unwrap();
        let n = &obs.metrics[&format!("count_syncs.{who}")];
        assert_eq!(
            n,
            &obs.metrics[&format!("count_syncs.grader.{who}")],
            "{who}"
        );
        assert_eq!(n.as_i64().unwrap() - extra, own, "{who}");
    }
    // count_syncs() called the grader's fn once per run, with the profiler recording throughout
    for who in ["baseline", "train"] {
        let calls = &obs.traces[&format!("count_syncs.{who}")];
        let calls: Vec<_> = calls.iter().filter(|e| e.e == "call").collect();
        assert_eq!(calls.len(), 1, "{who}");
        assert_eq!(calls[0].fields["profiling_start"], json!(true), "{who}");
        assert_eq!(calls[0].fields["profiling_end"], json!(true), "{who}");
    }
    // generate() ran every forward without autograd, and made no constant
    let gen = &obs.traces["host.generate"];
    assert_eq!(gen.iter().filter(|e| e.e == "forward").count(), 16);
    assert!(gen
        .iter()
        .filter(|e| e.e == "forward")
        .all(|e| e.fields["grad"] == json!(false)));
    assert_eq!(gen.iter().filter(|e| e.e == "factory").count(), 0);
}

#[test]
fn a_tolist_sum_is_invisible_to_the_cpu_profiler_but_not_to_the_grader() {
    let obs = L.recorded("python_float_sum");
    assert_eq!(obs.metrics["train.long.readbacks"], json!(16));
    assert!(readbacks(&obs, "host.train.long")
        .iter()
        .all(|e| e.field_str("op") == Some("tolist")));
    assert_eq!(obs.metrics["profile.grader.train"], json!(0));
}

/// One change to a recorded run: events added to a trace, events of a kind dropped, or a metric.
enum Change {
    Add(&'static str, Event, usize),
    Drop(&'static str, &'static str),
    Metric(&'static str, Value),
    /// the timed calls left other parameters than the baseline's
    Untrained,
}

#[test]
fn mutated_recorded_runs_fail_the_right_criterion() {
    let rb = || {
        Event::new("readback")
            .with("op", "item")
            .with("bytes", 4)
            .with("line", 20)
    };
    let factory = || Event::new("factory").with("op", "tensor").with("line", 20);
    let cases: Vec<(Change, &str)> = vec![
        (Change::Add("host.train.long", rb(), 3), "train_readbacks"),
        (Change::Add("host.train.short", rb(), 3), "train_readbacks"),
        // issue 38: every call is watched the same way, the grader's timed calls and its own
        // profiled call too (a per-step read-back in each of the 12 timed calls)
        (
            Change::Add("host.timing", rb().with("who", "train").with("call", 3), 48),
            "train_readbacks",
        ),
        (
            Change::Add("host.profile.grader.train", rb(), 3),
            "train_readbacks",
        ),
        (
            Change::Add(
                "host.timing",
                factory().with("who", "train").with("call", 3),
                48,
            ),
            "no_constants_in_loop",
        ),
        (
            Change::Add(
                "host.timing",
                Event::new("kept_graph")
                    .with("steps", 2)
                    .with("line", 20)
                    .with("who", "train"),
                1,
            ),
            "loss_detached",
        ),
        // read-backs hidden from the function mode still show in the grader's own profile
        (
            Change::Metric("profile.grader.train", json!(4)),
            "train_readbacks",
        ),
        // a graph kept across steps
        (
            Change::Add(
                "host.train.long",
                Event::new("kept_graph").with("steps", 4).with("line", 20),
                1,
            ),
            "loss_detached",
        ),
        // a constant per step: the long run makes more than the short one
        (
            Change::Add("host.train.long", factory(), 8),
            "no_constants_in_loop",
        ),
        (Change::Add("host.generate", rb(), 2), "generate_readbacks"),
        (
            Change::Add("host.generate", factory(), 16),
            "generate_no_constants",
        ),
        (
            Change::Add("host.generate", Event::new("forward").with("grad", true), 1),
            "generate_no_grad",
        ),
        (Change::Drop("host.generate", "forward"), "generate_no_grad"),
        (
            Change::Metric("timing.ratio", json!(1.44)),
            "throughput_not_worse",
        ),
        // a fast time from calls that did not train says nothing
        (Change::Untrained, "throughput_not_worse"),
        (
            Change::Metric("count_syncs.train", json!(2)),
            "profiler_counts_agree",
        ),
        // no profiler while fn ran (a count returned without profiling)
        (
            Change::Drop("count_syncs.train", "call"),
            "count_syncs_profiles",
        ),
        (
            Change::Add(
                "count_syncs.baseline",
                Event::new("call")
                    .with("profiling_start", false)
                    .with("profiling_end", false),
                1,
            ),
            "count_syncs_profiles",
        ),
    ];
    for (change, criterion) in cases {
        let mut obs = L.recorded("solution");
        let mut params = [1.0f32, 2.0];
        let what = match change {
            Change::Untrained => {
                params[1] = 2.5;
                "timing/params/train".to_string()
            }
            Change::Add(stream, ev, n) => {
                let t = obs.traces.get_mut(stream).unwrap();
                t.extend(std::iter::repeat_n(ev, n));
                format!("+{n} {stream}")
            }
            Change::Drop(stream, kind) => {
                obs.traces.get_mut(stream).unwrap().retain(|e| e.e != kind);
                format!("-{kind} {stream}")
            }
            Change::Metric(key, value) => {
                if key == "profile.grader.train" {
                    // the student's count_syncs() agrees with the grader's profile of the same
                    // job: only the hidden syncs are wrong
                    for k in ["count_syncs.train", "count_syncs.grader.train"] {
                        obs.metrics.insert(k.into(), value.clone());
                    }
                }
                obs.metrics.insert(key.into(), value);
                key.to_string()
            }
        };
        let v = grade_timed(obs, &params);
        assert_eq!(
            failing_without_tensors(&v),
            vec![criterion.to_string()],
            "{what}"
        );
    }
    // a grader that no longer sees the baseline's read-backs fails loudly, not silently
    let mut obs = L.recorded("solution");
    obs.traces
        .get_mut("host.baseline.long")
        .unwrap()
        .retain(|e| e.e != "readback");
    assert_eq!(
        failing_without_tensors(&grade_obs(obs)),
        vec!["train_readbacks".to_string()]
    );
    // the metrics the process reported are not what is judged: rewriting them changes nothing
    let mut obs = L.recorded("solution");
    for key in [
        "train.long.readbacks",
        "train.long.factories",
        "generate.readbacks",
    ] {
        obs.metrics.insert(key.into(), json!(99));
    }
    assert!(failing_without_tensors(&grade_obs(obs)).is_empty());
}

// --------------------------------------------------------------------- the grader's greedy decode

#[test]
fn greedy_decode_is_argmax_of_the_reference_logits_step_by_step() {
    let ex = L.exercise();
    let cfg = &ex.model;
    let work = workload::generate(cfg, 11);
    let (p, steps) = (cfg.seq_len / 4, cfg.seq_len / 2);
    let prompt = work.idx.narrow(0, 0, 1).narrow(1, 0, p);
    let tokens = reference::tinygpt::greedy_decode(cfg, &work.weights, &prompt, steps);
    assert_eq!(tokens.size(), vec![steps]);
    // the no-grad logits are the training forward's logits, bit for bit
    let out = reference::tinygpt::loss_and_grads(cfg, &work.weights, &work.idx, &work.targets);
    let logits = reference::tinygpt::logits(cfg, &work.weights, &work.idx);
    assert!(logits.equal(&out.logits));
    // each token is the argmax of the last position given everything before it
    let toks: Vec<i64> = Vec::try_from(&tokens).unwrap();
    let mut seq: Vec<i64> = Vec::try_from(&prompt.view([-1])).unwrap();
    for t in toks {
        let x = tch::Tensor::from_slice(&seq).view([1, -1]);
        let last = reference::tinygpt::logits(cfg, &work.weights, &x).select(1, -1);
        assert_eq!(last.argmax(-1, false).int64_value(&[0]), t);
        seq.push(t);
    }
    // and it is what compute() hands the checks
    let named = reference::compute(cfg, &work);
    assert!(named["reference/greedy/tokens"].equal(&tokens));
}

// ------------------------------------------------------- the instrument on every read-back path

/// Each path through which a tensor's value reaches Python, run from a file the counter watches:
/// (name, Python expression, read-backs, bytes, factories). `v` is a [4, 5] f32 tensor, `s` a
/// 0-dim f32 one, `dev` a `torch.device`.
const PATHS: &[(&str, &str, usize, usize, usize)] = &[
    ("item", "s.item()", 1, 4, 0),
    ("float", "float(s)", 1, 4, 0),
    ("int", "int(s)", 1, 4, 0),
    ("bool", "bool(s)", 1, 4, 0),
    ("if", "1 if torch.isnan(s) else 0", 1, 1, 0),
    ("index", "[0, 1, 2][(s * 0).long()]", 1, 8, 0),
    ("tolist", "v.tolist()", 1, 80, 0),
    ("numpy", "v.numpy()", 1, 80, 0),
    ("array", "numpy.asarray(v)", 1, 80, 0),
    ("print", "print(v)", 1, 80, 0),
    ("format", "f'{s:.3f}'", 1, 4, 0),
    ("str", "str(v)", 1, 80, 0),
    ("cpu", "v.cpu()", 1, 80, 0),
    ("to_str", "v.to('cpu')", 1, 80, 0),
    ("cpu_numpy", "v.cpu().numpy()", 1, 80, 0),
    ("host_math", "v.cpu()[0].argmax().item()", 1, 80, 0),
    ("equal", "torch.equal(v, v)", 1, 1, 0),
    ("allclose", "torch.allclose(v, v)", 1, 1, 0),
    ("nonzero", "v.nonzero()", 1, 8, 0),
    ("contains", "1.0 in v", 1, 4, 0),
    ("to_device", "v.to(dev)", 0, 0, 0),
    ("to_dtype", "v.to(torch.float64)", 0, 0, 0),
    (
        "back_to_device",
        "torch.cat([v, v.cpu().to(dev)]).sum()",
        1,
        80,
        0,
    ),
    ("device_math", "(v * 2).sum(0)", 0, 0, 0),
    ("tensor", "torch.tensor(3.0)", 0, 0, 1),
    ("zeros", "torch.zeros(())", 0, 0, 1),
    ("full_like", "torch.full_like(v, 2)", 0, 0, 1),
    // legacy constructors: no torch function sees them (an aten op does)
    ("legacy_Tensor", "torch.Tensor([1.0, 2.0])", 0, 0, 1),
    ("FloatTensor", "torch.FloatTensor([1.0])", 0, 0, 1),
    ("LongTensor", "torch.LongTensor([1, 2])", 0, 0, 1),
    ("LongTensor_shape", "torch.LongTensor(3)", 0, 0, 1),
    ("new_list", "v.new([1.0])", 0, 0, 1),
    ("new_shape", "v.new(3)", 0, 0, 1),
    ("empty_strided", "torch.empty_strided((2, 2), (2, 1))", 0, 0, 1),
    (
        "frombuffer",
        "torch.frombuffer(bytearray(8), dtype=torch.float32)",
        0,
        0,
        1,
    ),
    // with torch functions disabled the aten ops still show
    (
        "disabled",
        "with torch._C.DisableTorchFunction():\n        s.item(); torch.zeros(2)",
        1,
        4,
        1,
    ),
    // code the watched file built at run time is the watched file's
    (
        "exec_compiled",
        "exec(compile('s.item(); torch.tensor(1.0)', '<x>', 'exec'))",
        1,
        4,
        1,
    ),
    // issue 38: on CPU the device boundary behaves like a device. A view of the device memory
    // handed to host code is a copy, read back (numpy's DLPack import, an alias kept across
    // writes); a tensor computed from any device data is device data; device data written into
    // host memory is read back; a shape read from the data (a boolean mask) is a read-back by
    // torch's own op tags; a call that takes no tensor and returns one makes a constant
    ("dlpack", "numpy.from_dlpack(v)", 1, 80, 0),
    ("numpy_alias", "a = v.numpy(); v.add_(1); float(a[0, 0])", 1, 80, 0),
    ("host_plus_device", "h = v.cpu(); (h + v).tolist()", 2, 160, 0),
    ("host_copy_in", "h = v.cpu(); a = h.numpy(); h.copy_(v); float(a[0, 0])", 2, 160, 0),
    ("host_setitem", "h = v.cpu(); h[0] = v[0]; h.tolist()", 2, 160, 0),
    ("host_only_math", "h = v.cpu(); (h * 2).sum().item(); h.tolist()", 1, 80, 0),
    ("mask_len", "len(v[v > 0])", 1, 8, 0),
    ("long_index", "v[(s * 0).long().reshape(1)]", 0, 0, 0),
    ("randn_fill", "torch.randn(()).fill_(3)", 0, 0, 1),
    // the tables are frozen and bound when grade_lib loads: replacing them changes nothing
    (
        "tables_replaced",
        "lib.READBACKS = {}; lib.FACTORIES = frozenset(); lib.DISPATCH = {}; s.item(); torch.zeros(1)",
        1,
        4,
        1,
    ),
];

#[test]
fn host_reads_counts_every_read_back_path_once_on_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("paths.py");
    let mut py = String::from(
        "import contextlib, io, json, sys\nimport numpy, torch\n\
         sys.path.insert(0, sys.argv[1])\n\
         import importlib.util\n\
         spec = importlib.util.spec_from_file_location('grade_lib', sys.argv[2] + '/__init__.py', submodule_search_locations=[sys.argv[2]])\n\
         lib = importlib.util.module_from_spec(spec); sys.modules['grade_lib'] = lib; spec.loader.exec_module(lib)\n\
         spec = importlib.util.spec_from_file_location('grade_driver', sys.argv[3])\n\
         drv = importlib.util.module_from_spec(spec); spec.loader.exec_module(drv)\n\
         class Ctx:\n    def event(self, kind, **f): pass\n    attributed = staticmethod(drv.attribution.attributed)\n\
         v = torch.randn(4, 5); s = v.sum(); dev = torch.device('cpu')\nout = {}\n",
    );
    for (name, expr, ..) in PATHS {
        py.push_str(&format!(
            "c = lib.HostReads(Ctx(), [__file__], 'cpu')\n\
             with contextlib.redirect_stdout(io.StringIO()), c:\n    {expr}\n\
             out[{name:?}] = [len(c.readbacks), sum(r['bytes'] for r in c.readbacks), len(c.factories)]\n"
        ));
    }
    py.push_str("print(json.dumps(out))\n");
    std::fs::write(&script, py).unwrap();
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(&script)
        .arg(root().join("exercises"))
        .arg(root().join("src/driver/lib"))
        .arg(root().join("src/driver/driver.py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: BTreeMap<String, [usize; 3]> = serde_json::from_slice(&out.stdout).unwrap();
    let mut wrong = Vec::new();
    for (name, expr, n, bytes, factories) in PATHS {
        if got[*name] != [*n, *bytes, *factories] {
            wrong.push(format!(
                "{name} `{expr}`: got {:?}, want {:?}",
                got[*name],
                [n, bytes, factories]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
    // readable: the failing read-back criterion says how many and against what bound
    let r = L.check().report("starter");
    let why = why(r, "train_readbacks");
    assert!(why.contains("host.train.short"), "{why}");
}
