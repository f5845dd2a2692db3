//! How a student's measurement is read (DESIGN.md): steps, clock reads, timed windows and their
//! durations, rebuilt from one observed event trace. Every timing lesson shares this model; the
//! `trace` check kind judges it.
//!
//! Events (written by the driver and `grade_lib` (src/driver/lib/)):
//! - `step {id, inputs?, fp?, grad?}` a unit of work began; `step_done {id}` it finished (for
//!   training: backward done). A `step` without its `step_done` is a *stray* forward, not a step.
//!   `inputs` labels each input against the grader's own batch (`batch`, `other`, `none`;
//!   `shape`: another shape, where the batch handed over is the step's input: lessons 04, 05); `fp`
//!   gives each input's fingerprint instead (lesson 02, where the submission picks the input): it
//!   is labelled here, `batch` when it equals the first step's in the trace, else `other`; a
//!   `step_done {fp}` gives them again as the step ended (`other` unless still the first step's:
//!   an input changed while the step computed on it was not the same input).
//! - `fwd_end {id, variant?}` / any event with `id` and `variant`: names the step's variant.
//! - `timer {clock, v, ns?}` the submission read a clock (`v` seconds, `ns` the exact integer of a
//!   `_ns` clock); `timer {clock: cuda_event, id}` recorded a CUDA event; `elapsed {a, b, v}` the
//!   submission asked for the time between two recorded CUDA events.
//! - `sync` the submission called the `sync()` it was given.
//! - `step_undone {id, embedding, loss, ran, model_layers, back, grads, params, lowp}` a backward began at a step's loss
//!   but missed part of it (the embedding, a layer, a parameter's gradient): that step stays a
//!   stray forward; reports say what was missed.
//! - `work` device work the grader queued outside any step (lesson 05: inputs still being copied
//!   when `time_calls` starts): no step, but a clock read after it needs a `sync` between.
//!
//! A **window** is two consecutive reads of one clock that enclose exactly `per` whole steps of
//! one variant and no stray forward; its duration is rebuilt from the values the clocks returned.
//! Reads elsewhere (a log line, a chained timestamp) open or close nothing by themselves.
//!
//! Which windows the method rules (sync, warm-up, repeats) hold: a **source** of a returned number
//! is any pair of reads of one clock that encloses exactly `per` consecutive whole steps of one
//! variant (a *group*: no stray forward among them), the opening read in the step-free gap before
//! the group's first step, the closing one in the gap after its last, whose seconds give that
//! number within the clock's resolution at the values read. Reads between the two (a log stamp
//! after every step) break nothing; a read beside the pair (a log line) is no source unless its
//! seconds give the number. When every number a call returned has a source, in order, only those
//! sources are held to the rules: a read no returned number comes from is no window (issues 18,
//! 39). A rubric may also name the clock the contract defines (lesson 02: the profiler's own
//! recording stretches, `profiler#N`).
use crate::observations::Event;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One whole or partial step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub id: i64,
    /// Position of its `step` event.
    pub start: usize,
    /// Position of its `step_done` event; `None` for a stray forward.
    pub end: Option<usize>,
    pub variant: String,
    /// Input name → label (`batch`, `other`, `shape`, `none`).
    pub inputs: BTreeMap<String, String>,
}

