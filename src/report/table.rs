//! `--format table` (default), for people. Brief by default: one line per criterion (verdict,
//! title, measured against bound), the reason and the common mistake only under failed ones, a
//! failed probe named once with the criteria it blocks, then the summary. `--verbose`: the full
//! table (tabled) with every reason. Every cell in the chosen language; colour only when asked
//! for (a terminal, and `NO_COLOR` unset).
use super::{Exporter, Report};
use crate::checks::{Status, Verdict};
use crate::i18n::Lang;
use tabled::settings::{object::Columns, Modify, Style, Width};
use tabled::{builder::Builder, settings::Alignment};
use unicode_width::UnicodeWidthStr;

pub struct TableExporter {
    pub color: bool,
    pub verbose: bool,
}

fn paint(s: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

fn pad(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(s.width())))
}

impl TableExporter {
    fn status(&self, v: &Verdict, zh: bool) -> String {
        let (label, code) = match v.status {
            Status::Pass => (if zh { "✔ 通过" } else { "✔ PASS" }, "32"),
            Status::Fail => (if zh { "✘ 未通过" } else { "✘ FAIL" }, "31;1"),
            Status::Skip => (if zh { "– 跳过" } else { "– SKIP" }, "2"),
        };
        paint(&pad(label, 8), code, self.color)
    }

    fn header(&self, r: &Report, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        format!(
            "{} {} — {}\n{}: {}   {}: {}   seed: {}\n",
            if zh { "练习" } else { "Exercise" },
            r.exercise,
            r.title.get(lang),
            if zh { "提交" } else { "submission" },
            r.submission,
            if zh { "设备" } else { "device" },
            r.device,
            r.seed
        )
    }

    fn brief(&self, r: &Report, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        let width = r
            .verdicts
            .iter()
            .map(|v| v.title.get(lang).width())
            .max()
            .unwrap_or(0)
            .min(48);
        let mut out = String::new();
        for v in &r.verdicts {
            let title = v.title.get(lang);
            let measured = v.measured.get(lang);
            let bound = v.bound.get(lang);
            let against = match (v.status, measured, bound, &v.blocked_by) {
                (Status::Skip, ..) => v.why.get(lang).to_string(),
                (_, "—", _, Some(p)) => {
                    if zh {
                        format!("↳ 探针 `{p}` 失败，见下方")
                    } else {
                        format!("↳ probe `{p}` failed, see below")
                    }
                }
                (_, m, "" | "—", _) => m.to_string(),
                (_, m, b, _) => format!("{m}  ({} {b})", if zh { "界限" } else { "bound" }),
            };
            let line = format!("{} {}  {}", self.status(v, zh), pad(title, width), against);
            out.push_str(line.trim_end());
            out.push('\n');
            if v.status != Status::Fail || v.blocked_by.is_some() {
                continue;
            }
            let indent = " ".repeat(10);
            out.push_str(&format!(
                "{indent}{}{}\n",
                if zh { "原因：" } else { "why: " },
                v.why.get(lang)
            ));
            if let Some(c) = &v.catches {
                out.push_str(&format!(
                    "{indent}{}{}\n",
                    if zh {
                        "常见错误："
                    } else {
                        "common mistake: "
                    },
                    c.get(lang)
                ));
            }
        }
        out
    }

    fn full(&self, r: &Report, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        let mut b = Builder::default();
        b.push_record(if zh {
            ["准则", "结果", "测得", "界限", "说明"]
        } else {
            ["criterion", "verdict", "measured", "bound", "why"]
        });
        for v in &r.verdicts {
            let mut why = v.why.get(lang).to_string();
            if v.status == Status::Fail {
                if let Some(c) = &v.catches {
                    why.push_str(if zh {
                        "\n常见错误："
                    } else {
                        "\ncommon mistake: "
                    });
                    why.push_str(c.get(lang));
                }
            }
            b.push_record([
                format!("{}\n{}", v.id, v.title.get(lang)),
                self.status(v, zh).trim_end().to_string(),
                v.measured.get(lang).to_string(),
                v.bound.get(lang).to_string(),
                why,
            ]);
        }
        let mut table = b.build();
        table
            .with(Style::rounded())
            .with(Modify::new(Columns::new(0..1)).with(Width::wrap(34).keep_words(true)))
            .with(Modify::new(Columns::new(2..4)).with(Width::wrap(26).keep_words(true)))
            .with(Modify::new(Columns::new(4..5)).with(Width::wrap(48).keep_words(true)))
            .with(Modify::new(Columns::new(1..2)).with(Alignment::left()));
        format!("{table}\n")
    }

