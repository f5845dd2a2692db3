//! The warm executor of `grade batch`: one Python interpreter (`src/driver/zygote.py`) imports
//! torch once, inside the batch's sandbox, and forks one child per submission; each child takes
//! its own process group, the run's stdout/stderr/results pipes (sent over a unix socket), and its
//! own Landlock layer (read what its run needs, write only its own folder, no signals outside
//! itself) before the driver runs. Staging, limits, the watch loop and the reading of results
//! are `PythonExecutor`'s and `process`'s, unchanged: only the start of the process differs.
use super::process::{self, Finished, Streams, Watched};
use super::sandbox::{self, Policy};
use super::{Executor, PythonExecutor, RunRequest, RunResult, Staged, BASE_ENV};
use crate::error::GradeError;
use crate::i18n::Text;
use anyhow::Context;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The zygote's Python, embedded like the driver.
pub const ZYGOTE_PY: &str = include_str!("../driver/zygote.py");
/// How long the zygote may take to import torch (a loaded 2-core machine needs seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// What the zygote says about one request.
#[derive(Debug)]
enum Event {
    Started(i32),
    Exited(i32),
    Failed(String),
    /// The zygote is gone.
    Gone,
}

/// A running zygote: its socket, its process, and who waits for which request.
struct Zygote {
    sock: OwnedFd,
    process: Mutex<std::process::Child>,
    waiters: Arc<Mutex<HashMap<u64, Sender<Event>>>>,
    next: AtomicU64,
    /// One request at a time on the socket (each is one message with its descriptors).
    send: Mutex<()>,
    gaps: Vec<Text>,
    alive: Arc<std::sync::atomic::AtomicBool>,
    /// What its sandbox lets it read beyond the interpreter and the course's package: the shared
    /// precompiled headers of the exercise it was started for, if it has them.
    reads: Vec<PathBuf>,
}

/// `grade batch`'s executor: stages each run like `PythonExecutor` (in a folder of its own under
/// the batch's staging folder) and starts it as a fork of the warm zygote.
pub struct ZygoteExecutor {
    base: PythonExecutor,
    /// Where every run's folder lives: the zygote may read and write here, each child only its own.
    staging: tempfile::TempDir,
    /// The running zygotes, one per kind of run (`Kind`). A `grade check` of the whole course
    /// starts two.
    zygotes: Mutex<Vec<(Kind, Arc<Zygote>)>>,
}

/// What a zygote is started for: the exercise's shared compile cache (`None`: it compiles
/// nothing), whose zygote also imports the compiler and may read the cache's precompiled headers;
/// and whether its runs are the course's own, which write that cache in place (so its sandbox
/// lets them; a student's run writes only its own copy).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kind {
    compile_cache: Option<PathBuf>,
    writes_cache: bool,
}

impl Kind {
    fn of(req: &RunRequest) -> Kind {
        let compile_cache = super::compile_cache(req);
        Kind {
            writes_cache: req.trusted && compile_cache.is_some(),
            compile_cache,
        }
    }
}

impl ZygoteExecutor {
    pub fn new(base: PythonExecutor) -> Result<Self, GradeError> {
        let staging = tempfile::Builder::new()
            .prefix("grade-batch-")
            .tempdir()
            .context("creating the batch's staging folder")?;
        Ok(ZygoteExecutor {
            base,
            staging,
            zygotes: Mutex::new(Vec::new()),
        })
    }

