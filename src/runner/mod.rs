//! Runs a submission: a fresh temporary directory, the embedded Python driver, the exercise's
//! scenario, a nonce only the driver knows, and a leash (see `process`). Returns what it observed,
//! or why there is nothing to observe. The `Executor` trait lets tests substitute recorded runs.
pub mod channel;
pub mod process;
pub mod sandbox;
pub mod zygote;

pub use crate::device::Device; // where it lived before `device.rs`
use crate::error::GradeError;
use crate::i18n::Text;
use crate::observations::Observations;
use crate::spec::Exercise;
use crate::text;
use crate::workload::Workload;
use anyhow::Context;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tch::Tensor;

/// The grader's own Python code, embedded in the binary and written out for each run: the
/// driver's pipeline (`run_job`) and its modules, which it loads by path from beside itself.
pub const DRIVER_PY: &str = include_str!("../driver/driver.py");
pub const DRIVER_MODULES: [(&str, &str); 3] = [
    ("attribution.py", include_str!("../driver/attribution.py")),
    ("recorder.py", include_str!("../driver/recorder.py")),
    ("instruments.py", include_str!("../driver/instruments.py")),
];

/// Writes the driver (`DRIVER_PY`, `DRIVER_MODULES`) and `grade_lib` into `dir`; returns the
/// paths of `driver.py` and of the library's `__init__.py`.
pub fn write_driver(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let driver = dir.join("driver.py");
    std::fs::write(&driver, DRIVER_PY).context("writing the driver")?;
    for (name, text) in DRIVER_MODULES {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("writing the driver's {name}"))?;
    }
    Ok((driver, write_lib(dir)?))
}
/// Instruments the scenarios share (the package `grade_lib`: observed model, simulated device,
/// memory and read-back counters), one module per concern, written out as `lib/` beside the driver.
pub const LIB_FILES: [(&str, &str); 7] = [
    ("__init__.py", include_str!("../driver/lib/__init__.py")),
    ("reported.py", include_str!("../driver/lib/reported.py")),
    ("memory.py", include_str!("../driver/lib/memory.py")),
    ("steps.py", include_str!("../driver/lib/steps.py")),
    ("simdevice.py", include_str!("../driver/lib/simdevice.py")),
    ("reads.py", include_str!("../driver/lib/reads.py")),
    ("integrity.py", include_str!("../driver/lib/integrity.py")),
];

/// Writes `grade_lib` (`LIB_FILES`) into `dir/lib/`; returns its `__init__.py`.
pub fn write_lib(dir: &Path) -> anyhow::Result<PathBuf> {
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    for (name, text) in LIB_FILES {
        std::fs::write(lib.join(name), text)
            .with_context(|| format!("writing the driver's lib/{name}"))?;
    }
    Ok(lib.join("__init__.py"))
}
/// The static audit of the submission's source, run by the driver before the import.
pub const AUDIT_PY: &str = include_str!("../driver/audit.py");
/// The course's Python (deny by default): the submission is compiled and run under it.
pub const POLICY_PY: &str = include_str!("../driver/policy.py");
/// The driver's exit status when its own imports (torch, safetensors) fail: the grader cannot grade.
const DRIVER_ENV_BROKEN: i32 = 4;

/// Everything one run needs.
pub struct RunRequest<'a> {
    pub exercise: &'a Exercise,
    pub submission: &'a Path,
    pub workload: &'a Workload,
    pub device: Device,
    pub seed: u64,
    /// Folder holding the `course` package (put on the driver's sys.path).
    pub course_path: PathBuf,
    /// The course's own code: may write the shared compile cache (see `compile_cache`).
    pub trusted: bool,
}

/// What came back from a run.
pub struct RunResult {
    pub obs: Option<Observations>,
    pub tensors: BTreeMap<String, Tensor>,
    /// Why the run produced nothing usable (crash, timeout, no results, forged results).
    pub failure: Option<Text>,
    pub stderr_tail: String,
    pub stdout_bytes: u64,
    pub wall_s: f64,
    /// CLOCK_MONOTONIC seconds when the process started (`process::monotonic_s`).
    pub started: f64,
    /// Seconds spent laying out the run's folder before it started (`stage`).
    pub stage_s: f64,
    /// What the sandbox could not enforce on this platform (said once in the report).
    pub sandbox_gaps: Vec<Text>,
    /// The static audit's findings (`["audit", …]` on the channel), sent before the submission
    /// was imported: there even when the run crashed.
    pub audit: Option<serde_json::Value>,
}

