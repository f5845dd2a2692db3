//! The grader's inputs: TinyGPT weights and a token batch generated from a seed (tch), written as
//! safetensors for the driver. The submission never chooses its inputs.
use crate::spec::ModelConfig;
use anyhow::{Context, Result};
use std::path::Path;
use tch::{Device, Kind, Tensor};

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

/// Deterministic in `seed`: same seed, same bytes, on any machine.
pub fn generate(cfg: &ModelConfig, seed: u64) -> Workload {
    let _guard = tch::no_grad_guard();
    tch::manual_seed(seed as i64);
    let opts = (Kind::Float, Device::Cpu);
    let weights = parameter_shapes(cfg)
        .into_iter()
        .map(|(name, shape)| {
            let noise = Tensor::randn(shape.as_slice(), opts);
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
    let idx = Tensor::randint(
        cfg.vocab,
        [cfg.batch, cfg.seq_len],
        (Kind::Int64, Device::Cpu),
    );
    let targets = Tensor::randint(
        cfg.vocab,
        [cfg.batch, cfg.seq_len],
        (Kind::Int64, Device::Cpu),
    );
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
