//! `rubrics/NN-name.yaml`: the acceptance criteria, one check each (see `checks/`).
use super::{load_yaml, spec_error, Exercise};
use crate::error::GradeError;
use crate::i18n::Text;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rubric {
    pub exercise: String,
    pub criteria: Vec<Criterion>,
}

/// Where a criterion applies.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnlyOn {
    Cpu,
    Cuda,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Criterion {
    pub id: String,
    pub title: Text,
    /// The chapter's common mistake (常见错误) this criterion catches.
    #[serde(default)]
    pub catches: Option<Text>,
    #[serde(default = "one")]
    pub points: u32,
    #[serde(default)]
    pub only_on: Option<OnlyOn>,
    /// `band: true`: a sanity band on real-device timings. It must pass every correct submission
    /// on a loaded machine, but on a submission already wrong elsewhere whose error is a small
    /// factor on a real timing, whether it also fails is the machine's load: `grade check` holds
    /// it to a fixture only where expected.yaml lists it (see `selftest::expected`). Lesson 03's
    /// growth law is one too, by data rather than load: rows already wrong elsewhere may still
    /// decide the right law at one drawn model shape and decide none at another.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub band: bool,
    /// `gate: true`: the lesson's gate (the course's Python was kept and the grader's instruments
    /// are intact). It earns no points by itself (a starter that does nothing scores 0), and when
    /// it fails the whole lesson scores 0, as a submission that does not compile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gate: bool,
    /// `requires: [ids]`: this criterion's points count only when those criteria pass too (lesson
    /// 06: "the results agree" earns points for an optimised version, not for the baseline the
    /// starter is a copy of). Its verdict is its own either way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// `check: {close: {...}}`: the check kind is the single key.
    #[serde(with = "serde_yaml::with::singleton_map_recursive")]
    pub check: Check,
}

fn one() -> u32 {
    1
}

/// One check kind per file in `src/checks/`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// Every tensor under `expected/` equals the same name under `actual/` (assert_close).
    Close(CloseSpec),
    /// `num / den` within bounds.
    Ratio(RatioSpec),
    /// One metric within bounds.
    Range(RangeSpec),
    /// A predicate over an observed event trace.
    Trace(TraceSpec),
    /// A recorded answer equals the expected one.
    Answer(AnswerSpec),
    /// The static audit of the source found nothing that inspects or modifies the grader.
    Audit(AuditSpec),
    /// The same quantities measured in two runs agree.
    Reproducible(ReproducibleSpec),
    /// A list of numbers equals the grader's list, element by element.
    Series(SeriesSpec),
    /// A summary of samples (median, p90, rates) equals the grader's own computation.
    Stats(StatsSpec),
    /// Break-even answers equal the grader's own computation, case by case (lesson 05).
    BreakEven(BreakEvenSpec),
    /// Each number of a per-call timer is its own call's timed window (lesson 05).
    CallWindows(CallWindowsSpec),
    /// Memory ledger rows equal the grader's, entry by entry, to the byte (lesson 03).
    Ledger(LedgerSpec),
    /// A growth law answered for one axis of a sweep equals the one the grader's rows follow.
    Growth(GrowthSpec),
    /// A ranked list (top operators) against the grader's own (lesson 02).
    Ranking(RankingSpec),
    /// The reported time per step against the grader's own clock over the same steps, inside
    /// the same timed windows.
    StepTime(StepTimeSpec),
    /// Each call's steps, one variant against the other, cost what the grader's own steps do.
    StepRatio(StepRatioSpec),
    /// Whole steps in a profiler phase derived from the observed switch events (lesson 02).
    Phase(PhaseSpec),
    /// A reported per-call figure against the grader's own over the profiled calls (lesson 02).
    PerCall(PerCallSpec),
    /// Every sub-check passes.
    All(Vec<Check>),
}

/// `step_time`: for each case, `metric` (seconds per step) over the median of the grader's own
/// step durations inside the timed windows of `variant` in trace `stream`, within [min, max].
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepTimeSpec {
    pub cases: Vec<StepTimeCase>,
    pub min: f64,
    pub max: f64,
    /// Each timed window of a case holds at most this much time outside its whole steps, on the
    /// grader's cost clock (`Measurement::busy_between`): a window padded after its step (a
    /// sleep before the closing read) is no step's time.
    #[serde(default)]
    pub idle: Option<IdleSpec>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepTimeCase {
    pub stream: String,
    pub variant: String,
    pub metric: String,
}

/// `step_ratio`: in each trace of `streams`, the median of the grader's own cost-clock seconds of
/// the `num` variant's timed steps over the `den` variant's, divided by the metric `against` (the
/// grader's own on/off from steps it ran itself): the call nearest 1 within [min, max], every
/// call within [each_min, each_max]; see `checks/step_ratio.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepRatioSpec {
    pub streams: Vec<String>,
    pub num: String,
    pub den: String,
    pub against: String,
    pub min: f64,
    pub max: f64,
    pub each_min: f64,
    pub each_max: f64,
}

/// `audit: {}`: no finding of the static audit (`src/driver/audit.py`); what a lesson truly needs
/// is allowed in its exercise.yaml (`audit_allow:`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSpec {}

