//! The compact part of a run's observations a report keeps (`evidence` in `--format json` and in
//! `grade batch` records), so that pictures (`grade exercise --html`, `grade report`) are drawn
//! from what was recorded, not from new runs: small metrics (numbers, answers, short lists) and
//! the short row traces (ranked operators of lesson 02, memory ledgers and sweeps of lesson 03),
//! and the grader's own clock over each timed window of a trace whose steps it stamped (lesson
//! 04's `compare.runN`: what `step_time` judged a reported time by, for the picture beside it).
use crate::measurement::Measurement;
use crate::observations::Observations;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A metric is kept when its JSON is at most this long (lists of a few hundred samples are;
/// profiler event dumps are not).
const MAX_METRIC_CHARS: usize = 1500;
/// A trace is kept when it is this short and every event is a row (`op`, `ledger`).
const MAX_ROWS: usize = 24;
const ROW_EVENTS: [&str; 2] = ["op", "ledger"];

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Observed {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, Value>,
    /// trace name → its events' fields (the event kind left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rows: BTreeMap<String, Vec<BTreeMap<String, Value>>>,
    /// `TRACE.VARIANT` → the grader's own seconds per step in each timed window of that variant
    /// (`Measurement::grader_seconds`: its wall clock, perf_counter, stamped where each step began
    /// and where its backward ended), for traces whose steps carry those stamps. A picture reads
    /// them as `windows:TRACE.VARIANT`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, Vec<f64>>,
    /// The exercise's scalar `params:` the run was made with (steps per run, …), for per-step
    /// pictures.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, Value>,
}

impl Observed {
    pub fn of(obs: &Observations) -> Observed {
        let metrics = obs
            .metrics
            .iter()
            .filter(|(_, v)| serde_json::to_string(v).is_ok_and(|s| s.len() <= MAX_METRIC_CHARS))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let rows = obs
            .traces
            .iter()
            .filter(|(_, t)| {
                !t.is_empty()
                    && t.len() <= MAX_ROWS
                    && t.iter().all(|e| ROW_EVENTS.contains(&e.e.as_str()))
            })
            .map(|(k, t)| (k.clone(), t.iter().map(|e| e.fields.clone()).collect()))
            .collect();
        let mut windows = BTreeMap::new();
        for (name, events) in &obs.traces {
            let stamped = events
                .iter()
                .any(|e| e.e == "step" && e.fields.contains_key("t"));
            if !stamped || !events.iter().any(|e| e.e == "timer") {
                continue;
            }
            let m = Measurement::read(events, 1);
            for v in m.variants() {
                let secs = m.grader_seconds(events, &v);
                if !secs.is_empty() {
                    windows.insert(format!("{name}.{v}"), secs);
                }
            }
        }
        Observed {
            metrics,
            rows,
            windows,
            params: BTreeMap::new(),
        }
    }

    /// With the exercise's scalar (number, string, bool) top-level `params:`.
    pub fn with_params(mut self, params: &serde_yaml::Mapping) -> Observed {
        self.params = params
            .iter()
            .filter_map(|(k, v)| {
                let k = k.as_str()?;
                let v: Value = match v {
                    serde_yaml::Value::Number(_)
                    | serde_yaml::Value::String(_)
                    | serde_yaml::Value::Bool(_) => serde_json::to_value(v).ok()?,
                    _ => return None,
                };
                Some((k.to_string(), v))
            })
            .collect();
        self
    }

    /// A number of the exercise's `params:`.
    pub fn param(&self, key: &str) -> Option<f64> {
        self.params.get(key).and_then(Value::as_f64)
    }

    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
            && self.rows.is_empty()
            && self.windows.is_empty()
            && self.params.is_empty()
    }

    /// A number metric.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.metrics.get(key).and_then(Value::as_f64)
    }

    /// A list-of-numbers metric (a lone number reads as a list of one); `windows:TRACE.VARIANT`
    /// the grader's seconds per step in that variant's timed windows (`windows`).
    pub fn list(&self, key: &str) -> Option<Vec<f64>> {
        if let Some(k) = key.strip_prefix("windows:") {
            return self.windows.get(k).cloned();
        }
        match self.metrics.get(key)? {
            Value::Array(a) => a.iter().map(Value::as_f64).collect(),
            v => v.as_f64().map(|x| vec![x]),
        }
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        self.metrics.get(key).and_then(Value::as_str)
    }

    pub fn rows(&self, key: &str) -> &[BTreeMap<String, Value>] {
        self.rows.get(key).map_or(&[], Vec::as_slice)
    }
}