impl Step {
    pub fn whole(&self) -> bool {
        self.end.is_some()
    }
    /// Did it do the contract's work: no input of another shape than the one handed over
    /// (labelled `shape`: a slice of the batch)? A timed window holds only such steps (red team
    /// 20: steps on half the batch's rows timed as the step's windows). Other values of the same
    /// shape are the same work: `same_inputs` is what judges them.
    pub fn on_given_inputs(&self) -> bool {
        self.inputs.values().all(|l| l != "shape")
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
    /// The grader's cost clock where the value was read (`c`: wall seconds less run-queue wait).
    pub cost: Option<f64>,
    /// The grader's own seconds spent recording stamped events before this read (`g`).
    pub overhead: Option<f64>,
    /// The grader's work clock where the value was read (`w`: the process's CPU seconds; on a
    /// CPU device only): `cost` less `work` grows only while the reading thread neither runs
    /// nor waits for a CPU (a sleep, a blocking wait).
    pub work: Option<f64>,
    /// The grader's seconds spent recording this read itself (the next stamped event's `g`
    /// less this one's): a read the submission makes inside a window costs the window this
    /// much, and it is the submission's (red team 7: windows padded with extra clock reads).
    pub recording: Option<f64>,
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

/// What `Measurement::untimed_between` found amid a variant's timing.
#[derive(Clone, Debug, PartialEq)]
pub enum Untimed {
    /// Every step timed, or the steps timed equally spaced among whole steps of the variant that
    /// cost what they do.
    None,
    /// Forwards without a window of their own (these), in no fixed pattern or not whole steps of
    /// the variant: which steps were timed was chosen.
    Chosen(Vec<usize>),
    /// A fixed pattern, but each step timed costs `ratio` × the untimed step of the variant run
    /// right before it (the median over the pairs, the grader's cost clock): more than
    /// `UNLIKE_MAX` from 1.
    Unlike { ratio: f64 },
}

/// How far from 1 (×) the median ratio of a fixed pattern's timed steps to the untimed steps
/// right before them may be: each pair ran back to back. Honest (a timer's own warm-up before
/// each timed step) 0.96–1.03 quiet, 0.85–1.25 over 64 variant-calls with two gradings at a time
/// beside two busy loops (2026-12-06); red team 24's fixed patterns 1.3–2.6 (or 0.54–0.76).
pub const UNLIKE_MAX: f64 = 1.5;

/// Seconds of a span the stamping thread was neither on a CPU nor waiting for one: its cost-clock
/// seconds (`c`: running, sleeping, blocking) less its work-clock seconds (`w`: the process's CPU
/// time), never below 0.
fn asleep_s(c0: f64, c1: f64, w0: f64, w1: f64) -> f64 {
    ((c1 - c0) - (w1 - w0)).max(0.0)
}

/// How many reads at each end of a step-free gap can open or close a window (`sources_in`).
const GAP_ENDS: usize = 16;

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
    /// `call {c0, c1}` events: a handed-over `step()` or `sync()` ran from `c0` to `c1` on the
    /// grader's cost clock (position, c0, c1).
    pub calls: Vec<(usize, f64, f64)>,
    /// Positions of the `call` events of a handed-over `sync()` (`fn: "sync"`): one with no other
    /// handed-over call since the window opened or since the last `sync()` counted waits for
    /// nothing, and its time is the submission's own, not work (red team 6: windows padded with
    /// a hundred extra `sync()` calls after their last step).
    pub sync_calls: BTreeSet<usize>,
    /// Whole steps stamped on the grader's cost clock (`c` of `step` and `step_done`, lesson 04's
    /// observer): (position of the `step`, c0, c1). A window's busy time when it holds no `call`.
    pub step_calls: Vec<(usize, f64, f64)>,
    /// Seconds of each stamped call and step (by the position of its `call` or `step` event) its
    /// thread was neither on a CPU nor waiting for one (`asleep_s`, CPU device only): a sleep in
    /// a step the submission wrote (lesson 04) is no work of the step's; in a handed-over call
    /// (the grader's code, sealed) it is the call's (a compile waiting for its compiler).
    pub asleep: BTreeMap<usize, f64>,
    /// Backwards that began at a step's loss but were no whole step (`step_undone`).
    pub undone: Vec<Undone>,
}

/// A backward from a step's loss that missed part of the step (`step_undone`, lib.StepObserver).
#[derive(Clone, Debug, PartialEq)]
pub struct Undone {
    /// It reached the embedding's output from the loss, in the same backward.
    pub embedding: bool,
    /// It began with a loss's gradient (positive at the model's loss; a cross-entropy's at the
    /// logits), not that of `(logits * 0).sum()` or `logits.sum()`.
    pub loss: bool,
    /// Distinct layers (`attn`, `mlp`) of the model its forward ran, of the model's `layers`.
    pub ran: i64,
    pub layers: i64,
    /// Distinct layers it went back through.
    pub back: i64,
    /// Parameters it gave a new gradient, of all the model's.
    pub grads: i64,
    pub params: i64,
    /// Layer runs of its forward under autocast or on an input of another float type than
    /// float32 (the contract's step computes in float32).
    pub lowp: i64,
}

/// Where one returned number comes from: two reads of one clock that enclose the whole steps
/// `steps` (a group, `Measurement::groups`), the opening read in the step-free gap before the
/// first, the closing one in the gap after the last, and the seconds between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub open: usize,
    pub close: usize,
    pub clock: String,
    pub duration: Option<f64>,
    /// How far `duration` may be off from the seconds the submission computed from the same two
    /// values: the clock's resolution at the values read, a few units in their last place
    /// (`time.time()` near 1.7e9 s resolves ~0.24 µs; the JSON round trip may cost one).
    pub slack: f64,
    /// Indices into `Measurement::steps` of the whole steps enclosed.
    pub steps: Vec<usize>,
}

