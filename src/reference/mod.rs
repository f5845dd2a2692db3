//! The grader's own answer: TinyGPT forward, loss and every parameter gradient in libtorch (tch),
//! from the same weights and batch the submission got. Submissions are compared against this.
pub mod tinygpt;

use crate::spec::ModelConfig;
use crate::workload::Workload;
use std::collections::BTreeMap;
use tch::Tensor;

/// Named like the driver's tensors: `reference/off/{loss,logits,grad/<param>}`, and
/// `reference/greedy/tokens`: `seq_len/2` tokens greedily decoded after the prompt
/// `idx[0, :seq_len/4]` (lesson 06's `generate()`; a few small forwards).
/// Single-threaded, like the driver, so CPU kernels reduce in the same order (bit-identical).
pub fn compute(cfg: &ModelConfig, workload: &Workload) -> BTreeMap<String, Tensor> {
    tch::set_num_threads(1);
    let out = tinygpt::loss_and_grads(cfg, &workload.weights, &workload.idx, &workload.targets);
    let mut named = BTreeMap::new();
    named.insert("reference/off/loss".to_string(), out.loss);
    named.insert("reference/off/logits".to_string(), out.logits);
    for (name, g) in out.grads {
        named.insert(format!("reference/off/grad/{name}"), g);
    }
    let (prompt_len, steps) = (cfg.seq_len / 4, cfg.seq_len / 2);
    if prompt_len > 0 && steps > 0 {
        let prompt = workload.idx.narrow(0, 0, 1).narrow(1, 0, prompt_len);
        let tokens = tinygpt::greedy_decode(cfg, &workload.weights, &prompt, steps);
        named.insert("reference/greedy/tokens".to_string(), tokens);
    }
    named
}
