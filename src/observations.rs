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
    /// Where the driver's time went (`["timings", …]`, sent just before `END`): evidence of
    /// what a grading costs, never read by a criterion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<DriverTimings>,
}

/// The driver's stages, in the order they ran, in seconds (its own clock, `time.perf_counter`);
/// each stage begins where the one before ended.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DriverTimings {
    /// CLOCK_MONOTONIC seconds when the driver began (`run_job`'s first line): with the grader's
    /// own start of the process, the interpreter's start-up.
    #[serde(default)]
    pub t0: f64,
    /// The job read; numpy, safetensors, RestrictedPython and torch imported.
    #[serde(default)]
    pub imports_s: f64,
    /// The results channel, the instruments, `grade_lib` and the scenario loaded.
    #[serde(default)]
    pub setup_s: f64,
    /// The scenario's `before_submission` hook (the grader's own measurements) and a collection.
    #[serde(default)]
    pub before_submission_s: f64,
    /// The course's Python loaded, the submission compiled under it, the static audit, the watch.
    #[serde(default)]
    pub audit_s: f64,
    /// The `load` probe: the submission's own import.
    #[serde(default)]
    pub import_s: f64,
    /// The scenario's probes after the import.
    #[serde(default)]
    pub scenario_s: f64,
    /// The instruments verified one last time.
    #[serde(default)]
    pub end_check_s: f64,
    /// Every probe as it ran (those of `before_submission` too), in order.
    #[serde(default)]
    pub probes: Vec<ProbeTiming>,
    /// Seconds spent making and sending records (the recorder's gate, encoding, the pipe), in
    /// all stages.
    #[serde(default)]
    pub channel_s: f64,
    /// Seconds of the cost clock spent recording stamped events (`Ctx.overhead`: clock reads,
    /// handed-over calls), part of `channel_s`.
    #[serde(default)]
    pub recording_s: f64,
    /// Seconds from the driver's start to this record.
    #[serde(default)]
    pub end_s: f64,
}

/// One probe's time: when it began (seconds since the driver began), how long it took, and how
/// much of that went to recording.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ProbeTiming {
    pub name: String,
    pub start_s: f64,
    pub seconds: f64,
    #[serde(default)]
    pub channel_s: f64,
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