    /// The running zygote for `req`'s kind of exercise, started (again) when there is none or it
    /// died.
    fn zygote(&self, req: &RunRequest) -> Result<Arc<Zygote>, GradeError> {
        let kind = Kind::of(req);
        let mut slots = self.zygotes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, z)) = slots
            .iter()
            .find(|(k, z)| *k == kind && z.alive.load(Ordering::SeqCst))
        {
            return Ok(Arc::clone(z));
        }
        let z = Arc::new(self.start(req, &kind)?);
        slots.retain(|(k, _)| *k != kind);
        slots.push((kind, Arc::clone(&z)));
        Ok(z)
    }

    fn start(&self, req: &RunRequest, kind: &Kind) -> Result<Zygote, GradeError> {
        let python_err = |reason: String| GradeError::Python {
            path: self.base.python.clone(),
            reason,
        };
        let root = self.staging.path();
        let zygote_py = root.join("zygote.py");
        std::fs::write(&zygote_py, ZYGOTE_PY).context("writing the zygote")?;
        let (driver_py, _) = super::write_driver(root)?;
        let (ours, theirs) = seqpacket_pair().context("creating the zygote's socket")?;
        let theirs_fd = theirs.as_raw_fd();
        // The folder the zygote picks the CPU's vector ISA in (inductor builds a probe library
        // per ISA there, or finds it built): the shared cache where its runs write it (the
        // course's own), else a copy of it without the precompiled headers in the zygote's own
        // folder (students' runs each grade on a copy and never write the shared one back: with
        // no ISA picked here, every run probed it again, building the probes if the cache held
        // none). No copy, no pick: each run picks its own, as before.
        let warm_cache = match &kind.compile_cache {
            Some(shared) if kind.writes_cache => Some(shared.clone()),
            Some(shared) => {
                let own = root.join("inductor");
                super::seed_cache(shared, &own, super::Headers::Skip)
                    .ok()
                    .map(|()| own)
            }
            None => None,
        };
        let mut cmd = Command::new(&self.base.python);
        cmd.arg("-I")
            .arg("-B")
            .arg(&zygote_py)
            .arg(&driver_py)
            // an exercise that compiles: the compiler's modules imported once here too, and what
            // inductor computes once per process with a cache folder it may write (zygote.py)
            .args(kind.compile_cache.as_ref().map(|_| "--compile"))
            .args(
                warm_cache
                    .iter()
                    .flat_map(|c| [std::ffi::OsStr::new("--compile-cache"), c.as_os_str()]),
            )
            .current_dir(root)
            .env_clear()
            .envs(BASE_ENV)
            .env("HOME", root)
            .env("TMPDIR", root)
            .envs(super::cuda_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let reads: Vec<PathBuf> = super::read_only_cache(req).into_iter().collect();
        let prepared = super::sandbox_on().then(|| {
            Policy {
                read: {
                    let mut r = self.base.prefixes().to_vec();
                    r.push(req.course_path.clone());
                    r.extend(reads.iter().cloned()); // its children's links lead there
                    r
                },
                write: {
                    // the course's own runs write the shared compile cache in place
                    let mut w = vec![root.to_path_buf()];
                    w.extend(kind.compile_cache.clone().filter(|_| kind.writes_cache));
                    w
                },
            }
            .prepare()
        });
        let gaps = prepared
            .as_ref()
            .map_or_else(super::no_sandbox, |p| p.enforced.gaps());
        let mut prepared = prepared;
        // SAFETY: only system calls between fork and exec (see process::run).
        unsafe {
            cmd.pre_exec(move || {
                let core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &core);
                if let Some(sb) = prepared.as_mut() {
                    sb.apply_in_child()?;
                }
                process::inherit_as(theirs_fd, 3) // the socket is the zygote's fd 3
            });
        }
        sandbox::become_subreaper();
        let spawned = sandbox::spawn_tracked(&mut cmd);
        drop(theirs); // the zygote has its own copy
        let mut child = spawned.map_err(|e| python_err(format!("could not start: {e}")))?;
        let stderr = child.stderr.take().expect("stderr piped");
        let err_tail = Arc::new(Mutex::new(String::new()));
        {
            let tail = Arc::clone(&err_tail);
            std::thread::spawn(move || {
                use std::io::Read;
                let mut s = String::new();
                let _ = std::io::BufReader::new(stderr)
                    .take(64 << 10)
                    .read_to_string(&mut s);
                *tail.lock().unwrap_or_else(|e| e.into_inner()) = s;
            });
        }
        // the first message: ready (torch imported), or the socket closes (it failed)
        set_timeout(&ours, Some(READY_TIMEOUT));
        let first = recv(&ours);
        set_timeout(&ours, None);
        match first
            .as_deref()
            .map(serde_json::from_slice::<serde_json::Value>)
        {
            Ok(Ok(v)) if v["ready"] == true => {}
            _ => {
                let _ = child.kill();
                let status = child.wait().ok();
                sandbox::untrack(child.id());
                std::thread::sleep(Duration::from_millis(100));
                let why = err_tail.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let last = why.lines().last().unwrap_or("no message").to_string();
                return Err(python_err(format!(
                    "the warm interpreter did not start ({status:?}): {last}"
                )));
            }
        }
        let waiters: Arc<Mutex<HashMap<u64, Sender<Event>>>> = Arc::default();
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let reader_sock = ours.try_clone().context("cloning the zygote's socket")?;
        {
            let (waiters, alive) = (Arc::clone(&waiters), Arc::clone(&alive));
            std::thread::spawn(move || read_events(reader_sock, waiters, alive));
        }
        Ok(Zygote {
            sock: ours,
            process: Mutex::new(child),
            waiters,
            next: AtomicU64::new(1),
            send: Mutex::new(()),
            gaps,
            alive,
            reads,
        })
    }

    /// Start one staged run as a fork of the zygote and watch it like any run.
    /// `None`: the zygote was gone (or hung) before or while the run went on.
    fn launch(
        &self,
        z: &Zygote,
        req: &RunRequest,
        staged: &Staged,
    ) -> Result<Option<Finished>, GradeError> {
        let id = z.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = channel();
        z.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let io = |e: std::io::Error| GradeError::Python {
            path: self.base.python.clone(),
            reason: format!("the warm interpreter failed: {e}"),
        };
        let (out_r, out_w) = process::pipe().map_err(io)?;
        let (err_r, err_w) = process::pipe().map_err(io)?;
        let (res_r, res_w) = process::pipe().map_err(io)?;
        let (read, write) = staged
            .policy
            .as_ref()
            .map(Policy::expanded)
            .unwrap_or_default();
        let env: HashMap<&str, &str> = staged
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let msg = serde_json::json!({
            "id": id,
            "job": staged.job,
            "nonce": staged.nonce,
            "dir": staged.work,
            "env": env,
            "limits": {"data": staged.limits.data_bytes, "fsize": staged.limits.file_bytes},
            "landlock": staged.policy.is_some() && sandbox::landlock_abi() > 0,
            "read": read,
            "write": write,
        });
        let bytes = serde_json::to_vec(&msg).context("encoding the request")?;
        let start = Instant::now();
        let sent = {
            let _one_at_a_time = z.send.lock().unwrap_or_else(|e| e.into_inner());
            send_with_fds(
                z.sock.as_raw_fd(),
                &bytes,
                &[out_w.as_raw_fd(), err_w.as_raw_fd(), res_w.as_raw_fd()],
            )
        };
        drop((out_w, err_w, res_w)); // only the child keeps the write ends
        let forget = || {
            z.waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        };
        if sent.is_err() {
            forget();
            return Ok(None); // the zygote is gone
        }
        let streams = Streams::from_files(out_r, err_r, res_r);
        let pid = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Event::Started(pid)) => pid,
            Ok(Event::Failed(why)) => {
                forget();
                return Err(io(std::io::Error::other(format!(
                    "fork failed for {}: {why}",
                    req.submission.display()
                ))));
            }
            _ => {
                forget(); // gone, or hung: a fresh zygote next time
                return Ok(None);
            }
        };
        let mut child = Forked {
            pid,
            events: rx,
            status: None,
            gone: false,
        };
        let fin = process::watch(&mut child, &staged.limits, start, streams).map_err(io)?;
        forget();
        // the zygote died under this run (its child was then killed with its group): the run
        // says nothing about the submission
        Ok((!child.gone).then_some(fin))
    }
}

