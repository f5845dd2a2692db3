//! `break_even`: the cumulative time of n calls of two variants, `first + (n − 1) × steady`,
//! as lines; the candidate pays more on its first call and less on each after, and the title
//! says from which n it pays (`{n}`), or `never:` that it does not.
use super::{check_label, quote_or_dash, Label, Source};
use crate::charts::{self, Chart};
use crate::evidence::Observed;
use crate::i18n::Lang;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BreakEvenSpec {
    /// With `{n}`, the break-even number of calls.
    pub title: Label,
    /// The title when the candidate never pays.
    pub never: Label,
    /// The time axis.
    pub unit: Label,
    pub baseline: Timing,
    pub candidate: Timing,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    pub label: Label,
    /// The first call's time.
    pub first: Source,
    /// The time of each later call.
    pub steady: Source,
}

impl BreakEvenSpec {
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        check_label(&self.title)?;
        check_label(&self.never)?;
        for t in [&self.baseline, &self.candidate] {
            t.first.check()?;
            t.steady.check()?;
        }
        Ok(())
    }
}

pub(super) fn draw(spec: &BreakEvenSpec, ev: &Observed, lang: Lang) -> Option<Chart> {
    let get = |t: &Timing| Some((t.first.value(&[], ev)?, t.steady.value(&[], ev)?));
    let (base, cand) = (get(&spec.baseline)?, get(&spec.candidate)?);
    // the candidate pays from the break-even n on
    let even = (base.1 > cand.1).then(|| {
        let n = (cand.0 - cand.1) / (base.1 - cand.1);
        n.ceil().max(1.0)
    });
    let last = even.map_or(50.0, |n| (n * 2.0).clamp(10.0, 1e7));
    let xs: Vec<f64> = (0..=20)
        .map(|i| 1.0 + (last - 1.0) * i as f64 / 20.0)
        .collect();
    let line = |(first, step): (f64, f64)| -> Vec<(f64, f64)> {
        xs.iter()
            .map(|&n| (n.round(), first + (n.round() - 1.0) * step))
            .collect()
    };
    let title = match even {
        Some(n) => quote_or_dash(spec.title.get(lang), &[("n", &n.to_string())], ev),
        None => quote_or_dash(spec.never.get(lang), &[], ev),
    };
    Some(charts::points(
        &title,
        "n",
        spec.unit.get(lang),
        &[
            (
                quote_or_dash(spec.baseline.label.get(lang), &[], ev),
                line(base),
            ),
            (
                quote_or_dash(spec.candidate.label.get(lang), &[], ev),
                line(cand),
            ),
        ],
        true,
        &[],
    ))
}