/// `break_even`: every `case` event of `stream` (inputs and the submission's `answer`) against
/// the answer the grader computes; see `checks/break_even.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BreakEvenSpec {
    pub stream: Streams,
    /// A trace of cases made of the submission's own measurements (lesson 05: `real.break_even`):
    /// judged like `stream` when it is there; when the probe that makes it failed, noted and
    /// left out, so a broken timer never fails the break-even criterion (issue 18).
    #[serde(default)]
    pub measured: Option<String>,
}

/// `call_windows`: for each stream S, `S.first_s` and every `S.steady_s[i]` equal the windows the
/// submission's clock reads put around call 0 and call i + 1; with `calls`, 1 + calls calls were
/// made (every entry into `fn` counts, one that raised too) and `steady_s` holds `calls` numbers;
/// with `idle`, no window holds more of the submission's own time than it allows. See
/// `checks/call_windows.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CallWindowsSpec {
    pub stream: Streams,
    #[serde(default)]
    pub calls: Option<Operand>,
    /// The time each window may hold outside the calls handed over (`fn`, `sync`: their `call`
    /// stamps on the grader's cost clock): a window stretched by a sleep or a spin is no measure
    /// of its call. A window without the grader's stamps fails.
    #[serde(default)]
    pub idle: Option<IdleSpec>,
}

/// `series`: the list metric `actual` equals the list metric `expected` (relative tolerance);
/// when it does not, the first `diagnose` list it equals names the mistake.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesSpec {
    /// Metric prefixes: with `runs`, every key below is `{run}.{key}` and must hold in each run.
    #[serde(default)]
    pub runs: Option<Vec<String>>,
    pub actual: String,
    pub expected: String,
    /// Largest allowed |actual - expected| / |expected| per element (0 = identical).
    #[serde(default)]
    pub max_rel_diff: f64,
    #[serde(default)]
    pub diagnose: Vec<Diagnosis>,
}

/// A list a known mistake produces, and what to tell the student when `actual` equals it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnosis {
    pub metric: String,
    pub why: Text,
}

/// Which number of a summary `stats` recomputes.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// `median_s`: the median of `samples` (mean of the two middle values for an even count).
    Median,
    /// `p90_s`: the 90th percentile by linear interpolation (`numpy.percentile`'s default).
    P90,
    /// `steps_per_s` = 1 / the case's reported `median_s`.
    StepsPerS,
    /// `tokens_per_s` = batch × seq_len / the case's reported `median_s`.
    TokensPerS,
    /// `median_s` lies within the samples' range (a statistic of these samples, whichever: the
    /// median itself is `median`'s to judge).
    Within,
}

/// `stats`: for each case prefix P, the reported `P.<stat>` equals what the grader computes from
/// `P.samples` (and `P.batch`, `P.seq_len`) within `max_rel_diff`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StatsSpec {
    pub cases: Vec<String>,
    pub stat: Stat,
    #[serde(default = "stats_tolerance")]
    pub max_rel_diff: f64,
}

fn stats_tolerance() -> f64 {
    1e-9
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CloseSpec {
    pub actual: String,
    pub expected: String,
    #[serde(default)]
    pub rtol: Option<f64>,
    #[serde(default)]
    pub atol: Option<f64>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RatioSpec {
    pub num: String,
    pub den: String,
    #[serde(default)]
    pub min: Option<Operand>,
    #[serde(default)]
    pub max: Option<Operand>,
    /// Divide by another ratio: the bounds then hold (num/den) / (per.num/per.den). Two ratios
    /// from the same measurements: load that stretches one stretches the other (lesson 01: how
    /// much more tokens/s moved than steps/s is the change in tokens per step, whatever the load).
    #[serde(default)]
    pub per: Option<PerRatio>,
    /// What a zero `den` means, in the student's words, when the scenario writes 0 for "nothing
    /// measured" (lesson 04's `hooked_bytes`); without it the reason names the metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_zero: Option<Text>,
}

/// See `RatioSpec::per`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerRatio {
    pub num: String,
    pub den: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RangeSpec {
    pub metric: String,
    #[serde(default)]
    pub min: Option<Operand>,
    #[serde(default)]
    pub max: Option<Operand>,
}

/// What a trace check asserts about a student's measurement (see `measurement.rs`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TracePredicate {
    /// Every forward (whole step or not) ran on the inputs the grader handed over.
    SameInputs,
    /// Each variant ran at least `min` (default 1) whole untimed steps before its first timed one.
    Warmup,
    /// A `sync()` sits between the work and each clock read of every timed interval.
    Synced,
    /// Each variant has at least `min` timed windows (of `per` whole steps each).
    Repeats,
    /// The reported `{stream}.{variant}.{report}` is the median of the variant's windows.
    Median,
    /// Every number of the list `{stream}.{samples}` is seconds per step of a timed window, in
    /// window order, rebuilt from the clock values the grader recorded.
    Samples,
    /// The submission read (`output_read` events) the output of a `baseline` step and of a
    /// `candidate` step that ran on one input (their fingerprints equal as each began and ended):
    /// what an answer about the outputs agreeing needs before it is believed (lesson 02).
    OutputsRead,
}

/// One stream name or a list of them: a trace check holds for every stream it names.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Streams {
    One(String),
    Many(Vec<String>),
}

