//! The student's loop (issue 21): notebook submissions, `grade watch` and `grade list`.
//!
//! - the notebook parser and the `cell N, line M` map on hand-made notebooks (no Python);
//! - a notebook with a magic, a failing cell and a line the static audit flags names the cells
//!   and lines; one that runs a long demo at import fails by the timeout with the hint to guard
//!   it; malformed JSON and nbformat 3 are exit 2, located;
//! - `grade watch` in tmux regrades after two saves (an in-place write and a rename) and quits on
//!   `q`; `grade list` then shows the last verdict from the state file; `--reset` forgets it.
//!
//! Every lesson's reference solution as a notebook is graded in `tests/batch.rs`
//! (`all_exercises_in_one_batch`: one `grade batch --all` that was grading the six solutions
//! anyway now hands them in as `ID.ipynb`), so no grading is repeated for it here.
mod support;

use grade::notebook::{CellLine, Notebook};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::notebook;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn grade_in(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(args)
        .env("GRADE_ROOT", root())
        .env("GRADE_STATE_DIR", state)
        .env_remove("GRADE_PYTHON")
        .env("CI", "1")
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn parser_drops_magics_and_maps_lines() {
    let nb = notebook(&[
        "# md\n# Lesson 4\n",
        "%matplotlib inline\nimport torch\n",
        "def f(x):\n    !echo hi\n    return x\n",
        "%%time\nf(1)\n",
    ]);
    let nb = Notebook::parse(&nb.to_string(), Path::new("w.ipynb")).unwrap();
    assert_eq!(
        nb.source,
        "pass\nimport torch\n\ndef f(x):\n    pass\n    return x\n\npass\npass\n\n"
    );
    let at = |cell, line| Some(CellLine { cell, line });
    assert_eq!(nb.map.locate(1), at(1, 1));
    assert_eq!(nb.map.locate(3), None); // between cells
    assert_eq!(nb.map.locate(6), at(2, 3));
    assert_eq!(nb.map.locate(9), at(3, 2));
    assert_eq!(nb.map.locate(99), None);
    assert_eq!(nb.dropped.len(), 4);
    let note = nb.dropped_note().unwrap();
    assert!(
        note.en.starts_with("4 IPython magic/shell line(s)"),
        "{}",
        note.en
    );
    assert!(
        note.en.contains("cell 1, line 1: `%matplotlib inline`"),
        "{}",
        note.en
    );
    // every way a report names a line of the generated module
    let tb = "Traceback (most recent call last):\n  File \"/tmp/grade-x/submission.py\", line 6, in f\nZeroDivisionError";
    assert_eq!(
        nb.map.map_text(tb, "w.ipynb"),
        "Traceback (most recent call last):\n  File \"w.ipynb\", cell 2, line 3, in f\nZeroDivisionError"
    );
    assert_eq!(
        nb.map
            .map_text("ValueError: boom (submission.py:5 in f)", "w.ipynb"),
        "ValueError: boom (cell 2, line 2 in f)"
    );
    assert_eq!(
        nb.map.map_text(
            "SyntaxError: invalid syntax (submission.py, line 9)",
            "w.ipynb"
        ),
        "SyntaxError: invalid syntax (cell 3, line 2)"
    );
    // a line between cells is left as it is
    assert_eq!(
        nb.map.map_text("submission.py:3", "w.ipynb"),
        "submission.py:3"
    );
    // source as one string (also nbformat 4) and no magic: no note
    let one = json!({"nbformat": 4, "nbformat_minor": 2, "metadata": {},
        "cells": [{"cell_type": "code", "source": "x = 1\ny = 2", "metadata": {}, "outputs": []}]});
    let nb = Notebook::parse(&one.to_string(), Path::new("w.ipynb")).unwrap();
    assert_eq!(nb.source, "x = 1\ny = 2\n\n");
    assert!(nb.dropped_note().is_none());
}

#[test]
fn malformed_and_old_notebooks_are_exit_2_located() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.ipynb");
    std::fs::write(
        &bad,
        "{\n  \"nbformat\": 4,\n  \"cells\": [\n    {\"cell_type\": \"code\",, }\n  ]\n}\n",
    )
    .unwrap();
    let out = grade_in(
        tmp.path(),
        &["exercise", "04-checkpoint", "--submission", s(&bad)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:4:26:", bad.display())), "{err}");
    let old = tmp.path().join("old.ipynb");
    std::fs::write(
        &old,
        r#"{"nbformat": 3, "nbformat_minor": 0, "worksheets": []}"#,
    )
    .unwrap();
    let out = grade_in(
        tmp.path(),
        &["exercise", "04-checkpoint", "--submission", s(&old)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("nbformat 3 is not supported"), "{err}");
    // a wrong shape is located too
    let shape = tmp.path().join("shape.ipynb");
    std::fs::write(&shape, "{\"nbformat\": 4,\n \"cells\": 7}").unwrap();
    let out = grade_in(
        tmp.path(),
        &["exercise", "04-checkpoint", "--submission", s(&shape)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:2:", shape.display())), "{err}");
}

/// A magic, a cell whose function raises, and a cell the static audit flags: the report notes
/// the magic once and names the cell and line of the raise and of the finding, never the
/// generated file. One grading (lesson 04; its probes fail fast).
#[test]
fn notebook_with_a_magic_and_a_failing_cell_names_the_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let py = std::fs::read_to_string(root().join("solutions/04-checkpoint/exercise.py")).unwrap();
    let bad = "def forward(blocks, x, *, checkpointing):\n    # my own loop\n    raise ValueError(\"boom\")\n";
    // in a function never called: the static audit names its line, and the course's Python, which
    // refuses sys.modules where it is reached, lets the rest of the notebook run
    let audited = "import sys\n\ndef loaded(): return len(sys.modules)\n";
    let nb = notebook(&["%matplotlib inline\n", &py, bad, "# md\nnotes\n", audited]);
    let file = tmp.path().join("work.ipynb");
    std::fs::write(&file, nb.to_string()).unwrap();
    let out = grade_in(
        tmp.path(),
        &[
            "exercise",
            "04-checkpoint",
            "--submission",
            s(&file),
            "--device",
            "cpu",
            "--lang",
            "en",
        ],
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}");
    assert!(
        table.contains("ValueError: boom (cell 3, line 3 in forward)"),
        "{table}"
    );
    assert!(
        table.contains("cell 4, line 3: "),
        "the audit's finding: {table}"
    );
    assert!(
        table.contains("1 IPython magic/shell line(s) of the notebook were not run (dropped for grading), the first at cell 1, line 1: `%matplotlib inline`"),
        "{table}"
    );
    assert!(!table.contains("submission.py"), "{table}");
}

/// A demo cell that trains at import time runs into the timeout, with the hint to guard it.
#[test]
fn notebook_demo_at_import_times_out_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let nb = notebook(&[
        "import time\n",
        "def forward(blocks, x, *, checkpointing):\n    return x\n",
        "for epoch in range(1000):\n    time.sleep(1)  # training demo\n",
    ]);
    let file = tmp.path().join("demo.ipynb");
    std::fs::write(&file, nb.to_string()).unwrap();
    let out = grade_in(
        tmp.path(),
        &[
            "exercise",
            "04-checkpoint",
            "--submission",
            s(&file),
            "--device",
            "cpu",
            "--timeout",
            "3",
            "--lang",
            "en",
        ],
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}");
    assert!(table.contains("ran past its 3 s limit"), "{table}");
    assert!(table.contains("if __name__ == \"__main__\":"), "{table}");
}

fn tmux(args: &[&str]) -> Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux (test.sh installs it)")
}

fn pane(target: &str) -> String {
    String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-J", "-t", target]).stdout).into_owned()
}

/// Wait until the pane shows `what` (or panic with what it shows).
fn wait_for(target: &str, what: &str, secs: u64) -> String {
    let t = Instant::now();
    loop {
        let p = pane(target);
        if p.contains(what) {
            return p;
        }
        if t.elapsed() > Duration::from_secs(secs) {
            panic!("waited {secs} s for {what:?}; the pane shows:\n{p}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `grade watch` in a terminal: graded at start, regraded after each of two saves (an in-place
/// write, an editor-style rename of a new file over the old one), going on after a crash and a
/// syntax error; `q` quits with 0. Then `grade list` shows the last verdict from the state file,
/// and `--reset` forgets it. The submissions fail at import, so each grading costs ~1 s of CPU.
#[test]
fn watch_in_tmux_regrades_after_two_saves_and_quits_on_q() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("work.py"), "import torch\n\nx = 1 / 0\n").unwrap();
    std::fs::write(
        tmp.path().join("next.py"),
        "import torch\n\n\nraise RuntimeError('still a draft')\n",
    )
    .unwrap();
    let session = format!("grade-watch-{}", std::process::id());
    let cmd = format!(
        "cd {dir} && GRADE_ROOT={root} GRADE_STATE_DIR={dir} {bin} watch 04-checkpoint --submission work.py --device cpu --lang en --seed 7; echo WATCH-EXIT=$?; sleep 60",
        dir = s(tmp.path()),
        root = s(&root()),
        bin = env!("CARGO_BIN_EXE_grade"),
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "160",
        "-y",
        "50",
        &cmd,
    ]);
    assert!(started.status.success(), "{started:?}");
    struct Kill(String);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .output();
        }
    }
    let _kill = Kill(session.clone());
    let watch = format!("{session}:0");
    // the screen is cleared before each grading: what shows is the latest one only
    let graded = |round: u32| {
        wait_for(&watch, &format!("(grading #{round})"), 60);
        wait_for(&watch, "graded in", 120)
    };
    let first = graded(1);
    assert!(
        first.contains("ZeroDivisionError: division by zero (submission.py:3 in <module>)"),
        "{first}"
    );
    assert!(first.contains("criteria passed"), "{first}");
    // a second window is the student's shell. Save 1 writes in place (a syntax error) …
    tmux(&["new-window", "-d", "-t", &session, "-c", s(tmp.path())]);
    let shell = format!("{session}:1");
    tmux(&[
        "send-keys",
        "-t",
        &shell,
        "printf 'def forward(:\\n' >> work.py",
        "Enter",
    ]);
    let second = graded(2);
    assert!(second.contains("SyntaxError"), "{second}");
    // … save 2 as editors do it: a new file renamed over the old one
    tmux(&[
        "send-keys",
        "-t",
        &shell,
        "cp next.py .work.py.tmp && mv .work.py.tmp work.py",
        "Enter",
    ]);
    let third = graded(3);
    assert!(
        third.contains("RuntimeError: still a draft (submission.py:4 in <module>)"),
        "{third}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        pane(&watch).contains("(grading #3)"),
        "one regrade per save: {}",
        pane(&watch)
    );
    tmux(&["send-keys", "-t", &watch, "q"]);
    wait_for(&watch, "WATCH-EXIT=0", 30);
    // the state file remembers the last grading
    let list = grade_in(tmp.path(), &["list", "--lang", "en"]);
    let text = String::from_utf8_lossy(&list.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("04-checkpoint"))
        .unwrap();
    assert!(line.contains("FAIL ") && line.contains("work.py"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("01-metrics") && l.contains("not graded")),
        "{text}"
    );
    assert!(tmp.path().join("state.json").is_file());
    let reset = grade_in(tmp.path(), &["list", "--reset"]);
    assert_eq!(reset.status.code(), Some(0));
    assert!(!tmp.path().join("state.json").exists());
    let text = String::from_utf8_lossy(&grade_in(tmp.path(), &["list", "--lang", "en"]).stdout)
        .into_owned();
    assert!(
        text.lines()
            .find(|l| l.starts_with("04-checkpoint"))
            .unwrap()
            .contains("not graded"),
        "{text}"
    );
}
