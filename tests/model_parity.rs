//! The Rust (tch) TinyGPT and the course's Python TinyGPT agree: forward, loss and every
//! parameter gradient, over several seeds and shapes — within f32 assert_close, and on CPU
//! bit for bit (same libtorch, same op order, one thread each).
use grade::checks::close;
use grade::spec::ModelConfig;
use grade::{reference, workload};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use tch::Tensor;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python_side(
    cfg: &ModelConfig,
    seed: u64,
) -> (BTreeMap<String, Tensor>, BTreeMap<String, Tensor>) {
    let dir = tempfile::tempdir().unwrap();
    let work = workload::generate(cfg, seed);
    let inputs = dir.path().join("inputs.safetensors");
    let out = dir.path().join("out.safetensors");
    work.write(&inputs).unwrap();
    let status = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("tests/support/parity.py"))
        .arg(root().join("exercises"))
        .arg(serde_json::to_string(cfg).unwrap())
        .arg(&inputs)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let py: BTreeMap<String, Tensor> = Tensor::read_safetensors(&out)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k.trim_start_matches("python/").to_string(), t))
        .collect();
    // forward/backward parity: the reference's `off/…` tensors (its greedy decode, lesson 06's,
    // has its own test in tests/lesson_06.rs)
    let rs: BTreeMap<String, Tensor> = reference::compute(cfg, &work)
        .into_iter()
        .filter(|(k, _)| k.starts_with("reference/off/"))
        .map(|(k, t)| (k.trim_start_matches("reference/").to_string(), t))
        .collect();
    (py, rs)
}

const SHAPES: [ModelConfig; 3] = [
    ModelConfig {
        vocab: 256,
        seq_len: 64,
        d_model: 64,
        n_heads: 4,
        n_blocks: 4,
        batch: 8,
    },
    ModelConfig {
        vocab: 50,
        seq_len: 16,
        d_model: 32,
        n_heads: 2,
        n_blocks: 2,
        batch: 3,
    },
    ModelConfig {
        vocab: 97,
        seq_len: 33,
        d_model: 48,
        n_heads: 3,
        n_blocks: 3,
        batch: 5,
    },
];

#[test]
fn rust_and_python_tinygpt_agree_over_seeds_and_shapes() {
    for cfg in &SHAPES {
        for seed in [1u64, 2, 3] {
            let (py, rs) = python_side(cfg, seed);
            assert_eq!(py.len(), rs.len(), "same tensors on both sides");
            assert_eq!(rs.len(), workload::parameter_shapes(cfg).len() + 2);
            for (name, expected) in &rs {
                let actual = &py[name];
                let c = close::compare(actual, expected, None)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(c.mismatched, 0, "{cfg:?} seed {seed} {name}: {c:?}");
                assert_eq!(
                    c.max_abs, 0.0,
                    "{cfg:?} seed {seed} {name}: not bit-identical on CPU: {c:?}"
                );
            }
        }
    }
}

#[test]
fn workload_is_deterministic_in_its_seed_even_across_threads() {
    let cfg = &SHAPES[1];
    let a = workload::generate(cfg, 5);
    // other threads generating at the same time must not disturb it (no global RNG)
    let others: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                workload::generate(&SHAPES[1], if i % 2 == 0 { 5 } else { 6 })
            })
        })
        .collect();
    let b = workload::generate(cfg, 5);
    let others: Vec<_> = others.into_iter().map(|h| h.join().unwrap()).collect();
    for w in [&b, &others[0], &others[2]] {
        assert!(a.idx.equal(&w.idx) && a.targets.equal(&w.targets));
        for ((n1, t1), (n2, t2)) in a.weights.iter().zip(&w.weights) {
            assert!(n1 == n2 && t1.equal(t2), "{n1}");
        }
    }
    assert!(!a.idx.equal(&others[1].idx));
    assert!(!a.weights[3].1.equal(&others[1].weights[3].1));
}

/// A grading computes only the parts of the reference its rubric reads (lessons 01 and 02 none),
/// and each part is the same as in the whole answer.
#[test]
fn the_reference_computes_what_each_rubric_reads() {
    use grade::reference::Parts;
    use grade::spec::{Exercise, Rubric};
    let read = |id: &str| {
        let ex = Exercise::load(&root().join("exercises").join(id)).unwrap();
        Parts::read_by(&Rubric::load(&root().join(format!("rubrics/{id}.yaml")), &ex).unwrap())
    };
    let (none, off, greedy) = (
        Parts {
            off: false,
            greedy: false,
        },
        Parts {
            off: true,
            greedy: false,
        },
        Parts {
            off: false,
            greedy: true,
        },
    );
    for (id, want) in [
        ("01-metrics", none),
        ("02-profiler", none),
        ("03-memory", off),
        ("04-checkpoint", off),
        ("05-compile", off),
        ("06-sync", greedy),
    ] {
        assert_eq!(read(id), want, "{id}");
    }
    let cfg = ModelConfig {
        vocab: 32,
        seq_len: 8,
        d_model: 16,
        n_heads: 2,
        n_blocks: 1,
        batch: 2,
    };
    let work = workload::generate(&cfg, 3);
    let all = reference::compute(&cfg, &work);
    assert!(reference::compute_parts(&cfg, &work, none).is_empty());
    for parts in [off, greedy] {
        let some = reference::compute_parts(&cfg, &work, parts);
        assert!(!some.is_empty());
        for (name, t) in &some {
            assert!(
                name.starts_with(if parts.off {
                    "reference/off/"
                } else {
                    "reference/greedy/"
                }),
                "{name}"
            );
            assert!(t.equal(&all[name]), "{name}");
        }
    }
}