impl Streams {
    pub fn names(&self) -> Vec<&str> {
        match self {
            Streams::One(s) => vec![s.as_str()],
            Streams::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// The trace(s): `compare.run1`, or `[compare.run1, compare.run2]`.
    pub stream: Streams,
    /// Count events of this kind (`ckpt`, `sync`, `timer`, `step`, `step_done`, `empty_cache`) ...
    #[serde(default)]
    pub count: Option<String>,
    /// (`count` only: bound the total of this numeric field over the counted events instead of
    /// their number, e.g. `sum: bytes` of `readback` events)
    #[serde(default)]
    pub sum: Option<String>,
    /// ... or hold this numeric field of every selected event within the bounds ...
    #[serde(default)]
    pub each: Option<String>,
    /// (`count`/`each`: only events whose fields equal these, e.g. `{grad: true}`)
    #[serde(default, rename = "where")]
    pub filter: Option<serde_yaml::Mapping>,
    /// (`count` with only `max`) a stream whose probe failed is held to the events it recorded
    /// before the failure (none, when it never began), not failed as unknown: for calls another
    /// criterion holds to having run and returned well (lesson 06's train() inside count_syncs(),
    /// its train runs), so that a failed call fails that criterion only.
    #[serde(default)]
    pub so_far: bool,
    /// ... or check a predicate over the student's measurement.
    #[serde(default)]
    pub expect: Option<TracePredicate>,
    /// `median`: the reported metric under `{stream}.{variant}.`.
    #[serde(default)]
    pub report: Option<String>,
    /// The numbers the call returned, under `{stream}.`: a list metric (`samples`), or several
    /// metrics (numbers or lists) read in order as one list (`[first_s, steady_s]`). `expect:
    /// samples` holds them to the windows; `warmup`, `synced` and `repeats` then judge only the
    /// windows they came from (when every number has one), so a read no returned number comes
    /// from (a log line) is no window and is not held to the rules.
    #[serde(default)]
    pub samples: Option<Streams>,
    /// Only reads of this clock (and its stretches `clock#N`) time windows, when the trace holds
    /// any: the windows the contract defines (lesson 02: `profiler`).
    #[serde(default)]
    pub clock: Option<Box<str>>,
    /// Variants that must each be measured (default: those observed).
    #[serde(default)]
    pub variants: Option<Vec<String>>,
    /// (`expect: samples`) each sample's window may hold at most this much time outside the
    /// handed-over calls (`step()`, `sync()`), on the grader's cost clock: a window is the work
    /// timed, not idle time added to it. A window without the grader's stamps fails.
    #[serde(default)]
    pub idle: Option<IdleSpec>,
    /// Whole steps in one timed repeat (default 1).
    #[serde(default)]
    pub per: Option<Operand>,
    #[serde(default)]
    pub equals: Option<Operand>,
    #[serde(default)]
    pub min: Option<Operand>,
    #[serde(default)]
    pub max: Option<Operand>,
}

/// The time a timed window may hold outside the work the grader handed over: at most
/// `max_s + max_share × busy` seconds (`busy`: the window's seconds inside those calls).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IdleSpec {
    pub max_share: f64,
    pub max_s: f64,
    /// `call_windows`, `expect: samples`, `step_time`: the median over a stream's windows of the submission's
    /// own seconds may be at most `median_s + median_share × busy` (that window's): one slow window is noise, padding
    /// every window by less than `max_s` is not (red team 5).
    #[serde(default)]
    pub median_s: Option<f64>,
    /// The share of the calls' time the median rule allows beside `median_s` (default
    /// `max_share`): lesson 01 allows one noisy window a quarter, the median of them a twentieth.
    #[serde(default)]
    pub median_share: Option<f64>,
    /// The same rule on the mean over the windows as well: padding just under half of them by
    /// just under `max_s` leaves the median alone (red team 7).
    #[serde(default)]
    pub mean: bool,
    /// On a CPU device: the median over a stream's windows of the seconds each spent asleep
    /// (neither on a CPU nor waiting for one: a sleep, a blocking wait, outside the handed-over
    /// calls; `Measurement::asleep_between`) may be at most this. Honest windows sleep 0–5 µs: a
    /// step on a CPU is work, and padding under `max_s` and `median_s` with a sleep is not
    /// (red team 33's 0.9 ms after every "off" window, a sleep inside each "off" step).
    #[serde(default)]
    pub asleep_s: Option<f64>,
    /// With `asleep_s`: the most seconds any one window may spend asleep (default 50 ms, the
    /// longest stall excused): one window padded with a sleep leaves the median alone. Not
    /// less: a hypervisor's steal looks like sleep to both clocks (neither CPU time nor a
    /// run-queue wait), 3–9 ms in one window of careful students 43 beside busy loops.
    #[serde(default)]
    pub asleep_max_s: Option<f64>,
}

impl IdleSpec {
    /// The most one excused window (a stall of the machine's: 5.5–7.7 ms seen in CI) may exceed
    /// the per-window allowance by: a spin of a quarter second is no stall (red team 21).
    pub const MAX_STALL_S: f64 = 0.05;

    /// The one-window half of `asleep_over`: the first window over `asleep_max_s`, when there is
    /// an `asleep_s` rule (lesson 05 holds its first call's window to this half only).
    pub fn asleep_in_one(&self, asleep: &[f64]) -> Option<Asleep> {
        self.asleep_s?;
        let most = self.asleep_max_s.unwrap_or(Self::ASLEEP_MAX_S);
        let (k, &x) = asleep.iter().enumerate().find(|(_, &x)| x > most)?;
        Some(Asleep {
            n: asleep.len(),
            secs: x,
            limit: most,
            window: Some(k),
        })
    }

