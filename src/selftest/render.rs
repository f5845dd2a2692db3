//! `grade check` output: a table (one row per exercise), then each surprise with the part of the
//! report that shows it, then the total time; or the whole `CheckReport` as JSON. Progress lines
//! go to stderr.
use super::{CheckReport, Event, ExerciseCheck, Part};
use crate::i18n::Lang;
use tabled::builder::Builder;
use tabled::settings::{object::Columns, Alignment, Modify, Style, Width};

fn paint(s: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// `✔ 3/3` or `✘ 2/3`: runs that did what they must, of those graded; `—` when none was.
fn cell(ex: &ExerciseCheck, part: Part, color: bool) -> String {
    let runs: Vec<_> = ex.submissions.iter().filter(|g| g.part == part).collect();
    if runs.is_empty() {
        return "—".into();
    }
    let ok = runs.iter().filter(|g| g.as_expected).count();
    mark(ok == runs.len(), &format!("{ok}/{}", runs.len()), color)
}

fn mark(ok: bool, s: &str, color: bool) -> String {
    if ok {
        paint(&format!("✔ {s}"), "32", color)
    } else {
        paint(&format!("✘ {s}"), "31;1", color)
    }
}

pub fn table(r: &CheckReport, lang: Lang, color: bool) -> String {
    let zh = lang == Lang::Zh;
    let mut b = Builder::default();
    b.push_record(if zh {
        ["练习", "参考答案", "起始代码", "错误示例", "覆盖", "秒"]
    } else {
        [
            "exercise", "solution", "starter", "fixtures", "coverage", "seconds",
        ]
    });
    for ex in &r.exercises {
        let gaps = ex
            .surprises
            .iter()
            .filter(|s| s.part == Part::Coverage)
            .count();
        let mut coverage = if gaps == 0 {
            paint("✔", "32", color)
        } else {
            mark(
                false,
                &format!("{gaps} {}", if zh { "处缺口" } else { "gaps" }),
                color,
            )
        };
        if !ex.unprovable.is_empty() {
            coverage.push_str(&format!(
                "\n{}{}",
                if zh {
                    "本设备上无法证明："
                } else {
                    "not provable on this device: "
                },
                ex.unprovable.join(", ")
            ));
        }
        b.push_record([
            ex.id.clone(),
            cell(ex, Part::Solution, color),
            cell(ex, Part::Starter, color),
            cell(ex, Part::Fixtures, color),
            coverage,
            format!("{:.1}", ex.seconds),
        ]);
    }
    let mut t = b.build();
    t.with(Style::rounded())
        .with(Modify::new(Columns::new(4..5)).with(Width::wrap(36).keep_words(true)))
        .with(Modify::new(Columns::new(5..6)).with(Alignment::right()));
    let mut out = format!(
        "{}: {}   {}: {}   {}: {}{}\n",
        if zh { "设备" } else { "device" },
        r.device,
        if zh {
            "每个提交评分次数"
        } else {
            "runs per submission"
        },
        r.runs,
        if zh { "并行" } else { "jobs" },
        r.jobs,
        if r.only.is_empty() {
            String::new()
        } else {
            format!(
                "   {}: {}",
                if zh { "只评分" } else { "only graded" },
                r.only.join(", ")
            )
        }
    );
    out.push_str(&t.to_string());
    out.push('\n');
    let all: Vec<_> = r.exercises.iter().flat_map(|e| &e.surprises).collect();
    for (i, s) in all.iter().enumerate() {
        let head = format!(
            "{} {}/{} — {} · {}{}",
            if zh { "意外" } else { "surprise" },
            i + 1,
            all.len(),
            s.exercise,
            part_name(s.part, zh),
            s.submission
                .as_ref()
                .map(|n| format!(" · {n}"))
                .unwrap_or_default()
        );
        out.push_str(&format!("\n{}\n", paint(&head, "31;1", color)));
        out.push_str(&format!("  {}\n", s.message.get(lang)));
        out.push_str(&format!(
            "  {}: {}\n",
            if zh { "文件" } else { "files" },
            s.files.join(", ")
        ));
        for line in &s.evidence {
            for l in line.get(lang).lines() {
                out.push_str(&format!("  │ {l}\n"));
            }
        }
    }
    let bands: Vec<String> = r
        .exercises
        .iter()
        .flat_map(|e| &e.submissions)
        .filter(|g| !g.bands_failed().is_empty())
        .map(|g| {
            format!(
                "{} · {}{} · {}",
                g.report.exercise,
                g.name,
                if r.runs > 1 {
                    format!(" #{}", g.run)
                } else {
                    String::new()
                },
                g.bands_failed().join(", ")
            )
        })
        .collect();
    if !bands.is_empty() {
        out.push_str(&format!(
            "\n{}\n",
            if zh {
                "以下错误示例还未通过计时区间（band）；它们已在别处出错，expected.yaml 没有列出这些区间，所以不计为意外："
            } else {
                "these fixtures also failed a timing band (band: true) that expected.yaml does not list for them; they are wrong elsewhere, so it is not a surprise:"
            }
        ));
        for b in &bands {
            out.push_str(&format!("  · {b}\n"));
        }
    }
    let graded = r
        .exercises
        .iter()
        .map(|e| e.submissions.len())
        .sum::<usize>();
    let line = if zh {
        format!(
            "\n{} 处意外；评分 {graded} 次；总用时 {:.1} s\n",
            r.surprises, r.total_s
        )
    } else {
        format!(
            "\n{} surprise{}; {graded} gradings; total run time {:.1} s\n",
            r.surprises,
            if r.surprises == 1 { "" } else { "s" },
            r.total_s
        )
    };
    out.push_str(&paint(
        &line,
        if r.surprises == 0 { "32;1" } else { "31;1" },
        color,
    ));
    out
}

fn part_name(p: Part, zh: bool) -> &'static str {
    match (p, zh) {
        (Part::Solution, true) => "参考答案",
        (Part::Starter, true) => "起始代码",
        (Part::Fixtures, true) => "错误示例",
        (Part::Coverage, true) => "覆盖",
        (Part::Solution, false) => "solution",
        (Part::Starter, false) => "starter",
        (Part::Fixtures, false) => "fixture",
        (Part::Coverage, false) => "coverage",
    }
}

