//! `--format yaml`: the whole report, both languages, for machines and diffs.
use super::{Exporter, Report};
use crate::i18n::Lang;

pub struct YamlExporter;

impl Exporter for YamlExporter {
    fn render(&self, report: &Report, _lang: Lang) -> String {
        serde_yaml::to_string(report).expect("a report always serialises")
    }
}