    /// The most seconds one window may spend asleep (`asleep_max_s`, default 50 ms).
    pub const ASLEEP_MAX_S: f64 = Self::MAX_STALL_S;

    /// The asleep rules over windows' seconds asleep: `Some(Asleep)` when one window is over
    /// `asleep_max_s` or their median over `asleep_s`; `None` when they hold, when no window was
    /// stamped with the work clock (CUDA), or without an `asleep_s`.
    pub fn asleep_over(&self, asleep: &[f64]) -> Option<Asleep> {
        let limit = self.asleep_s?;
        if let Some(one) = self.asleep_in_one(asleep) {
            return Some(one);
        }
        let mut xs = asleep.to_vec();
        if xs.is_empty() {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        let median = xs[xs.len() / 2];
        (median > limit).then_some(Asleep {
            n: asleep.len(),
            secs: median,
            limit,
            window: None,
        })
    }
}

/// Windows over an asleep rule (`IdleSpec::asleep_over`): of `n`, window `window` (else their
/// median) spent `secs` asleep, over `limit`.
#[derive(Clone, Debug, PartialEq)]
pub struct Asleep {
    pub n: usize,
    pub secs: f64,
    pub limit: f64,
    pub window: Option<usize>,
}

impl IdleSpec {
    /// The share of a window's calls' time the median rule allows (`median_share`, else `max_share`).
    pub fn median_share(&self) -> f64 {
        self.median_share.unwrap_or(self.max_share)
    }

    /// The median rule over windows given as `(own, busy)` seconds: `Some((own, false))` of the
    /// median window (ranked by `own − median_share × busy`) when that window's excess is over
    /// `median_s`; with `mean`, `Some((mean own, true))` when the windows' mean excess is over it;
    /// `None` when it holds, when there is no window, or without a `median_s`.
    pub fn median_over(&self, windows: &[(f64, f64)]) -> Option<(f64, bool)> {
        let limit = self.median_s?;
        let share = self.median_share();
        let mut over: Vec<(f64, f64)> = windows
            .iter()
            .map(|&(own, busy)| (own - share * busy, own))
            .collect();
        if over.is_empty() {
            return None;
        }
        let n = over.len() as f64;
        let (mean_excess, mean_own) = over
            .iter()
            .fold((0.0, 0.0), |(e, o), &(x, y)| (e + x / n, o + y / n));
        over.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (excess, own) = over[over.len() / 2];
        if excess > limit {
            Some((own, false))
        } else if self.mean && mean_excess > limit {
            Some((mean_own, true))
        } else {
            None
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerSpec {
    pub metric: String,
    /// Accepted answers (any one of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected: Vec<String>,
    /// Or the one answer the grader recorded as the truth of this run (another metric): for
    /// questions whose answer is drawn per grading, so that no answer is right in advance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReproducibleSpec {
    /// Metric prefixes of the two runs, e.g. `compare.run1` and `compare.run2`.
    pub runs: [String; 2],
    pub quantities: Vec<Quantity>,
    /// `measured: true`: each run names a trace, and each must hold a whole step. A second call
    /// that hands back the first call's result (cached) agrees with it, but measured nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub measured: bool,
}

/// A metric (relative to a run prefix), or the ratio of two, and how far the runs may differ.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Quantity {
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default)]
    pub ratio: Option<[String; 2]>,
    /// ... or how many events of this kind the run's trace holds (the run names a trace, e.g.
    /// `host.train.short`; counted here from the events, not from a number the run reported)
    #[serde(default)]
    pub count: Option<String>,
    /// Largest allowed max(a/b, b/a) - 1 (0 = identical, 0.6 = within a factor of 1.6).
    pub max_rel_diff: f64,
}

/// `ledger`: each trace of `actual` (the submission's ledger rows) against the same-position trace
/// of `expected` (the grader's rows: grid, optimizer, measured activations); see `checks/ledger.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerSpec {
    pub actual: Streams,
    pub expected: Streams,
    /// Which of `params`, `grads`, `optimizer_state`, `activations` must equal (may be empty
    /// when `steps:` is given: the rows' steps are then all that is judged).
    pub entries: Vec<String>,
    /// The event traces where each row's call was watched (lesson 03's `ledger.calls`,
    /// `sweep.calls`): every row of `actual` counts only if the grader saw a whole training step
    /// (`step` + its `step_done`, then the case's optimizer step, `opt_step`) at the row's shape
    /// in the call that returned it, and its `optimizer_state` must be what the grader read of
    /// the optimizer at that step.
    #[serde(default)]
    pub steps: Option<Streams>,
    /// `[ACTUAL, EXPECTED]`: compare an entry only where the submission's rows of trace ACTUAL
    /// equal the grader's rows of EXPECTED (or were not a number): what a method got right once
    /// it must get right again on another case; what it got wrong is another criterion's
    /// (lesson 03's repeated ledger).
    #[serde(default)]
    pub where_right: Option<[String; 2]>,
}

/// The entries a ledger has (besides `peak`, which only CUDA can tell): what `entries:` may name.
pub const LEDGER_ENTRIES: [&str; 4] = ["params", "grads", "optimizer_state", "activations"];

/// `growth`: the law of `value` against `axis` in the rows of trace `rows`, per `group_by` value,
/// equals the answer recorded under metric `answer`; see `checks/growth.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GrowthSpec {
    pub rows: String,
    pub value: String,
    pub axis: String,
    pub group_by: String,
    pub answer: String,
    /// Whose sweep `rows` is (names it in the reason): the grader's (default) or the student's
    /// own, so an answer copied from the hints fails when the student's own rows decide another
    /// law or are missing (own rows that decide nothing pass: the grader's sweep decides).
    #[serde(default)]
    pub whose: Whose,
    /// Taken off each row's `value` before the fit: field `value` of the row of trace `rows` at
    /// the same `axis` and `group_by` (lesson 03: each row's tag, a tensor of the grader's drawn
    /// per row, is part of an honest measurement but of no growth law).
    #[serde(default)]
    pub less: Option<GrowthLess>,
    /// The event traces where the call that returned `rows` was watched (lesson 03's
    /// `sweep.calls`, the `ledger` check's `steps:`): only rows the grader saw a whole training
    /// step for at their shape in that call are fitted (`checks::ledger::whole_steps`); the rest
    /// are left out, and named (red team 5: a forward-only sweep "explains" no law).
    #[serde(default)]
    pub steps: Option<Streams>,
}

