//! Lesson 04 `04-checkpoint`, end to end: one `grade check 04-checkpoint` of the real binary
//! (tests/support/lesson.rs) grades the reference solution, the starter and one fixture per
//! common mistake (careful, careless and cheating students) against
//! tests/fixtures/04-checkpoint/expected.yaml (the expectations live there, applied by the
//! command); its verdict tables are insta snapshots (ids and verdicts only: measured numbers vary
//! from run to run and seed to seed). The rubric on recorded observations and the `step_time`
//! kind are in tests/rubric_engine.rs; the terminal tables and hostile input in tests/e2e.rs.
mod support;
use support::lesson::{explain, why, Lesson};

const ID: &str = "04-checkpoint";
const L: Lesson = Lesson(ID);

/// Solution, starter and every fixture failed exactly their expected criteria; every criterion
/// is failed by a fixture and has a `catches`; every common mistake of the README is mapped.
/// Each verdict table is a snapshot `04-checkpoint__<name>`.
#[test]
fn grade_check_proves_the_lesson() {
    for (name, table) in L.check().assert_proves_the_lesson(&["peak_memory_drops"]) {
        insta::assert_snapshot!(format!("{ID}__{name}"), table);
    }
}

#[test]
fn solution_passes_everything() {
    let r = L.check().report("solution");
    assert_eq!(r["summary"]["failed"], 0, "{}", explain(r));
    assert_eq!(r["summary"]["points"], r["summary"]["max_points"]);
}

#[test]
fn starter_fails_with_readable_reasons() {
    let r = L.check().report("starter");
    assert!(why(r, "on_off_agree")
        .contains("NotImplementedError: TODO: forward(blocks, x, *, checkpointing)"));
    assert!(why(r, "compare_warmup").contains("NotImplementedError: TODO: compare("));
}

/// Tampering (fixture `unwrapped_counter`): the course's Python refuses the unwrapping where the
/// module runs it, so nothing of it is imported: every criterion fails, the reason names what was
/// refused, and the lesson scores 0.
#[test]
fn unwrapping_the_checkpoint_counter_fails_everything_and_says_why() {
    let r = L.check().report("unwrapped_counter");
    assert_eq!(r["summary"]["passed"], 0);
    assert_eq!(r["summary"]["points"], 0);
    let reason = why(r, "on_off_agree");
    assert!(
        reason.contains("__wrapped__") && reason.contains("not part of the course's Python"),
        "{reason}"
    );
}
