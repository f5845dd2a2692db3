//! `ranked`: ranked rows (top operators) of several row traces side by side: a category per
//! name, in the order first met, a bar per trace (0 where a trace lacks the name).
use super::{check_label, quote_or_dash, Label, Scale};
use crate::charts::{self, Chart};
use crate::evidence::Observed;
use crate::i18n::Lang;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RankedSpec {
    pub title: Label,
    /// The value axis.
    pub unit: Label,
    /// The row field naming the item.
    pub name: String,
    /// The row field of the value.
    pub value: String,
    #[serde(default)]
    pub scale: Option<Scale>,
    pub series: Vec<RankedSeries>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RankedSeries {
    /// The row trace's name.
    pub rows: String,
    pub label: Label,
    /// Only its first rows (that have both fields).
    #[serde(default)]
    pub take: Option<usize>,
}

impl RankedSpec {
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        check_label(&self.title)?;
        if self.series.is_empty() {
            return Err(("ranked needs at least one series".into(), "ranked:".into()));
        }
        Ok(())
    }
}

pub(super) fn draw(spec: &RankedSpec, ev: &Observed, lang: Lang) -> Option<Chart> {
    let lists: Vec<Vec<(String, f64)>> = spec
        .series
        .iter()
        .map(|s| {
            ev.rows(&s.rows)
                .iter()
                .filter_map(|r| {
                    Some((
                        r.get(&spec.name)?.as_str()?.to_string(),
                        Scale::apply(spec.scale, r.get(&spec.value)?.as_f64()?),
                    ))
                })
                .take(s.take.unwrap_or(usize::MAX))
                .collect()
        })
        .collect();
    if lists.iter().all(Vec::is_empty) {
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    for (n, _) in lists.iter().flatten() {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let get = |l: &[(String, f64)], n: &str| l.iter().find(|o| o.0 == n).map_or(0.0, |o| o.1);
    let series: Vec<(String, Vec<f64>)> = spec
        .series
        .iter()
        .zip(&lists)
        .map(|(s, l)| {
            (
                quote_or_dash(s.label.get(lang), &[], ev),
                names.iter().map(|n| get(l, n)).collect(),
            )
        })
        .collect();
    Some(charts::bars(
        &quote_or_dash(spec.title.get(lang), &[], ev),
        spec.unit.get(lang),
        &names,
        &series,
        false,
    ))
}
