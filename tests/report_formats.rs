//! The exporters: one report, three formats; colour only when asked; both languages.
use grade::checks::{Status, Verdict};
use grade::i18n::{Lang, Text};
use grade::report::{exporter, Format, Report, Summary};

fn report() -> Report {
    let verdict = |id: &str, status, why: &str| Verdict {
        id: id.into(),
        title: Text::new(format!("标题 {id}"), format!("title {id}")),
        status,
        points: 2,
        measured: "0.1168 (1,323,524 / 11,334,148)".into(),
        bound: "≤ 0.5".into(),
        why: Text::new(format!("原因 {why}"), format!("because {why}")),
        catches: Some(Text::new(
            "推理时也开 checkpoint",
            "checkpointing during inference",
        )),
    };
    let verdicts = vec![
        verdict("a_passes", Status::Pass, "ok"),
        verdict("b_fails", Status::Fail, "bad"),
        verdict("c_skips", Status::Skip, "cuda only"),
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
    }
}

#[test]
fn summary_counts_points_of_applicable_criteria() {
    let r = report();
    assert_eq!(
        (r.summary.passed, r.summary.failed, r.summary.skipped),
        (1, 1, 1)
    );
    assert_eq!((r.summary.points, r.summary.max_points), (2, 4));
    assert_eq!(r.exit_code(), 1);
}

#[test]
fn table_in_both_languages_with_reasons_mistakes_and_stderr() {
    let r = report();
    let en = exporter(Format::Table, false).render(&r, Lang::En);
    for want in [
        "criterion",
        "✔ PASS",
        "✘ FAIL",
        "– SKIP",
        "because bad",
        "checkpointing during inference",
        "ValueError: nope",
        "1/2 criteria passed, 1 failed, 1 skipped; score 2/4",
    ] {
        assert!(en.contains(want), "missing {want:?} in\n{en}");
    }
    assert!(
        !en.contains("because ok\ncommon mistake"),
        "mistakes are shown for failures only"
    );
    let zh = exporter(Format::Table, false).render(&r, Lang::Zh);
    for want in [
        "准则",
        "✔ 通过",
        "✘ 未通过",
        "原因 bad",
        "推理时也开 checkpoint",
        "1/2 项通过，1 项未通过，1 项跳过；得分 2/4",
    ] {
        assert!(zh.contains(want), "missing {want:?} in\n{zh}");
    }
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
        assert_eq!(doc["summary"]["failed"], 1);
        assert_eq!(doc["verdicts"][1]["status"], "FAIL");
        assert_eq!(doc["verdicts"][1]["why"]["en"], "because bad");
        assert_eq!(doc["verdicts"][1]["why"]["zh"], "原因 bad");
        assert_eq!(doc["seed"], 7);
    }
}
