//! The grader's own answer: TinyGPT forward, loss and every parameter gradient in libtorch (tch),
//! from the same weights and batch the submission got. Submissions are compared against this.
pub mod tinygpt;

use crate::spec::{ModelConfig, Rubric};
use crate::workload::Workload;
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// Which of the reference's answers a rubric reads: `reference/off/…` (and the optimizer updates
/// made from its gradients), `reference/greedy/…`. Lessons 01 and 02 read neither, so their
/// gradings compute none (a forward, a backward and a decode in libtorch: 0.05 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    pub off: bool,
    pub greedy: bool,
}

impl Parts {
    pub const ALL: Parts = Parts {
        off: true,
        greedy: true,
    };

    /// What `rubric` reads of the reference, by the tensor names its checks name.
    pub fn read_by(rubric: &Rubric) -> Parts {
        Parts {
            off: ["reference/off", "reference/adam", "reference/sgd"]
                .iter()
                .any(|p| rubric.names_tensor(p)),
            greedy: rubric.names_tensor("reference/greedy"),
        }
    }
}

/// Named like the driver's tensors: `reference/off/{loss,logits,grad/<param>}`, and
/// `reference/greedy/tokens`: `seq_len/2` tokens greedily decoded after the prompt
/// `idx[0, :seq_len/4]` (lesson 06's `generate()`; a few small forwards).
/// Single-threaded, like the driver, so CPU kernels reduce in the same order (bit-identical).
pub fn compute(cfg: &ModelConfig, workload: &Workload) -> BTreeMap<String, Tensor> {
    compute_parts(cfg, workload, Parts::ALL)
}

/// [`compute`], only the `parts` asked for.
pub fn compute_parts(
    cfg: &ModelConfig,
    workload: &Workload,
    parts: Parts,
) -> BTreeMap<String, Tensor> {
    tch::set_num_threads(1);
    let mut named = BTreeMap::new();
    if parts.off {
        let out = tinygpt::loss_and_grads(cfg, &workload.weights, &workload.idx, &workload.targets);
        named.insert("reference/off/loss".to_string(), out.loss);
        named.insert("reference/off/logits".to_string(), out.logits);
        for (name, g) in out.grads {
            named.insert(format!("reference/off/grad/{name}"), g);
        }
    }
    let (prompt_len, steps) = (cfg.seq_len / 4, cfg.seq_len / 2);
    if parts.greedy && prompt_len > 0 && steps > 0 {
        let prompt = workload.idx.narrow(0, 0, 1).narrow(1, 0, prompt_len);
        let tokens = tinygpt::greedy_decode(cfg, &workload.weights, &prompt, steps);
        named.insert("reference/greedy/tokens".to_string(), tokens);
    }
    named
}

/// The change of every weight after ONE optimizer step on the reference gradients (lesson 03: the
/// ledger runs exactly one training step), for a fresh `torch.optim.Adam(lr)` (betas 0.9, 0.999,
/// eps 1e-8): `reference/adam/update/<param>`, and a fresh `torch.optim.SGD(lr, momentum)`:
/// `reference/sgd/update/<param>` (on the first step the momentum buffer is the gradient itself,
/// so the momentum does not enter). Each is `w_after - w_before` in float64 of two float32 values
/// (exact), the float32 update written op for op as torch's single-tensor CPU path does it
/// (`_single_tensor_adam`, `_single_tensor_sgd`).
pub fn updates(
    weights: &[(String, Tensor)],
    answer: &BTreeMap<String, Tensor>,
    lr: f64,
) -> BTreeMap<String, Tensor> {
    let _guard = tch::no_grad_guard();
    let (beta1, beta2, eps) = (0.9f64, 0.999f64, 1e-8f64);
    let mut out = BTreeMap::new();
    for (name, w) in weights {
        let Some(g) = answer.get(&format!("reference/off/grad/{name}")) else {
            continue;
        };
        let delta = |after: Tensor| after.to_kind(Kind::Double) - w.to_kind(Kind::Double);
        // Adam, step 1: exp_avg = lerp(0, g, 1-β1), exp_avg_sq = (1-β2)·g·g,
        // w += -(lr / (1-β1)) · exp_avg / (sqrt(exp_avg_sq) / sqrt(1-β2) + eps)
        let exp_avg = g * (1.0 - beta1);
        let exp_avg_sq = (g * (1.0 - beta2)) * g;
        let denom = exp_avg_sq.sqrt() / (1.0 - beta2).sqrt() + eps;
        let adam = w + (exp_avg * -(lr / (1.0 - beta1))) / denom;
        out.insert(format!("reference/adam/update/{name}"), delta(adam));
        // SGD with momentum, step 1: w += -lr · g
        out.insert(format!("reference/sgd/update/{name}"), delta(w + g * -lr));
    }
    out
}