impl Executor for ZygoteExecutor {
    /// A run whose zygote died under it is run again on a fresh one, once; twice is an error
    /// (the grader cannot grade), never a verdict against the student.
    fn execute(&self, req: &RunRequest) -> Result<RunResult, GradeError> {
        for _attempt in 0..2 {
            let t = std::time::Instant::now();
            let z = self.zygote(req)?;
            // the shared precompiled headers are read in place only where the zygote's own
            // sandbox lets its children read them (it was started for an exercise with that cache)
            let readable = super::read_only_cache(req).is_none_or(|c| z.reads.contains(&c));
            let staged = self.base.stage(req, Some(self.staging.path()), readable)?;
            let stage_s = t.elapsed().as_secs_f64();
            if let Some(fin) = self.launch(&z, req, &staged)? {
                let mut result = self.base.finish(req, &staged, fin, z.gaps.clone())?;
                result.stage_s = stage_s;
                return Ok(result);
            }
            z.alive.store(false, Ordering::SeqCst);
        }
        Err(GradeError::Python {
            path: self.base.python.clone(),
            reason: format!(
                "the warm interpreter died twice while grading {} (GRADE_ZYGOTE=off grades with a fresh interpreter per run)",
                req.submission.display()
            ),
        })
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        let mut p = self.process.lock().unwrap_or_else(|e| e.into_inner());
        let _ = p.kill();
        let _ = p.wait();
        sandbox::untrack(p.id());
    }
}

