//! `grade batch` (issue 8): a whole class through `pipeline::grade`, one run per student and
//! exercise on a pool of workers, each record written atomically as soon as it is graded; the
//! gradebooks (`crate::gradebook`) are assembled from the records at the end.
//!
//! Discovery (`discover`), in `DIR`, sorted by name, hidden entries (`.name`) ignored:
//! - a folder is a student (id = folder name); for exercise `ID` its submission is the first of
//!   `ID/exercise.py`, `ID/exercise.ipynb`, `ID.py`, `ID.ipynb`, `exercise.py`, `exercise.ipynb`
//!   (the last two only with a single exercise) inside it (`.ipynb`: a Jupyter notebook);
//! - a file `NAME.py` or `NAME.ipynb` is a student (id = `NAME`) whose submission it is (single
//!   exercise only; with `--all` a loose file has no submission);
//! - other files are ignored; a folder where nothing matches is a "no submission" row;
//! - a class without any student is exit 2, and so is a folder and a file with the same id.
pub mod commands;
pub mod progress;

pub use crate::cli::parse_shard; // `--shard K/N` is parsed where the arguments are
use crate::course::Course;
use crate::device::Device;
use crate::error::{exit, GradeError};
use crate::gradebook::{self, Record, Roster, GRADED, NO_SUBMISSION};
use crate::pipeline::{self, GradeRequest, Spec};
use crate::runner::Executor;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

/// One student as found in the class folder.
#[derive(Clone, Debug, PartialEq)]
pub struct Student {
    pub id: String,
    /// The student's folder, or their single file.
    pub path: PathBuf,
    pub is_file: bool,
}

impl Student {
    /// The file graded for `exercise`, if any (see the module's discovery rules).
    pub fn submission(&self, exercise: &str, single: bool) -> Option<PathBuf> {
        if self.is_file {
            return single.then(|| self.path.clone());
        }
        let mut names = vec![
            format!("{exercise}/exercise.py"),
            format!("{exercise}/exercise.ipynb"),
            format!("{exercise}.py"),
            format!("{exercise}.ipynb"),
        ];
        if single {
            names.extend(["exercise.py".into(), "exercise.ipynb".into()]);
        }
        names
            .into_iter()
            .map(|n| self.path.join(n))
            .find(|p| p.is_file())
    }
}

pub fn discover(dir: &Path) -> Result<Vec<Student>, GradeError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("class folder {}: {e}", dir.display()))?;
    let mut students: Vec<Student> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let student = if path.is_dir() {
            Student {
                id: name,
                path,
                is_file: false,
            }
        } else if let Some(stem) = (name.strip_suffix(".py"))
            .or(name.strip_suffix(".ipynb"))
            .filter(|s| !s.is_empty())
        {
            Student {
                id: stem.to_string(),
                path,
                is_file: true,
            }
        } else {
            continue;
        };
        students.push(student);
    }
    students.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(w) = students.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(anyhow::anyhow!(
            "student `{}` is both a folder and a file in {}; keep one / 同一学生既有文件夹又有文件",
            w[0].id,
            dir.display()
        )
        .into());
    }
    if students.is_empty() {
        return Err(anyhow::anyhow!(
            "no student in {} (a folder per student, or a NAME.py per student) / 班级文件夹中没有学生",
            dir.display()
        )
        .into());
    }
    Ok(students)
}

/// FNV-1a (64 bit) of the id: stable across runs, platforms and the class's order.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// `--shard K/N` (K from 1): whether this shard grades the student.
pub fn in_shard(id: &str, shard: (u32, u32)) -> bool {
    fnv(id) % shard.1 as u64 == (shard.0 - 1) as u64
}

/// A student's seed: from the batch seed and the student id only (so `grade exercise --seed S`
/// regrades the row alone), in the range of the seeds `grade exercise` draws.
pub fn student_seed(batch_seed: u64, student: &str) -> u64 {
    let h = Sha256::new()
        .chain_update(b"grade-batch seed v1\0")
        .chain_update(batch_seed.to_le_bytes())
        .chain_update(student.as_bytes())
        .finalize();
    u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as u64
}

