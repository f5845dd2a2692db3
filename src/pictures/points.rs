//! `points`: list metrics as points (the i-th value at x = i + 1), one series per list, with
//! labelled horizontal reference lines (a grader's median); lines through the points when
//! `joined`.
use super::{check_label, check_template, quote_or_dash, Label, Scale, Source};
use crate::charts::{self, Chart};
use crate::evidence::Observed;
use crate::i18n::Lang;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PointsSpec {
    pub title: Label,
    /// The x axis (what i counts).
    pub x: Label,
    /// The value axis.
    pub unit: Label,
    #[serde(default)]
    pub scale: Option<Scale>,
    #[serde(default)]
    pub joined: bool,
    /// A series per list metric the evidence has.
    pub series: Vec<ListSeries>,
    /// A reference line per number the evidence has.
    #[serde(default)]
    pub lines: Vec<RefLine>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListSeries {
    /// A list-of-numbers metric's key.
    pub list: String,
    pub label: Label,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RefLine {
    pub value: Source,
    pub label: Label,
}

impl PointsSpec {
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        check_label(&self.title)?;
        if self.series.is_empty() {
            return Err(("points needs at least one series".into(), "points:".into()));
        }
        for s in &self.series {
            check_template(&s.list)?;
        }
        for l in &self.lines {
            l.value.check()?;
        }
        Ok(())
    }
}

pub(super) fn draw(spec: &PointsSpec, ev: &Observed, lang: Lang) -> Option<Chart> {
    let series: Vec<(String, Vec<(f64, f64)>)> = spec
        .series
        .iter()
        .filter_map(|s| {
            let list = ev.list(&s.list)?;
            Some((
                quote_or_dash(s.label.get(lang), &[], ev),
                list.iter()
                    .enumerate()
                    .map(|(i, v)| ((i + 1) as f64, Scale::apply(spec.scale, *v)))
                    .collect(),
            ))
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    let lines: Vec<(String, f64)> = spec
        .lines
        .iter()
        .filter_map(|l| {
            Some((
                quote_or_dash(l.label.get(lang), &[], ev),
                Scale::apply(spec.scale, l.value.value(&[], ev)?),
            ))
        })
        .collect();
    Some(charts::points(
        &quote_or_dash(spec.title.get(lang), &[], ev),
        spec.x.get(lang),
        spec.unit.get(lang),
        &series,
        spec.joined,
        &lines,
    ))
}