/// A child the zygote forked: its end is reported on the socket, not by waitpid here.
struct Forked {
    pid: i32,
    events: Receiver<Event>,
    status: Option<ExitStatus>,
    /// The zygote died before reporting this child's end.
    gone: bool,
}

impl Forked {
    fn next(&mut self, wait: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            match self.events.recv_timeout(wait) {
                Ok(Event::Exited(raw)) => self.status = Some(ExitStatus::from_raw(raw)),
                Ok(Event::Gone) | Err(RecvTimeoutError::Disconnected) => {
                    // the zygote died: its orphaned child is killed with its group by `watch`
                    self.gone = true;
                    self.status = Some(ExitStatus::from_raw(libc::SIGKILL));
                }
                _ => {}
            }
        }
        self.status
    }
}

impl Watched for Forked {
    fn pgid(&self) -> i32 {
        self.pid
    }
    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        Ok(self.next(Duration::ZERO))
    }
    fn wait(&mut self) -> Option<ExitStatus> {
        self.next(Duration::from_secs(10))
    }
}

/// The zygote's messages, routed to whoever waits for each request.
fn read_events(
    sock: OwnedFd,
    waiters: Arc<Mutex<HashMap<u64, Sender<Event>>>>,
    alive: Arc<std::sync::atomic::AtomicBool>,
) {
    while let Ok(msg) = recv(&sock) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&msg) else {
            break;
        };
        let (id, event) = if let Some(id) = v["started"].as_u64() {
            (id, Event::Started(v["pid"].as_i64().unwrap_or(0) as i32))
        } else if let Some(id) = v["exited"].as_u64() {
            (id, Event::Exited(v["status"].as_i64().unwrap_or(0) as i32))
        } else if let Some(id) = v["error"].as_u64() {
            (
                id,
                Event::Failed(v["why"].as_str().unwrap_or("").to_string()),
            )
        } else {
            continue;
        };
        if let Some(tx) = waiters.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            let _ = tx.send(event);
        }
    }
    alive.store(false, Ordering::SeqCst);
    for tx in waiters.lock().unwrap_or_else(|e| e.into_inner()).values() {
        let _ = tx.send(Event::Gone);
    }
}

// -- a unix SOCK_SEQPACKET socket pair, messages with descriptors ------------------------------

fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair fills two fresh descriptors we then own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are ours, open, and owned once each.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_timeout(sock: &OwnedFd, t: Option<Duration>) {
    let tv = t.map_or(
        libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        |d| libc::timeval {
            tv_sec: d.as_secs() as libc::time_t,
            tv_usec: d.subsec_micros() as libc::suseconds_t,
        },
    );
    // SAFETY: setsockopt with a timeval we own.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
}

/// One message; an error at end of file (the zygote is gone) or timeout.
fn recv(sock: &OwnedFd) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: recv into a buffer we own, of its length.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        if n > 0 {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One message carrying `fds` (SCM_RIGHTS): the receiver gets its own copies.
fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_* compute sizes and offsets inside the control buffer sized by CMSG_SPACE
    // (u64 elements keep it aligned for cmsghdr); sendmsg reads only what msghdr points at.
    unsafe {
        let space = libc::CMSG_SPACE(payload) as usize;
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr() as *const u8,
            libc::CMSG_DATA(cmsg),
            payload as usize,
        );
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
