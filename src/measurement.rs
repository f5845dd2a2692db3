//! How a student's measurement is read (DESIGN.md): steps, clock reads, timed windows and their
//! durations, rebuilt from one observed event trace. Every timing lesson shares this model; the
//! `trace` check kind judges it.
//!
//! Events (written by the driver and `lib.py`):
//! - `step {id, inputs?, grad?}` a unit of work began; `step_done {id}` it finished (for training:
//!   backward done). A `step` without its `step_done` is a *stray* forward, not a step.
//! - `fwd_end {id, variant?}` / any event with `id` and `variant`: names the step's variant.
//! - `timer {clock, v, ns?}` the submission read a clock (`v` seconds, `ns` the exact integer of a
//!   `_ns` clock); `timer {clock: cuda_event, id}` recorded a CUDA event; `elapsed {a, b, v}` the
//!   submission asked for the time between two recorded CUDA events.
//! - `sync` the submission called the `sync()` it was given.
//!
//! A **window** is two consecutive reads of one clock that enclose exactly `per` whole steps of
//! one variant and no stray forward; its duration is rebuilt from the values the clocks returned.
//! Reads elsewhere (a log line, a chained timestamp) open or close nothing by themselves.
use crate::observations::Event;
use serde_json::Value;
use std::collections::BTreeMap;

/// One whole or partial step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub id: i64,
    /// Position of its `step` event.
    pub start: usize,
    /// Position of its `step_done` event; `None` for a stray forward.
    pub end: Option<usize>,
    pub variant: String,
    /// Input name → label (`batch`, `other`, `none`).
    pub inputs: BTreeMap<String, String>,
}

impl Step {
    pub fn whole(&self) -> bool {
        self.end.is_some()
    }
    /// Last position the step occupies.
    pub fn last(&self) -> usize {
        self.end.unwrap_or(self.start)
    }
}

/// One clock read by the submission.
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub pos: usize,
    pub clock: String,
    pub secs: Option<f64>,
    pub ns: Option<i64>,
    /// A CUDA event's id.
    pub id: Option<i64>,
}

/// Two consecutive reads of one clock with work between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    pub open: usize,
    pub close: usize,
    pub clock: String,
    /// Indices into `Measurement::steps` of the whole steps inside.
    pub steps: Vec<usize>,
    /// Stray forwards or steps only partly inside.
    pub partial: usize,
    /// Seconds between the two reads, rebuilt from the values returned (None if unknown).
    pub duration: Option<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct Measurement {
    pub steps: Vec<Step>,
    pub reads: Vec<Read>,
    /// Every interval holding at least one whole step.
    pub intervals: Vec<Interval>,
    /// Positions of `sync` events.
    pub syncs: Vec<usize>,
    /// Whole steps per timed repeat.
    pub per: usize,
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
}

