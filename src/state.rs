//! The student's progress: each lesson's last verdict and score, kept in `.grade/state.json`
//! under the course root (`GRADE_STATE_DIR` moves it), written atomically after each grading of a
//! student's file; `grade list` shows it, `grade list --reset` forgets it.
use crate::course::Course;
use crate::error::{exit, GradeError};
use crate::i18n::Lang;
use crate::report::Report;
use crate::spec::Exercise;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The last grading of one lesson.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LastGrade {
    /// `pass` or `fail`.
    pub verdict: String,
    pub passed: usize,
    pub failed: usize,
    pub points: u32,
    pub max_points: u32,
    /// The file graded, as given.
    pub submission: String,
    /// When (seconds since the Unix epoch).
    pub at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    #[serde(default)]
    pub lessons: BTreeMap<String, LastGrade>,
}

/// Folder of the state file: `$GRADE_STATE_DIR`, else `<course root>/.grade`.
pub fn dir(course: &Course) -> PathBuf {
    std::env::var_os("GRADE_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| course.root.join(".grade"))
}

fn file(course: &Course) -> PathBuf {
    dir(course).join("state.json")
}

impl State {
    /// The state, or an empty one when there is none yet or it is unreadable (it is only a memo).
    pub fn load(course: &Course) -> State {
        std::fs::read(file(course))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn save(&self, course: &Course) -> Result<(), GradeError> {
        let dir = dir(course);
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        let json = serde_json::to_vec_pretty(self).map_err(anyhow::Error::from)?;
        crate::gradebook::write_atomic(&file(course), &json)?;
        Ok(())
    }
}

/// Remember `report` as lesson `id`'s last grading. A state that cannot be written is a warning,
/// never a failed grading.
pub fn record(course: &Course, id: &str, submission: &Path, report: &Report) {
    let mut state = State::load(course);
    let s = &report.summary;
    state.lessons.insert(
        id.to_string(),
        LastGrade {
            verdict: if s.failed == 0 { "pass" } else { "fail" }.into(),
            passed: s.passed,
            failed: s.failed,
            points: s.points,
            max_points: s.max_points,
            submission: submission.display().to_string(),
            at: now(),
        },
    );
    if let Err(e) = state.save(course) {
        eprintln!("grade: warning: progress not saved / 进度未保存: {e}");
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `5 min ago` / `5 分钟前`.
fn ago(at: u64, lang: Lang) -> String {
    let s = now().saturating_sub(at);
    let (n, zh, en) = match s {
        0..=59 => (s, "秒", "s"),
        60..=3599 => (s / 60, "分钟", "min"),
        3600..=86399 => (s / 3600, "小时", "h"),
        _ => (s / 86400, "天", "d"),
    };
    match lang {
        Lang::Zh => format!("{n} {zh}前"),
        Lang::En => format!("{n} {en} ago"),
    }
}

/// `grade list`: the lessons found on disk (a malformed `exercise.yaml` is reported on its line,
/// not fatal), the course's title, and the last verdict and score of each.
pub fn list(course: &Course, reset: bool, lang: Lang) -> Result<i32, GradeError> {
    if reset {
        let f = file(course);
        match std::fs::remove_file(&f) {
            Ok(()) => println!(
                "{}",
                match lang {
                    Lang::Zh => format!("已清除进度（{}）", f.display()),
                    Lang::En => format!("progress forgotten ({})", f.display()),
                }
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow::anyhow!("removing {}: {e}", f.display()).into()),
        }
        return Ok(exit::PASS);
    }
    let state = State::load(course);
    if let Some(title) = course.file()?.title {
        println!("{}  /  {}\n", title.zh, title.en);
    }
    for id in course.exercises()? {
        let id = id.as_str();
        let title = match Exercise::load(&course.exercise_dir(id)) {
            Ok(ex) => format!("{}  /  {}", ex.title.zh, ex.title.en),
            Err(e) => format!("(broken spec / 规格文件有误: {e})"),
        };
        let last = match state.lessons.get(id) {
            None => match lang {
                Lang::Zh => "未评分".to_string(),
                Lang::En => "not graded".to_string(),
            },
            Some(g) => {
                let verdict = match (g.verdict.as_str(), lang) {
                    ("pass", Lang::Zh) => "通过",
                    ("pass", Lang::En) => "PASS",
                    (_, Lang::Zh) => "未通过",
                    (_, Lang::En) => "FAIL",
                };
                let file = Path::new(&g.submission)
                    .file_name()
                    .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
                format!(
                    "{verdict} {}/{} ({}, {file})",
                    g.points,
                    g.max_points,
                    ago(g.at, lang)
                )
            }
        };
        println!("{id:<14} {last:<36} {title}");
    }
    Ok(exit::PASS)
}
