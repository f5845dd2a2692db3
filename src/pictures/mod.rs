//! A lesson's pictures as data: `pictures:` of exercise.yaml lists them, each entry one picture
//! kind (`- bars: {...}`), one file per kind; this file owns the list, its validation, drawing
//! from recorded evidence (`Observed`, never new runs) and what the kinds share: bilingual
//! labels, metric-key templates, value sources and scales.
//!
//! Templates: `{category}`, `{series}` (and a kind's own names, `{n}` of `break_even`) are
//! replaced first; what is left in braces is a key quoted from the evidence: `{growth.seq_len}`
//! (a metric: a number or an answer), `{$params.short_steps}` (a number of exercise.yaml's
//! `params:`). A picture lacking what it needs is left out (a starter, a crash records little).
pub mod bars;
pub mod break_even;
pub mod points;
pub mod ranked;
pub mod sweep;

use crate::charts::Chart;
use crate::evidence::Observed;
use crate::i18n::{Lang, Text};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One picture of a lesson: the kind is the single key (`- bars: {...}`), as a rubric's check.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Picture {
    /// Bars per category, a bar per series (or stacked), values from metric-key templates.
    Bars(bars::BarsSpec),
    /// Points of list metrics (one series each), with labelled horizontal reference lines.
    Points(points::PointsSpec),
    /// Bars of ranked rows (top operators), several row traces side by side by name.
    Ranked(ranked::RankedSpec),
    /// A sweep's rows: one field against another, a line per value of a third.
    Sweep(sweep::SweepSpec),
    /// Cumulative time of n calls of two variants (a one-off cost against a steady gain) and
    /// where the lines cross.
    BreakEven(break_even::BreakEvenSpec),
}

/// Deserializes `pictures:` (each entry a singleton map, as rubric checks).
pub fn deserialize_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Picture>, D::Error> {
    #[derive(Deserialize)]
    struct Entry(#[serde(with = "serde_yaml::with::singleton_map")] Picture);
    Ok(Vec::<Entry>::deserialize(d)?
        .into_iter()
        .map(|e| e.0)
        .collect())
}

/// Serializes `pictures:` the way it is read.
pub fn serialize_list<S: serde::Serializer>(v: &[Picture], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    #[derive(Serialize)]
    struct Entry<'a>(#[serde(with = "serde_yaml::with::singleton_map")] &'a Picture);
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for p in v {
        seq.serialize_element(&Entry(p))?;
    }
    seq.end()
}

impl Picture {
    /// The picture's chart, when the evidence holds what it needs.
    pub fn draw(&self, ev: &Observed, lang: Lang) -> Option<Chart> {
        match self {
            Picture::Bars(s) => bars::draw(s, ev, lang),
            Picture::Points(s) => points::draw(s, ev, lang),
            Picture::Ranked(s) => ranked::draw(s, ev, lang),
            Picture::Sweep(s) => sweep::draw(s, ev, lang),
            Picture::BreakEven(s) => break_even::draw(s, ev, lang),
        }
    }

    /// What the YAML cannot say by its shape: returns the problem and a word to locate it by.
    pub fn validate(&self) -> Result<(), (String, String)> {
        match self {
            Picture::Bars(s) => s.validate(),
            Picture::Points(s) => s.validate(),
            Picture::Ranked(s) => s.validate(),
            Picture::Sweep(s) => s.validate(),
            Picture::BreakEven(s) => s.validate(),
        }
    }
}

/// Every chart of `pictures` the evidence allows, in the order written.
pub fn draw(pictures: &[Picture], ev: &Observed, lang: Lang) -> Vec<Chart> {
    pictures.iter().filter_map(|p| p.draw(ev, lang)).collect()
}

/// A label: `{zh: …, en: …}` as everywhere in the course's YAML, or one string for both
/// languages (a unit, a name).
#[derive(Clone, Debug, PartialEq, Serialize, Default)]
#[serde(transparent)]
pub struct Label(pub Text);

impl Label {
    pub fn get(&self, lang: Lang) -> &str {
        self.0.get(lang)
    }
}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Label;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or {zh: …, en: …}")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Label, E> {
                Ok(Label(Text::same(s)))
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Label, A::Error> {
                Text::deserialize(de::value::MapAccessDeserializer::new(m)).map(Label)
            }
        }
        d.deserialize_any(V)
    }
}

