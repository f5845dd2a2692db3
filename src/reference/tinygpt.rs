//! TinyGPT in tch, op for op the same as `exercises/course/model.py` (keep the two in step: on CPU
//! they are then bit-identical). Dropout is not modelled: the reference runs with dropout 0.
use crate::spec::ModelConfig;
use std::collections::BTreeMap;
use tch::{Kind, Reduction, Tensor};

pub struct Output {
    pub loss: Tensor,
    pub logits: Tensor,
    pub grads: Vec<(String, Tensor)>,
}

struct Params<'a>(&'a BTreeMap<String, Tensor>);

impl Params<'_> {
    fn get(&self, name: &str) -> &Tensor {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("workload has no parameter {name}"))
    }
}

fn layer_norm(p: &Params, prefix: &str, x: &Tensor, d: i64) -> Tensor {
    x.layer_norm(
        [d],
        Some(p.get(&format!("{prefix}.weight"))),
        Some(p.get(&format!("{prefix}.bias"))),
        1e-5,
        true,
    )
}

fn linear(p: &Params, prefix: &str, x: &Tensor) -> Tensor {
    x.linear(
        p.get(&format!("{prefix}.weight")),
        Some(p.get(&format!("{prefix}.bias"))),
    )
}

fn attention(p: &Params, prefix: &str, x: &Tensor, cfg: &ModelConfig, mask: &Tensor) -> Tensor {
    let (b, t, c) = x.size3().expect("attention input is [B, T, C]");
    let h = cfg.n_heads;
    let hd = c / h;
    let qkv = linear(p, &format!("{prefix}.qkv"), x).split(c, 2);
    let heads = |z: &Tensor| z.view([b, t, h, hd]).transpose(1, 2);
    let (q, k, v) = (heads(&qkv[0]), heads(&qkv[1]), heads(&qkv[2]));
    let att = q.matmul(&k.transpose(-2, -1)) * (1.0 / (hd as f64).sqrt());
    let att = att.masked_fill(
        &mask.narrow(0, 0, t).narrow(1, 0, t).logical_not(),
        f64::NEG_INFINITY,
    );
    let att = att.softmax(-1, None::<Kind>);
    let y = att.matmul(&v);
    let y = y.transpose(1, 2).contiguous().view([b, t, c]);
    linear(p, &format!("{prefix}.proj"), &y)
}

fn block(p: &Params, i: i64, x: &Tensor, cfg: &ModelConfig, mask: &Tensor) -> Tensor {
    let pre = format!("blocks.{i}");
    let x = x + attention(
        p,
        &format!("{pre}.attn"),
        &layer_norm(p, &format!("{pre}.ln1"), x, cfg.d_model),
        cfg,
        mask,
    );
    let hidden = linear(
        p,
        &format!("{pre}.mlp.fc"),
        &layer_norm(p, &format!("{pre}.ln2"), &x, cfg.d_model),
    )
    .gelu("none");
    &x + linear(p, &format!("{pre}.mlp.proj"), &hidden)
}

/// Forward, cross-entropy loss and backward on CPU; gradients of every parameter.
pub fn loss_and_grads(
    cfg: &ModelConfig,
    weights: &[(String, Tensor)],
    idx: &Tensor,
    targets: &Tensor,
) -> Output {
    let leaves: BTreeMap<String, Tensor> = weights
        .iter()
        .map(|(n, w)| (n.clone(), w.detach().copy().set_requires_grad(true)))
        .collect();
    let p = Params(&leaves);
    let t = idx.size()[1];
    let mask = Tensor::ones([cfg.seq_len, cfg.seq_len], (Kind::Bool, tch::Device::Cpu)).tril(0);
    let pos = Tensor::arange(t, (Kind::Int64, tch::Device::Cpu));
    let mut x = Tensor::embedding(p.get("tok_emb.weight"), idx, -1, false, false)
        + Tensor::embedding(p.get("pos_emb.weight"), &pos, -1, false, false);
    for i in 0..cfg.n_blocks {
        x = block(&p, i, &x, cfg, &mask);
    }
    let h = layer_norm(&p, "ln_f", &x, cfg.d_model);
    let logits = h.linear::<Tensor>(p.get("head.weight"), None);
    let loss = logits.view([-1, cfg.vocab]).cross_entropy_loss::<Tensor>(
        &targets.view([-1]),
        None,
        Reduction::Mean,
        -100,
        0.0,
    );
    loss.backward();
    let grads = weights
        .iter()
        .map(|(n, _)| (n.clone(), leaves[n].grad().detach().copy()))
        .collect();
    Output {
        loss: loss.detach(),
        logits: logits.detach(),
        grads,
    }
}

/// Logits `[B, T, vocab]` of `idx` (no autograd), the same ops as `loss_and_grads`.
pub fn logits(cfg: &ModelConfig, weights: &[(String, Tensor)], idx: &Tensor) -> Tensor {
    let _guard = tch::no_grad_guard();
    let named: BTreeMap<String, Tensor> = weights
        .iter()
        .map(|(n, w)| (n.clone(), w.shallow_clone()))
        .collect();
    let p = Params(&named);
    let t = idx.size()[1];
    let mask = Tensor::ones([cfg.seq_len, cfg.seq_len], (Kind::Bool, tch::Device::Cpu)).tril(0);
    let pos = Tensor::arange(t, (Kind::Int64, tch::Device::Cpu));
    let mut x = Tensor::embedding(p.get("tok_emb.weight"), idx, -1, false, false)
        + Tensor::embedding(p.get("pos_emb.weight"), &pos, -1, false, false);
    for i in 0..cfg.n_blocks {
        x = block(&p, i, &x, cfg, &mask);
    }
    let h = layer_norm(&p, "ln_f", &x, cfg.d_model);
    h.linear::<Tensor>(p.get("head.weight"), None)
}

/// Greedy decoding (lesson 06): `steps` new tokens after `prompt` (`[1, P]`, `P + steps - 1 <=
/// seq_len`), each the argmax of the last position's logits over the whole sequence so far.
pub fn greedy_decode(
    cfg: &ModelConfig,
    weights: &[(String, Tensor)],
    prompt: &Tensor,
    steps: i64,
) -> Tensor {
    let mut seq = prompt.shallow_clone();
    let start = prompt.size()[1];
    for _ in 0..steps {
        let last = logits(cfg, weights, &seq).select(1, -1);
        let next = last.argmax(-1, true);
        seq = Tensor::cat(&[seq, next], 1);
    }
    seq.narrow(1, start, steps).view([-1])
}
