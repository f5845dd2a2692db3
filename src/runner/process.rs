//! One child process, held on a short leash: its own process group (killed whole on timeout and
//! after exit, strays swept), the sandbox (`sandbox.rs`), resource limits (data, file size, a
//! resident-memory watchdog that also holds on CUDA), and stdout/stderr captured as capped tails.
use super::sandbox::{self, Prepared};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most of each stream kept (its last bytes).
pub const TAIL_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub timeout: Duration,
    /// RLIMIT_DATA in bytes (None: unlimited; CUDA needs large mappings).
    pub data_bytes: Option<u64>,
    /// RLIMIT_FSIZE in bytes: the largest file the child may write.
    pub file_bytes: Option<u64>,
    /// Resident memory of the whole process group, watched from outside (holds on CUDA too,
    /// where RLIMIT_DATA cannot be used): over it, the group is killed.
    pub rss_bytes: Option<u64>,
}

#[derive(Debug)]
pub struct Finished {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    /// Killed by the memory watchdog at this many bytes resident, in this many processes.
    pub over_memory: Option<(u64, u64)>,
    /// Processes that outlived the run (daemons, escaped children) and were killed.
    pub strays: usize,
    pub wall: Duration,
    /// CLOCK_MONOTONIC seconds when the run was started (the clock of the driver's `timings`).
    pub started: f64,
    pub stdout: Tail,
    pub stderr: Tail,
    /// What arrived on the results channel (fd 3 in the child): the driver's one frame.
    pub results: Results,
}

/// The bytes written to the child's fd 3, a pipe the grader reads while the run goes on: once
/// written they cannot be rewritten (unlike a file in the run's directory), and the grader reads
/// nothing back from the directory the submission could write.
#[derive(Debug, Default, Clone)]
pub struct Results {
    pub bytes: Vec<u8>,
    /// More than `RESULTS_MAX` bytes arrived (the excess was dropped).
    pub overflow: bool,
    /// The channel did not reach end-of-file (a writer survived the sweep).
    pub open: bool,
}

/// The most the results channel keeps: far above any exercise's observations and tensors.
pub const RESULTS_MAX: usize = 512 << 20;
/// The child's end of the results channel.
pub const RESULTS_FD: i32 = 3;

/// The last `TAIL_BYTES` of a stream and how much it wrote in all.
#[derive(Debug, Default, Clone)]
pub struct Tail {
    pub bytes: Vec<u8>,
    pub total: u64,
}

impl Tail {
    pub fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.total as usize > self.bytes.len() {
            format!(
                "[… {} bytes cut …]\n{s}",
                self.total as usize - self.bytes.len()
            )
        } else {
            s
        }
    }
}

impl Finished {
    /// "exit status 1", "killed by signal 9", "timed out after 30 s".
    pub fn describe(&self) -> String {
        if self.timed_out {
            return format!(
                "timed out after {:.0} s and was killed",
                self.wall.as_secs_f64()
            );
        }
        if let Some((b, n)) = self.over_memory {
            return format!(
                "killed at {} MiB resident in {n} processes: over the memory limit",
                b >> 20
            );
        }
        match self.status {
            Some(s) if s.code().is_some() => format!("exit status {}", s.code().unwrap()),
            Some(s) => match s.signal() {
                Some(9) => "killed by signal 9 (SIGKILL: out of memory or over a limit?)".into(),
                Some(6) => "killed by signal 6 (SIGABRT: abort())".into(),
                Some(11) => "killed by signal 11 (SIGSEGV: a segmentation fault)".into(),
                Some(25) => {
                    "killed by signal 25 (SIGXFSZ: wrote a file past the 1 GiB limit)".into()
                }
                Some(sig) => format!("killed by signal {sig}"),
                None => "ended".into(),
            },
            None => "did not start".into(),
        }
    }
}

/// Read a stream on a thread, keeping its tail in a shared buffer (readable even if a stray
/// grandchild keeps the pipe open forever).
fn drain<R: Read + Send + 'static>(mut r: R) -> (Arc<Mutex<Tail>>, JoinHandle<()>) {
    let shared = Arc::new(Mutex::new(Tail::default()));
    let sink = Arc::clone(&shared);
    let handle = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut tail = sink.lock().unwrap_or_else(|e| e.into_inner());
            tail.total += n as u64;
            tail.bytes.extend_from_slice(&buf[..n]);
            if tail.bytes.len() > 2 * TAIL_BYTES {
                let cut = tail.bytes.len() - TAIL_BYTES;
                tail.bytes.drain(..cut);
            }
        }
    });
    (shared, handle)
}