pub trait Executor {
    fn execute(&self, req: &RunRequest) -> Result<RunResult, GradeError>;
}

/// The real thing: `python -I -B driver.py job.json` under `process::run`, in the sandbox.
pub struct PythonExecutor {
    pub python: PathBuf,
    /// `sys.base_prefix` and `sys.prefix`: what the sandbox lets the interpreter read.
    prefixes: std::sync::OnceLock<Vec<PathBuf>>,
}

impl PythonExecutor {
    /// Fails with a hint when the interpreter is missing.
    pub fn new(python: PathBuf) -> Result<Self, GradeError> {
        if !python.exists() {
            return Err(GradeError::Python {
                path: python,
                reason: "not found".into(),
            });
        }
        Ok(PythonExecutor {
            python,
            prefixes: std::sync::OnceLock::new(),
        })
    }

    /// The interpreter's installation and environment (asked once).
    fn prefixes(&self) -> &[PathBuf] {
        self.prefixes.get_or_init(|| {
            let out = sandbox::quietly(|| {
                Command::new(&self.python)
                    .args([
                        "-I",
                        "-c",
                        "import sys; print(sys.base_prefix); print(sys.prefix)",
                    ])
                    .output()
            });
            let mut dirs: Vec<PathBuf> = out
                .ok()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .map(PathBuf::from)
                        .collect()
                })
                .unwrap_or_default();
            if let Ok(real) = std::fs::canonicalize(&self.python) {
                dirs.extend(real.parent().and_then(Path::parent).map(Path::to_path_buf));
            }
            dirs
        })
    }

    /// What one run may read (its folder `tmp` among the rest) and write (`writable`: the
    /// submission's folder, out/, the compile cache).
    fn policy(
        &self,
        req: &RunRequest,
        tmp: &Path,
        writable: &[PathBuf],
        headers_readable: bool,
    ) -> sandbox::Policy {
        let mut read = self.prefixes().to_vec();
        read.push(req.course_path.clone());
        read.push(req.exercise.dir.clone());
        read.push(tmp.to_path_buf());
        if headers_readable {
            read.extend(read_only_cache(req));
        }
        let write = writable.to_vec();
        sandbox::Policy { read, write }
    }
}

/// A persistent torch.compile (inductor) cache, when the exercise asks for one: lesson 05's
/// `params.compile_cache`, a folder relative to the course root (`.cache/inductor`), so repeated
/// gradings pay a cold compile once. `GRADE_COMPILE_CACHE=DIR` puts it elsewhere;
/// `GRADE_COMPILE_CACHE=cold` gives every run a fresh, empty one (the true first-call cost).
/// `None`: the run's own temporary folder (nothing persists). Only a trusted run (the course's
/// own code) gets the shared folder itself; a student's run gets a private copy (`seed_cache`),
/// so no submission can plant a compiled artefact another student's run would load.
pub(crate) fn compile_cache(req: &RunRequest) -> Option<PathBuf> {
    let rel = req.exercise.params.get("compile_cache")?.as_str()?;
    let dir = match std::env::var("GRADE_COMPILE_CACHE") {
        Ok(v) if v == "cold" => return None,
        Ok(v) if !v.is_empty() => std::path::absolute(&v).ok()?, // the child runs elsewhere
        _ => req.course_path.parent()?.join(rel),
    };
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// safetensors bytes → named tensors (through a fresh file of the grader's own: tch reads files).
fn read_tensors(bytes: &[u8]) -> anyhow::Result<BTreeMap<String, Tensor>> {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("grade-tensors-")
        .suffix(".safetensors")
        .tempfile()?;
    f.write_all(bytes)?;
    f.flush()?;
    Ok(Tensor::read_safetensors(f.path())?.into_iter().collect())
}

/// The compile cache's folder of precompiled headers (inductor's `_HEADER_DIR`, set there by
/// lesson 05's scenario): one 150 MB `.gch` per compiler command line.
pub(crate) const PRECOMPILED_HEADERS: &str = "precompiled_headers";

/// What `seed_cache` does with the shared precompiled headers.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Headers {
    /// A read-only link per shared file (a student's run, where Landlock keeps it from writing
    /// where a link leads).
    Link,
    /// Copied like any other file (a student's run without Landlock).
    Copy,
    /// Left out (the students' zygote, which only picks the CPU's vector ISA: zygote.py).
    Skip,
}

