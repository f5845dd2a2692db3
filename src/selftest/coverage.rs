//! The static half of `grade check`: does the rubric prove itself? Every criterion is failed by at
//! least one fixture (else it cannot be shown to work), names the common mistake it `catches`, and
//! every item of the lesson README's `### 常见错误` section maps to criteria through the
//! `mistakes:` list of exercise.yaml.
use super::expected::{applies, blank_before, mask_comments, Expected};
use super::surprise::Surprise;
use crate::course::Course;
use crate::device::Device;
use crate::error::GradeError;
use crate::pipeline::Spec;
use crate::spec::spec_error;
use crate::text;
use std::collections::BTreeSet;

/// What the static checks found for one exercise.
pub struct Coverage {
    /// Criteria that do not apply on this device (`only_on`): nothing here can fail them.
    pub unprovable: Vec<String>,
    pub surprises: Vec<Surprise>,
}

pub fn check(
    course: &Course,
    spec: &Spec,
    expected: &Expected,
    device: Device,
) -> Result<Coverage, GradeError> {
    let id = &spec.exercise.id;
    let rubric = course.rel(&course.rubric(id));
    let exp = course.rel(&expected.path);
    let mut out = Coverage {
        unprovable: Vec::new(),
        surprises: Vec::new(),
    };
    let surprise = |criteria, files, message| Surprise::coverage(id, criteria, files, message);
    // a `refused` fixture fails every criterion before it runs: it shows none of them catches
    // anything, so it proves none
    let failed_by_fixture: BTreeSet<&str> = expected
        .fixtures
        .values()
        .filter(|(_, fails)| !fails.refused)
        .flat_map(|(_, fails)| fails.on(device))
        .map(String::as_str)
        .collect();
    for c in &spec.rubric.criteria {
        if !applies(c, device) {
            out.unprovable.push(c.id.clone());
        } else if !failed_by_fixture.contains(c.id.as_str()) {
            out.surprises.push(surprise(
                vec![c.id.clone()],
                vec![rubric.clone(), exp.clone()],
                text!(
                    format!("{rubric}：评分项 `{}` 没有任何错误示例会失败（{exp} 中没有列出它），无法证明它有效；请添加一个犯下它所捕捉错误的错误示例", c.id),
                    format!("{rubric}: criterion `{}` is failed by no fixture ({exp} lists it for none), so it cannot be shown to work; add a fixture that makes the mistake it catches", c.id)
                ),
            ));
        }
        let has_catches = c
            .catches
            .as_ref()
            .is_some_and(|t| !t.zh.trim().is_empty() && !t.en.trim().is_empty());
        if c.only_on.is_none() && !has_catches {
            out.surprises.push(surprise(
                vec![c.id.clone()],
                vec![rubric.clone()],
                text!(
                    format!("{rubric}：评分项 `{}` 没有 `catches:`（它捕捉的常见错误，中英文）", c.id),
                    format!("{rubric}: criterion `{}` has no `catches:` (the common mistake it catches, zh and en)", c.id)
                ),
            ));
        }
    }
    out.surprises.extend(mistakes(course, spec)?);
    Ok(out)
}

/// The README's `### 常见错误` items, each mapped by some `mistakes:` entry of exercise.yaml.
fn mistakes(course: &Course, spec: &Spec) -> Result<Vec<Surprise>, GradeError> {
    let ex = &spec.exercise;
    let yaml_path = ex.dir.join("exercise.yaml");
    let yaml = course.rel(&yaml_path);
    let known: BTreeSet<&str> = spec.rubric.criteria.iter().map(|c| c.id.as_str()).collect();
    for m in &ex.mistakes {
        if let Some(bad) = m.criteria.iter().find(|c| !known.contains(c.as_str())) {
            let text = std::fs::read_to_string(&yaml_path).unwrap_or_default();
            let masked = mask_comments(&text);
            let start = masked.iter().position(|l| l.contains(&m.zh)).unwrap_or(0);
            return Err(spec_error(
                &yaml_path,
                &blank_before(&masked, start),
                bad,
                format!(
                    "mistakes: `{}` maps to unknown criterion `{bad}`; the criteria of {} are: {}",
                    m.zh,
                    course.rel(&course.rubric(&ex.id)),
                    known.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    let readme_path = course.readme(&ex.id);
    let readme = course.rel(&readme_path);
    let surprise = |files, criteria, message| Surprise::coverage(&ex.id, criteria, files, message);
    let Some((bullets, items)) = std::fs::read_to_string(&readme_path)
        .ok()
        .and_then(|t| mistake_items(&t))
    else {
        return Ok(vec![surprise(
            vec![readme.clone()],
            vec![],
            text!(
                format!("{readme} 没有 `### 常见错误` 一节（或其中没有列表项）"),
                format!("{readme} has no `### 常见错误` section (or no bullet in it)")
            ),
        )]);
    };
    let mut out = Vec::new();
    for m in &ex.mistakes {
        if !bullets.contains(&m.zh) {
            out.push(surprise(
                vec![yaml.clone(), readme.clone()],
                m.criteria.clone(),
                text!(
                    format!("{yaml}：mistakes 条目 `{}` 在 {readme} 的 `### 常见错误` 一节中找不到", m.zh),
                    format!("{yaml}: the mistakes entry `{}` ({}) does not occur in the `### 常见错误` section of {readme}", m.zh, m.en)
                ),
            ));
        }
    }
    for item in items {
        if !ex.mistakes.iter().any(|m| item.contains(&m.zh)) {
            out.push(surprise(
                vec![readme.clone(), yaml.clone()],
                vec![],
                text!(
                    format!("{readme}：常见错误 `{item}` 没有对应的评分项；在 {yaml} 的 mistakes: 中加上 {{zh: …, en: …, criteria: [...]}}"),
                    format!("{readme}: the common mistake `{item}` maps to no criterion; add {{zh: …, en: …, criteria: [...]}} to mistakes: in {yaml}")
                ),
            ));
        }
    }
    Ok(out)
}

/// The bullets of the README's `### 常见错误` section (to the next heading), joined, and the items
/// they list: each bullet (`- ` or `* `; the quoted English lines are not bullets) split at
/// `；` `;` `，` `,` `、` and `或`, with a final `。` dropped. `None` when there is no such section.
pub fn mistake_items(readme: &str) -> Option<(String, Vec<String>)> {
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("### 常见错误"));
    lines.next()?;
    let bullets: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("- ").or_else(|| l.strip_prefix("* "))
        })
        .collect();
    let items: Vec<String> = bullets
        .iter()
        .flat_map(|b| b.split(['；', ';', '，', ',', '、']))
        .flat_map(|part| part.split('或'))
        .map(|s| s.trim().trim_end_matches(['。', '.']).trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    (!items.is_empty()).then(|| (bullets.join("\n"), items))
}