fn collect((tail, handle): (Arc<Mutex<Tail>>, JoinHandle<()>)) -> Tail {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if t.bytes.len() > TAIL_BYTES {
        let cut = t.bytes.len() - TAIL_BYTES;
        t.bytes.drain(..cut);
    }
    t
}

/// A pipe: (read end, write end), both close-on-exec in the grader.
pub fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two fresh descriptors we own from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are ours and open; each File closes its own.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    })
}

/// In a child between fork and exec: make `fd` descriptor `target`, kept open across exec
/// (dup2 clears close-on-exec; when `fd` already is `target`, the flag is cleared by hand). Call
/// it after the sandbox is applied: `target` may be the sandbox's ruleset until then.
///
/// # Safety
/// Only between fork and exec (async-signal-safe system calls on descriptors of this process).
pub unsafe fn inherit_as(fd: i32, target: i32) -> std::io::Result<()> {
    let r = if fd == target {
        libc::fcntl(target, libc::F_SETFD, 0)
    } else {
        libc::dup2(fd, target)
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Read the results channel to its end on a thread, keeping at most `RESULTS_MAX` bytes. With
/// `GRADE_PROGRESS=probes` in the grader's environment (`grade exercise --progress`, and on a
/// terminal), each probe's start is said on stderr as it arrives (`⏳ probe NAME`): the lesson's
/// long steps, for a student waiting on `%grade` or `grade watch`. Only what the driver sent is
/// read; nothing here is judged (`channel::parse` does that after the run).
fn drain_results(mut r: std::fs::File) -> JoinHandle<Results> {
    let progress = std::env::var("GRADE_PROGRESS").is_ok_and(|v| v == "probes");
    std::thread::spawn(move || {
        let mut res = Results::default();
        let mut buf = vec![0u8; 1 << 16];
        let mut scanned = 0;
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            if res.bytes.len() + n > RESULTS_MAX {
                res.overflow = true;
            } else {
                res.bytes.extend_from_slice(&buf[..n]);
                if progress {
                    scanned = say_probes(&res.bytes, scanned);
                }
            }
        }
        res
    })
}

/// Says each probe start (`J n` + `["probe","NAME",null]`) among the complete frames from
/// `from`; returns where the first incomplete frame begins.
fn say_probes(bytes: &[u8], mut from: usize) -> usize {
    while let Some(nl) = bytes[from..].iter().position(|&b| b == b'\n') {
        let header = String::from_utf8_lossy(&bytes[from..from + nl]).into_owned();
        let body = from + nl + 1;
        let mut parts = header.split(' ');
        let len = match (
            parts.next(),
            parts.next().and_then(|n| n.parse::<usize>().ok()),
        ) {
            (Some("J" | "T"), Some(len)) => len,
            _ => {
                from = body; // the channel's first and last lines carry no payload
                continue;
            }
        };
        if bytes.len() < body + len {
            break;
        }
        if header.starts_with('J') {
            if let Ok(serde_json::Value::Array(rec)) =
                serde_json::from_slice::<serde_json::Value>(&bytes[body..body + len])
            {
                if rec.len() == 3 && rec[0] == "probe" && rec[2].is_null() {
                    if let Some(name) = rec[1].as_str() {
                        eprintln!("⏳ probe {name}");
                    }
                }
            }
        }
        from = body + len;
    }
    from
}

fn collect_results(handle: JoinHandle<Results>) -> Results {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if handle.is_finished() {
        handle.join().unwrap_or_default()
    } else {
        Results {
            open: true,
            ..Results::default()
        }
    }
}

/// Resident bytes of every process in group `pgid` (pages shared after a fork count once per
/// process: an overestimate that only matters for fork bombs), and how many processes.
fn group_rss(pgid: i32) -> (u64, u64) {
    // SAFETY: sysconf has no failure mode for _SC_PAGESIZE.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    let pages: Vec<u64> = dir
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            // after the comm: state ppid pgrp … rss is field 24 of stat (index 21 here)
            (f.get(2)?.parse::<i32>().ok()? == pgid).then(|| f.get(21)?.parse::<u64>().ok())?
        })
        .collect();
    (pages.iter().sum::<u64>() * page, pages.len() as u64)
}