/// `less:` of a `growth` check: where the amount taken off each row is read.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GrowthLess {
    pub rows: String,
    pub value: String,
}

/// Who made a set of rows.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Whose {
    #[default]
    Grader,
    Student,
}

/// `ranking`: traces of `{e: op, name, ...}` rows, best first; see `checks/ranking.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RankingSpec {
    pub actual: String,
    pub expected: String,
    /// Overlap mode: at least this many of `actual`'s names among `expected`'s first `within`
    /// (absent: exact mode, the same names in the same order).
    #[serde(default)]
    pub min_overlap: Option<usize>,
    #[serde(default)]
    pub within: Option<usize>,
    /// Overlap mode: both lists start with the same name.
    #[serde(default)]
    pub leader: bool,
    /// Fields that must agree: field -> max relative difference. With fields, every name of
    /// `actual` must be in `expected` and `actual` must list something (see `checks/ranking.rs`).
    #[serde(default)]
    pub fields: std::collections::BTreeMap<String, f64>,
}

/// `phase`: whole steps of each stream run in a profiler phase (`warmup`, `record`, `none`),
/// derived from the order of the `profiler {switch}` events, or made before the first step seen
/// recorded with nothing recording (`before_recorded`); see `checks/profiler.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    pub stream: Streams,
    pub phase: String,
    /// Only steps of this variant.
    #[serde(default)]
    pub variant: Option<String>,
    #[serde(default)]
    pub equals: Option<Operand>,
    #[serde(default)]
    pub min: Option<Operand>,
    #[serde(default)]
    pub max: Option<Operand>,
}

/// `per_call`: the metric `reported` / the mean of `field` (on the `recorded` event, else on
/// `step_done`) over the `variant`'s calls the grader saw recorded, within bounds; with
/// `relative_to`, the reported ratio `reported / relative_to.reported` over the grader's ratio of
/// the two means (e.g. a speed-up); see `checks/profiler.rs`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerCallSpec {
    pub stream: String,
    #[serde(default)]
    pub variant: Option<String>,
    pub field: String,
    pub reported: String,
    #[serde(default)]
    pub relative_to: Option<PerCallOther>,
    #[serde(default)]
    pub min: Option<Operand>,
    #[serde(default)]
    pub max: Option<Operand>,
}

/// `per_call`'s `relative_to`: the other variant of the same stream and what was reported for it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerCallOther {
    pub variant: String,
    pub reported: String,
}

/// A bound: a number, or `$model.KEY` / `$params.KEY` from exercise.yaml, or (a trace count's
/// bound and a phase's `equals` only) `$metric.NAME`: a number the scenario recorded in this run, e.g. a call count it
/// drew before handing anything to the submission.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Number(f64),
    Ref(String),
    Metric(String),
}

/// As written in a rubric: `3`, `$params.repeats`, `$metric.sim.calls_expected`.
impl Serialize for Operand {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Operand::Number(v) => s.serialize_f64(*v),
            Operand::Ref(r) => s.serialize_str(r),
            Operand::Metric(m) => s.serialize_str(&format!("$metric.{m}")),
        }
    }
}

