//! Layers without circles (issue 40): the modules of `src/` import one another only downward.
//! Every `crate::…` path in `src/**/*.rs` (a `use`, a qualified name, a path in a string such as
//! `deserialize_with = "crate::…"`; comments ignored) is an edge from the file's module to the
//! module it names, at the granularity of top-level modules, and of `selftest/`'s submodules
//! (which also name each other through `super::` and, in `mod.rs`, by their bare names). The test
//! fails on any cycle, on any import of a module in a higher layer than the importer's, and on a
//! module of `src/` that `LAYERS` does not place. Pure Rust, no grading: well under a second.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may import its own layer and those below it, never one
/// above; within a layer, imports must not form a cycle (checked over the whole graph).
const LAYERS: &[&[&str]] = &[
    // foundation: bilingual text, the error types and exit codes, the device a run grades on
    &["i18n", "error", "device"],
    // what a run recorded: raw observations, the compact evidence a report keeps, how a
    // student's measurement is read from them
    &["observations", "evidence", "measurement"],
    // pictures as data (`pictures:` of exercise.yaml) and the SVG charts they are drawn with
    &["charts", "pictures"],
    // the course as files: exercise.yaml and rubrics (validated), the course folder and lessons
    &["spec", "course"],
    // the grader's own inputs and answer: seeded weights and batch, the libtorch reference
    &["workload", "reference"],
    // running a submission: the sandboxed driver, a notebook read as a module
    &["runner", "notebook"],
    // judging: the rubric engine, one check kind per file
    &["checks"],
    // reporting: a report and its exporters, gradebook records and exporters (a report renders
    // as a platform's results.json through them)
    &["gradebook", "report"],
    // one grading, stages 1–5 (where a notebook's line map is applied to its report)
    &["pipeline"],
    // `grade check`: surprises, expectations, coverage, the self-test, its rendering
    &[
        "selftest::surprise",
        "selftest::expected",
        "selftest::coverage",
        "selftest",
        "selftest::render",
    ],
    // pages and progress: HTML reports and class pages, the student's recorded progress
    &["html", "state"],
    // the command line: clap's argument types and their parsing (`--shard K/N`)
    &["cli"],
    // the commands built on all of the above
    &["export", "batch", "watch"],
];

/// Top-level modules whose submodules are nodes of their own.
const SPLIT: &[&str] = &["selftest"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source with comments blanked out (strings, raw strings and char literals kept as they
/// are, so a `//` inside a string is no comment and a path in a string still counts).
fn strip_comments(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]))
            && matches!(c.get(i + 1), Some('"') | Some('#'))
        {
            // raw string r"…", r#"…"#
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut k = j + 1;
            while k < c.len()
                && !(c[k] == '"' && (0..hashes).all(|h| c.get(k + 1 + h) == Some(&'#')))
            {
                k += 1;
            }
            let end = (k + 1 + hashes).min(c.len());
            out.extend(&c[i..end]);
            i = end;
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(c[i]);
                    i += 1;
                }
                if i < c.len() {
                    out.push(c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                out.push('"');
                i += 1;
            }
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            // an escaped char literal: '\'' '\n' '\u{..}'
            let mut j = i + 2;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            if j == i + 2 {
                j = i + 3; // '\'' itself
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
            }
            out.extend(&c[i..=j.min(c.len() - 1)]);
            i = j + 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            out.extend(&c[i..i + 3]); // a char literal: '"', '{'
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The node a file belongs to: its top-level module, or `top::sub` inside a `SPLIT` module.
fn node_of(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [root] if root == "lib" || root == "main" => None,
        [top] => Some(top.clone()),
        [top, sub, ..] if SPLIT.contains(&top.as_str()) && sub != "mod" => {
            Some(format!("{top}::{sub}"))
        }
        [top, ..] => Some(top.clone()),
        [] => None,
    }
}

/// The paths a `crate::` (or `super::`, or a bare submodule name) at `s[at..]` names: one, or
/// each item of a `{…}` group, as their segments.
fn paths_at(s: &[char], at: usize) -> Vec<Vec<String>> {
    let mut i = at;
    while i < s.len() && s[i].is_whitespace() {
        i += 1;
    }
    if s.get(i) == Some(&'{') {
        let (mut depth, mut item, mut items) = (0, String::new(), Vec::new());
        while i < s.len() {
            match s[i] {
                '{' => {
                    depth += 1;
                    if depth > 1 {
                        item.push('{');
                    }
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        items.push(std::mem::take(&mut item));
                        break;
                    }
                    item.push('}');
                }
                ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                ch => item.push(ch),
            }
            i += 1;
        }
        return items
            .iter()
            .map(|it| segments(&it.chars().collect::<Vec<_>>(), 0))
            .filter(|p| !p.is_empty())
            .collect();
    }
    let p = segments(s, i);
    if p.is_empty() {
        Vec::new()
    } else {
        vec![p]
    }
}

