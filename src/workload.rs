//! The grader's inputs: TinyGPT weights and a token batch generated from a seed (tch), written as
//! safetensors for the driver. The submission never chooses its inputs.
use crate::spec::ModelConfig;
use anyhow::{Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use tch::Tensor;

/// Weights (named as in `course.TinyGPT.state_dict()`) and one batch.
pub struct Workload {
    pub weights: Vec<(String, Tensor)>,
    pub idx: Tensor,
    pub targets: Tensor,
}

/// Parameter names and shapes of TinyGPT, in `state_dict()` order.
pub fn parameter_shapes(cfg: &ModelConfig) -> Vec<(String, Vec<i64>)> {
    let (v, t, d) = (cfg.vocab, cfg.seq_len, cfg.d_model);
    let mut out = vec![
        ("tok_emb.weight".to_string(), vec![v, d]),
        ("pos_emb.weight".to_string(), vec![t, d]),
    ];
    for i in 0..cfg.n_blocks {
        let p = |s: &str| format!("blocks.{i}.{s}");
        out.extend([
            (p("ln1.weight"), vec![d]),
            (p("ln1.bias"), vec![d]),
            (p("attn.qkv.weight"), vec![3 * d, d]),
            (p("attn.qkv.bias"), vec![3 * d]),
            (p("attn.proj.weight"), vec![d, d]),
            (p("attn.proj.bias"), vec![d]),
            (p("ln2.weight"), vec![d]),
            (p("ln2.bias"), vec![d]),
            (p("mlp.fc.weight"), vec![4 * d, d]),
            (p("mlp.fc.bias"), vec![4 * d]),
            (p("mlp.proj.weight"), vec![d, 4 * d]),
            (p("mlp.proj.bias"), vec![d]),
        ]);
    }
    out.extend([
        ("ln_f.weight".to_string(), vec![d]),
        ("ln_f.bias".to_string(), vec![d]),
        ("head.weight".to_string(), vec![v, d]),
    ]);
    out
}

/// Standard normal samples (Box–Muller) from a generator owned by this call: thread-safe and
/// independent of libtorch's global RNG, which the grader and other threads also use.
fn randn(rng: &mut StdRng, shape: &[i64]) -> Tensor {
    let n: i64 = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| {
            let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
            let u2: f64 = rng.random::<f64>();
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect();
    Tensor::from_slice(&data).view(shape)
}

fn randint(rng: &mut StdRng, high: i64, shape: &[i64]) -> Tensor {
    let n: i64 = shape.iter().product();
    let data: Vec<i64> = (0..n).map(|_| rng.random_range(0..high)).collect();
    Tensor::from_slice(&data).view(shape)
}

/// Deterministic in `seed`: same seed, same bytes, on any machine and from any thread.
pub fn generate(cfg: &ModelConfig, seed: u64) -> Workload {
    let _guard = tch::no_grad_guard();
    let mut rng = StdRng::seed_from_u64(seed);
    let weights = parameter_shapes(cfg)
        .into_iter()
        .map(|(name, shape)| {
            let noise = randn(&mut rng, &shape);
            let w = if name.contains(".ln") || name.starts_with("ln_f") {
                // LayerNorm: weight near 1, bias near 0, both non-trivial so their grads matter
                if name.ends_with("weight") {
                    noise * 0.1 + 1.0
                } else {
                    noise * 0.1
                }
            } else if name.ends_with("bias") {
                noise * 0.02
            } else {
                noise * 0.05
            };
            (name, w)
        })
        .collect();
    let shape = [cfg.batch, cfg.seq_len];
    let idx = randint(&mut rng, cfg.vocab, &shape);
    let targets = randint(&mut rng, cfg.vocab, &shape);
    Workload {
        weights,
        idx,
        targets,
    }
}

impl Workload {
    /// `weights/<name>`, `batch/idx`, `batch/targets`.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut named: Vec<(String, &Tensor)> = self
            .weights
            .iter()
            .map(|(n, t)| (format!("weights/{n}"), t))
            .collect();
        named.push(("batch/idx".into(), &self.idx));
        named.push(("batch/targets".into(), &self.targets));
        Tensor::write_safetensors(&named, path)
            .with_context(|| format!("writing workload to {}", path.display()))
    }
}
