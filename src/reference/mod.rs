//! The grader's own answer: TinyGPT forward, loss and every parameter gradient in libtorch (tch),
//! from the same weights and batch the submission got. Submissions are compared against this.
pub mod tinygpt;

use crate::spec::ModelConfig;
use crate::workload::Workload;
use std::collections::BTreeMap;
use tch::Tensor;

/// Named like the driver's tensors: `reference/off/{loss,logits,grad/<param>}`.
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
    named
}