/// `a::b::c` at `s[i..]` as its identifier segments (stops at anything else).
fn segments(s: &[char], mut i: usize) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        let start = i;
        while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
            i += 1;
        }
        if start == i {
            break;
        }
        out.push(s[start..i].iter().collect());
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        if s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            break;
        }
    }
    out
}

/// Where `word` followed by `::` occurs as a path's first segment (not after `::`, `$` or an
/// identifier character); the index just after the `::`.
fn path_starts(s: &[char], word: &str) -> Vec<usize> {
    let w: Vec<char> = word.chars().collect();
    let mut out = Vec::new();
    for i in 0..s.len().saturating_sub(w.len()) {
        if s[i..i + w.len()] != w[..] {
            continue;
        }
        let before = if i == 0 { ' ' } else { s[i - 1] };
        if before.is_alphanumeric() || before == '_' || before == '$' || before == ':' {
            continue;
        }
        let mut j = i + w.len();
        while j < s.len() && s[j].is_whitespace() {
            j += 1;
        }
        if s.get(j) == Some(&':') && s.get(j + 1) == Some(&':') {
            out.push(j + 2);
        }
    }
    out
}

struct Crate {
    /// Top-level module → its submodule names (files and folders directly under it).
    modules: BTreeMap<String, BTreeSet<String>>,
    /// `#[macro_export]` macros (at the crate root) → the module defining them.
    macros: BTreeMap<String, String>,
    /// Node → (node it imports → the files that do).
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// `crate::NAME` that names neither a module nor an exported macro.
    unknown: Vec<String>,
}

fn graph() -> Crate {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut macros = BTreeMap::new();
    let mut sources = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().to_path_buf();
        let Some(node) = node_of(&rel) else { continue };
        let top = node.split("::").next().unwrap().to_string();
        let comps: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let subs = modules.entry(top.clone()).or_default();
        if comps.len() >= 2 && comps[1] != "mod" {
            subs.insert(comps[1].clone());
        }
        let text = strip_comments(&std::fs::read_to_string(f).unwrap());
        let mut lines = text.lines().peekable();
        while let Some(l) = lines.next() {
            if l.trim() == "#[macro_export]" {
                if let Some(next) = lines.peek() {
                    if let Some(name) = next.trim().strip_prefix("macro_rules!") {
                        let name = name.trim().trim_end_matches('{').trim();
                        macros.insert(name.to_string(), top.clone());
                    }
                }
            }
        }
        sources.push((rel, node, text));
    }
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for (rel, node, text) in &sources {
        let s: Vec<char> = text.chars().collect();
        let top = node.split("::").next().unwrap().to_string();
        let split = SPLIT.contains(&top.as_str());
        let file = format!("src/{}", rel.display());
        let mut targets: Vec<String> = Vec::new();
        // resolve a path that starts inside module `base` (the crate root: `None`)
        let resolve = |base: Option<&str>, p: &[String], unknown: &mut Vec<String>| {
            let (top, rest) = match base {
                None => match p.first() {
                    Some(m) if modules.contains_key(m) => (m.clone(), &p[1..]),
                    Some(m) => match macros.get(m) {
                        Some(home) => return Some(home.clone()),
                        None => {
                            unknown.push(format!("{file}: crate::{}", p.join("::")));
                            return None;
                        }
                    },
                    None => return None,
                },
                Some(b) => (b.to_string(), p),
            };
            match rest.first() {
                Some(sub) if SPLIT.contains(&top.as_str()) && modules[&top].contains(sub) => {
                    Some(format!("{top}::{sub}"))
                }
                _ => Some(top),
            }
        };
        for at in path_starts(&s, "crate") {
            for p in paths_at(&s, at) {
                targets.extend(resolve(None, &p, &mut unknown));
            }
        }
        if split {
            let inner = node.contains("::");
            // `super::` from a submodule is the split module's `mod.rs` (or a sibling)
            if inner {
                for at in path_starts(&s, "super") {
                    for p in paths_at(&s, at) {
                        targets.extend(resolve(Some(&top), &p, &mut unknown));
                    }
                }
            } else {
                // in mod.rs: `self::sub::…` and the bare names of its submodules
                for at in path_starts(&s, "self") {
                    for p in paths_at(&s, at) {
                        targets.extend(resolve(Some(&top), &p, &mut unknown));
                    }
                }
                for sub in &modules[&top] {
                    if !path_starts(&s, sub).is_empty() {
                        targets.push(format!("{top}::{sub}"));
                    }
                }
            }
        }
        for t in targets {
            if &t != node {
                edges
                    .entry(node.clone())
                    .or_default()
                    .entry(t)
                    .or_default()
                    .insert(file.clone());
            }
        }
    }
    Crate {
        modules,
        macros,
        edges,
        unknown,
    }
}

