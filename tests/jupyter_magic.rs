//! Issue 41: `%grade` from inside a notebook (`python/grade_jupyter`, installed into the course's
//! .venv by setup.sh), driven through real kernels: three notebooks executed headless by nbclient
//! and ipykernel (`tests/support/jupyter_run.py`), each in its own kernel started in the notebook's
//! folder with `JPY_SESSION_NAME` set to its path, as a Jupyter server starts them. The notebooks
//! live in a temporary folder under `target/`, inside the course, so the extension finds the
//! course by walking up from the notebook (no `GRADE_COURSE`).
//!
//! 1. lesson 04's reference solution in cells, `%load_ext grade_jupyter`, `%grade 04-checkpoint`:
//!    the cell's one output is the HTML report (every criterion PASS, SKIP only for the CUDA one
//!    on CPU, the lesson's two pictures as SVG with their numbers) with the terminal table as its
//!    `text/plain`, headed by the saved file graded; the cells after it run. That output is then
//!    opened in headless Chromium and checked as the other report pages are.
//! 2. the same with `forward()` never checkpointing: the failed criteria and their reasons.
//! 3. every problem a student can act on, each a bilingual message in the cell and no traceback,
//!    and the notebook runs on: an unknown lesson (`grade` exits 2; `%grade` and the function
//!    form), a cell run since the save that the saved file does not hold (the warning), a notebook
//!    outside any course, a notebook never saved, `grade` not built, a kernel that does not know
//!    its notebook, `%grade` without a lesson. None of these grades anything.
//!
//! Two gradings in all (~5 s of CPU each), then three kernels' start-ups and torch imports.
mod support;

