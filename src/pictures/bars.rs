//! `bars`: bars per category, a bar per series side by side (or `stacked`), each value a metric
//! key template over the category's and the series' `key` (`{category}`, `{series}`); the
//! numbers as a table beside it. Options: `relative_to:` a category (values as ratios to it,
//! the table with both), `per:` a number per category to divide by (per step).
use super::{check_label, quote, quote_or_dash, Label, Scale, Source};
use crate::charts::{self, Chart};
use crate::evidence::Observed;
use crate::i18n::Lang;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BarsSpec {
    pub title: Label,
    /// The value axis.
    pub unit: Label,
    #[serde(default)]
    pub stacked: bool,
    /// The value of every bar, unless its category or series gives its own (series first).
    #[serde(default)]
    pub value: Option<Source>,
    #[serde(default)]
    pub scale: Option<Scale>,
    /// Groups along the axis; a label may quote metrics (`{shapes.{category}.batch}`), and a
    /// category whose label quotes a missing one is left out.
    pub categories: Vec<Item>,
    pub series: Vec<Item>,
    /// What a missing value leaves out: its `category`, its `series`, or the whole picture
    /// (`all`, the default).
    #[serde(default)]
    pub require: Require,
    /// The table's first column head.
    #[serde(default)]
    pub category_header: Option<Label>,
    /// A category's key: bars are values over that category's, the table shows both.
    #[serde(default)]
    pub relative_to: Option<String>,
    /// Divide each category's values by a number (steps per run); used when every category
    /// has one above 0, with its own title, unit and category labels.
    #[serde(default)]
    pub per: Option<Per>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub key: String,
    pub label: Label,
    #[serde(default)]
    pub value: Option<Source>,
    /// The table's column of this series relative to `relative_to`.
    #[serde(default)]
    pub relative_label: Option<Label>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Per {
    pub value: Source,
    pub title: Label,
    pub unit: Label,
    /// Category labels when divided (default: the categories' own).
    #[serde(default)]
    pub label: Option<Label>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    Category,
    Series,
    #[default]
    All,
}

impl BarsSpec {
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        check_label(&self.title)?;
        if self.categories.is_empty() || self.series.is_empty() {
            return Err((
                "bars needs at least one category and one series".into(),
                "bars:".into(),
            ));
        }
        for c in &self.categories {
            check_label(&c.label)?;
            for s in &self.series {
                let Some(v) = s
                    .value
                    .as_ref()
                    .or(c.value.as_ref())
                    .or(self.value.as_ref())
                else {
                    return Err((
                        format!(
                            "bars: no value for category `{}`, series `{}`: give `value:` to the picture, the category or the series",
                            c.key, s.key
                        ),
                        s.key.clone(),
                    ));
                };
                v.check()?;
            }
        }
        if let Some(base) = &self.relative_to {
            if !self.categories.iter().any(|c| &c.key == base) {
                return Err((
                    format!("relative_to: `{base}` is not the key of a category"),
                    "relative_to:".into(),
                ));
            }
            if let Some(s) = self.series.iter().find(|s| s.relative_label.is_none()) {
                return Err((
                    format!(
                        "with relative_to:, series `{}` needs relative_label:",
                        s.key
                    ),
                    s.key.clone(),
                ));
            }
        }
        if let Some(p) = &self.per {
            p.value.check()?;
            check_label(&p.title)?;
            if let Some(l) = &p.label {
                check_label(l)?;
            }
        }
        Ok(())
    }

    fn source<'a>(&'a self, c: &'a Item, s: &'a Item) -> Option<&'a Source> {
        s.value
            .as_ref()
            .or(c.value.as_ref())
            .or(self.value.as_ref())
    }
}