/// Every node of the crate: top-level modules, and the submodules of the `SPLIT` ones.
fn nodes(c: &Crate) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (top, subs) in &c.modules {
        out.insert(top.clone());
        if SPLIT.contains(&top.as_str()) {
            out.extend(subs.iter().map(|s| format!("{top}::{s}")));
        }
    }
    out
}

/// Strongly connected components with more than one node (Tarjan), each sorted.
fn cycles(edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.edges.get(v) {
            for w in ws.keys() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn layer_of(node: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&node))
}

#[test]
fn no_cycles() {
    let c = graph();
    let found = cycles(&c.edges);
    let described: Vec<String> = found
        .iter()
        .map(|comp| {
            let inside: Vec<String> =
                comp.iter()
                    .flat_map(|a| {
                        c.edges[a].iter().filter(|(b, _)| comp.contains(b)).map(
                            move |(b, files)| {
                                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                                format!("    {a} → {b} ({})", files.join(", "))
                            },
                        )
                    })
                    .collect();
            format!("  {}:\n{}", comp.join(", "), inside.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "modules that import each other in a loop:\n{}",
        described.join("\n")
    );
}

#[test]
fn no_upward_imports() {
    let c = graph();
    assert!(
        c.unknown.is_empty(),
        "paths naming no module of the crate (a new root item? teach tests/layers.rs):\n{}",
        c.unknown.join("\n")
    );
    let mut wrong = Vec::new();
    for (a, targets) in &c.edges {
        let Some(la) = layer_of(a) else { continue };
        for (b, files) in targets {
            let Some(lb) = layer_of(b) else { continue };
            if lb > la {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                wrong.push(format!(
                    "  {a} (layer {la}) imports {b} (layer {lb}): {}",
                    files.join(", ")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up the layers (LAYERS in tests/layers.rs, lowest first):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_module_has_a_layer() {
    let c = graph();
    let all = nodes(&c);
    let missing: Vec<&String> = all.iter().filter(|n| layer_of(n).is_none()).collect();
    assert!(
        missing.is_empty(),
        "modules without a layer (add each to LAYERS in tests/layers.rs): {missing:?}"
    );
    let placed: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    let stale: Vec<&&str> = placed.iter().filter(|n| !all.contains(**n)).collect();
    assert!(
        stale.is_empty(),
        "LAYERS names modules src/ lacks: {stale:?}"
    );
    let mut seen = BTreeSet::new();
    let twice: Vec<&&str> = placed.iter().filter(|n| !seen.insert(**n)).collect();
    assert!(twice.is_empty(), "LAYERS places a module twice: {twice:?}");
}

/// The parser itself: it sees what it must, and the edges the refactor of issue 40 removed are
/// gone (a check that would pass on an empty graph proves nothing).
#[test]
fn the_parser_sees_the_crate() {
    let c = graph();
    assert_eq!(c.macros.get("text").map(String::as_str), Some("i18n"));
    let has = |a: &str, b: &str| c.edges.get(a).is_some_and(|t| t.contains_key(b));
    // grouped, nested and string paths, `super::` and bare submodule names all count
    assert!(
        has("pipeline", "checks"),
        "use crate::checks::{{self, Env}}"
    );
    assert!(
        has("spec", "pictures"),
        "deserialize_with = \"crate::pictures::…\""
    );
    assert!(
        has("selftest::coverage", "selftest::expected"),
        "use super::expected::…"
    );
    assert!(
        has("selftest", "selftest::expected"),
        "expected::bands_not_held in mod.rs"
    );
    assert!(
        has("selftest::render", "selftest"),
        "use super::{{CheckReport, …}}"
    );
    assert!(has("checks", "i18n"), "use crate::text (the macro)");
    // comments are not imports
    let stripped = strip_comments("let a = \"// not a comment\"; // crate::x\n/* crate::y */ '\"'");
    assert_eq!(stripped, "let a = \"// not a comment\"; \n  '\"'");
    // and what issue 40 found is gone
    for (a, b) in [
        ("error", "notebook"),
        ("notebook", "report"),
        ("checks", "runner"),
        ("runner", "report"),
        ("cli", "batch"),
        ("selftest::expected", "selftest::coverage"),
    ] {
        assert!(!has(a, b), "{a} imports {b} again");
    }
    assert!(nodes(&c).len() >= 25, "{:?}", nodes(&c));
}