/// The clock's resolution at a value it returned: one unit in the last place of `v` (as Python's
/// `math.ulp`).
pub fn ulp(v: f64) -> f64 {
    let v = v.abs();
    if !v.is_finite() {
        return 0.0;
    }
    let next = f64::from_bits(v.to_bits() + 1);
    next - v
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
        let mut calls = Vec::new();
        let mut sync_calls = BTreeSet::new();
        let mut step_calls = Vec::new();
        let mut asleep = BTreeMap::new();
        let mut first_fp: BTreeMap<String, Value> = BTreeMap::new();
        let mut undone = Vec::new();
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
                            // the fingerprints again as the step ended: an input is the first
                            // step's only if it still was when the work on it was done
                            if let Some(fp) = e.fields.get("fp").and_then(Value::as_object) {
                                for (name, v) in fp {
                                    if first_fp.get(name) != Some(v) {
                                        steps[k].inputs.insert(name.clone(), "other".into());
                                    }
                                }
                            }
                            let f = |e: &Event, k: &str| e.fields.get(k).and_then(Value::as_f64);
                            let start = &events[steps[k].start];
                            if let (Some(c0), Some(c1)) = (f(start, "c"), f(e, "c")) {
                                step_calls.push((steps[k].start, c0, c1));
                                if let (Some(w0), Some(w1)) = (f(start, "w"), f(e, "w")) {
                                    asleep.insert(steps[k].start, asleep_s(c0, c1, w0, w1));
                                }
                            }
                        }
                    }
                }
                "timer" => reads.push(Read {
                    pos,
                    clock: e.field_str("clock").unwrap_or("?").to_string(),
                    secs: e.fields.get("v").and_then(Value::as_f64),
                    ns: int(e.fields.get("ns")),
                    id,
                    cost: e.fields.get("c").and_then(Value::as_f64),
                    overhead: e.fields.get("g").and_then(Value::as_f64),
                    work: e.fields.get("w").and_then(Value::as_f64),
                    recording: None,
                }),
                "call" => {
                    let c = |k: &str| e.fields.get(k).and_then(Value::as_f64);
                    if let (Some(c0), Some(c1)) = (c("c0"), c("c1")) {
                        calls.push((pos, c0, c1));
                        if let (Some(w0), Some(w1)) = (c("w0"), c("w1")) {
                            asleep.insert(pos, asleep_s(c0, c1, w0, w1));
                        }
                        if e.field_str("fn") == Some("sync") {
                            sync_calls.insert(pos);
                        }
                    }
                }
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
                "step_undone" => undone.push(Undone {
                    embedding: e.fields.get("embedding").and_then(Value::as_bool) == Some(true),
                    loss: e.fields.get("loss").and_then(Value::as_bool) != Some(false),
                    ran: int(e.fields.get("ran")).unwrap_or(0),
                    layers: int(e.fields.get("model_layers")).unwrap_or(0),
                    back: int(e.fields.get("back")).unwrap_or(0),
                    grads: int(e.fields.get("grads")).unwrap_or(0),
                    params: int(e.fields.get("params")).unwrap_or(0),
                    lowp: int(e.fields.get("lowp")).unwrap_or(0),
                }),
                "work" => queued.push(pos),
                _ => {}
            }
            if let (Some(id), Some(v)) = (id, e.field_str("variant")) {
                if let Some(&k) = by_id.get(&id) {
                    steps[k].variant = v.to_string();
                }
            }
        }
        // each read's own recording: up to the next event that says how much the grader had
        // spent recording (a read's or a handed-over call's `g`)
        let stamped: Vec<(usize, f64)> = events
            .iter()
            .enumerate()
            .filter_map(|(pos, e)| Some((pos, e.fields.get("g").and_then(Value::as_f64)?)))
            .collect();
        for r in reads.iter_mut() {
            let next = stamped
                .get(stamped.partition_point(|(pos, _)| *pos <= r.pos))
                .map(|&(_, g)| g);
            r.recording = r.overhead.zip(next).map(|(g0, g1)| (g1 - g0).max(0.0));
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
            undone,
            calls,
            sync_calls,
            step_calls,
            asleep,
        }
    }

    /// A source's window on the grader's cost clock: `(seconds, busy)`, the seconds between its
    /// two reads and those of them spent inside the handed-over calls (`call` events between the
    /// reads, clipped to them). The rest is the submission's own time in the window: a loop and a
    /// clock read, or idle time added to it (a sleep, a spin after the last `sync()`). `None`
    /// when a read or the calls carry no stamp (nothing to compare).
    pub fn busy(&self, s: &Source) -> Option<(f64, f64)> {
        self.window_cost(s.open, s.close, false)
    }

    /// `busy` of the window between the reads at positions `open` and `close`, for a lesson
    /// whose submission writes the step itself (lesson 04): the work is the handed-over calls
    /// (`call` events) in it or, in a window that holds none, its whole steps stamped on the cost
    /// clock (`step_calls`: where the grader saw each begin and its backward end). `None` when
    /// the window holds no stamped work (nothing to compare).
    pub fn busy_between(&self, open: usize, close: usize) -> Option<(f64, f64)> {
        self.window_cost(open, close, true)
    }

    fn window_cost(&self, open: usize, close: usize, steps: bool) -> Option<(f64, f64)> {
        let read = |pos: usize| self.reads.iter().find(|r| r.pos == pos);
        let (r0, r1) = (read(open)?, read(close)?);
        let (a, b) = (r0.cost?, r1.cost?);
        // the grader's own recording between the two reads (the opening read's event, each
        // call's event) is neither the work nor the submission's; that of a read the submission
        // made inside the window is the submission's (it chose to read the clock there)
        let inner: f64 = self
            .reads
            .iter()
            .filter(|r| open < r.pos && r.pos < close)
            .filter_map(|r| r.recording)
            .sum();
        let writing = (r1.overhead? - r0.overhead? - inner).max(0.0);
        let inside = |(pos, ..): &&(usize, f64, f64)| open < *pos && *pos < close;
        let clip = |&(_, c0, c1): &(usize, f64, f64)| (c1.min(b) - c0.max(a)).max(0.0);
        let busy: f64 = if self.calls.iter().any(|c| inside(&c)) {
            // a sync() counts as work only when other work was handed over before it in the
            // window, since the last sync() that counted: an idle sync() is the submission's time
            let mut pending = false;
            let mut sum = 0.0;
            for c in self.calls.iter().filter(inside) {
                let sync = self.sync_calls.contains(&c.0);
                if !sync || pending {
                    sum += clip(c);
                }
                pending = !sync;
            }
            sum
        } else if !steps {
            0.0
        } else if self.step_calls.iter().any(|c| inside(&c)) {
            // a step's seconds asleep (not on a CPU, not waiting for one) are no work of it
            let work = |c: &(usize, f64, f64)| {
                let asleep = self.asleep.get(&c.0).copied().unwrap_or(0.0);
                (clip(c) - asleep).max(0.0)
            };
            self.step_calls.iter().filter(inside).map(work).sum()
        } else {
            return None; // no stamped work in the window: nothing to compare
        };
        Some((b - a - writing, busy))
    }

    /// The seconds of the window between the reads at positions `open` and `close` that the
    /// submission's thread spent neither on a CPU nor waiting for one (a sleep, a blocking wait)
    /// outside the handed-over calls in it: on a CPU device no part of a step's work, whatever
    /// the window holds (a sleep inside a step the submission wrote counts). `None` without the
    /// grader's work clock on both reads (CUDA, a kernel without schedstat).
    pub fn asleep_between(&self, open: usize, close: usize) -> Option<f64> {
        let read = |pos: usize| self.reads.iter().find(|r| r.pos == pos);
        let (r0, r1) = (read(open)?, read(close)?);
        let total = asleep_s(r0.cost?, r1.cost?, r0.work?, r1.work?);
        let calls: f64 = (self.calls.iter())
            .filter(|c| open < c.0 && c.0 < close)
            .filter_map(|c| self.asleep.get(&c.0))
            .sum();
        Some((total - calls).max(0.0))
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

    /// Timed repeats: intervals with exactly `per` whole steps of one variant, each on the
    /// inputs handed over (`Step::on_given_inputs`), and nothing else.
    pub fn windows(&self) -> Vec<&Interval> {
        self.intervals
            .iter()
            .filter(|iv| {
                iv.steps.len() == self.per
                    && iv.partial == 0
                    && self.variant_of(iv).is_some()
                    && iv.steps.iter().all(|&k| self.steps[k].on_given_inputs())
            })
            .collect()
    }

    pub fn windows_of(&self, variant: &str) -> Vec<&Interval> {
        self.windows()
            .into_iter()
            .filter(|iv| self.variant_of(iv) == Some(variant))
            .collect()
    }

    /// The readings of `variant`'s timed windows a number reported over all of them (a median)
    /// may come from. A window is two consecutive reads of one clock; where a call also reads
    /// other clocks (a `time.time()` log stamp around each window, windows that alternate two
    /// clocks), their pairs around the same steps are windows too, but the student timed each
    /// group of steps once (issue 39). With one clock, every window (`windows_of`). With several:
    /// the windows of every clock that timed each group of steps some window timed, together,
    /// then each such clock's own, then one window per group of steps (the innermost pair synced
    /// before both reads, else the innermost). A clock that timed only some of the groups is a
    /// subset of the measurement chosen after the fact (red team 20: a second clock closed around
    /// the fastest steps only, or around the padded ones): its windows are in no reading but the
    /// one-per-group one, neither alone nor in the union of all windows, where the steps it timed
    /// counted twice, leaning its median towards them (`redteam20_cherry_pick_second_clock`, which
    /// reports its fastest steps' median, passed once in 764 gradings, where that union was the
    /// one reading still holding the subset clock's windows).
    pub fn window_readings(&self, variant: &str) -> Vec<Vec<&Interval>> {
        let all = self.windows_of(variant);
        let mut clocks: Vec<&str> = Vec::new();
        for iv in &all {
            if !clocks.contains(&iv.clock.as_str()) {
                clocks.push(iv.clock.as_str());
            }
        }
        if clocks.len() < 2 {
            return vec![all];
        }
        let mut groups: Vec<&Vec<usize>> = Vec::new();
        for iv in &all {
            if !groups.contains(&&iv.steps) {
                groups.push(&iv.steps);
            }
        }
        let own = |c: &str| -> Vec<&Interval> {
            all.iter().copied().filter(|iv| iv.clock == c).collect()
        };
        let whole: Vec<&str> = clocks
            .into_iter()
            .filter(|c| {
                let timed = own(c);
                groups
                    .iter()
                    .all(|g| timed.iter().any(|iv| &iv.steps == *g))
            })
            .collect();
        let mut out: Vec<Vec<&Interval>> = Vec::new();
        if whole.len() > 1 {
            out.push(
                all.iter()
                    .copied()
                    .filter(|iv| whole.contains(&iv.clock.as_str()))
                    .collect(),
            );
        }
        out.extend(whole.iter().map(|c| own(c)));
        let one_each = groups
            .into_iter()
            .filter_map(|g| {
                all.iter()
                    .copied()
                    .filter(|iv| &iv.steps == g)
                    .max_by_key(|iv| {
                        let (o, c) = self.synced(iv);
                        (o && c, iv.open, std::cmp::Reverse(iv.close))
                    })
            })
            .collect();
        out.push(one_each);
        out
    }

    /// Whole steps of `variant` between the first and the last of the steps `timed` (those its
    /// windows hold) that are not among them, when which steps have a window follows no pattern. A measurement is its timed
    /// steps: a step left without a window in the middle of the timing (its clock read skipped,
    /// glued to the next step, read inside the step) leaves the median, so windows kept only
    /// around the fast steps of one variant and the slow ones of the other choose the result
    /// after the fact (red team 22). A timer's own untimed warm-up before each timed step
    /// (`torch.utils.benchmark.Timer.timeit`: two, then one timed) is a pattern fixed before any
    /// step ran: the steps timed are equally spaced over the whole timing. Steps before the
    /// first window are warm-up; steps after the last are after the measurement.
    pub fn untimed_between(
        &self,
        variant: &str,
        others: &[String],
        timed: impl IntoIterator<Item = usize>,
    ) -> Untimed {
        let timed: BTreeSet<usize> = timed.into_iter().collect();
        let (Some(&first), Some(&last)) = (timed.first(), timed.last()) else {
            return Untimed::None;
        };
        // every forward amid the timing counts, whole or not, whatever it was labelled, except
        // whole steps of another of the variants compared (`others`: steps timed alternately):
        // a backward made to raise (a stray forward then), or a step made "partial" (a layer
        // called once more in its backward), leaves the timing as surely as an untimed step
        // (red team 23)
        let span: Vec<usize> = (first..=last)
            .filter(|&k| {
                let s = &self.steps[k];
                !(s.whole() && s.variant != variant && others.contains(&s.variant))
            })
            .collect();
        let untimed: Vec<usize> = span
            .iter()
            .copied()
            .filter(|k| !timed.contains(k))
            .collect();
        if untimed.is_empty() {
            return Untimed::None;
        }
        // the steps timed equally spaced: every k-th (one timed step per period; a period
        // holding several timed steps lets its first instance be chosen after the fact and then
        // repeated blindly: red team 23's `half_period_pick`), the others whole steps of the
        // same variant (a timer's own warm-up runs the step it times)
        let at: Vec<usize> = span
            .iter()
            .enumerate()
            .filter(|(_, k)| timed.contains(k))
            .map(|(i, _)| i)
            .collect();
        let spaced = at.windows(2).all(|w| w[1] - w[0] == at[1] - at[0]);
        let same = untimed
            .iter()
            .all(|&k| self.steps[k].whole() && self.steps[k].variant == variant);
        if !(spaced && same) {
            return Untimed::Chosen(untimed);
        }
        // and they cost what the timed ones do, on the grader's cost clock: each timed step
        // against the untimed step of the variant right before it (run back to back, so load
        // that comes and goes hits both halves of a pair alike), the median of those ratios. A
        // fixed pattern whose timed steps alone are made slower or faster (the caches swept, a
        // profiler or a deep stack around them only: red team 24) measures something else than
        // the step
        let mut ratios = Vec::new();
        for (i, &k) in span.iter().enumerate() {
            if !timed.contains(&k) || i == 0 || timed.contains(&span[i - 1]) {
                continue;
            }
            if let (Some(t), Some(u)) = (self.step_cost(k), self.step_cost(span[i - 1])) {
                if u > 0.0 {
                    ratios.push(t / u);
                }
            }
        }
        match median_range(&ratios).map(|(lo, hi)| (lo + hi) / 2.0) {
            Some(r) if !(1.0 / UNLIKE_MAX..=UNLIKE_MAX).contains(&r) => {
                Untimed::Unlike { ratio: r }
            }
            _ => Untimed::None,
        }
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

    /// The grader's own seconds per step in each timed window of `variant` (`timed_of`), from the
    /// `t` stamps of the grader's clock on its steps (`step` where a step began, `step_done` where
    /// its backward ended; `lib.StepObserver`, wall time): what `step_time` holds a reported time
    /// per step to, and what a picture sets beside it. `events` are the ones this was read from.
    pub fn grader_seconds(&self, events: &[Event], variant: &str) -> Vec<f64> {
        let stamp = |pos: usize| events.get(pos)?.fields.get("t").and_then(Value::as_f64);
        self.timed_of(variant)
            .iter()
            .filter_map(|iv| {
                iv.steps
                    .iter()
                    .map(|&k| {
                        let s = &self.steps[k];
                        Some(stamp(s.end?)? - stamp(s.start)?)
                    })
                    .sum::<Option<f64>>()
                    .map(|d| d / iv.steps.len().max(1) as f64)
            })
            .collect()
    }

    /// The grader's cost-clock seconds of each step of `variant` its timed windows hold
    /// (`timed_of`), from where the observer saw it begin to where its backward ended
    /// (`step_calls`): the step's own work, whatever the windows hold around it.
    pub fn step_costs(&self, variant: &str) -> Vec<f64> {
        self.timed_of(variant)
            .iter()
            .flat_map(|iv| iv.steps.iter().filter_map(|&k| self.step_cost(k)))
            .collect()
    }

    /// Step `k`'s seconds on the grader's cost clock, from where the observer saw it begin to
    /// where its backward ended (`step_calls`); `None` when it was not stamped.
    fn step_cost(&self, k: usize) -> Option<f64> {
        let start = self.steps[k].start;
        self.step_calls
            .iter()
            .find(|c| c.0 == start)
            .map(|&(_, c0, c1)| c1 - c0 - self.asleep.get(&start).copied().unwrap_or(0.0))
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

    /// Every group of `per` consecutive whole steps of `variant` with no other step (a stray
    /// forward, a step of another variant) among them: what one timed window encloses. In order
    /// of their first step; groups overlap (every start is one).
    pub fn groups(&self, variant: &str) -> Vec<Vec<usize>> {
        let per = self.per;
        let n = self.steps.len();
        let mut out = Vec::new();
        if n < per {
            return out;
        }
        for k in 0..=n - per {
            let g: Vec<usize> = (k..k + per).collect();
            let ok = g
                .iter()
                .all(|&i| self.steps[i].whole() && self.steps[i].variant == variant);
            if !ok {
                continue;
            }
            // steps are in order of their start: none outside the group may touch its span
            let (a, b) = (self.steps[k].start, self.steps[k + per - 1].last());
            let clean = self.steps.iter().enumerate().all(|(i, s)| {
                g.contains(&i) || !((a < s.start && s.start < b) || (a < s.last() && s.last() < b))
            });
            if clean {
                out.push(g);
            }
        }
        out
    }

    /// Positions of every step's `step` and `step_done` events, in order.
    fn step_marks(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self
            .steps
            .iter()
            .flat_map(|s| [Some(s.start), s.end])
            .flatten()
            .collect();
        w.sort_unstable();
        w
    }

    /// Every source of the group `steps`: a read of a clock in the step-free gap before its first
    /// step paired with a read of the same clock in the gap after its last. Reads between the
    /// two (inside the group) do not matter; which pair a returned number comes from, its seconds
    /// say. Of a gap holding more than `2 × GAP_ENDS` reads only its first and last `GAP_ENDS`
    /// are paired (the reads next to the steps on either side: where a window opens or closes);
    /// a gap padded with thousands of reads (red team 6's 1500 per window) would otherwise give
    /// millions of pairs per group, and minutes of checking.
    pub fn sources_of(&self, steps: &[usize]) -> Vec<Source> {
        self.sources_in(steps, &self.step_marks())
    }

    fn sources_in<'a>(&'a self, steps: &[usize], marks: &[usize]) -> Vec<Source> {
        let (Some(&first), Some(&last)) = (steps.first(), steps.last()) else {
            return Vec::new();
        };
        let start = self.steps[first].start;
        let end = self.steps[last].last();
        let before = marks.iter().copied().filter(|&p| p < start).max();
        let after = marks.iter().copied().find(|&p| p > end);
        let ends = |mut gap: Vec<&'a Read>| -> Vec<&'a Read> {
            if gap.len() > 2 * GAP_ENDS {
                gap.drain(GAP_ENDS..gap.len() - GAP_ENDS);
            }
            gap
        };
        let opens = ends(
            self.reads
                .iter()
                .filter(|r| r.pos < start && before.is_none_or(|b| r.pos > b))
                .collect(),
        );
        let closes = ends(
            self.reads
                .iter()
                .filter(|r| r.pos > end && after.is_none_or(|x| r.pos < x))
                .collect(),
        );
        let mut out = Vec::new();
        for a in opens {
            for b in closes.iter().copied().filter(|r| r.clock == a.clock) {
                let res = |r: &Read| r.secs.map_or(0.0, ulp);
                out.push(Source {
                    open: a.pos,
                    close: b.pos,
                    clock: a.clock.clone(),
                    duration: seconds(a, b, &self.elapsed),
                    slack: 4.0 * res(a).max(res(b)),
                    steps: steps.to_vec(),
                });
            }
        }
        out
    }

    /// Match the numbers a call returned to the timed windows of `variant`, in order: number i
    /// comes from a source of a group after the one number i-1 came from, where `from(number,
    /// source)` says a number is taken from a source (when several pairs give it, one the device
    /// was synced before is taken). The first clock whose windows give every number wins (one
    /// whose pairs were all synced first); when no one clock gives them all, each number may come
    /// from a window of its own clock (a call whose windows alternate `time.time_ns()` and a
    /// `timeit` timer: every window is two reads of one clock, as lesson 05 holds each call's
    /// number to any clock's pair around it; issue 39).
    pub fn sources(
        &self,
        variant: &str,
        numbers: &[f64],
        from: impl Fn(f64, &Source) -> bool,
    ) -> Matched {
        let marks = self.step_marks();
        let groups: Vec<Vec<Source>> = self
            .groups(variant)
            .iter()
            .map(|g| self.sources_in(g, &marks))
            .filter(|s| !s.is_empty())
            .collect();
        let mut clocks: Vec<&str> = Vec::new();
        for s in groups.iter().flatten() {
            if !clocks.contains(&s.clock.as_str()) {
                clocks.push(s.clock.as_str());
            }
        }
        let per = self.per as f64;
        let all_synced = |got: &[Source]| {
            got.iter().all(|s| {
                let (o, c) = self.synced_reads(&s.clock, s.open, s.close);
                o && c
            })
        };
        let mut best: Option<(usize, Option<f64>)> = None;
        let mut full: Option<Vec<Source>> = None;
        // one clock's sources per group (`Some(clock)`), or every clock's (`None`), in order
        let mut tries: Vec<Option<&str>> = clocks.iter().map(|c| Some(*c)).collect();
        tries.push(None);
        for clock in tries {
            if clock.is_none() && full.is_some() {
                break; // a clock of its own gives every number
            }
            let ws: Vec<Vec<&Source>> = groups
                .iter()
                .map(|g| {
                    g.iter()
                        .filter(|s| clock.is_none_or(|c| s.clock == c))
                        .collect::<Vec<_>>()
                })
                .filter(|g| !g.is_empty())
                .collect();
            let mut got: Vec<Source> = Vec::new();
            let mut j = 0;
            for &x in numbers {
                let after = got.last().and_then(|s| s.steps.last().copied());
                let found = ws.iter().enumerate().skip(j).find_map(|(i, g)| {
                    if after.is_some_and(|a| g[0].steps[0] <= a) {
                        return None;
                    }
                    let giving: Vec<&&Source> = g.iter().filter(|s| from(x, s)).collect();
                    let synced = giving.iter().find(|s| {
                        let (o, c) = self.synced_reads(&s.clock, s.open, s.close);
                        o && c
                    });
                    synced.or(giving.first()).map(|s| (i, (**s).clone()))
                });
                match found {
                    Some((i, s)) => {
                        j = i + 1;
                        got.push(s);
                    }
                    None => break,
                }
            }
            if got.len() == numbers.len() && !numbers.is_empty() {
                // two clocks may give the same numbers (on a virtual clock a log stamp's pair can
                // equal the window's): the one whose pairs were all synced before reading wins
                if all_synced(&got) {
                    return Matched {
                        sources: Some(got),
                        first_unmatched: None,
                    };
                }
                full.get_or_insert(got);
                continue;
            }
            // the next window: the innermost pair of the next group that does not overlap
            let after = got.last().and_then(|s| s.steps.last().copied());
            let next = ws
                .iter()
                .skip(j)
                .find(|g| after.is_none_or(|a| g[0].steps[0] > a))
                .and_then(|g| {
                    g.iter()
                        .max_by_key(|s| (s.open, std::cmp::Reverse(s.close)))
                })
                .and_then(|s| s.duration)
                .map(|d| d / per);
            if best.is_none_or(|(n, _)| got.len() > n) {
                best = Some((got.len(), next));
            }
        }
        match full {
            Some(got) => Matched {
                sources: Some(got),
                first_unmatched: None,
            },
            None => Matched {
                sources: None,
                first_unmatched: Some(best.unwrap_or((0, None))),
            },
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
            .flat_map(|s| s.steps.iter().copied())
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