/// Copy the shared compile cache into a run's own folder: regular files and folders only (no
/// links followed), best effort (a file being written by a trusted run at that moment is skipped
/// or copied whole; inductor writes by rename). The precompiled headers are not copied (150 MB
/// per grading, written to disk for every student's run): each is a link to the shared file,
/// made read-only, which the run may read (`read_only_cache`) and not write (the sandbox's write
/// rule applies to where a link leads); a header the run builds itself lands in its own folder.
pub(crate) fn seed_cache(from: &Path, to: &Path, headers: Headers) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)?.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let dest = to.join(entry.file_name());
        let is_headers = kind.is_dir() && entry.file_name() == PRECOMPILED_HEADERS;
        if is_headers && headers == Headers::Skip {
            continue;
        } else if is_headers && headers == Headers::Link {
            link_headers(&entry.path(), &dest)?;
        } else if kind.is_dir() {
            seed_cache(&entry.path(), &dest, Headers::Copy)?;
        } else if kind.is_file() {
            let _ = std::fs::copy(entry.path(), &dest);
        }
    }
    Ok(())
}

/// `seed_cache` for the precompiled headers: a read-only link per shared file (their locks are
/// the run's own).
fn link_headers(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)?.flatten() {
        if !entry.file_type().is_ok_and(|k| k.is_file()) {
            continue; // `locks/`: the run takes its own
        }
        let shared = std::path::absolute(entry.path())?;
        let _ = std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o444));
        let _ = std::os::unix::fs::symlink(&shared, to.join(entry.file_name()));
    }
    Ok(())
}

/// What of the shared compile cache a student's run reads in place: its precompiled headers
/// (`seed_cache` links them), when the exercise has a compile cache and Landlock keeps the run
/// from writing where a link leads (the course's Python lets a submission open files for
/// writing, and a run as root ignores a file's read-only mode: without Landlock, copies).
pub(crate) fn read_only_cache(req: &RunRequest) -> Option<PathBuf> {
    if req.trusted || !sandbox_on() || sandbox::landlock_abi() < 1 {
        return None; // the course's own run has the whole cache, writable
    }
    Some(compile_cache(req)?.join(PRECOMPILED_HEADERS))
}

fn random_nonce() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..4)
        .map(|_| format!("{:08x}", rng.random::<u32>()))
        .collect()
}

/// The interpreter's environment: scrubbed, one torch thread, the run's folder as home.
const BASE_ENV: [(&str, &str); 6] = [
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("LANG", "C.UTF-8"),
    ("OMP_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
    ("PYTHONHASHSEED", "0"),
    ("PYTHONUNBUFFERED", "1"),
];

/// The variables CUDA needs, passed through from the grader's environment.
fn cuda_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("CUDA_") || k.starts_with("NVIDIA_"))
        .collect()
}

/// GRADE_SANDBOX=off: only to measure the sandbox's cost or to debug it
/// (docs/how-grading-works.md, "Security").
fn sandbox_on() -> bool {
    std::env::var("GRADE_SANDBOX").map_or(true, |v| v != "off")
}

/// One run laid out on disk, ready to start: its own folder (driver, lib, submission, inputs,
/// job.json: the grader's, read-only to the run), the submission's folder inside it (`work/`: its
/// working directory, HOME and TMPDIR), the environment, the limits, what it may touch, and its
/// nonce.
pub(crate) struct Staged {
    pub dir: tempfile::TempDir,
    pub work: PathBuf,
    pub driver: PathBuf,
    pub job: PathBuf,
    /// Set on top of `BASE_ENV`.
    pub env: Vec<(String, String)>,
    pub limits: process::Limits,
    /// `None`: GRADE_SANDBOX=off.
    pub policy: Option<sandbox::Policy>,
    pub nonce: String,
}

