//! `audit`: the static audit of the submission's source (`src/driver/audit.py`, run by the driver
//! before the import) found no introspection or patching primitive, and the submission started no
//! thread while graded (runtime findings, merged in by `merge_runtime`). Judged even when the run
//! crashed: the static findings left the process before the submission was imported.
use super::{Env, Outcome};
use crate::i18n::Text;
use crate::text;
use serde::Deserialize;

/// One use of a primitive that inspects or modifies the grader.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Finding {
    pub line: u64,
    #[serde(default)]
    pub col: u64,
    pub code: String,
    pub what: String,
    pub zh: String,
    pub en: String,
    /// Where to say it is instead of `line N` (a notebook's `cell N, line M`; set by the pipeline).
    #[serde(default)]
    pub place: Option<String>,
}

/// Metrics the driver sends as the submission runs that are findings of the audit too: a thread
/// started on the submission's behalf (`integrity.thread.<line>`, driver.py `_install_threads`),
/// whose work the grader's per-thread instruments cannot see, and what the course's Python
/// refused while it ran (`integrity.policy.<line>`, `src/driver/policy.py`: a name computed at run
/// time, judged like a literal one).
pub const RUNTIME_PREFIXES: [&str; 2] = ["integrity.thread.", "integrity.policy."];

/// Moves the runtime findings (`RUNTIME_PREFIXES` metrics) into `obs.audit`, in line order, so the
/// audit criterion judges them with the static ones (and a notebook places them in its cells).
pub fn merge_runtime(obs: &mut crate::observations::Observations) {
    let runtime: Vec<serde_json::Value> = obs
        .metrics
        .iter()
        .filter(|(k, _)| RUNTIME_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(_, v)| v.clone())
        .collect();
    if runtime.is_empty() {
        return;
    }
    let mut all = match obs.audit.take() {
        Some(serde_json::Value::Array(a)) => a,
        None => Vec::new(),
        Some(other) => {
            obs.audit = Some(other); // unreadable: left as it came, so findings() says so
            return;
        }
    };
    all.extend(runtime);
    all.sort_by_key(|f| f.get("line").and_then(|l| l.as_u64()).unwrap_or(0));
    obs.audit = Some(serde_json::Value::Array(all));
}

/// The audit's findings, or why there are none to judge.
pub fn findings(env: &Env) -> Result<Vec<Finding>, Text> {
    match &env.evidence.obs.audit {
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            text!(
                format!("静态审查的结果无法读取：{e}"),
                format!("the static audit's findings are unreadable: {e}")
            )
        }),
        None => Err(text!(
            "没有静态审查的结果（评分驱动在导入提交之前就停止了）",
            "no static audit arrived (the driver stopped before it imported the submission)"
        )),
    }
}

pub fn evaluate(env: &Env) -> Outcome {
    let bound = text!("0 处", "0 uses");
    let found = match findings(env) {
        Ok(f) => f,
        Err(why) => return Outcome::new(false, "—", bound, why),
    };
    if found.is_empty() {
        return Outcome::new(
            true,
            text!("0 处", "0 uses"),
            bound,
            text!(
                "只用了课程的 Python，没有检查或修改评分器的写法",
                "only the course's Python, nothing that inspects or modifies the grader"
            ),
        );
    }
    let shown: Vec<&Finding> = found.iter().take(5).collect();
    let more = found.len() - shown.len();
    let (more_zh, more_en) = if more > 0 {
        (format!("；另有 {more} 处"), format!("; {more} more"))
    } else {
        (String::new(), String::new())
    };
    let at = |f: &Finding, zh: bool| match (&f.place, zh) {
        (Some(p), true) => format!("{p} "),
        (Some(p), false) => format!("{p}: "),
        (None, true) => format!("第 {} 行 ", f.line),
        (None, false) => format!("line {}: ", f.line),
    };
    let zh: Vec<String> = shown
        .iter()
        .map(|f| format!("{}{}", at(f, true), f.zh))
        .collect();
    let en: Vec<String> = shown
        .iter()
        .map(|f| format!("{}{}", at(f, false), f.en))
        .collect();
    Outcome::new(
        false,
        text!(
            format!("{} 处", found.len()),
            format!("{} uses", found.len())
        ),
        bound,
        text!(
            format!(
                "提交只能用课程的 Python，且不得检查或修改评分器（本课记 0 分）：{}{more_zh}",
                zh.join("；")
            ),
            format!(
                "a submission uses only the course's Python and may not inspect or modify the grader (the lesson scores 0): {}{more_en}",
                en.join("; ")
            )
        ),
    )
}