/// Run `cmd` to completion or timeout, writing `stdin_line` to its stdin first, inside
/// `sandbox` when given; the child's fd 3 is the results channel (`Finished::results`).
pub fn run(
    mut cmd: Command,
    stdin_line: &str,
    limits: &Limits,
    sandbox: Option<Prepared>,
) -> std::io::Result<Finished> {
    let (data, fsize) = (limits.data_bytes, limits.file_bytes);
    let mut sandbox = sandbox;
    let (results_rx, results_w) = pipe()?;
    let results_fd = results_w.as_raw_fd();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: only async-signal-safe calls (dup2, fcntl, setrlimit, the sandbox's syscalls)
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let set = |res, v: u64| {
                let lim = libc::rlimit {
                    rlim_cur: v as libc::rlim_t,
                    rlim_max: v as libc::rlim_t,
                };
                libc::setrlimit(res, &lim);
            };
            set(libc::RLIMIT_CORE, 0);
            if let Some(d) = data {
                set(libc::RLIMIT_DATA, d);
            }
            if let Some(f) = fsize {
                set(libc::RLIMIT_FSIZE, f);
            }
            if let Some(sb) = sandbox.as_mut() {
                sb.apply_in_child()?;
            }
            inherit_as(results_fd, RESULTS_FD) // last: after the sandbox
        });
    }
    sandbox::become_subreaper();
    let start = Instant::now();
    let spawned = sandbox::spawn_tracked(&mut cmd);
    drop(results_w); // only the child (and its descendants) keep the write end
    let mut child = spawned?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{stdin_line}");
    }
    let streams = Streams {
        out: drain(child.stdout.take().expect("stdout piped")),
        err: drain(child.stderr.take().expect("stderr piped")),
        results: drain_results(results_rx),
    };
    watch(&mut child, limits, start, streams)
}

/// CLOCK_MONOTONIC in seconds: the clock Python's `time.clock_gettime(CLOCK_MONOTONIC)` reads in
/// the child, so the driver's stage timings line up with the grader's start of the process.
pub fn monotonic_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A process being watched: a child of the grader, or one the zygote forked for it.
pub trait Watched {
    /// Its process group (its own pid).
    fn pgid(&self) -> i32;
    /// Its exit status once it ended (never blocks).
    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>>;
    /// Its exit status, after it was killed.
    fn wait(&mut self) -> Option<ExitStatus>;
    /// It ended and was reaped: forget it before the stray sweep.
    fn forget(&mut self) {}
}

impl Watched for Child {
    fn pgid(&self) -> i32 {
        self.id() as i32
    }
    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        Child::try_wait(self)
    }
    fn wait(&mut self) -> Option<ExitStatus> {
        Child::wait(self).ok()
    }
    fn forget(&mut self) {
        sandbox::untrack(self.id());
    }
}

/// What the grader reads from a run while it goes on: stdout, stderr, the results channel.
pub struct Streams {
    out: (Arc<Mutex<Tail>>, JoinHandle<()>),
    err: (Arc<Mutex<Tail>>, JoinHandle<()>),
    results: JoinHandle<Results>,
}

impl Streams {
    /// Read ends of three pipes (stdout, stderr, results), each drained on its own thread.
    pub fn from_files(out: std::fs::File, err: std::fs::File, results: std::fs::File) -> Streams {
        Streams {
            out: drain(out),
            err: drain(err),
            results: drain_results(results),
        }
    }
}

/// Watch a started run to its end: the timeout and the memory watchdog kill its whole group;
/// then whatever it left (its group, strays reparented to the grader) is killed too, and the
/// streams are collected.
pub fn watch(
    child: &mut dyn Watched,
    limits: &Limits,
    start: Instant,
    streams: Streams,
) -> std::io::Result<Finished> {
    let pgid = child.pgid();
    let kill = || {
        // SAFETY: killpg on the group made for this run; a stale id only yields ESRCH.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    };
    let mut timed_out = false;
    let mut over_memory = None;
    let mut polls = 0u64;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() >= limits.timeout {
            timed_out = true;
            kill();
            break child.wait();
        }
        polls += 1;
        if let Some(max) = limits.rss_bytes.filter(|_| polls.is_multiple_of(10)) {
            let (rss, procs) = group_rss(pgid);
            if rss > max {
                over_memory = Some((rss, procs));
                kill();
                break child.wait();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = start.elapsed();
    let started = monotonic_s() - wall.as_secs_f64();
    child.forget();
    // Whatever the submission left running in its group (forked children holding the pipes) goes
    // too, and so does anything that left the group (setsid daemons) once it is orphaned.
    kill();
    let strays = sandbox::sweep_strays();
    let (stdout, stderr) = (collect(streams.out), collect(streams.err));
    let results = collect_results(streams.results);
    Ok(Finished {
        status,
        timed_out,
        over_memory,
        strays,
        wall,
        started,
        stdout,
        stderr,
        results,
    })
}