impl PythonExecutor {
    /// Stage 3a: the run's folder (under `parent`, or the system's temp folder) and its job.
    /// `headers_readable`: whether the run's interpreter may read the shared precompiled headers
    /// in place (`read_only_cache`; a fork of a zygote whose sandbox does not let it read them
    /// gets copies).
    pub(crate) fn stage(
        &self,
        req: &RunRequest,
        parent: Option<&Path>,
        headers_readable: bool,
    ) -> Result<Staged, GradeError> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("grade-");
        let dir = match parent {
            Some(p) => builder.tempdir_in(p),
            None => builder.tempdir(),
        }
        .context("creating a temporary directory")?;
        let tmp = dir.path();
        let out_dir = tmp.join("out");
        std::fs::create_dir(&out_dir).context("creating out/")?;
        // What the run may write: its own folder, not the grader's files beside it (a submission
        // that rewrote inputs.safetensors during its import shrank the work the scenario then
        // loaded; red team 14)
        let work = tmp.join("work");
        std::fs::create_dir(&work).context("creating work/")?;
        let submission = tmp.join("submission.py");
        std::fs::copy(req.submission, &submission).with_context(|| {
            format!(
                "copying {} into {}",
                req.submission.display(),
                tmp.display()
            )
        })?;
        let (driver, lib) = write_driver(tmp)?;
        std::fs::write(tmp.join("audit.py"), AUDIT_PY).context("writing the driver's audit.py")?;
        std::fs::write(tmp.join("policy.py"), POLICY_PY)
            .context("writing the driver's policy.py")?;
        let inputs = tmp.join("inputs.safetensors");
        req.workload.write(&inputs)?;
        let ex = req.exercise;
        let job = serde_json::json!({
            "exercise": ex.id,
            "submission": submission,
            "scenario": ex.dir.join("scenario.py"),
            "course_path": req.course_path,
            "lib": lib,
            "audit": tmp.join("audit.py"),
            "audit_allow": ex.audit_allow,
            "policy": (!crate::spec::policy::switched_off()).then_some(&ex.policy),
            "policy_py": tmp.join("policy.py"),
            "inputs": inputs,
            "out_dir": out_dir,
            "results_fd": process::RESULTS_FD,
            "device": req.device.name(),
            "seed": req.seed,
            "threads": 1,
            "model": ex.model,
            "params": ex.params,
        });
        let job_path = tmp.join("job.json");
        std::fs::write(
            &job_path,
            serde_json::to_vec_pretty(&job).context("encoding job.json")?,
        )
        .context("writing job.json")?;

        let own_cache = tmp.join("inductor");
        let compile_cache = match compile_cache(req) {
            Some(shared) if req.trusted => Some(shared),
            Some(shared) => {
                let headers = if headers_readable && read_only_cache(req).is_some() {
                    Headers::Link
                } else {
                    Headers::Copy
                };
                seed_cache(&shared, &own_cache, headers).context("copying the compile cache")?;
                None
            }
            None => None,
        };
        if compile_cache.is_none() {
            std::fs::create_dir_all(&own_cache).context("creating the run's compile cache")?;
        }
        let mut env: Vec<(String, String)> = vec![
            ("HOME".into(), work.display().to_string()),
            ("TMPDIR".into(), work.display().to_string()),
            (
                "TORCHINDUCTOR_CACHE_DIR".into(),
                compile_cache
                    .clone()
                    .unwrap_or_else(|| own_cache.clone())
                    .display()
                    .to_string(),
            ),
        ];
        env.extend(cuda_env());
        let limits = process::Limits {
            timeout: Duration::from_secs(ex.timeout_s),
            data_bytes: match req.device {
                Device::Cpu => ex.memory_mb.map(|m| m << 20),
                Device::Cuda => None,
            },
            file_bytes: Some(1 << 30),
            rss_bytes: ex.memory_mb.map(|m| m << 20),
        };
        let writable = [work.clone(), out_dir, compile_cache.unwrap_or(own_cache)];
        let policy = sandbox_on().then(|| self.policy(req, tmp, &writable, headers_readable));
        Ok(Staged {
            dir,
            work,
            driver,
            job: job_path,
            env,
            limits,
            policy,
            nonce: random_nonce(),
        })
    }
}

