//! HTML reports (issue 20): one self-contained page (inline CSS, inline SVG charts, a few lines
//! of inline JS for sorting; no network) for one graded submission (`grade exercise --html`) and
//! for a class (`grade report`, in `class`). Markup by `maud`, charts by `crate::charts`
//! (plotters), a lesson's pictures by `crate::pictures` (declared in its exercise.yaml), all
//! drawn from recorded evidence.
pub mod class;

use crate::charts::Chart;
use crate::course::Course;
use crate::evidence::Observed;
use crate::i18n::{Lang, Text};
use crate::pictures::{self, Picture};
use crate::report::Report;
use crate::spec::Exercise;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One criterion as a page shows it (a report's verdict, read back from JSON).
#[derive(Clone, Debug, Deserialize, Default)]
pub struct CriterionView {
    pub id: String,
    #[serde(default)]
    pub title: Text,
    pub status: String,
    #[serde(default)]
    pub points: u32,
    #[serde(default)]
    pub measured: Text,
    #[serde(default)]
    pub bound: Text,
    #[serde(default)]
    pub why: Text,
    #[serde(default)]
    pub catches: Option<Text>,
    #[serde(default)]
    pub blocked_by: Option<String>,
}

/// A graded report (from `grade exercise`, or a `grade batch` record) as a page reads it.
#[derive(Clone, Debug, Deserialize, Default)]
pub struct View {
    pub exercise: String,
    #[serde(default)]
    pub title: Text,
    #[serde(default)]
    pub student: Option<String>,
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub submission: Option<String>,
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub verdicts: Vec<CriterionView>,
    #[serde(default)]
    pub summary: crate::gradebook::RecordSummary,
    #[serde(default)]
    pub run_s: f64,
    #[serde(default)]
    pub run_failure: Option<Text>,
    #[serde(default)]
    pub stderr_tail: Option<String>,
    #[serde(default)]
    pub failed_probes: BTreeMap<String, String>,
    #[serde(default)]
    pub evidence: Observed,
}

impl View {
    pub fn of(report: &Report) -> View {
        serde_json::to_value(report)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }
    pub fn graded(&self) -> bool {
        self.outcome
            .as_deref()
            .is_none_or(|o| o == crate::gradebook::GRADED)
    }
}

/// Lesson `id`'s exercise.yaml when `course` has that lesson and it loads (a record of a lesson
/// the course lacks has no pictures, no mapped mistakes).
pub fn lesson(course: Option<&Course>, id: &str) -> Option<Exercise> {
    let course = course?;
    course.check_id(id).ok()?;
    Exercise::load(&course.exercise_dir(id)).ok()
}

/// Picks the language of a label.
pub(crate) fn l(lang: Lang, zh: &str, en: &str) -> String {
    match lang {
        Lang::Zh => zh.into(),
        Lang::En => en.into(),
    }
}

/// A word quoted for a POSIX shell when it needs to be.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command that grades this row again, alone, with the same seed.
pub fn regrade_command(v: &View) -> Option<String> {
    let sub = v.submission.as_deref()?;
    Some(format!(
        "grade exercise {} --submission {} --seed {} --device {}",
        shell_quote(&v.exercise),
        shell_quote(sub),
        v.seed,
        shell_quote(if v.device.is_empty() {
            "cpu"
        } else {
            &v.device
        })
    ))
}

const CSS: &str = r#"
:root{--pass:#1d7a3a;--fail:#b3261e;--skip:#6b6b6b;--none:#8a6d00;--line:#d6d6d6;--bg:#fafafa}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC",sans-serif;margin:0 auto;max-width:1100px;padding:1rem;line-height:1.45;color:#1b1b1b;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.25rem;border-bottom:1px solid var(--line);padding-bottom:.2rem;margin-top:2rem}h3{font-size:1.05rem}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid var(--line);padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:var(--bg)}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.PASS{color:var(--pass);font-weight:600}.FAIL{color:var(--fail);font-weight:600}.SKIP{color:var(--skip)}.NONE{color:var(--none)}
td.cell{text-align:center}
table.verdicts td:nth-child(2),table.verdicts td:nth-child(3){white-space:nowrap}
figure{margin:1rem 0;padding:.5rem;border:1px solid var(--line);border-radius:6px;break-inside:avoid}
figure svg{width:100%;height:auto;max-width:640px;display:block}
figcaption{font-weight:600;margin-bottom:.3rem}
figure table{font-size:.8rem}
pre,code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85rem}
pre{background:var(--bg);border:1px solid var(--line);padding:.5rem;white-space:pre-wrap;word-break:break-word}
details{border:1px solid var(--line);border-radius:6px;margin:.4rem 0;padding:.3rem .6rem}
summary{cursor:pointer}
.meta{color:#555;font-size:.9rem}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
button{font:inherit;margin:.2rem .3rem .2rem 0}
@media (max-width:600px){body{padding:.5rem}th,td{padding:.2rem .25rem}}
@media print{button,.noprint{display:none!important}details{border:none}a{color:inherit;text-decoration:none}figure{border:none}}
"#;

/// Sorting of the class tables (buttons stay hidden without JS: the table is then in roster
/// order, students alphabetical; `#by-score` sorts by score on load) and every `<details>`
/// opened for printing. `data-js="ready"` on `<html>` says the script ran to its end.
const JS: &str = r#"
document.querySelectorAll('button[data-sort]').forEach(function(b){
  b.hidden=false;
  b.addEventListener('click',function(){
    var tb=document.getElementById(b.dataset.table).tBodies[0];
    var rows=Array.prototype.slice.call(tb.rows);
    var byScore=b.dataset.sort==='score';
    rows.sort(function(x,y){
      var d=byScore?(parseFloat(y.dataset.score)-parseFloat(x.dataset.score)):0;
      return d!==0?d:x.dataset.student.localeCompare(y.dataset.student);
    });
    rows.forEach(function(r){tb.appendChild(r);});
  });
});
window.addEventListener('beforeprint',function(){document.querySelectorAll('details').forEach(function(d){d.open=true;});});
if(location.hash==='#by-score'){document.querySelectorAll('button[data-sort=score]').forEach(function(b){b.click();});}
document.documentElement.setAttribute('data-js','ready');
"#;

/// A whole page around `body`.
pub(crate) fn page(title: &str, lang: Lang, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang=(if lang == Lang::Zh { "zh-CN" } else { "en" }) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                (body)
                script { (PreEscaped(JS)) }
            }
        }
    }
    .into_string()
}