use regex::Regex;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    root().join(".venv/bin/python")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// nbclient, ipykernel and nbformat (test.sh installs them) and grade_jupyter (setup.sh installs
/// it, editable, from this course's `python/`) in the course's .venv; installed here when a
/// developer runs this file alone on a .venv older than them.
fn ensure_packages() {
    let has = |modules: &str| {
        Command::new(python())
            .args(["-c", &format!("import {modules}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let pip = |args: &[&str]| {
        let o = Command::new(python())
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(args)
            .output()
            .expect("the course's .venv (./setup.sh makes it)");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    if !has("nbclient, ipykernel, nbformat") {
        let (ok, err) = pip(&["nbclient", "ipykernel", "nbformat"]);
        assert!(ok, "pip install nbclient ipykernel nbformat: {err}");
    }
    if !has("grade_jupyter") {
        // as setup.sh does it
        let here = root().join("python");
        let (ok, _) = pip(&["--no-deps", "-e", s(&here)]);
        let (ok, err) = if ok {
            (ok, String::new())
        } else {
            pip(&["--no-deps", "--no-build-isolation", "-e", s(&here)])
        };
        assert!(ok, "pip install -e python: {err}");
    }
    let o = Command::new(python())
        .args(["-c", "import grade_jupyter; print(grade_jupyter.__file__)"])
        .output()
        .unwrap();
    let file = String::from_utf8_lossy(&o.stdout);
    let here = root().join("python/grade_jupyter").canonicalize().unwrap();
    assert!(
        Path::new(file.trim())
            .canonicalize()
            .is_ok_and(|f| f.starts_with(&here)),
        "the .venv's grade_jupyter is this course's python/grade_jupyter (editable): {file}"
    );
}

/// An nbformat 4.5 notebook: a markdown cell, then `cells` as code cells (ids `cell-N`).
fn write_notebook(path: &Path, cells: &[String]) {
    let mut all = vec![
        json!({"cell_type": "markdown", "id": "intro", "metadata": {},
                               "source": "# Lesson 04\nMy work, graded from inside the notebook.\n"}),
    ];
    all.extend(cells.iter().enumerate().map(|(i, src)| {
        json!({"cell_type": "code", "id": format!("cell-{i}"), "metadata": {},
               "execution_count": null, "outputs": [], "source": src})
    }));
    let nb = json!({"nbformat": 4, "nbformat_minor": 5, "cells": all,
                    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                "language": "python"},
                                 "language_info": {"name": "python"}}});
    std::fs::write(path, serde_json::to_string_pretty(&nb).unwrap()).unwrap();
}

/// The code cells of an executed notebook, with their source and outputs.
struct Executed {
    cells: Vec<(String, Vec<Value>)>,
}

impl Executed {
    fn read(path: &Path) -> Executed {
        let nb: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let text = |v: &Value| match v {
            Value::Array(lines) => lines.iter().filter_map(|l| l.as_str()).collect(),
            v => v.as_str().unwrap_or("").to_string(),
        };
        let cells = nb["cells"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["cell_type"] == "code")
            .map(|c| {
                let outputs = c["outputs"].as_array().cloned().unwrap_or_default();
                // multi-line strings come back as lists of lines: one string each
                let outputs = outputs
                    .into_iter()
                    .map(|mut o| {
                        if let Some(data) = o.get_mut("data").and_then(|d| d.as_object_mut()) {
                            for v in data.values_mut() {
                                *v = Value::String(text(v));
                            }
                        }
                        if let Some(t) = o.get_mut("text") {
                            *t = Value::String(text(t));
                        }
                        o
                    })
                    .collect();
                (text(&c["source"]), outputs)
            })
            .collect();
        Executed { cells }
    }

    /// The outputs of the cell whose source is `start`, else of the first that starts with it.
    fn outputs(&self, start: &str) -> &[Value] {
        let cells = &self.cells;
        &cells
            .iter()
            .find(|(src, _)| src == start)
            .or_else(|| cells.iter().find(|(src, _)| src.starts_with(start)))
            .unwrap_or_else(|| panic!("a cell starting with {start:?}"))
            .1
    }

    /// The one display of the cell starting with `start` (the progress line it replaced gone):
    /// its `text/html` and `text/plain`.
    fn display(&self, start: &str) -> (String, String) {
        let outs = self.outputs(start);
        let shown: Vec<&Value> = outs
            .iter()
            .filter(|o| o["output_type"] != "stream")
            .collect();
        assert_eq!(
            shown.len(),
            1,
            "cell {start:?}: one display, the report (the progress line updated into it): {outs:#?}"
        );
        let o = shown[0];
        assert_eq!(o["output_type"], "display_data", "{o:#?}");
        (
            o["data"]["text/html"].as_str().unwrap().to_string(),
            o["data"]["text/plain"].as_str().unwrap().to_string(),
        )
    }

    /// No cell errored, no traceback anywhere: what the student sees is the extension's message.
    fn assert_no_error(&self, name: &str) {
        for (src, outs) in &self.cells {
            for o in outs {
                assert_ne!(
                    o["output_type"], "error",
                    "{name}: cell {src:?} raised: {o:#?}"
                );
                assert!(
                    !o.to_string().contains("Traceback"),
                    "{name}: a traceback in cell {src:?}: {o:#?}"
                );
            }
        }
    }

    fn printed(&self, start: &str) -> String {
        self.outputs(start)
            .iter()
            .filter(|o| o["output_type"] == "stream")
            .map(|o| o["text"].as_str().unwrap().to_string())
            .collect()
    }
}

/// The rows of a report's verdict table: (criterion id, status class, reason).
fn verdict_rows(html: &str) -> Vec<(String, String, String)> {
    let row = Regex::new(
        r#"<tr><th scope="row"><code>([^<]+)</code>.*?</th><td class="(\w+)">.*?</td>(?:<td[^>]*>.*?</td>){3}<td>(.*?)</td></tr>"#,
    )
    .unwrap();
    row.captures_iter(html)
        .map(|c| (c[1].to_string(), c[2].to_string(), c[3].to_string()))
        .collect()
}

fn rubric_ids() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("rubrics/04-checkpoint.yaml")).unwrap();
    let rubric: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    rubric["criteria"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

/// Every `<figure class="chart">` with its SVG and its numbers.
fn charts_with_numbers(html: &str) -> usize {
    let figures: Vec<&str> = html
        .split("<figure class=\"chart\">")
        .skip(1)
        .map(|f| f.split("</figure>").next().unwrap())
        .collect();
    for f in &figures {
        assert!(f.contains("<svg"), "a chart without its picture: {f}");
        assert!(
            f.contains("<figcaption>") && f.contains("<td class=\"num\">"),
            "a chart without its numbers: {f}"
        );
    }
    figures.len()
}

#[test]
fn grade_magic_in_real_kernels() {
    ensure_packages();
    let started = std::time::Instant::now();
    // inside the course (target/tmp), so the course is found from the notebook's folder
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let under_course = base.starts_with(root());
    let tmp = tempfile::Builder::new()
        .prefix("jupyter-magic-")
        .tempdir_in(&base)
        .unwrap();
    let dir = tmp.path();
    let outside = tempfile::tempdir().unwrap(); // no course above it
    let outside_nb = outside.path().join("lonely.ipynb");
    write_notebook(&outside_nb, &["x = 1\n".to_string()]);
    let fake_course = outside.path().join("course-not-built");
    std::fs::create_dir_all(fake_course.join("exercises")).unwrap();
    std::fs::write(fake_course.join("course.yaml"), "order: []\n").unwrap();

    let solution =
        std::fs::read_to_string(root().join("solutions/04-checkpoint/exercise.py")).unwrap();
    let grade_cell = "%grade 04-checkpoint --seed 7 --lang en --device cpu".to_string();
    // 1. the reference solution
    let mut cells = vec!["%load_ext grade_jupyter".to_string()];
    cells.extend(support::cells_of(&solution));
    cells.push(grade_cell.clone());
    cells.push("print('after the grade cell')".to_string());
    write_notebook(&dir.join("solution.ipynb"), &cells);
    // 2. one mistake: forward() never checkpoints
    let wrong = solution.replace(
        "x = checkpoint(block, x, use_reentrant=False)",
        "x = block(x)  # forgot to checkpoint",
    );
    assert_ne!(
        wrong, solution,
        "the solution's checkpoint call is where the test expects it"
    );
    let mut cells = vec!["%load_ext grade_jupyter".to_string()];
    cells.extend(support::cells_of(&wrong));
    cells.push(grade_cell.clone());
    write_notebook(&dir.join("mistake.ipynb"), &cells);
    // 3. problems, none of which grades anything
    let cells: Vec<String> = [
        "%load_ext grade_jupyter".to_string(),
        "import os\nimport grade_jupyter\nx = 1".to_string(),
        // the file on disk as if `x = 1` had been `x = 0` when last saved, 30 s ago: the
        // kernel ran a version of In [2] that the saved file does not hold
        "import json, time\n\
         saved = json.load(open(__session__))\n\
         for c in saved['cells']:\n    \
             if c['id'] == 'cell-1':\n        \
                 c['source'] = c['source'].replace('x = 1', 'x = 0')\n\
         json.dump(saved, open(__session__, 'w'))\n\
         os.utime(__session__, (time.time() - 30, time.time() - 30))"
            .to_string(),
        "%grade 99-nope".to_string(),
        "r = grade_jupyter.check('99-nope', lang='en')\nprint('function form exit', r.exit_code, r.html)".to_string(),
        format!("r = grade_jupyter.check('04-checkpoint', notebook={:?})\nprint('outside exit', r.exit_code)", s(&outside_nb)),
        "r = grade_jupyter.check('04-checkpoint', notebook='never-saved.ipynb')\nprint('unsaved exit', r.exit_code)".to_string(),
        format!(
            "kept = {{k: os.environ.pop(k) for k in ['GRADE_BIN'] if k in os.environ}}\n\
             os.environ['GRADE_COURSE'] = {:?}\n\
             r = grade_jupyter.check('04-checkpoint')\n\
             del os.environ['GRADE_COURSE']\nos.environ.update(kept)\n\
             print('not built exit', r.exit_code)",
            s(&fake_course)
        ),
        "session = __session__\ndel __session__\njpy = os.environ.pop('JPY_SESSION_NAME')".to_string(),
        "%grade 04-checkpoint".to_string(),
        "__session__ = session\nos.environ['JPY_SESSION_NAME'] = jpy".to_string(),
        "%grade".to_string(),
        "print('still running')".to_string(),
    ]
    .to_vec();
    write_notebook(&dir.join("problems.ipynb"), &cells);

    // the three notebooks, each through its own kernel (one runner, one Python start)
    let state = dir.join("state");
    let mut run = Command::new(python());
    run.arg(root().join("tests/support/jupyter_run.py"))
        .args(["solution.ipynb", "mistake.ipynb", "problems.ipynb"])
        .current_dir(dir)
        .env("GRADE_STATE_DIR", &state)
        .env("JUPYTER_RUNTIME_DIR", dir.join("runtime"))
        .env("IPYTHONDIR", dir.join("ipython"))
        .env("NO_COLOR", "1")
        .env_remove("GRADE_ROOT")
        .env_remove("GRADE_COURSE")
        .env_remove("GRADE_PYTHON")
        .env_remove("JPY_SESSION_NAME");
    // the binary cargo built is the course's target/debug/grade, unless the target dir is elsewhere
    let built = PathBuf::from(env!("CARGO_BIN_EXE_grade"));
    if built != root().join("target/debug/grade") {
        run.env("GRADE_BIN", &built);
    } else {
        run.env_remove("GRADE_BIN");
    }
    if !under_course {
        run.env("GRADE_COURSE", root());
    }
    let o = run
        .output()
        .expect("the course's .venv python runs nbclient");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "jupyter_run.py failed:\n{log}");
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));

    // 1. every criterion passes; the report says what it graded; the cells after it ran
    let nb1 = Executed::read(&dir.join("solution.out.ipynb"));
    nb1.assert_no_error("solution");
    let (html, plain) = nb1.display("%grade 04-checkpoint");
    assert_eq!(
        nb1.outputs("%grade 04-checkpoint").len(),
        1,
        "nothing but the report"
    );
    let scope = Regex::new(r#"^<div class="grade-jupyter" id="(gj-[0-9a-f]+)" data-exit="0">"#)
        .unwrap()
        .captures(&html)
        .unwrap_or_else(|| panic!("the report's own div: {html}"))[1]
        .to_string();
    // every rule of the page's style is limited to that div (JupyterLab's table styles neither)
    let style = html
        .split("<style>")
        .nth(1)
        .unwrap()
        .split("</style>")
        .next()
        .unwrap();
    let rules = Regex::new(r"([^{}]+)\{[^{}]*\}").unwrap();
    assert!(rules.captures_iter(style).count() > 20, "{style}");
    for rule in rules.captures_iter(style) {
        for selector in rule[1].split(',') {
            assert!(
                selector.trim().starts_with(&format!("#{scope}")),
                "a rule not scoped to the report: {selector:?}"
            );
        }
    }
    let rows = verdict_rows(&html);
    let ids: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, rubric_ids(), "every criterion of the rubric, in order");
    for (id, status, why) in &rows {
        let expected = if id == "peak_memory_drops" {
            "SKIP"
        } else {
            "PASS"
        };
        assert_eq!(status, expected, "{id}: {why}");
    }
    assert!(!html.contains(r#"class="FAIL""#));
    assert_eq!(charts_with_numbers(&html), 2, "activation bytes, step time");
    let nb_path = dir.join("solution.ipynb").canonicalize().unwrap();
    let graded = format!("Graded: the saved file {}", nb_path.display());
    assert!(html.contains(&graded) && plain.contains(&graded), "{plain}");
    assert!(plain.contains("评分对象：已保存的文件"), "{plain}");
    assert!(
        !plain.contains("Unsaved"),
        "every cell the kernel ran is saved: {plain}"
    );
    assert!(
        plain.contains("criteria passed, 0 failed") && plain.contains("✔ PASS"),
        "the terminal table as text/plain: {plain}"
    );
    assert!(
        plain.contains("`%load_ext grade_jupyter` (1 more)"),
        "the magic lines were dropped, not graded: {plain}"
    );
    // the page's style is scoped to the report, the script left out
    assert!(!html.contains("<script") && !html.contains("<body"));
    assert!(!Regex::new(r"(?m)^body\{").unwrap().is_match(&html));
    assert_eq!(
        nb1.printed("print('after the grade cell')"),
        "after the grade cell\n"
    );

    // 2. the mistake: its criteria fail, each with its reason
    let nb2 = Executed::read(&dir.join("mistake.out.ipynb"));
    nb2.assert_no_error("mistake");
    let (html2, plain2) = nb2.display("%grade 04-checkpoint");
    assert!(html2.contains(r#"data-exit="1""#), "{plain2}");
    let rows2 = verdict_rows(&html2);
    for id in ["one_checkpoint_per_block", "activation_bytes_halved"] {
        let (_, status, why) = rows2.iter().find(|r| r.0 == id).unwrap();
        assert_eq!(status, "FAIL", "{id}: {why}");
        assert!(!why.trim().is_empty(), "{id} names its reason");
        assert!(
            plain2.contains(why.as_str()) || plain2.contains("✘ FAIL"),
            "{plain2}"
        );
    }
    let (_, _, why) = rows2
        .iter()
        .find(|r| r.0 == "one_checkpoint_per_block")
        .unwrap();
    assert!(
        why.contains("ckpt"),
        "the checkpoint count is the reason: {why}"
    );
    assert!(
        plain2.contains("✘ FAIL") && plain2.contains("one checkpoint per block"),
        "{plain2}"
    );

    // 3. each problem a bilingual message; nothing raised; the notebook ran to its end
    let nb3 = Executed::read(&dir.join("problems.out.ipynb"));
    nb3.assert_no_error("problems");
    let message = |start: &str, zh: &str, en: &str| {
        let (html, plain) = nb3.display(start);
        assert!(
            html.contains("gj-error") && html.contains(r#"data-exit="2""#),
            "{start}: {html}"
        );
        for part in [zh, en] {
            assert!(
                plain.contains(part) && html.contains(part),
                "{start}: {part:?} in {plain}"
            );
        }
        plain
    };
    let unknown = message(
        "%grade 99-nope",
        "没有这个练习",
        "no such lesson: `99-nope`",
    );
    assert!(
        unknown.contains("04-checkpoint"),
        "the lessons there are: {unknown}"
    );
    assert!(
        unknown.contains("⚠ Unsaved: In [2] ran after the last save") && unknown.contains("未保存"),
        "the cell run since the save is named: {unknown}"
    );
    message(
        "r = grade_jupyter.check('99-nope'",
        "没有这个练习",
        "no such lesson",
    );
    assert!(nb3
        .printed("r = grade_jupyter.check('99-nope'")
        .contains("function form exit 2 None"));
    message(
        &format!(
            "r = grade_jupyter.check('04-checkpoint', notebook={:?}",
            s(&outside_nb)
        ),
        "找不到课程目录",
        "no course found",
    );
    message(
        "r = grade_jupyter.check('04-checkpoint', notebook='never-saved.ipynb')",
        "请先保存笔记本",
        "save the notebook first",
    );
    message("kept = ", "还没有构建", "run ./setup.sh");
    message(
        "%grade 04-checkpoint",
        "不知道这个内核运行的是哪个笔记本",
        "does not know which notebook file it runs",
    );
    message("%grade", "用法：%grade", "usage: %grade LESSON");
    assert_eq!(nb3.printed("print('still running')"), "still running\n");

    // the first report as a browser renders it: every criterion, the verdicts, the pictures
    if let Some(chromium) = support::chromium() {
        let page = dir.join("solution-output.html");
        std::fs::write(
            &page,
            format!("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>%grade output</title></head><body>{html}</body></html>"),
        )
        .unwrap();
        let shot = base.join("screenshots/jupyter-magic.png");
        let r = support::render(&chromium, s(&page), &shot);
        assert!(r.console.is_empty(), "console messages: {:?}", r.console);
        for id in rubric_ids() {
            let code = format!("<code>{id}</code>");
            assert!(r.dom.contains(&code), "{code} in the rendered page");
        }
        assert_eq!(
            r.dom.matches(r#"<td class="PASS">"#).count(),
            rubric_ids().len() - 1,
            "every criterion but the CUDA one PASS"
        );
        assert_eq!(charts_with_numbers(&r.dom), 2);
        assert!(
            std::fs::metadata(&shot).unwrap().len() > 20_000,
            "a screenshot with something on it: {}",
            shot.display()
        );
    }
    eprintln!("jupyter_magic: {:.1} s", started.elapsed().as_secs_f64());
}