/// What the report says when the sandbox was off.
fn no_sandbox() -> Vec<Text> {
    vec![text!(
        "GRADE_SANDBOX=off：本次运行没有沙箱",
        "GRADE_SANDBOX=off: this run had no sandbox"
    )]
}

impl Executor for PythonExecutor {
    /// A fresh interpreter per run: `python -I -B driver.py job.json`, nonce on stdin.
    fn execute(&self, req: &RunRequest) -> Result<RunResult, GradeError> {
        let t = std::time::Instant::now();
        let staged = self.stage(req, None, true)?;
        let stage_s = t.elapsed().as_secs_f64();
        let mut cmd = Command::new(&self.python);
        cmd.arg("-I")
            .arg("-B")
            .arg(&staged.driver)
            .arg(&staged.job)
            .current_dir(&staged.work)
            .env_clear()
            .envs(BASE_ENV)
            .envs(staged.env.iter().map(|(k, v)| (k, v)));
        let prepared = staged.policy.as_ref().map(sandbox::Policy::prepare);
        let gaps = prepared
            .as_ref()
            .map_or_else(no_sandbox, |p| p.enforced.gaps());
        let fin = process::run(cmd, &staged.nonce, &staged.limits, prepared).map_err(|e| {
            GradeError::Python {
                path: self.python.clone(),
                reason: format!("could not start: {e}"),
            }
        })?;
        let mut result = self.finish(req, &staged, fin, gaps)?;
        result.stage_s = stage_s;
        Ok(result)
    }
}

