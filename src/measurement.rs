//! How a student's measurement is read (DESIGN.md): steps, clock reads, timed windows and their
//! durations, rebuilt from one observed event trace. Every timing lesson shares this model; the
//! `trace` check kind judges it.
//!
//! Events (written by the driver and `lib.py`):
//! - `step {id, inputs?, fp?, grad?}` a unit of work began; `step_done {id}` it finished (for
//!   training: backward done). A `step` without its `step_done` is a *stray* forward, not a step.
//!   `inputs` labels each input against the grader's own batch (`batch`, `other`, `none`); `fp`
//!   gives each input's fingerprint instead (lesson 02, where the submission picks the input): it
//!   is labelled here, `batch` when it equals the first step's in the trace, else `other`.
//! - `fwd_end {id, variant?}` / any event with `id` and `variant`: names the step's variant.
//! - `timer {clock, v, ns?}` the submission read a clock (`v` seconds, `ns` the exact integer of a
//!   `_ns` clock); `timer {clock: cuda_event, id}` recorded a CUDA event; `elapsed {a, b, v}` the
//!   submission asked for the time between two recorded CUDA events.
//! - `sync` the submission called the `sync()` it was given.
//! - `work` device work the grader queued outside any step (lesson 05: inputs still being copied
//!   when `time_calls` starts): no step, but a clock read after it needs a `sync` between.
//!
//! A **window** is two consecutive reads of one clock that enclose exactly `per` whole steps of
//! one variant and no stray forward; its duration is rebuilt from the values the clocks returned.
//! Reads elsewhere (a log line, a chained timestamp) open or close nothing by themselves.
//!
//! Which windows the method rules (sync, warm-up, repeats) hold: a **source** of a returned number
//! is a pair of reads of one clock around a window, each in the work-free gap at the window's
//! edge (the window's own reads, or a log read beside them), whose seconds give that number. When
//! every number a call returned has a source, in order, only those sources are held to the rules;
//! a log stamp elsewhere is not (issue 18). A rubric may also name the clock the contract defines
//! (lesson 02: the profiler's own recording stretches, `profiler#N`).
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
    /// Positions of `work` events: device work the grader queued outside any step (a clock read
    /// after it needs a `sync()` between, as after a step).
    pub queued: Vec<usize>,
    /// Whole steps per timed repeat.
    pub per: usize,
    /// Seconds between two recorded CUDA events (by their ids), as the submission asked.
    pub elapsed: BTreeMap<(i64, i64), f64>,
}

/// Where one returned number comes from: two reads of one clock around the window
/// `intervals[interval]`, each in the work-free gap at its edge, and the seconds between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub open: usize,
    pub close: usize,
    pub clock: String,
    pub duration: Option<f64>,
    /// How far `duration` may be off from the seconds the submission computed from the same two
    /// values: a few units in the last place of the values read (a clock read as seconds since
    /// 1970 carries ~0.2 µs per unit there; the JSON round trip may cost one).
    pub slack: f64,
    pub interval: usize,
}

impl Source {
    /// Is `x` this source's seconds divided by `per`, to float precision?
    pub fn gives(&self, x: f64, per: f64) -> bool {
        self.duration.is_some_and(|d| {
            let want = d / per;
            (x - want).abs() <= self.slack / per || close_to(x, want, want)
        })
    }
}

/// How far matching returned numbers to windows got (`Measurement::sources`).
#[derive(Clone, Debug, PartialEq)]
pub struct Matched {
    /// One source per number, in order, when every number has one.
    pub sources: Option<Vec<Source>>,
    /// Otherwise the first number without a source, and the seconds per step of the window the
    /// match stopped at (the next one of the best clock), if any.
    pub first_unmatched: Option<(usize, Option<f64>)>,
}