/// A chart and its numbers.
pub(crate) fn figure(c: &Chart) -> Markup {
    html! {
        figure.chart {
            figcaption { (c.title) }
            @if !c.svg.is_empty() {
                div aria-hidden="true" { (PreEscaped(&c.svg)) }
            }
            div.scroll {
                table {
                    caption.sr { (c.title) }
                    thead { tr { @for h in &c.head { th scope="col" { (h) } } } }
                    tbody {
                        @for r in &c.rows {
                            tr {
                                @for (i, cell) in r.iter().enumerate() {
                                    @if i == 0 { th scope="row" { (cell) } } @else { td.num { (cell) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn status_word(status: &str, lang: Lang) -> String {
    match (status, lang) {
        ("PASS", Lang::Zh) => "✔ 通过".into(),
        ("PASS", Lang::En) => "✔ PASS".into(),
        ("FAIL", Lang::Zh) => "✘ 未通过".into(),
        ("FAIL", Lang::En) => "✘ FAIL".into(),
        ("SKIP", Lang::Zh) => "– 跳过".into(),
        ("SKIP", Lang::En) => "– SKIP".into(),
        (s, _) => s.into(),
    }
}

/// The full report of one submission: verdicts (measured against bound, why, the mistake each
/// catches), failed probes, stderr tail, seed, the regrade command and the lesson's pictures.
pub(crate) fn report_body(v: &View, pictures: &[Picture], lang: Lang) -> Markup {
    let charts = pictures::draw(pictures, &v.evidence, lang);
    html! {
        p.meta {
            (l(lang, "设备", "device")) ": " (v.device) " · seed: " code.seed { (v.seed) }
            " · " (l(lang, "得分", "score")) ": " (v.summary.points) "/" (v.summary.max_points)
            " · " (v.summary.passed) " " (l(lang, "通过", "passed")) ", " (v.summary.failed) " " (l(lang, "未通过", "failed"))
            @if let Some(s) = &v.submission { " · " (l(lang, "提交", "submission")) ": " code { (s) } }
        }
        @if let Some(cmd) = regrade_command(v) {
            p { (l(lang, "单独重评这一行（同一 seed）：", "Regrade this row alone (same seed):")) }
            pre.cmd { code { (cmd) } }
        }
        @if let Some(f) = &v.run_failure {
            p.FAIL { (l(lang, "运行失败：", "The run failed: ")) (f.get(lang)) }
        }
        div.scroll {
            table.verdicts {
                thead { tr {
                    th scope="col" { (l(lang, "验收项", "criterion")) }
                    th scope="col" { (l(lang, "结果", "verdict")) }
                    th scope="col" { (l(lang, "分", "points")) }
                    th scope="col" { (l(lang, "测得", "measured")) }
                    th scope="col" { (l(lang, "界限", "bound")) }
                    th scope="col" { (l(lang, "原因", "why")) }
                } }
                tbody {
                    @for c in &v.verdicts {
                        tr {
                            th scope="row" { code { (c.id) } br; (c.title.get(lang)) }
                            td class=(c.status) { (status_word(&c.status, lang)) }
                            td.num { @if c.status == "PASS" { (c.points) } @else { "0" } "/" (c.points) }
                            td { (c.measured.get(lang)) }
                            td { (c.bound.get(lang)) }
                            td {
                                (c.why.get(lang))
                                @if c.status == "FAIL" {
                                    @if let Some(m) = &c.catches {
                                        br; em { (l(lang, "常见错误：", "common mistake: ")) (m.get(lang)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !v.failed_probes.is_empty() {
            h4 { (l(lang, "失败的探针", "Failed probes")) }
            ul { @for (p, e) in &v.failed_probes { li { code { (p) } ": " (e) } } }
        }
        @if let Some(t) = &v.stderr_tail {
            h4 { (l(lang, "stderr 末尾", "stderr tail")) }
            pre { (t) }
        }
        @for c in &charts { (figure(c)) }
    }
}

/// `grade exercise ID --html FILE`: the page of one graded submission, with `pictures` (its
/// exercise.yaml's).
pub fn exercise_page(report: &Report, pictures: &[Picture], lang: Lang) -> String {
    view_page(&View::of(report), pictures, lang)
}

/// The page of one report as read back (a record, a `--format json` report).
pub fn view_page(v: &View, pictures: &[Picture], lang: Lang) -> String {
    let title = format!("{} — {}", v.exercise, v.title.get(lang));
    page(
        &title,
        lang,
        html! {
            h1 { (title) }
            (report_body(v, pictures, lang))
        },
    )
}