pub(super) fn draw(spec: &BarsSpec, ev: &Observed, lang: Lang) -> Option<Chart> {
    // per category: the number its values are divided by, when every category has one
    let per: Option<Vec<f64>> = spec.per.as_ref().and_then(|p| {
        spec.categories
            .iter()
            .map(|c| {
                p.value
                    .value(&[("category", &c.key)], ev)
                    .filter(|x| *x > 0.0)
            })
            .collect()
    });
    let per_spec = spec.per.as_ref().filter(|_| per.is_some());
    // every category's label and cells, as the evidence has them
    let cells: Vec<(Option<String>, Vec<Option<f64>>)> = spec
        .categories
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let vars = [("category", c.key.as_str())];
            let label = per_spec.and_then(|p| p.label.as_ref()).unwrap_or(&c.label);
            let label = quote(label.get(lang), &vars, ev);
            let row = spec
                .series
                .iter()
                .map(|s| {
                    let v = spec
                        .source(c, s)?
                        .value(&[("category", &c.key), ("series", &s.key)], ev)?;
                    let v = Scale::apply(spec.scale, v);
                    Some(per.as_ref().map_or(v, |d| v / d[i]))
                })
                .collect();
            (label, row)
        })
        .collect();
    let cats: Vec<usize> = (0..spec.categories.len())
        .filter(|&i| {
            cells[i].0.is_some()
                && (spec.require != Require::Category || cells[i].1.iter().all(Option::is_some))
        })
        .collect();
    let sers: Vec<usize> = (0..spec.series.len())
        .filter(|&s| {
            spec.require != Require::Series || cats.iter().all(|&c| cells[c].1[s].is_some())
        })
        .collect();
    let complete = cats.len() == spec.categories.len()
        && cats.iter().all(|&c| cells[c].1.iter().all(Option::is_some));
    if cats.is_empty() || sers.is_empty() || (spec.require == Require::All && !complete) {
        return None;
    }
    let cell = |c: usize, s: usize| cells[c].1[s].unwrap_or(0.0);
    let labels: Vec<String> = cats
        .iter()
        .map(|&c| cells[c].0.clone().unwrap_or_default())
        .collect();
    let (title, unit) = match per_spec {
        Some(p) => (&p.title, &p.unit),
        None => (&spec.title, &spec.unit),
    };
    let title = quote_or_dash(title.get(lang), &[], ev);
    let names = |s: usize| {
        quote_or_dash(
            spec.series[s].label.get(lang),
            &[("series", &spec.series[s].key)],
            ev,
        )
    };
    let Some(base) = &spec.relative_to else {
        let series: Vec<(String, Vec<f64>)> = sers
            .iter()
            .map(|&s| (names(s), cats.iter().map(|&c| cell(c, s)).collect()))
            .collect();
        let mut chart = charts::bars(&title, unit.get(lang), &labels, &series, spec.stacked);
        if let Some(h) = &spec.category_header {
            chart.head[0] = h.get(lang).to_string();
        }
        return Some(chart);
    };
    let b = *cats.iter().find(|&&c| &spec.categories[c].key == base)?;
    let series: Vec<(String, Vec<f64>)> = sers
        .iter()
        .map(|&s| {
            (
                names(s),
                cats.iter().map(|&c| cell(c, s) / cell(b, s)).collect(),
            )
        })
        .collect();
    let mut chart = charts::bars(&title, unit.get(lang), &labels, &series, spec.stacked);
    chart.head = std::iter::once(
        spec.category_header
            .as_ref()
            .map_or(String::new(), |h| h.get(lang).to_string()),
    )
    .chain(sers.iter().map(|&s| names(s)))
    .chain(sers.iter().map(|&s| {
        spec.series[s]
            .relative_label
            .as_ref()
            .map_or(String::new(), |l| l.get(lang).to_string())
    }))
    .collect();
    chart.rows = cats
        .iter()
        .zip(&labels)
        .map(|(&c, label)| {
            std::iter::once(label.clone())
                .chain(sers.iter().map(|&s| charts::fmt(cell(c, s))))
                .chain(sers.iter().map(|&s| charts::fmt(cell(c, s) / cell(b, s))))
                .collect()
        })
        .collect();
    Some(chart)
}
