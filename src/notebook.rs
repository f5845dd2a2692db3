//! Notebook submissions (`.ipynb`, nbformat 4): the code cells, in order, as one Python module
//! (IPython magics and shell lines dropped), and the map from the generated module's lines back
//! to `cell N, line M` that every text naming `submission.py` goes through.
use crate::error::NotebookError;
use crate::i18n::Text;
use crate::text;
use regex::{Captures, Regex};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

#[derive(Deserialize)]
struct RawNotebook {
    cells: Vec<RawCell>,
}

#[derive(Deserialize)]
struct RawCell {
    cell_type: String,
    #[serde(default)]
    source: Source,
}

/// nbformat 4 stores a cell's source as one string or as a list of lines (each with its `\n`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Source {
    Lines(Vec<String>),
    Text(String),
}

impl Default for Source {
    fn default() -> Self {
        Source::Text(String::new())
    }
}

impl Source {
    fn text(&self) -> String {
        match self {
            Source::Lines(l) => l.concat(),
            Source::Text(t) => t.clone(),
        }
    }
}

/// A line of a notebook: its code cell (counted among code cells, from 1) and line in the cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellLine {
    pub cell: usize,
    pub line: usize,
}

impl std::fmt::Display for CellLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cell {}, line {}", self.cell, self.line)
    }
}

/// Generated-module line (from 1) → notebook cell and line. Lines between cells map to nothing.
#[derive(Clone, Debug, Default)]
pub struct LineMap {
    lines: Vec<Option<CellLine>>,
}

static FILE_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"File "[^"\n]*submission\.py", line (\d+)"#).unwrap());
static COLON_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:[\w./-]*/)?submission\.py(?::(\d+)|, line (\d+))").unwrap());

impl LineMap {
    /// Where line `line` (from 1) of the generated module came from.
    pub fn locate(&self, line: usize) -> Option<CellLine> {
        line.checked_sub(1)
            .and_then(|i| self.lines.get(i))
            .copied()
            .flatten()
    }

    /// The static audit's findings (`[{line, …}]`, `src/driver/audit.py`) get a `place`:
    /// `cell N, line M`, which the `audit` check names instead of the generated line.
    pub fn place_findings(&self, findings: &mut serde_json::Value) {
        for f in findings.as_array_mut().into_iter().flatten() {
            let at = f.get("line").and_then(|l| l.as_u64());
            if let (Some(at), Some(obj)) =
                (at.and_then(|l| self.locate(l as usize)), f.as_object_mut())
            {
                obj.insert("place".into(), at.to_string().into());
            }
        }
    }

    /// `text` with every reference to a line of the generated module (`submission.py:12`,
    /// `File ".../submission.py", line 12`, `(submission.py, line 12)`) rewritten as the
    /// notebook's `cell N, line M`; `notebook` names the file in traceback lines. Any report
    /// text (probe errors, stderr, a static audit's findings) can go through this.
    pub fn map_text(&self, text: &str, notebook: &str) -> String {
        let located = |n: &str| n.parse().ok().and_then(|n| self.locate(n));
        let text = FILE_LINE.replace_all(text, |c: &Captures| match located(&c[1]) {
            Some(at) => format!("File \"{notebook}\", {at}"),
            None => c[0].to_string(),
        });
        COLON_LINE
            .replace_all(&text, |c: &Captures| {
                let n = c.get(1).or(c.get(2)).map_or("", |m| m.as_str());
                match located(n) {
                    Some(at) => at.to_string(),
                    None => c[0].to_string(),
                }
            })
            .into_owned()
    }
}

/// A notebook as the module the driver imports.
#[derive(Clone, Debug)]
pub struct Notebook {
    /// The code cells joined, magics and shell lines replaced by `pass` (same indentation).
    pub source: String,
    pub map: LineMap,
    /// Where the dropped magics and shell lines were, with their text.
    pub dropped: Vec<(CellLine, String)>,
}

