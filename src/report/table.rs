//! `--format table` (default): a verdict table people read, then a summary line. Colour only when
//! asked for (a terminal, and `NO_COLOR` unset).
use super::{Exporter, Report};
use crate::checks::Status;
use crate::i18n::Lang;
use tabled::settings::{object::Columns, Modify, Style, Width};
use tabled::{builder::Builder, settings::Alignment};

pub struct TableExporter {
    pub color: bool,
}

fn paint(s: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

impl Exporter for TableExporter {
    fn render(&self, r: &Report, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        let mut out = String::new();
        out.push_str(&format!(
            "{} {} — {}\n{}: {}   {}: {}   seed: {}\n",
            if zh { "练习" } else { "Exercise" },
            r.exercise,
            r.title.get(lang),
            if zh { "提交" } else { "submission" },
            r.submission,
            if zh { "设备" } else { "device" },
            r.device,
            r.seed
        ));
        let mut b = Builder::default();
        b.push_record(if zh {
            ["准则", "结果", "测得", "界限", "说明"]
        } else {
            ["criterion", "verdict", "measured", "bound", "why"]
        });
        for v in &r.verdicts {
            let status = match v.status {
                Status::Pass => paint(if zh { "✔ 通过" } else { "✔ PASS" }, "32", self.color),
                Status::Fail => paint(if zh { "✘ 未通过" } else { "✘ FAIL" }, "31;1", self.color),
                Status::Skip => paint(if zh { "– 跳过" } else { "– SKIP" }, "2", self.color),
            };
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
                status,
                v.measured.clone(),
                v.bound.clone(),
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
        out.push_str(&table.to_string());
        out.push('\n');
        if let Some(f) = &r.run_failure {
            out.push_str(&format!(
                "{} {}\n",
                if zh { "运行失败：" } else { "run failed:" },
                f.get(lang)
            ));
        }
        if let Some(tail) = &r.stderr_tail {
            let lines: Vec<&str> = tail.lines().collect();
            let start = lines.len().saturating_sub(15);
            out.push_str(if zh {
                "提交程序 stderr 的最后几行：\n"
            } else {
                "last lines of the submission's stderr:\n"
            });
            for l in &lines[start..] {
                out.push_str(&format!("  │ {l}\n"));
            }
        }
        let s = &r.summary;
        let line = if zh {
            format!(
                "{}/{} 项通过，{} 项未通过{}；得分 {}/{}（运行 {:.1} s）",
                s.passed,
                s.passed + s.failed,
                s.failed,
                if s.skipped > 0 {
                    format!("，{} 项跳过", s.skipped)
                } else {
                    String::new()
                },
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
                if s.skipped > 0 {
                    format!(", {} skipped", s.skipped)
                } else {
                    String::new()
                },
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
