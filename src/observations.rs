//! What one run of a submission produced: probe outcomes, metrics, event traces (JSON from the
//! driver) and tensors (safetensors). Lookups explain *why* something is missing.
use crate::i18n::Text;
use crate::text;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use tch::Tensor;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct ProbeRecord {
    pub ok: bool,
    pub error: Option<String>,
    pub seconds: Option<f64>,
}

/// One observed event: `e` is its kind (`ckpt`, `sync`, `timer`, `embed`), the rest its fields.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Event {
    pub e: String,
    #[serde(flatten)]
    pub fields: BTreeMap<String, Value>,
}

impl Event {
    pub fn new(e: &str) -> Event {
        Event {
            e: e.into(),
            fields: BTreeMap::new(),
        }
    }
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Event {
        self.fields.insert(key.into(), value.into());
        self
    }
    pub fn field_str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Observations {
    #[serde(default)]
    pub nonce: String,
    #[serde(default)]
    pub probes: BTreeMap<String, ProbeRecord>,
    #[serde(default)]
    pub metrics: BTreeMap<String, Value>,
    #[serde(default)]
    pub traces: BTreeMap<String, Vec<Event>>,
    #[serde(default)]
    pub driver_s: f64,
    /// The static audit's findings (a list; `src/driver/audit.py`), sent before the import, so
    /// kept even when the run crashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<Value>,
}

/// Why a value is absent, and the probe whose failure blocked it (reported once, not per criterion).
#[derive(Clone, Debug, PartialEq)]
pub struct Absent {
    pub why: Text,
    pub probe: Option<String>,
}

impl From<Text> for Absent {
    fn from(why: Text) -> Absent {
        Absent { why, probe: None }
    }
}

/// Observations plus the tensors (the submission's and the reference's) checks read.
#[derive(Default)]
pub struct Evidence {
    pub obs: Observations,
    pub tensors: BTreeMap<String, Tensor>,
    /// Set when the whole run failed (crash, timeout, no results): every criterion fails with it.
    pub run_failure: Option<Text>,
}

impl Evidence {
    /// Why a value under `key` (metric `probe.x.y`, tensor `probe/x/y`, trace `probe.x`) is absent.
    pub fn why_missing(&self, key: &str) -> Absent {
        if let Some(f) = &self.run_failure {
            return f.clone().into();
        }
        // the probe that records `key`: its first segment naming a probe (`compare.run1`,
        // `numerics/on/loss`, `forwards.numerics`)
        let probe = key
            .split(['.', '/'])
            .find(|seg| self.obs.probes.contains_key(*seg))
            .unwrap_or(key);
        if let Some(ProbeRecord {
            ok: false,
            error: Some(e),
            ..
        }) = self.obs.probes.get(probe)
        {
            return Absent {
                why: text!(
                    format!("探针 `{probe}` 失败：{e}"),
                    format!("probe `{probe}` failed: {e}")
                ),
                probe: Some(probe.to_string()),
            };
        }
        if let Some(ProbeRecord {
            ok: false,
            error: Some(e),
            ..
        }) = self.obs.probes.get("load")
        {
            return Absent {
                why: text!(
                    format!("无法导入提交的文件：{e}"),
                    format!("the submission could not be imported: {e}")
                ),
                probe: Some("load".into()),
            };
        }
        text!(
            format!("没有记录到 `{key}`"),
            format!("`{key}` was not recorded")
        )
        .into()
    }

    pub fn metric(&self, key: &str) -> Result<&Value, Absent> {
        self.obs
            .metrics
            .get(key)
            .ok_or_else(|| self.why_missing(key))
    }

    pub fn number(&self, key: &str) -> Result<f64, Absent> {
        let v = self.metric(key)?;
        v.as_f64().ok_or_else(|| {
            text!(
                format!("`{key}` 不是数值：{v}"),
                format!("`{key}` is not a number: {v}")
            )
            .into()
        })
    }

    pub fn trace(&self, key: &str) -> Result<&[Event], Absent> {
        self.obs
            .traces
            .get(key)
            .map(Vec::as_slice)
            .ok_or_else(|| self.why_missing(key))
    }

    /// Tensors under `prefix/`, keyed by the rest of their name.
    pub fn group(&self, prefix: &str) -> BTreeMap<&str, &Tensor> {
        let p = format!("{}/", prefix.trim_end_matches('/'));
        self.tensors
            .iter()
            .filter_map(|(k, t)| k.strip_prefix(&p).map(|rest| (rest, t)))
            .collect()
    }
}