/// What a record's grade depends on besides the submission: the exercise's spec and scenario
/// files (not its README or starter), the `course` package, the rubric, the embedded driver (its
/// modules, the static audit, the course's Python policy, `grade_lib`) and the grader's version.
pub fn spec_digest(course: &Course, exercise: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"grade-batch key v1\0");
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(crate::runner::DRIVER_PY.as_bytes());
    let modules = &crate::runner::DRIVER_MODULES;
    let policy = [
        ("audit.py", crate::runner::AUDIT_PY),
        ("policy.py", crate::runner::POLICY_PY),
    ];
    for (name, text) in modules
        .iter()
        .chain(&policy)
        .chain(&crate::runner::LIB_FILES)
    {
        h.update(name.as_bytes());
        h.update(text.as_bytes());
    }
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [
        course.exercise_dir(exercise),
        course.package_path().join("course"),
    ] {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| {
                let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                p.is_file()
                    && !n.starts_with("README")
                    && !(n == "exercise.py" && p.parent() == Some(&course.exercise_dir(exercise)))
            }));
        }
    }
    files.sort();
    files.push(course.rubric(exercise));
    for f in files {
        h.update(
            f.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        );
        h.update(b"\0");
        h.update(std::fs::read(&f).unwrap_or_default());
        h.update(b"\0");
    }
    h.finalize().to_vec()
}

