//! `sweep`: the rows of a sweep (a row trace) as points, field `y` against field `x`, a line per
//! value of field `by` (in the order first met, points sorted by x).
use super::{check_label, quote_or_dash, Label, Scale};
use crate::charts::{self, Chart};
use crate::evidence::Observed;
use crate::i18n::Lang;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// May quote an answer: `… — your answer: {growth.seq_len}`.
    pub title: Label,
    /// The row trace's name.
    pub rows: String,
    pub x: String,
    pub by: String,
    pub y: String,
    #[serde(default)]
    pub scale: Option<Scale>,
    /// The value axis.
    pub unit: Label,
}

impl SweepSpec {
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        check_label(&self.title)
    }
}

pub(super) fn draw(spec: &SweepSpec, ev: &Observed, lang: Lang) -> Option<Chart> {
    let field = |r: &std::collections::BTreeMap<String, serde_json::Value>, k: &str| {
        r.get(k).and_then(|v| v.as_f64())
    };
    let mut groups: Vec<(f64, Vec<(f64, f64)>)> = Vec::new();
    for r in ev.rows(&spec.rows) {
        let (Some(g), Some(x), Some(y)) =
            (field(r, &spec.by), field(r, &spec.x), field(r, &spec.y))
        else {
            continue;
        };
        let p = (x, Scale::apply(spec.scale, y));
        match groups.iter_mut().find(|(k, _)| *k == g) {
            Some((_, pts)) => pts.push(p),
            None => groups.push((g, vec![p])),
        }
    }
    if groups.is_empty() {
        return None;
    }
    let series: Vec<(String, Vec<(f64, f64)>)> = groups
        .into_iter()
        .map(|(g, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (format!("{}={g}", spec.by), pts)
        })
        .collect();
    Some(charts::points(
        &quote_or_dash(spec.title.get(lang), &[], ev),
        &spec.x,
        spec.unit.get(lang),
        &series,
        true,
        &[],
    ))
}