/// Where a number comes from: a metric key template, `median(KEY)` of a list metric (or of
/// `windows:TRACE.VARIANT`, the grader's clock over each timed window: `Observed::windows`), or
/// `$params.KEY`; several alternatives (a list) are tried in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Source(pub Vec<String>);

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Source, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Source;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a metric key, `median(KEY)`, `$params.KEY`, or a list of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Source, E> {
                Ok(Source(vec![s.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Source, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = s.next_element::<String>()? {
                    v.push(x);
                }
                if v.is_empty() {
                    return Err(de::Error::invalid_length(0, &self));
                }
                Ok(Source(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Source {
    /// The first alternative the evidence has, with `vars` filled in.
    pub fn value(&self, vars: &[(&str, &str)], ev: &Observed) -> Option<f64> {
        self.0.iter().find_map(|alt| {
            let key = fill(alt, vars);
            if let Some(inner) = key
                .strip_prefix("median(")
                .and_then(|k| k.strip_suffix(')'))
            {
                median(&ev.list(inner)?)
            } else if let Some(p) = key.strip_prefix("$params.") {
                ev.param(p)
            } else {
                ev.num(&key)
            }
        })
    }

    fn check(&self) -> Result<(), (String, String)> {
        for alt in &self.0 {
            check_template(alt)?;
            if alt.starts_with("median(") != alt.ends_with(')') {
                return Err((
                    format!("`{alt}` is not `KEY` nor `median(KEY)`"),
                    alt.clone(),
                ));
            }
        }
        Ok(())
    }
}

/// A unit conversion: `"*1000"` (seconds → ms), `"/1048576"` (bytes → MiB), or a number to
/// multiply by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Mul(f64),
    Div(f64),
}

impl Scale {
    pub fn apply(s: Option<Scale>, v: f64) -> f64 {
        match s {
            None => v,
            Some(Scale::Mul(x)) => v * x,
            Some(Scale::Div(x)) => v / x,
        }
    }
}

impl Serialize for Scale {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scale::Mul(x) => s.serialize_str(&format!("*{x}")),
            Scale::Div(x) => s.serialize_str(&format!("/{x}")),
        }
    }
}

impl<'de> Deserialize<'de> for Scale {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scale, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scale;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scale: `*N` or `/N` (N a positive number), or a number")
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Scale, E> {
                if x.is_finite() && x > 0.0 {
                    Ok(Scale::Mul(x))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(x), &self))
                }
            }
            fn visit_u64<E: de::Error>(self, x: u64) -> Result<Scale, E> {
                self.visit_f64(x as f64)
            }
            fn visit_i64<E: de::Error>(self, x: i64) -> Result<Scale, E> {
                self.visit_f64(x as f64)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Scale, E> {
                let t = s.trim();
                let (op, n) = t.split_at(t.chars().next().map_or(0, char::len_utf8));
                let x: Option<f64> = n
                    .trim()
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x > 0.0);
                match (op, x) {
                    ("*", Some(x)) => Ok(Scale::Mul(x)),
                    ("/", Some(x)) => Ok(Scale::Div(x)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `t` with each `{name}` of `vars` replaced by its value.
pub fn fill(t: &str, vars: &[(&str, &str)]) -> String {
    let mut s = t.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

/// A quoted key's value as text: a number as Rust prints it (8, 0.5), an answer as written.
fn quoted(key: &str, ev: &Observed) -> Option<String> {
    let v = match key.strip_prefix("$params.") {
        Some(p) => ev.params.get(p)?,
        None => ev.metrics.get(key)?,
    };
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        v => v.as_f64().map(|x| x.to_string()),
    }
}

/// `t` (vars filled) with every `{KEY}` quoted from the evidence; None when a key is missing.
pub fn quote(t: &str, vars: &[(&str, &str)], ev: &Observed) -> Option<String> {
    quote_with(&fill(t, vars), &mut |k| quoted(k, ev))
}

/// As `quote`, a missing key shown as "—" (titles).
pub fn quote_or_dash(t: &str, vars: &[(&str, &str)], ev: &Observed) -> String {
    quote_with(&fill(t, vars), &mut |k| {
        Some(quoted(k, ev).unwrap_or_else(|| "—".into()))
    })
    .unwrap_or_default()
}

fn quote_with(t: &str, f: &mut dyn FnMut(&str) -> Option<String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = t;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let Some(j) = rest[i..].find('}') else {
            out.push_str(&rest[i..]);
            return Some(out);
        };
        out.push_str(&f(&rest[i + 1..i + j])?);
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// Braces of a template nest (a quoted key may hold `{category}`) and are balanced.
pub fn check_template(t: &str) -> Result<(), (String, String)> {
    let mut depth = 0i32;
    for c in t.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if !(0..=2).contains(&depth) {
            break;
        }
    }
    if depth != 0 {
        return Err((
            format!("`{t}`: unbalanced braces (`{{KEY}}`, `{{category}}`, `{{series}}`)"),
            t.to_string(),
        ));
    }
    Ok(())
}

/// Both languages of a label checked as templates.
pub fn check_label(l: &Label) -> Result<(), (String, String)> {
    check_template(&l.0.zh)?;
    check_template(&l.0.en)
}

/// The median of the finite values (None when there is none).
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}