    /// Each failed probe once (probes failing with the same error together): the error and the
    /// criteria it left without evidence.
    fn probes(&self, r: &Report, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        let mut groups: Vec<(&str, Vec<&str>, Vec<&str>)> = Vec::new(); // error, probes, blocked
        for (probe, error) in &r.failed_probes {
            let blocked: Vec<&str> = r
                .verdicts
                .iter()
                .filter(|v| v.status == Status::Fail && v.blocked_by.as_deref() == Some(probe))
                .map(|v| v.id.as_str())
                .collect();
            if blocked.is_empty() && !self.verbose {
                continue;
            }
            match groups.iter_mut().find(|g| g.0 == error.as_str()) {
                Some(g) => {
                    g.1.push(probe);
                    g.2.extend(blocked);
                }
                None => groups.push((error, vec![probe], blocked)),
            }
        }
        let mut out = String::new();
        for (error, probes, blocked) in groups {
            let names = probes
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ");
            out.push_str(&if zh {
                format!("探针 {names} 失败：{error}\n")
            } else if probes.len() > 1 {
                format!("probes {names} failed: {error}\n")
            } else {
                format!("probe {names} failed: {error}\n")
            });
            if !blocked.is_empty() {
                out.push_str(&format!(
                    "  {}{}\n",
                    if zh {
                        "因此无法评分："
                    } else {
                        "so these could not be graded: "
                    },
                    blocked.join(", ")
                ));
            }
        }
        out
    }

    fn footer(&self, r: &Report, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        let mut out = String::new();
        if let Some(f) = &r.run_failure {
            out.push_str(&format!(
                "{} {}\n",
                if zh { "运行失败：" } else { "run failed:" },
                f.get(lang)
            ));
        }
        if let Some(tail) = &r.stderr_tail {
            let lines: Vec<&str> = tail.lines().collect();
            let start = lines
                .len()
                .saturating_sub(if self.verbose { 15 } else { 6 });
            out.push_str(if zh {
                "提交程序 stderr 的最后几行：\n"
            } else {
                "last lines of the submission's stderr:\n"
            });
            for l in &lines[start..] {
                out.push_str(&format!("  │ {l}\n"));
            }
        }
        for note in &r.notes {
            out.push_str(&format!(
                "{}{}\n",
                if zh { "ℹ 注意：" } else { "ℹ note: " },
                note.get(lang)
            ));
        }
        for gap in &r.sandbox_gaps {
            out.push_str(&format!(
                "{}{}\n",
                if zh { "⚠ 沙箱：" } else { "⚠ sandbox: " },
                gap.get(lang)
            ));
        }
        let s = &r.summary;
        let skipped = |zh: bool| match (s.skipped, zh) {
            (0, _) => String::new(),
            (n, true) => format!("，{n} 项跳过"),
            (n, false) => format!(", {n} skipped"),
        };
        let line = if zh {
            format!(
                "{}/{} 项通过，{} 项未通过{}；得分 {}/{}（运行 {:.1} s）",
                s.passed,
                s.passed + s.failed,
                s.failed,
                skipped(true),
                s.points,
                s.max_points,
                r.run_s
            )
        } else {
            format!(
                "{}/{} criteria passed, {} failed{}; score {}/{} (run {:.1} s)",
                s.passed,
                s.passed + s.failed,
                s.failed,
                skipped(false),
                s.points,
                s.max_points,
                r.run_s
            )
        };
        out.push_str(&paint(
            &line,
            if s.failed == 0 { "32;1" } else { "31;1" },
            self.color,
        ));
        out.push('\n');
        out
    }
}

impl Exporter for TableExporter {
    fn render(&self, r: &Report, lang: Lang) -> String {
        let mut out = self.header(r, lang);
        out.push('\n');
        out.push_str(&if self.verbose {
            self.full(r, lang)
        } else {
            self.brief(r, lang)
        });
        let probes = self.probes(r, lang);
        if !probes.is_empty() {
            out.push('\n');
            out.push_str(&probes);
        }
        out.push_str(&self.footer(r, lang));
        out
    }
}