pub fn json(r: &CheckReport) -> String {
    serde_json::to_string_pretty(r).expect("a check report always serialises") + "\n"
}

/// One plain line per event, for stderr.
pub fn progress(e: &Event, lang: Lang) -> String {
    let zh = lang == Lang::Zh;
    match e {
        Event::Start { submissions, jobs } => {
            if zh {
                format!("grade check：评分 {submissions} 次，同时 {jobs} 个 …")
            } else {
                format!("grade check: {submissions} gradings, {jobs} at a time …")
            }
        }
        Event::Graded {
            done,
            total,
            graded: g,
            runs,
        } => {
            let run = if *runs > 1 {
                format!(" #{}", g.run)
            } else {
                String::new()
            };
            let verdict = match (g.as_expected, zh) {
                (true, true) => "✔ 符合预期",
                (true, false) => "✔ as expected",
                (false, true) => "✘ 意外",
                (false, false) => "✘ surprise",
            };
            let bands = g.bands_failed();
            let also = if bands.is_empty() {
                String::new()
            } else if zh {
                format!(
                    "；另未通过计时区间 {}（已在别处出错，不据此判定）",
                    bands.join(", ")
                )
            } else {
                format!(
                    "; also failed timing band {} (wrong elsewhere: not held to it)",
                    bands.join(", ")
                )
            };
            format!(
                "[{done}/{total}] {} · {}{run} · {verdict}{also} ({:.1} s)",
                g.report.exercise, g.name, g.seconds
            )
        }
    }
}