/// Is `path` a notebook (by its extension)?
pub fn is_notebook(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("ipynb"))
}

impl Notebook {
    pub fn load(path: &Path) -> Result<Notebook, NotebookError> {
        let text = std::fs::read_to_string(path).map_err(|e| NotebookError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Notebook::parse(&text, path)
    }

    /// Parse nbformat 4 JSON; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Notebook, NotebookError> {
        let json_err = |e: serde_json::Error| NotebookError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e
                .to_string()
                .split(" at line ")
                .next()
                .unwrap_or("")
                .to_string(),
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(json_err)?;
        match value.get("nbformat").and_then(|v| v.as_u64()) {
            Some(n) if n >= 4 => {}
            other => {
                return Err(NotebookError::OldFormat {
                    path: path.to_path_buf(),
                    found: other.map_or_else(|| "(missing)".to_string(), |n| n.to_string()),
                })
            }
        }
        // parsed again as the typed shape, so a wrong field is located too
        let raw: RawNotebook = serde_json::from_str(text).map_err(json_err)?;
        let mut nb = Notebook {
            source: String::new(),
            map: LineMap::default(),
            dropped: Vec::new(),
        };
        let code = raw.cells.iter().filter(|c| c.cell_type == "code");
        for (i, cell) in code.enumerate() {
            let src = cell.source.text();
            let cell_magic = src.trim_start().starts_with("%%");
            for (j, line) in src.lines().enumerate() {
                let at = CellLine {
                    cell: i + 1,
                    line: j + 1,
                };
                let body = line.trim_start();
                let indent = &line[..line.len() - body.len()];
                if cell_magic || body.starts_with('%') || body.starts_with('!') {
                    if !body.is_empty() {
                        nb.dropped.push((at, body.to_string()));
                    }
                    nb.source.push_str(indent);
                    nb.source
                        .push_str(if body.is_empty() { "" } else { "pass" });
                } else {
                    nb.source.push_str(line);
                }
                nb.source.push('\n');
                nb.map.lines.push(Some(at));
            }
            nb.source.push('\n'); // a cell ends its last statement
            nb.map.lines.push(None);
        }
        Ok(nb)
    }

    /// The one report note on the dropped lines, if any.
    pub fn dropped_note(&self) -> Option<Text> {
        let n = self.dropped.len();
        let (first, text) = self.dropped.first()?;
        let (more_zh, more_en) = if n > 1 {
            (
                format!("（另有 {} 处）", n - 1),
                format!(" ({} more)", n - 1),
            )
        } else {
            (String::new(), String::new())
        };
        Some(text!(
            format!("笔记本中的 {n} 行 IPython 魔法命令/Shell 命令没有运行（评分时忽略），第一处：{first}：`{text}`{more_zh}"),
            format!("{n} IPython magic/shell line(s) of the notebook were not run (dropped for grading), the first at {first}: `{text}`{more_en}")
        ))
    }
}

/// A submission as the runner takes it: a `.py` as it is, a notebook converted into a temporary
/// `submission.py` (kept alive as long as this is).
pub struct Prepared {
    pub notebook: Option<(Notebook, tempfile::TempDir)>,
    path: PathBuf,
}

impl Prepared {
    pub fn new(submission: &Path) -> Result<Prepared, NotebookError> {
        if !is_notebook(submission) {
            return Ok(Prepared {
                notebook: None,
                path: submission.to_path_buf(),
            });
        }
        let nb = Notebook::load(submission)?;
        let io = |e: std::io::Error| NotebookError::Io {
            path: submission.to_path_buf(),
            message: e.to_string(),
        };
        let dir = tempfile::Builder::new()
            .prefix("grade-notebook-")
            .tempdir()
            .map_err(io)?;
        let path = dir.path().join("submission.py");
        std::fs::write(&path, &nb.source).map_err(io)?;
        Ok(Prepared {
            notebook: Some((nb, dir)),
            path,
        })
    }

    /// The Python file to run.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