impl PythonExecutor {
    /// Stage 3c: what a finished run means: its observations and tensors, or why there are none.
    pub(crate) fn finish(
        &self,
        req: &RunRequest,
        staged: &Staged,
        fin: process::Finished,
        sandbox_gaps: Vec<Text>,
    ) -> Result<RunResult, GradeError> {
        let ex = req.exercise;
        let out_dir = staged.dir.path().join("out");
        let nonce = &staged.nonce;
        let stderr_tail = fin.stderr.text();
        let mut result = RunResult {
            obs: None,
            tensors: BTreeMap::new(),
            failure: None,
            stderr_tail,
            stdout_bytes: fin.stdout.total,
            wall_s: fin.wall.as_secs_f64(),
            started: fin.started,
            stage_s: 0.0,
            sandbox_gaps,
            audit: None,
        };
        let env_ok = out_dir.join("env-ok").exists();
        if !env_ok && fin.status.and_then(|s| s.code()) == Some(DRIVER_ENV_BROKEN) {
            let why = fin
                .stderr
                .text()
                .lines()
                .last()
                .unwrap_or("torch or safetensors missing")
                .to_string();
            return Err(GradeError::Python {
                path: self.python.clone(),
                reason: why,
            });
        }
        let how = fin.describe();
        if let Some((b, n)) = fin.over_memory {
            let (mib, limit) = (b >> 20, ex.memory_mb.unwrap_or(0));
            let procs_zh = if n > 1 {
                format!("（{n} 个进程：fork 炸弹？）")
            } else {
                String::new()
            };
            let procs_en = if n > 1 {
                format!(" in {n} processes (a fork bomb?)")
            } else {
                String::new()
            };
            result.failure = Some(text!(
                format!("提交的程序占用内存 {mib} MiB{procs_zh}，超过 {limit} MiB 的上限，已被终止"),
                format!("the submission used {mib} MiB of memory{procs_en}, over its {limit} MiB limit, and was killed")
            ));
            return Ok(result);
        }
        if fin.timed_out {
            result.failure = Some(text!(
                format!("提交的程序超过 {} s 时限，已被终止（整个进程组）", ex.timeout_s),
                format!("the submission ran past its {} s limit and was killed (its whole process group)", ex.timeout_s)
            ));
            return Ok(result);
        }
        if fin.results.overflow {
            result.failure = Some(channel::tampered("more than 512 MiB"));
            return Ok(result);
        }
        let received = match channel::parse(&fin.results.bytes, nonce) {
            Ok(r) => r,
            Err((why, audit)) => {
                result.failure = Some(why);
                result.audit = audit;
                return Ok(result);
            }
        };
        let ended_early = || {
            text!(
                format!("提交的程序在评分驱动写完结果前就退出了（{how}）"),
                format!("the run ended before the driver wrote its results ({how})")
            )
        };
        let Some(received) = received else {
            result.failure = Some(ended_early());
            return Ok(result);
        };
        result.audit = received.obs.audit.clone();
        if !received.complete {
            result.failure = Some(ended_early());
            return Ok(result);
        }
        for blob in &received.tensors {
            match read_tensors(blob) {
                Ok(ts) => {
                    for (name, t) in ts {
                        if result.tensors.insert(name.clone(), t).is_some() {
                            result.failure =
                                Some(channel::tampered(&format!("tensor `{name}` written twice")));
                            return Ok(result);
                        }
                    }
                }
                Err(e) => {
                    result.failure = Some(text!(
                        format!("张量无法读取：{e}"),
                        format!("the tensors are unreadable: {e}")
                    ));
                    return Ok(result);
                }
            }
        }
        let obs = received.obs;
        // Patched instruments make every observation of this run untrustworthy: fail it all.
        // (`integrity.seen.*`: a patch seen at any check, even if undone before the end.)
        let mut patched: Vec<String> = obs
            .metrics
            .keys()
            .filter_map(|k| k.strip_prefix("integrity.seen."))
            .map(str::to_string)
            .collect();
        if let Some(t) = obs
            .metrics
            .get("integrity.tampered")
            .and_then(|v| v.as_str())
        {
            patched.extend(t.split(", ").filter(|t| *t != "none").map(str::to_string));
        }
        patched.sort();
        patched.dedup();
        if !patched.is_empty() {
            let patched = patched.join(", ");
            result.failure = Some(text!(
                format!("提交的代码篡改了评分器的测量工具（{patched}）：这次运行的任何观测都不可信"),
                format!("the submission tampered with the grader's instruments ({patched}): nothing this run observed can be trusted")
            ));
        }
        result.obs = Some(obs);
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A student's copy of the compile cache: kernels copied, precompiled headers linked to the
    /// shared files (made read-only), no shared lock; without the read rule, copies throughout.
    #[test]
    fn precompiled_headers_are_linked_not_copied() {
        let shared = tempfile::tempdir().unwrap();
        let pch = shared.path().join(PRECOMPILED_HEADERS);
        std::fs::create_dir_all(pch.join("locks")).unwrap();
        std::fs::write(pch.join("h.h"), "#include <x>\n").unwrap();
        std::fs::write(pch.join("h.h.gch"), [7u8; 64]).unwrap();
        std::fs::create_dir_all(shared.path().join("fxgraph")).unwrap();
        std::fs::write(shared.path().join("fxgraph/k"), "kernel").unwrap();

        let own = tempfile::tempdir().unwrap();
        seed_cache(shared.path(), own.path(), Headers::Link).unwrap();
        let gch = own.path().join(PRECOMPILED_HEADERS).join("h.h.gch");
        assert!(gch.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&gch).unwrap(), vec![7u8; 64]);
        let mode = std::fs::metadata(pch.join("h.h.gch"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o222, 0, "the shared header is read-only");
        assert!(!own.path().join(PRECOMPILED_HEADERS).join("locks").exists());
        let kernel = own.path().join("fxgraph/k");
        assert!(!kernel.symlink_metadata().unwrap().file_type().is_symlink());

        let copied = tempfile::tempdir().unwrap();
        seed_cache(shared.path(), copied.path(), Headers::Copy).unwrap();
        let gch = copied.path().join(PRECOMPILED_HEADERS).join("h.h.gch");
        assert!(!gch.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&gch).unwrap(), vec![7u8; 64]);
    }
}