/// The record's key: submission bytes, spec digest, seed and device.
pub fn key(spec: &[u8], submission: Option<&[u8]>, seed: u64, device: &str) -> String {
    let mut h = Sha256::new();
    h.update(spec);
    h.update(seed.to_le_bytes());
    h.update(device.as_bytes());
    match submission {
        Some(b) => {
            h.update(b"submission\0");
            h.update(b);
        }
        None => h.update(b"no submission\0"),
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

pub struct BatchOptions {
    pub class: PathBuf,
    pub exercises: Vec<String>,
    pub out: PathBuf,
    pub jobs: usize,
    pub resume: bool,
    pub device: Device,
    pub seed: Option<u64>,
    pub shard: Option<(u32, u32)>,
    pub timeout: Option<u64>,
}

/// What happened to one job, for progress lines and the summary.
pub enum Event<'a> {
    Start {
        total: usize,
        skipped: usize,
        jobs: usize,
    },
    Done {
        record: &'a Record,
        resumed: bool,
        seconds: f64,
    },
}

pub struct Outcome {
    pub graded: usize,
    pub resumed: usize,
    pub interrupted: bool,
    pub book: gradebook::Gradebook,
    pub errors: Vec<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// First Ctrl-C: take no new job, let the running ones finish and keep their records. A second
/// Ctrl-C kills the grader (the handler resets itself); finished records are whole either way.
fn catch_sigint() {
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

struct Job {
    student: Student,
    exercise: String,
    submission: Option<PathBuf>,
    seed: u64,
    key: String,
}

pub fn run(
    course: &Course,
    opts: &BatchOptions,
    executor: &(dyn Executor + Sync),
    progress: &mut dyn FnMut(Event),
) -> Result<Outcome, GradeError> {
    let students = discover(&opts.class)?;
    // 1. specs, once per exercise: a broken spec stops the batch before any run (exit 2)
    let mut digests = Vec::new();
    for id in &opts.exercises {
        Spec::load(course, id)?;
        digests.push(spec_digest(course, id));
    }
    let roster_file = gradebook::roster_path(&opts.out);
    let previous: Option<Roster> = std::fs::read_to_string(&roster_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let seed = match (opts.seed, &previous) {
        (Some(s), _) => s,
        (None, Some(p)) if opts.resume => p.seed,
        (None, _) if opts.shard.is_some() => {
            return Err(anyhow::anyhow!(
                "--shard needs --seed, so that every shard grades with the same seeds / 分片评分需要 --seed"
            )
            .into())
        }
        (None, _) => rand::random::<u32>() as u64,
    };
    let roster = Roster {
        class: opts.class.display().to_string(),
        exercises: opts.exercises.clone(),
        students: students.iter().map(|s| s.id.clone()).collect(),
        seed,
        device: opts.device.name().into(),
    };
    let text = serde_json::to_string_pretty(&roster).map_err(anyhow::Error::from)? + "\n";
    gradebook::write_atomic(&roster_file, text.as_bytes())?;

    // 2. the jobs of this shard; --resume skips records whose key is unchanged
    let single = opts.exercises.len() == 1;
    let mut jobs = Vec::new();
    let mut resumed = Vec::new();
    for st in students
        .iter()
        .filter(|s| opts.shard.is_none_or(|k| in_shard(&s.id, k)))
    {
        for (ex, digest) in opts.exercises.iter().zip(&digests) {
            let submission = st.submission(ex, single);
            let bytes = match &submission {
                Some(p) => {
                    Some(std::fs::read(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?)
                }
                None => None,
            };
            let s_seed = student_seed(seed, &st.id);
            let key = key(digest, bytes.as_deref(), s_seed, opts.device.name());
            let path = gradebook::record_path(&opts.out, ex, &st.id);
            if opts.resume {
                if let Some(r) = gradebook::read_record(&path).filter(|r| r.key == key) {
                    resumed.push(r);
                    continue;
                }
            }
            jobs.push(Job {
                student: st.clone(),
                exercise: ex.clone(),
                submission,
                seed: s_seed,
                key,
            });
        }
    }
    progress(Event::Start {
        total: jobs.len() + resumed.len(),
        skipped: resumed.len(),
        jobs: opts.jobs,
    });
    for r in &resumed {
        progress(Event::Done {
            record: r,
            resumed: true,
            seconds: 0.0,
        });
    }

    // 3. the pool: each worker takes the next job; the main thread writes records as they come
    catch_sigint();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Result<(Record, serde_json::Value), GradeError>, f64)>();
    let mut graded = 0;
    let mut errors = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1).min(jobs.len().max(1)) {
            let tx = tx.clone();
            let (jobs, next) = (&jobs, &next);
            s.spawn(move || loop {
                if STOP.load(Ordering::SeqCst) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                let t0 = Instant::now();
                let r = grade_one(course, job, opts, executor);
                if tx.send((i, r, t0.elapsed().as_secs_f64())).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r, secs) in rx {
            let job = &jobs[i];
            match r.and_then(|(rec, json)| {
                let text = serde_json::to_string_pretty(&json).map_err(anyhow::Error::from)? + "\n";
                gradebook::write_atomic(
                    &gradebook::record_path(&opts.out, &job.exercise, &job.student.id),
                    text.as_bytes(),
                )?;
                Ok(rec)
            }) {
                Ok(rec) => {
                    graded += 1;
                    progress(Event::Done {
                        record: &rec,
                        resumed: false,
                        seconds: secs,
                    });
                }
                Err(e) => errors.push(format!("{} {}: {e}", job.student.id, job.exercise)),
            }
        }
    });
    let interrupted = STOP.load(Ordering::SeqCst);
    // 4. gradebooks from whatever records exist
    let book = gradebook::write_all(&opts.out)?;
    Ok(Outcome {
        graded,
        resumed: resumed.len(),
        interrupted,
        book,
        errors,
    })
}

/// Grade one job with the pipeline; the record is the report's JSON plus student, key, outcome.
fn grade_one(
    course: &Course,
    job: &Job,
    opts: &BatchOptions,
    executor: &(dyn Executor + Sync),
) -> Result<(Record, serde_json::Value), GradeError> {
    let mut json = match &job.submission {
        Some(sub) => {
            let report = pipeline::grade(
                course,
                &GradeRequest {
                    id: job.exercise.clone(),
                    submission: sub.clone(),
                    device: opts.device,
                    seed: Some(job.seed),
                    timeout: opts.timeout,
                    dump_observations: None,
                    trusted: false,
                },
                executor,
            )?;
            let mut v = serde_json::to_value(&report).map_err(anyhow::Error::from)?;
            v["outcome"] = GRADED.into();
            v
        }
        None => serde_json::json!({
            "exercise": job.exercise,
            "seed": job.seed,
            "outcome": NO_SUBMISSION,
            "submission": null,
            "verdicts": [],
            "summary": {"passed": 0, "failed": 0, "skipped": 0, "points": 0, "max_points": 0},
        }),
    };
    json["student"] = job.student.id.clone().into();
    json["key"] = job.key.clone().into();
    let rec: Record = serde_json::from_value(json.clone()).map_err(anyhow::Error::from)?;
    Ok((rec, json))
}

/// The batch's exit code: 2 when some job could not be graded or the batch was interrupted,
/// 1 when a student failed or has no submission, 0 when everyone passed.
pub fn exit_code(o: &Outcome) -> i32 {
    if !o.errors.is_empty() || o.interrupted {
        exit::CANNOT_GRADE
    } else if o.book.records.values().all(|r| r.passed()) {
        exit::PASS
    } else {
        exit::FAIL
    }
}
