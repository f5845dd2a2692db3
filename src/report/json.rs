//! `--format json`: the whole report, both languages, for machines.
use super::{Exporter, Report};
use crate::i18n::Lang;

pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn render(&self, report: &Report, _lang: Lang) -> String {
        serde_json::to_string_pretty(report).expect("a report always serialises") + "\n"
    }
}
