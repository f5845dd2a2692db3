//! The exporters: one report, three formats; colour only when asked; both languages.
use grade::checks::{Status, Verdict};
use grade::i18n::{Lang, Text};
use grade::report::{exporter, exporter_with, Format, Report, Summary, Timings};

fn report() -> Report {
    let verdict = |id: &str, status, why: &str| Verdict {
        id: id.into(),
        title: Text::new(format!("标题 {id}"), format!("title {id}")),
        status,
        points: 2,
        measured: "0.1168 (1,323,524 / 11,334,148)".into(),
        bound: Text::new("≤ 0.5（界限）", "≤ 0.5"),
        why: Text::new(format!("原因 {why}"), format!("because {why}")),
        catches: Some(Text::new(
            "推理时也开 checkpoint",
            "checkpointing during inference",
        )),
        blocked_by: None,
        gate: false,
        requires: Vec::new(),
    };
    let mut blocked = verdict("d_blocked", Status::Fail, "probe `compare` failed: boom");
    blocked.blocked_by = Some("compare".into());
    blocked.measured = "—".into();
    let verdicts = vec![
        verdict("a_passes", Status::Pass, "ok"),
        verdict("b_fails", Status::Fail, "bad"),
        verdict("c_skips", Status::Skip, "cuda only"),
        blocked,
    ];
    Report {
        exercise: "04-checkpoint".into(),
        title: Text::new("激活检查点", "Activation checkpointing"),
        submission: "exercise.py".into(),
        device: "cpu".into(),
        seed: 7,
        summary: Summary::of(&verdicts),
        verdicts,
        run_s: 4.2,
        run_failure: None,
        stderr_tail: Some("Traceback …\nValueError: nope".into()),
        failed_probes: [(
            "compare".to_string(),
            "ValueError: boom (submission.py:3 in compare)".to_string(),
        )]
        .into_iter()
        .collect(),
        sandbox_gaps: vec![Text::new("没有 Landlock", "no Landlock here")],
        notes: vec![],
        evidence: Default::default(),
        timings: Timings {
            run_s: 4.2,
            interpreter_s: Some(0.05),
            reference_s: 0.1,
            total_s: 4.4,
            ..Default::default()
        },
    }
}

#[test]
fn summary_counts_points_of_applicable_criteria() {
    let r = report();
    assert_eq!(
        (r.summary.passed, r.summary.failed, r.summary.skipped),
        (1, 2, 1)
    );
    assert_eq!((r.summary.points, r.summary.max_points), (2, 6));
    assert_eq!(r.exit_code(), 1);
}

#[test]
fn brief_table_in_both_languages_explains_failures_only() {
    let r = report();
    let en = exporter(Format::Table, false).render(&r, Lang::En);
    for want in [
        "✔ PASS   title a_passes",
        "✘ FAIL   title b_fails",
        "– SKIP   title c_skips",
        "0.1168 (1,323,524 / 11,334,148)  (bound ≤ 0.5)",
        "why: because bad",
        "common mistake: checkpointing during inference",
        "↳ probe `compare` failed, see below",
        "probe `compare` failed: ValueError: boom (submission.py:3 in compare)\n  so these could not be graded: d_blocked",
        "ValueError: nope",
        "1/3 criteria passed, 2 failed, 1 skipped; score 2/6",
        "⚠ sandbox: no Landlock here",
    ] {
        assert!(en.contains(want), "missing {want:?} in\n{en}");
    }
    assert!(
        !en.contains("because ok"),
        "reasons under failures only:\n{en}"
    );
    assert!(
        !en.contains("because probe"),
        "a blocked criterion points at its probe:\n{en}"
    );
    assert_eq!(
        en.matches("boom").count(),
        1,
        "the probe's error is said once:\n{en}"
    );
    let zh = exporter(Format::Table, false).render(&r, Lang::Zh);
    for want in [
        "✔ 通过   标题 a_passes",
        "✘ 未通过 标题 b_fails",
        "(界限 ≤ 0.5（界限）)",
        "原因：原因 bad",
        "常见错误：推理时也开 checkpoint",
        "探针 `compare` 失败：ValueError: boom",
        "因此无法评分：d_blocked",
        "1/3 项通过，2 项未通过，1 项跳过；得分 2/6",
    ] {
        assert!(zh.contains(want), "missing {want:?} in\n{zh}");
    }
    assert!(
        !zh.contains("bound") && !zh.contains("why:"),
        "every label in Chinese:\n{zh}"
    );
}

#[test]
fn verbose_table_shows_every_reason() {
    let r = report();
    let en = exporter_with(Format::Table, false, true).render(&r, Lang::En);
    for want in [
        "criterion",
        "✔ PASS",
        "because ok",
        "because bad",
        "checkpointing during inference",
    ] {
        assert!(en.contains(want), "missing {want:?} in\n{en}");
    }
    let zh = exporter_with(Format::Table, false, true).render(&r, Lang::Zh);
    assert!(
        zh.contains("准则") && zh.contains("原因 ok") && zh.contains("≤ 0.5（界限）"),
        "{zh}"
    );
}

#[test]
fn colour_only_when_asked() {
    let r = report();
    assert!(!exporter(Format::Table, false)
        .render(&r, Lang::En)
        .contains('\x1b'));
    assert!(exporter(Format::Table, true)
        .render(&r, Lang::En)
        .contains("\x1b[31;1m"));
}

#[test]
fn json_and_yaml_carry_the_whole_report() {
    let r = report();
    let json: serde_json::Value =
        serde_json::from_str(&exporter(Format::Json, true).render(&r, Lang::Zh)).unwrap();
    let yaml: serde_json::Value =
        serde_yaml::from_str(&exporter(Format::Yaml, true).render(&r, Lang::Zh)).unwrap();
    for doc in [&json, &yaml] {
        assert_eq!(doc["summary"]["failed"], 2);
        assert_eq!(doc["verdicts"][3]["blocked_by"], "compare");
        assert_eq!(
            doc["verdicts"][1]["measured"]["en"],
            "0.1168 (1,323,524 / 11,334,148)"
        );
        assert_eq!(doc["verdicts"][1]["status"], "FAIL");
        assert_eq!(doc["verdicts"][1]["why"]["en"], "because bad");
        assert_eq!(doc["verdicts"][1]["why"]["zh"], "原因 bad");
        assert_eq!(doc["seed"], 7);
        // where the time went: evidence for scripts/bench-grading, in the machine formats only
        assert_eq!(doc["timings"]["run_s"], 4.2);
        assert_eq!(doc["timings"]["interpreter_s"], 0.05);
        assert_eq!(doc["timings"]["total_s"], 4.4);
        assert!(doc["timings"]["driver"].is_null());
    }
    for verbose in [false, true] {
        let table = exporter_with(Format::Table, false, verbose).render(&r, Lang::En);
        assert!(
            !table.contains("interpreter"),
            "no timings in the table:\n{table}"
        );
    }
}