impl<'de> Deserialize<'de> for Operand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Operand;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a number or a reference like `$model.n_blocks` / `$params.repeats` / `$metric.sim.calls_expected`",
                )
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Operand, E> {
                Ok(Operand::Number(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Operand, E> {
                Ok(Operand::Number(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Operand, E> {
                Ok(Operand::Number(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Operand, E> {
                if v.starts_with("$model.") || v.starts_with("$params.") {
                    Ok(Operand::Ref(v.to_string()))
                } else if let Some(name) = v.strip_prefix("$metric.").filter(|n| !n.is_empty()) {
                    Ok(Operand::Metric(name.to_string()))
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(v), &self))
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Operand {
    /// The number, from the rubric or exercise.yaml; `None` for a `$metric.` bound (only a run's
    /// evidence holds it: `checks::Env::bound`).
    pub fn resolve(&self, exercise: &Exercise) -> Option<f64> {
        match self {
            Operand::Number(v) => Some(*v),
            Operand::Ref(r) => exercise.lookup(r),
            Operand::Metric(_) => None,
        }
    }
}

impl Rubric {
    /// Does some check of this rubric name a tensor under `prefix` (`reference/greedy`)? Read
    /// off the checks as written, whatever kind of check names it.
    pub fn names_tensor(&self, prefix: &str) -> bool {
        let p = prefix.trim_end_matches('/');
        serde_json::to_string(&self.criteria).is_ok_and(|text| {
            text.match_indices(p).any(|(i, _)| {
                let after = text[i + p.len()..].chars().next();
                let before = text[..i].chars().next_back();
                before == Some('"') && matches!(after, Some('"') | Some('/'))
            })
        })
    }

    pub fn load(path: &Path, exercise: &Exercise) -> Result<Rubric, GradeError> {
        let (rubric, text): (Rubric, String) = load_yaml(path)?;
        let err = |needle: &str, msg: String| spec_error(path, &text, needle, msg);
        if rubric.exercise != exercise.id {
            return Err(err(
                "exercise:",
                format!(
                    "rubric is for `{}` but is used for `{}`",
                    rubric.exercise, exercise.id
                ),
            ));
        }
        if rubric.criteria.is_empty() {
            return Err(err(
                "criteria:",
                "a rubric needs at least one criterion".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        for c in &rubric.criteria {
            let at = format!("id: {}", c.id);
            if !c
                .id
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
                || c.id.is_empty()
            {
                return Err(err(
                    &at,
                    format!(
                        "criterion id `{}` may use only letters, digits, `_` and `-`",
                        c.id
                    ),
                ));
            }
            if !seen.insert(c.id.clone()) {
                return Err(err(
                    &at,
                    format!("criterion id `{}` appears twice; ids must be unique", c.id),
                ));
            }
            validate(&c.check, exercise)
                .map_err(|m| err(&at, format!("criterion `{}`: {m}", c.id)))?;
        }
        let ids: BTreeSet<&str> = rubric.criteria.iter().map(|c| c.id.as_str()).collect();
        for c in &rubric.criteria {
            if let Some(r) = c
                .requires
                .iter()
                .find(|r| !ids.contains(r.as_str()) || **r == c.id)
            {
                return Err(err(
                    &format!("id: {}", c.id),
                    format!(
                        "criterion `{}` requires `{r}`, which is no other criterion of this rubric",
                        c.id
                    ),
                ));
            }
        }
        Ok(rubric)
    }
}

fn validate(check: &Check, ex: &Exercise) -> Result<(), String> {
    let operand = |o: &Option<Operand>, name: &str| -> Result<Option<f64>, String> {
        match o {
            None => Ok(None),
            Some(Operand::Metric(m)) => Err(format!(
                "{name}: `$metric.{m}` is allowed only as a trace count's bound (count: … equals/min/max) or a phase's equals"
            )),
            Some(op) => op.resolve(ex).map(Some).ok_or_else(|| {
                format!(
                    "{name}: `{op:?}` does not name a number in exercise.yaml (model: or params:)"
                )
            }),
        }
    };
    let bounds = |min: &Option<Operand>, max: &Option<Operand>| -> Result<(), String> {
        let (lo, hi) = (operand(min, "min")?, operand(max, "max")?);
        match (lo, hi) {
            (None, None) => Err("give at least one of min / max".into()),
            (Some(l), Some(h)) if l > h => Err(format!("min ({l}) is greater than max ({h})")),
            _ => Ok(()),
        }
    };
    match check {
        Check::Close(c) => {
            for (n, v) in [("rtol", c.rtol), ("atol", c.atol)] {
                if v.is_some_and(|v| v.is_nan() || v < 0.0) {
                    return Err(format!("{n} must be a number ≥ 0"));
                }
            }
            if c.rtol.is_some() != c.atol.is_some() {
                return Err("give both rtol and atol, or neither (per-dtype defaults)".into());
            }
            Ok(())
        }
        Check::Ratio(r) => bounds(&r.min, &r.max),
        Check::Range(r) => bounds(&r.min, &r.max),
        Check::Trace(t) => {
            if t.stream.names().is_empty() {
                return Err("stream: name at least one trace".into());
            }
            operand(&t.per, "per")?;
            if t.sum.is_some() && t.count.is_none() {
                return Err("sum: totals a field of the counted events: it needs count:".into());
            }
            let counted = |what: &str| -> Result<(), String> {
                if t.equals.is_some() && (t.min.is_some() || t.max.is_some()) {
                    return Err(format!("{what}: give equals, or min/max, not both"));
                }
                // a count may be bounded by a number the run recorded (`$metric.…`)
                let recorded =
                    |o: &Option<Operand>| what == "count" && matches!(o, Some(Operand::Metric(_)));
                match &t.equals {
                    Some(_) if recorded(&t.equals) => Ok(()),
                    Some(_) => operand(&t.equals, "equals").map(|_| ()),
                    None if recorded(&t.min) || recorded(&t.max) => {
                        for (o, n) in [(&t.min, "min"), (&t.max, "max")] {
                            if !recorded(o) {
                                operand(o, n)?;
                            }
                        }
                        Ok(())
                    }
                    None => bounds(&t.min, &t.max),
                }
            };
            match (&t.count, &t.each, t.expect) {
                (Some(kind), None, None) => {
                    // lesson 06 adds its read-back instrument's events (grade_lib HostReads, its
                    // `autograd` too), the model's `forward {grad}` and count_syncs()'s `call`;
                    // lesson 05's dynamo watch `graph` and `graph_break` (and its own `call`);
                    // lesson 03 `empty_cache` and `shape` (a forward's case); `left`, what a
                    // call left behind for the grader to put back (grade_lib.leftover_state);
                    // `step_undone`, a backward from a step's loss that was no whole step
                    const KINDS: [&str; 17] = [
                        "ckpt",
                        "sync",
                        "timer",
                        "step",
                        "step_done",
                        "readback",
                        "factory",
                        "kept_graph",
                        "autograd",
                        "forward",
                        "graph",
                        "graph_break",
                        "call",
                        "empty_cache",
                        "shape",
                        "left",
                        "step_undone",
                    ];
                    if !KINDS.contains(&kind.as_str()) {
                        return Err(format!(
                            "count: unknown event `{kind}`; allowed: {}",
                            KINDS.join(", ")
                        ));
                    }
                    counted("count")
                }
                (None, Some(_), None) => counted("each"),
                (None, None, Some(TracePredicate::Repeats)) => operand(&t.min, "min")?
                    .map(|_| ())
                    .ok_or_else(|| "expect: repeats needs min (e.g. `$params.repeats`)".into()),
                (None, None, Some(TracePredicate::Median)) => match &t.report {
                    Some(_) => Ok(()),
                    None => Err("expect: median needs report: (the metric, e.g. `step_s`)".into()),
                },
                (None, None, Some(TracePredicate::Samples)) => match &t.samples {
                    Some(_) => Ok(()),
                    None => Err(
                        "expect: samples needs samples: (the list metric, e.g. `samples`)".into(),
                    ),
                },
                (None, None, Some(_)) => operand(&t.min, "min").map(|_| ()),
                _ => {
                    Err("a trace check needs exactly one of `count:`, `each:` or `expect:`".into())
                }
            }
        }
        Check::Ledger(l) => {
            if l.actual.names().len() != l.expected.names().len() || l.actual.names().is_empty() {
                return Err("actual: and expected: name the same number (≥ 1) of traces".into());
            }
            if l.entries.is_empty() && l.steps.is_none() {
                return Err("entries: list at least one (or give steps:)".into());
            }
            match l
                .entries
                .iter()
                .find(|e| !LEDGER_ENTRIES.contains(&e.as_str()))
            {
                Some(e) => Err(format!(
                    "entries: unknown `{e}`; allowed: {}",
                    LEDGER_ENTRIES.join(", ")
                )),
                None => Ok(()),
            }
        }
        Check::Growth(g) => {
            if g.axis == g.group_by {
                Err("axis and group_by must differ".into())
            } else {
                Ok(())
            }
        }
        Check::Audit(_) => Ok(()),
        Check::StepRatio(s) => {
            if s.streams.is_empty() {
                Err("streams: list at least one trace (e.g. compare.run1)".into())
            } else if !(s.max.is_finite() && s.each_max.is_finite()
                && 0.0 < s.each_min
                && s.each_min <= s.min
                && s.min <= s.max
                && s.max <= s.each_max)
            {
                Err("bounds must be numbers with 0 < each_min ≤ min ≤ max ≤ each_max".into())
            } else {
                Ok(())
            }
        }
        Check::StepTime(s) => {
            if s.cases.is_empty() {
                Err("cases: list at least one {stream, variant, metric}".into())
            } else if !(s.min.is_finite() && s.max.is_finite() && s.min <= s.max) {
                Err("min and max must be numbers with min ≤ max".into())
            } else {
                Ok(())
            }
        }
        Check::Answer(a) => match (a.expected.is_empty(), &a.same_as) {
            (true, None) => Err(
                "expected: list at least one accepted answer (or `same_as:` the metric holding the truth)".into(),
            ),
            (false, Some(_)) => Err("give either `expected:` or `same_as:`, not both".into()),
            _ => Ok(()),
        },
        Check::Reproducible(r) => {
            if r.quantities.is_empty() {
                return Err("quantities: list at least one".into());
            }
            for q in &r.quantities {
                let named = [q.metric.is_some(), q.ratio.is_some(), q.count.is_some()];
                if named.iter().filter(|x| **x).count() != 1 {
                    return Err(
                        "each quantity needs exactly one of `metric:`, `ratio: [num, den]` or `count:`"
                            .into(),
                    );
                }
                if q.max_rel_diff.is_nan() || q.max_rel_diff < 0.0 {
                    return Err("max_rel_diff must be a number ≥ 0".into());
                }
            }
            Ok(())
        }
        Check::Ranking(r) => {
            if r.min_overlap.is_none() && (r.within.is_some() || r.leader) {
                return Err("within/leader need min_overlap (overlap mode)".into());
            }

            match r.fields.iter().find(|(_, t)| t.is_nan() || **t < 0.0) {
                Some((f, _)) => Err(format!("fields: {f}: the tolerance must be a number ≥ 0")),
                None => Ok(()),
            }
        }
        Check::Phase(p) => {
            if !["warmup", "record", "none", "before_recorded"].contains(&p.phase.as_str()) {
                return Err(format!(
                    "phase: `{}` is none of warmup, record, none, before_recorded",
                    p.phase
                ));
            }
            match &p.equals {
                // the steps a call was handed may be drawn per grading (lesson 02's `steps`)
                Some(Operand::Metric(_)) => Ok(()),
                Some(_) => operand(&p.equals, "equals").map(|_| ()),
                None => bounds(&p.min, &p.max),
            }
        }
        Check::PerCall(c) => bounds(&c.min, &c.max),
        Check::All(checks) => {
            if checks.is_empty() {
                return Err("all: list at least one check".into());
            }
            checks.iter().try_for_each(|c| validate(c, ex))
        }
        Check::Series(s) => {
            if s.max_rel_diff.is_nan() || s.max_rel_diff < 0.0 {
                return Err("max_rel_diff must be a number ≥ 0".into());
            }
            if s.runs.as_ref().is_some_and(Vec::is_empty) {
                return Err("runs: list at least one metric prefix (or leave runs out)".into());
            }
            Ok(())
        }
        Check::CallWindows(p) => {
            if p.stream.names().is_empty() {
                return Err("stream: name at least one trace".into());
            }
            Ok(())
        }
        Check::BreakEven(b) => {
            if b.stream.names().is_empty() {
                return Err("stream: name at least one trace".into());
            }
            Ok(())
        }
        Check::Stats(s) => {
            if s.cases.is_empty() {
                return Err("cases: list at least one case prefix".into());
            }
            if s.max_rel_diff.is_nan() || s.max_rel_diff < 0.0 {
                return Err("max_rel_diff must be a number ≥ 0".into());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IdleSpec;

    fn idle(median_s: Option<f64>, median_share: Option<f64>) -> IdleSpec {
        IdleSpec {
            max_share: 0.25,
            max_s: 0.002,
            median_s,
            median_share,
            mean: false,
            asleep_s: None,
            asleep_max_s: None,
        }
    }

    #[test]
    fn the_asleep_rules_hold_the_median_window_and_every_one() {
        let rule = IdleSpec {
            asleep_s: Some(0.0002),
            ..idle(Some(0.0015), Some(0.05))
        };
        // honest windows sleep microseconds; one page fault's millisecond among them is noise
        assert_eq!(rule.asleep_over(&[0.0, 0.000004, 0.0, 0.001, 0.0]), None);
        // a 0.9 ms sleep in most windows (red team 33's `04_pad_own_time`): the median is over
        let padded = rule
            .asleep_over(&[0.0009, 0.0009, 0.0, 0.0009, 0.0009])
            .unwrap();
        assert_eq!((padded.secs, padded.window), (0.0009, None));
        // a hypervisor's steal of 9 ms in one window is no sleep of the submission's; one window
        // asleep for more than 50 ms, whatever the median, is
        assert_eq!(rule.asleep_over(&[0.0, 0.0, 0.009, 0.0]), None);
        let one = rule.asleep_over(&[0.0, 0.0, 0.06, 0.0]).unwrap();
        assert_eq!((one.secs, one.window), (0.06, Some(2)));
        assert!(
            one.why("off").en.contains("window #3 of the 4"),
            "{}",
            one.why("off").en
        );
        // no window stamped with the work clock (CUDA), or no rule: nothing to hold
        assert_eq!(rule.asleep_over(&[]), None);
        assert_eq!(idle(Some(0.0015), None).asleep_over(&[0.01; 3]), None);
    }

    #[test]
    fn the_median_rule_holds_the_median_window_not_the_worst() {
        let rule = idle(Some(0.0008), Some(0.05));
        // (own, busy): one slow window among quiet ones is noise
        let quiet = [(0.0001, 0.01), (0.0001, 0.01), (0.0019, 0.01)];
        assert_eq!(rule.median_over(&quiet), None);
        // every window padded by 1.6 ms (under the single-window 2 ms): the median is over
        let padded = [(0.0016, 0.01), (0.0016, 0.01), (0.0001, 0.01)];
        assert_eq!(rule.median_over(&padded), Some((0.0016, false)));
        // the share allows 5 % of the calls' time beside median_s: 1.2 ms of a 10 ms call holds
        assert_eq!(rule.median_over(&[(0.0012, 0.01); 3]), None);
        // without median_share the rule takes max_share; without median_s there is no rule
        assert_eq!(
            idle(Some(0.0008), None).median_over(&[(0.003, 0.01); 3]),
            None
        );
        assert_eq!(idle(None, Some(0.05)).median_over(&padded), None);
        assert_eq!(rule.median_over(&[]), None);
        // just under half the windows padded by 1.8 ms: the median holds, the mean does not
        let half: Vec<(f64, f64)> = (0..50)
            .map(|k| (if k < 24 { 0.0018 } else { 0.00002 }, 0.0017))
            .collect();
        assert_eq!(rule.median_over(&half), None);
        let both = IdleSpec {
            mean: true,
            ..idle(Some(0.0003), Some(0.05))
        };
        let (own, by_mean) = both.median_over(&half).unwrap();
        assert!(by_mean && (own - (24.0 * 0.0018 + 26.0 * 0.00002) / 50.0).abs() < 1e-12);
        // quiet windows with one 2 ms outlier hold under the mean too
        let quiet: Vec<(f64, f64)> = (0..50)
            .map(|k| (if k == 7 { 0.002 } else { 0.00003 }, 0.0017))
            .collect();
        assert_eq!(both.median_over(&quiet), None);
    }
}