/// Seconds between reads `a` and `b` of one clock, rebuilt from the values the clock returned.
fn seconds(a: &Read, b: &Read, elapsed: &BTreeMap<(i64, i64), f64>) -> Option<f64> {
    match (a.ns, b.ns, a.secs, b.secs) {
        (Some(x), Some(y), ..) => Some((y - x) as f64 / 1e9),
        _ if b.clock == "cuda_event" => a.id.zip(b.id).and_then(|ids| elapsed.get(&ids).copied()),
        (_, _, Some(x), Some(y)) => Some(y - x),
        _ => None,
    }
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
        let mut queued = Vec::new();
        let mut elapsed: BTreeMap<(i64, i64), f64> = BTreeMap::new();
        let mut first_fp: BTreeMap<String, Value> = BTreeMap::new();
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
                    // fingerprints: labelled against the trace's first (the same input, when
                    // the submission chooses it), here, from what was sent as each step began
                    let inputs = match e.fields.get("fp").and_then(Value::as_object) {
                        None => inputs,
                        Some(fp) => fp
                            .iter()
                            .map(|(k, v)| {
                                let first = first_fp.entry(k.clone()).or_insert_with(|| v.clone());
                                let label = if *first == *v { "batch" } else { "other" };
                                (k.clone(), label.to_string())
                            })
                            .collect(),
                    };
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
                "work" => queued.push(pos),
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
                let duration = seconds(prev, r, &elapsed);
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
            queued,
            per,
            elapsed,
        }
    }

    /// `events` with only the reads of `clock` (and of its numbered stretches `clock#N`), when
    /// there are any: the windows a contract defines (lesson 02's profiler recordings). Without
    /// such reads, every clock counts (the submission timed by other means).
    pub fn only_clock(events: &[Event], clock: &str) -> Vec<Event> {
        let ours = |e: &Event| {
            e.field_str("clock").is_some_and(|c| {
                c == clock || c.strip_prefix(clock).is_some_and(|r| r.starts_with('#'))
            })
        };
        if !events.iter().any(|e| e.e == "timer" && ours(e)) {
            return events.to_vec();
        }
        events
            .iter()
            .filter(|e| e.e != "timer" || ours(e))
            .cloned()
            .collect()
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

    /// Positions of every step's `step` and `step_done` events and of queued `work`, in order.
    fn work(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self
            .steps
            .iter()
            .flat_map(|s| [Some(s.start), s.end])
            .flatten()
            .chain(self.queued.iter().copied())
            .collect();
        w.sort_unstable();
        w
    }

    /// Every source of window `intervals[k]`: a read of its clock in the work-free gap before its
    /// first step (its own opening read included) paired with one in the gap after its last step
    /// (its own closing read included). A log read right beside a window's own read times the
    /// same work, so a number taken from either is this window's.
    pub fn sources_of(&self, k: usize) -> Vec<Source> {
        let iv = &self.intervals[k];
        let work = self.work();
        let before = work.iter().copied().filter(|&p| p < iv.open).max();
        let after = work.iter().copied().find(|&p| p > iv.close);
        let of_clock = |r: &&Read| r.clock == iv.clock;
        let opens: Vec<&Read> = self
            .reads
            .iter()
            .filter(of_clock)
            .filter(|r| r.pos <= iv.open && before.is_none_or(|b| r.pos > b))
            .collect();
        let closes: Vec<&Read> = self
            .reads
            .iter()
            .filter(of_clock)
            .filter(|r| r.pos >= iv.close && after.is_none_or(|a| r.pos < a))
            .collect();
        let mut out = Vec::new();
        for a in &opens {
            for b in &closes {
                let ulp = |r: &Read| r.secs.map_or(0.0, |v| v.abs() * f64::EPSILON);
                out.push(Source {
                    open: a.pos,
                    close: b.pos,
                    clock: iv.clock.clone(),
                    duration: seconds(a, b, &self.elapsed),
                    slack: 4.0 * ulp(a).max(ulp(b)),
                    interval: k,
                });
            }
        }
        out
    }

    /// Match the numbers a call returned to the windows of `variant`, in order: number i comes
    /// from a source of a window after the one number i-1 came from, all of one clock, where
    /// `from(number, source)` says a number is taken from a source. The first clock whose
    /// windows give every number wins.
    pub fn sources(
        &self,
        variant: &str,
        numbers: &[f64],
        from: impl Fn(f64, &Source) -> bool,
    ) -> Matched {
        let windows: Vec<usize> = (0..self.intervals.len())
            .filter(|&k| {
                let iv = &self.intervals[k];
                iv.steps.len() == self.per
                    && iv.partial == 0
                    && self.variant_of(iv) == Some(variant)
            })
            .collect();
        let mut clocks: Vec<&str> = Vec::new();
        for &k in &windows {
            let c = self.intervals[k].clock.as_str();
            if !clocks.contains(&c) {
                clocks.push(c);
            }
        }
        let per = self.per as f64;
        let mut best: Option<(usize, Option<f64>)> = None;
        for clock in clocks {
            let ws: Vec<usize> = windows
                .iter()
                .copied()
                .filter(|&k| self.intervals[k].clock == clock)
                .collect();
            let mut got = Vec::new();
            let mut j = 0;
            for &x in numbers {
                let found = ws[j..].iter().enumerate().find_map(|(i, &k)| {
                    self.sources_of(k)
                        .into_iter()
                        .find(|s| from(x, s))
                        .map(|s| (i, s))
                });
                match found {
                    Some((i, s)) => {
                        j += i + 1;
                        got.push(s);
                    }
                    None => break,
                }
            }
            if got.len() == numbers.len() && !numbers.is_empty() {
                return Matched {
                    sources: Some(got),
                    first_unmatched: None,
                };
            }
            let next = ws
                .get(j)
                .and_then(|&k| self.intervals[k].duration)
                .map(|d| d / per);
            if best.is_none_or(|(n, _)| got.len() > n) {
                best = Some((got.len(), next));
            }
        }
        Matched {
            sources: None,
            first_unmatched: Some(best.unwrap_or((0, None))),
        }
    }

    /// The sources of `numbers` when each is seconds per step (or seconds) of a window of
    /// `variant`: the windows these numbers come from, held to the method's rules.
    pub fn held(&self, variant: &str, numbers: &[f64]) -> Option<Vec<Source>> {
        let per = self.per as f64;
        self.sources(variant, numbers, |x, s| s.gives(x, per) || s.gives(x, 1.0))
            .sources
    }

    /// Whole steps of `variant` before the first of `sources`' windows and in none of them.
    pub fn warmup_before(&self, variant: &str, sources: &[Source]) -> usize {
        let inside: Vec<usize> = sources
            .iter()
            .flat_map(|s| self.intervals[s.interval].steps.iter().copied())
            .collect();
        let Some(&first) = inside.iter().min() else {
            return 0;
        };
        (0..first)
            .filter(|&k| {
                self.steps[k].whole() && self.steps[k].variant == variant && !inside.contains(&k)
            })
            .count()
    }

    /// Does a `sync()` separate the work before each of the two reads from the read?
    pub fn synced_reads(&self, clock: &str, open: usize, close: usize) -> (bool, bool) {
        if clock == "cuda_event" {
            return (true, true);
        }
        let work = self.work();
        let ok = |pos: usize| {
            work.iter()
                .copied()
                .filter(|&p| p < pos)
                .max()
                .is_none_or(|w| self.sync_between(w, pos))
        };
        (ok(open), ok(close))
    }

    fn sync_between(&self, from: usize, to: usize) -> bool {
        self.syncs.iter().any(|&p| from < p && p < to)
    }

    /// Does a `sync()` separate the work before each read of `iv` from the read? (A CUDA event
    /// is recorded on the stream: it needs none.)
    pub fn synced(&self, iv: &Interval) -> (bool, bool) {
        self.synced_reads(&iv.clock, iv.open, iv.close)
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
