//! Gradescope's autograder zip (https://gradescope-autograders.readthedocs.io/en/latest/specs/):
//! `setup.sh` and `run_autograder` at the root (from `examples/gradescope/`, with the exercise id
//! filled in), and the course's sources under `course/` (what `./setup.sh` builds: Cargo files,
//! `src/`, `exercises/`, `rubrics/`, `solutions/`, the set-up scripts; no `target/`, `.venv/`,
//! caches or tests). Gradescope unpacks it in `/autograder/source`, runs `setup.sh` once when it
//! builds the image, then `run_autograder` per submission.
use crate::course::Course;
use crate::error::GradeError;
use crate::gradebook::write_atomic;
use crate::spec::Exercise;
use std::io::Write;
use std::path::{Path, PathBuf};

const SETUP: &str = include_str!("../../examples/gradescope/setup.sh");
const RUN: &str = include_str!("../../examples/gradescope/run_autograder");
/// The line of both scripts where the exported exercise id becomes the default.
const MARKER: &str = "exercise=${1:-${GRADE_EXERCISE:-}}";

/// Course files the build and the grading need, relative to the course root.
const FILES: [&str; 7] = [
    ".cargo/config.toml",
    "Cargo.toml",
    "Cargo.lock",
    "build.rs",
    "setup.sh",
    "grade",
    "scripts/install-system-deps.sh",
];
const DIRS: [&str; 4] = ["src", "exercises", "rubrics", "solutions"];

/// What was written, for the advice printed after it.
pub struct Exported {
    pub id: String,
    pub files: usize,
    pub bytes: usize,
    pub timeout_s: u64,
}

/// A script with `id` as its default exercise.
fn fill(script: &str, id: &str) -> String {
    assert_eq!(
        script.matches(MARKER).count(),
        1,
        "marker line in the script"
    );
    script.replace(
        MARKER,
        &format!("exercise=${{1:-${{GRADE_EXERCISE:-{id}}}}}"),
    )
}

/// Every regular file under `dir`, sorted; hidden entries, `__pycache__` and `.pyc` left out.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".pyc") {
            continue;
        }
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&e.path(), out)?;
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

/// 0755 for a file with any execute bit, else 0644.
fn mode(path: &Path) -> std::io::Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(path)?.permissions().mode();
    Ok(if m & 0o111 != 0 { 0o755 } else { 0o644 })
}

/// The zip's entries: (name in the zip, mode, bytes), root scripts first.
pub fn entries(course: &Course, id: &str) -> Result<Vec<(String, u32, Vec<u8>)>, GradeError> {
    course.check_id(id)?;
    let io = |p: &Path, e: std::io::Error| anyhow::anyhow!("{}: {e}", p.display());
    let mut out = vec![
        ("setup.sh".to_string(), 0o755, fill(SETUP, id).into_bytes()),
        (
            "run_autograder".to_string(),
            0o755,
            fill(RUN, id).into_bytes(),
        ),
    ];
    let mut paths: Vec<PathBuf> = FILES.iter().map(|f| course.root.join(f)).collect();
    for d in DIRS {
        let dir = course.root.join(d);
        walk(&dir, &mut paths).map_err(|e| io(&dir, e))?;
    }
    for p in paths {
        let rel = p.strip_prefix(&course.root).expect("under the root");
        let bytes = std::fs::read(&p).map_err(|e| io(&p, e))?;
        let name = format!("course/{}", rel.to_string_lossy());
        out.push((name, mode(&p).map_err(|e| io(&p, e))?, bytes));
    }
    Ok(out)
}

/// Write the autograder zip of exercise `id` to `out` (atomically).
pub fn export(course: &Course, id: &str, out: &Path) -> Result<Exported, GradeError> {
    let entries = entries(course, id)?;
    let timeout_s = Exercise::load(&course.exercise_dir(id))?.timeout_s;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, mode, bytes) in &entries {
        // fixed timestamps: the same course gives the same zip
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(*mode);
        zip.start_file(name.as_str(), opts)
            .and_then(|_| zip.write_all(bytes).map_err(Into::into))
            .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    }
    let bytes = zip
        .finish()
        .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?
        .into_inner();
    write_atomic(out, &bytes)?;
    Ok(Exported {
        id: id.to_string(),
        files: entries.len(),
        bytes: bytes.len(),
        timeout_s,
    })
}

/// Gradescope's overall timeout must cover `timeout_s` (the limit of the submission's run) plus
/// the grader's own start and reference (about a minute on Gradescope's default half CPU).
pub fn platform_timeout_min(timeout_s: u64) -> u64 {
    (timeout_s + 120).div_ceil(60)
}

/// What to do with the zip, and how the lesson's `timeout_s` maps to Gradescope's limits.
pub fn advice(x: &Exported, out: &Path) -> String {
    let min = platform_timeout_min(x.timeout_s);
    let timeout = if min > 40 {
        format!(
            "timeout_s {} s needs more than Gradescope's 40-minute maximum: lower it with \
             GRADE_TIMEOUT in run_autograder / 超出 Gradescope 40 分钟上限",
            x.timeout_s
        )
    } else {
        format!(
            "set the autograder timeout to at least {min} min (timeout_s {} s + 2 min; \
             Gradescope's default is 10, its maximum 40) / 超时至少设为 {min} 分钟",
            x.timeout_s
        )
    };
    format!(
        "wrote {} ({} files, {} KiB) for {} / 已写入 Gradescope 自动评分包\n\
         upload it under Configure Autograder (base image Ubuntu 22.04) / 在 Configure Autograder 上传\n\
         {timeout}\n\
         set memory to at least 4 GB (the default 768 MB is too little for torch) and 2 CPUs if you can / \
         内存至少 4 GB",
        out.display(),
        x.files,
        x.bytes / 1024,
        x.id
    )
}