impl Measurement {
    pub fn read(events: &[Event], per: usize) -> Measurement {
        let per = per.max(1);
        let mut steps: Vec<Step> = Vec::new();
        let mut by_id: BTreeMap<i64, usize> = BTreeMap::new();
        let mut reads = Vec::new();
        let mut syncs = Vec::new();
        let mut elapsed: BTreeMap<(i64, i64), f64> = BTreeMap::new();
        for (pos, e) in events.iter().enumerate() {
            let id = int(e.fields.get("id"));
            match e.e.as_str() {
                "step" => {
                    let inputs = e
                        .fields
                        .get("inputs")
                        .and_then(Value::as_object)
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("?").to_string()))
                                .collect()
                        })
                        .unwrap_or_default();
                    let id = id.unwrap_or(steps.len() as i64);
                    by_id.insert(id, steps.len());
                    steps.push(Step {
                        id,
                        start: pos,
                        end: None,
                        variant: String::new(),
                        inputs,
                    });
                }
                "step_done" => {
                    if let Some(&k) = id.and_then(|id| by_id.get(&id)) {
                        if steps[k].end.is_none() {
                            steps[k].end = Some(pos);
                        }
                    }
                }
                "timer" => reads.push(Read {
                    pos,
                    clock: e.field_str("clock").unwrap_or("?").to_string(),
                    secs: e.fields.get("v").and_then(Value::as_f64),
                    ns: int(e.fields.get("ns")),
                    id,
                }),
                "elapsed" => {
                    if let (Some(a), Some(b), Some(v)) = (
                        int(e.fields.get("a")),
                        int(e.fields.get("b")),
                        e.fields.get("v").and_then(Value::as_f64),
                    ) {
                        elapsed.insert((a, b), v);
                    }
                }
                "sync" => syncs.push(pos),
                _ => {}
            }
            if let (Some(id), Some(v)) = (id, e.field_str("variant")) {
                if let Some(&k) = by_id.get(&id) {
                    steps[k].variant = v.to_string();
                }
            }
        }
        let mut intervals = Vec::new();
        let mut last_of_clock: BTreeMap<&str, &Read> = BTreeMap::new();
        for r in &reads {
            if let Some(prev) = last_of_clock.insert(r.clock.as_str(), r) {
                let (a, b) = (prev.pos, r.pos);
                let inside: Vec<usize> = (0..steps.len())
                    .filter(|&k| steps[k].whole() && a < steps[k].start && steps[k].last() < b)
                    .collect();
                let partial = steps
                    .iter()
                    .filter(|s| {
                        let touches =
                            (a < s.start && s.start < b) || (a < s.last() && s.last() < b);
                        touches && !(s.whole() && a < s.start && s.last() < b)
                    })
                    .count();
                if inside.is_empty() && partial == 0 {
                    continue;
                }
                let duration = match (prev.ns, r.ns, prev.secs, r.secs, prev.id, r.id) {
                    (Some(x), Some(y), ..) => Some((y - x) as f64 / 1e9),
                    _ if r.clock == "cuda_event" => {
                        prev.id.zip(r.id).and_then(|ids| elapsed.get(&ids).copied())
                    }
                    (_, _, Some(x), Some(y), ..) => Some(y - x),
                    _ => None,
                };
                intervals.push(Interval {
                    open: a,
                    close: b,
                    clock: r.clock.clone(),
                    steps: inside,
                    partial,
                    duration,
                });
            }
        }
        Measurement {
            steps,
            reads,
            intervals,
            syncs,
            per,
        }
    }

    /// The variant of an interval whose whole steps all share one.
    fn variant_of(&self, iv: &Interval) -> Option<&str> {
        let first = &self.steps[*iv.steps.first()?].variant;
        iv.steps
            .iter()
            .all(|&k| &self.steps[k].variant == first)
            .then_some(first.as_str())
    }

    /// Timed repeats: intervals with exactly `per` whole steps of one variant and nothing else.
    pub fn windows(&self) -> Vec<&Interval> {
        self.intervals
            .iter()
            .filter(|iv| {
                iv.steps.len() == self.per && iv.partial == 0 && self.variant_of(iv).is_some()
            })
            .collect()
    }

    pub fn windows_of(&self, variant: &str) -> Vec<&Interval> {
        self.windows()
            .into_iter()
            .filter(|iv| self.variant_of(iv) == Some(variant))
            .collect()
    }

    /// Variants in order of first appearance among whole steps.
    pub fn variants(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.steps.iter().filter(|s| s.whole()) {
            if !out.contains(&s.variant) {
                out.push(s.variant.clone());
            }
        }
        out
    }

    /// The intervals that time a variant: its windows, or (when it has none, e.g. one block of
    /// many steps timed as a whole) every clean interval holding only its steps.
    pub fn timed_of(&self, variant: &str) -> Vec<&Interval> {
        let w = self.windows_of(variant);
        if !w.is_empty() {
            return w;
        }
        self.intervals
            .iter()
            .filter(|iv| iv.partial == 0 && self.variant_of(iv) == Some(variant))
            .collect()
    }

    /// Whole steps of `variant` run before its first timed one and outside every timed interval.
    pub fn warmup_of(&self, variant: &str) -> usize {
        let timed = self.timed_of(variant);
        let Some(first) = timed.iter().flat_map(|iv| iv.steps.iter().copied()).min() else {
            return 0;
        };
        let in_timed = |k: usize| timed.iter().any(|iv| iv.steps.contains(&k));
        (0..first)
            .filter(|&k| self.steps[k].whole() && self.steps[k].variant == variant && !in_timed(k))
            .count()
    }

    fn sync_between(&self, from: usize, to: usize) -> bool {
        self.syncs.iter().any(|&p| from < p && p < to)
    }

    /// Does a `sync()` separate the work before each read of `iv` from the read? (A CUDA event
    /// is recorded on the stream: it needs none.)
    pub fn synced(&self, iv: &Interval) -> (bool, bool) {
        if iv.clock == "cuda_event" {
            return (true, true);
        }
        let last_work_before = |pos: usize| {
            self.steps
                .iter()
                .flat_map(|s| [Some(s.start), s.end])
                .flatten()
                .filter(|&p| p < pos)
                .max()
        };
        let open_ok = last_work_before(iv.open).is_none_or(|w| self.sync_between(w, iv.open));
        let close_ok = last_work_before(iv.close).is_none_or(|w| self.sync_between(w, iv.close));
        (open_ok, close_ok)
    }
}

/// The median of `xs` as the interval of values that are a median: one value for an odd count,
/// `[lower middle, upper middle]` for an even one (their mean, `statistics.median`'s answer,
/// lies inside; so do `median_low`/`median_high`).
pub fn median_range(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        (v[n / 2], v[n / 2])
    } else {
        (v[n / 2 - 1], v[n / 2])
    })
}

/// Equal to float precision: rebuilding `t1 - t0` from recorded clock values may differ from the
/// submission's own arithmetic in the last bits (`t1/1e9 - t0/1e9` with `_ns` clocks).
pub fn close_to(x: f64, lo: f64, hi: f64) -> bool {
    let tol = |v: f64| 1e-9 + 1e-7 * v.abs();
    x >= lo - tol(lo) && x <= hi + tol(hi)
}
