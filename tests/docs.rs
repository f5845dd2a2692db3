//! Guides that cannot rot (issue 40): every `console` block of README.md and docs/*.md is run by
//! trycmd (`$ cmd`, an optional `? CODE` exit status, then the expected stdout and stderr, with
//! `[..]` eliding part of a line and `...` whole lines: seeds, timings, paths) and its output
//! checked. `./grade` and `grade` are the binary this build made (not the setting-up wrapper);
//! the progress file is a fresh temporary folder; CUDA is hidden, so a GPU machine shows the same
//! `device: cpu` report. Other code blocks are shown, not run: each must name its language (trycmd
//! would run a bare fence), and a `console` block must not be indented (trycmd would skip it).
//! Gradings are the expensive commands (seconds of both cores each): at most `MAX_GRADINGS`.
//! Every relative link of the guides names a file that exists, and a heading it has.
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Real gradings (`grade exercise`, `check`, `batch`, `watch` that get past their arguments) the
/// examples may run together.
const MAX_GRADINGS: usize = 3;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, relative to the course root.
fn guides() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// A fenced code block: its info string, whether its fence is indented, and its lines.
struct Block {
    file: PathBuf,
    line: usize,
    info: String,
    indented: bool,
    body: Vec<String>,
}

fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let mut out = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        match &mut open {
            Some((fence, block)) => {
                if trimmed.starts_with(fence.as_str()) && trimmed[ticks..].trim().is_empty() {
                    out.push(open.take().unwrap().1);
                } else {
                    block.body.push(line.to_string());
                }
            }
            None if ticks >= 3 => {
                open = Some((
                    "`".repeat(ticks),
                    Block {
                        file: file.to_path_buf(),
                        line: i + 1,
                        info: trimmed[ticks..].trim().to_string(),
                        indented: trimmed.len() != line.len(),
                        body: Vec::new(),
                    },
                ));
            }
            None => {}
        }
    }
    assert!(
        open.is_none(),
        "{}: a code block is never closed",
        file.display()
    );
    out
}

fn is_console(b: &Block) -> bool {
    matches!(b.info.split(',').next(), Some("console") | Some("trycmd"))
}

#[test]
fn every_block_says_whether_it_runs() {
    let mut wrong = Vec::new();
    let mut console = 0;
    for file in guides() {
        for b in blocks(&file) {
            let at = format!("{}:{}", b.file.display(), b.line);
            if b.info.is_empty() {
                wrong.push(format!(
                    "{at}: a bare ``` block (trycmd would run it): name its language, e.g. ```text"
                ));
            } else if is_console(&b) && b.indented {
                wrong.push(format!(
                    "{at}: an indented console block (trycmd would not run it)"
                ));
            } else if is_console(&b) && b.info.contains("ignore") {
                wrong.push(format!("{at}: console,ignore: show it as ```sh instead"));
            } else if is_console(&b) {
                console += 1;
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        console >= 5,
        "only {console} console examples found: is the parser right?"
    );
}

#[test]
fn the_examples_grade_little() {
    let mut gradings = Vec::new();
    for file in guides() {
        for b in blocks(&file).iter().filter(|b| is_console(b)) {
            let mut lines = b.body.iter().peekable();
            while let Some(line) = lines.next() {
                let Some(cmd) = line.strip_prefix("$ ") else {
                    continue;
                };
                let status = lines
                    .peek()
                    .and_then(|l| l.strip_prefix("? "))
                    .map(str::trim);
                let words: Vec<&str> = cmd.split_whitespace().collect();
                let sub = words.iter().skip_while(|w| w.contains('=')).nth(1).copied();
                let grades = matches!(sub, Some("exercise" | "check" | "batch" | "watch"))
                    && !words.iter().any(|w| *w == "-h" || *w == "--help")
                    && status != Some("2"); // could not grade: nothing ran
                if grades {
                    gradings.push(format!("{}:{}: {cmd}", b.file.display(), b.line));
                }
            }
        }
    }
    assert!(
        gradings.len() <= MAX_GRADINGS,
        "{} gradings in the examples (at most {MAX_GRADINGS}; prefer cheap commands):\n{}",
        gradings.len(),
        gradings.join("\n")
    );
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks).
fn anchors(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn links_between_the_guides_resolve() {
    let mut wrong = Vec::new();
    for file in guides() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        let dir = root().join(&file).parent().unwrap().to_path_buf();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                root().join(&file)
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                wrong.push(format!("{}: {target}: no such file", file.display()));
            } else if !anchor.is_empty()
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&resolved).iter().any(|a| a == anchor)
            {
                wrong.push(format!("{}: {target}: no such heading", file.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn console_examples_run_as_shown() {
    let grade = PathBuf::from(env!("CARGO_BIN_EXE_grade"));
    let state = tempfile::tempdir().unwrap();
    let cases = trycmd::TestCases::new();
    cases
        .register_bin("grade", &grade)
        .register_bin("./grade", &grade)
        .env("GRADE_STATE_DIR", state.path().display().to_string())
        .env("NO_COLOR", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .timeout(Duration::from_secs(300));
    for file in guides() {
        cases.case(root().join(file));
    }
    cases.run();
}
