//! The sandbox around a submission's process (docs/how-grading-works.md, "Security"): Landlock
//! file-system rules (read-only: the Python environment, the course package, system libraries;
//! read-write: the run's own temporary directory), Landlock TCP and signal scoping, a fresh
//! network namespace, no capabilities (also as root), a task limit that stops fork bombs, and a
//! sweep that kills strays (daemons, double forks) that try to outlive the run. What the platform
//! cannot enforce is reported once per run, never silently skipped.
use crate::i18n::Text;
use crate::text;
use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The Landlock ABI whose rights the grader asks for (file system, TCP, signal/socket scopes).
const ABI_WANTED: ABI = ABI::V6;
/// `CAP_SETPCAP` (linux/capability.h): needed to drop the others, so dropped last.
const CAP_SETPCAP: libc::c_int = 8;
/// Tasks (processes and threads) a run may add to its user's count: torch starts a few dozen.
const TASK_ALLOWANCE: u64 = 512;
/// Read-only system locations a Python + libtorch process needs.
const SYSTEM_READ: [&str; 9] = [
    "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/opt",
];
/// Device files a run may read and write (CUDA's are added when present).
const DEVICES_RW: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/shm",
];

/// What one run may touch.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// How much of the sandbox this platform enforces (reported when anything is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enforced {
    /// Landlock ABI in force, 0 when the kernel has none.
    pub landlock_abi: i32,
    pub network_namespace: bool,
    /// Capabilities dropped (the grader runs as root).
    pub root: bool,
}

impl Enforced {
    /// One line per protection the platform could not give, for the report.
    pub fn gaps(&self) -> Vec<Text> {
        let mut out = Vec::new();
        if self.landlock_abi == 0 {
            out.push(text!(
                "内核没有 Landlock：提交的代码可以读写评分器用户能访问的所有文件（其余限制仍然有效）",
                "this kernel has no Landlock: the submission can read and write whatever the grader's user can (the other limits still hold)"
            ));
        } else if self.landlock_abi < 4 && !self.network_namespace {
            out.push(text!(
                format!("Landlock ABI {} 不能限制网络，且无法创建网络命名空间：提交的代码可以联网", self.landlock_abi),
                format!("Landlock ABI {} cannot restrict the network and no network namespace could be made: the submission can reach the network", self.landlock_abi)
            ));
        }
        out
    }
}

/// The kernel's Landlock ABI (0: none).
pub fn landlock_abi() -> i32 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    v.max(0) as i32
}

/// Can this process give a child a fresh network namespace? (Asked once: a child `true` tries.)
pub fn netns_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        use std::os::unix::process::CommandExt;
        let mut probe = std::process::Command::new("/bin/true");
        // SAFETY: unshare is async-signal-safe.
        unsafe {
            probe.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        quietly(|| probe.status().map(|s| s.success()).unwrap_or(false))
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no failure mode.
    unsafe { libc::geteuid() == 0 }
}

/// Tasks (threads included) whose real uid is `uid`: what RLIMIT_NPROC counts.
fn tasks_of(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for entry in dir.flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(uid as u64) {
            n += field("Threads:").unwrap_or(1);
        }
    }
    n
}

/// Everything prepared in the parent, applied in the child between fork and exec.
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    netns: bool,
    drop_caps: bool,
    nproc: u64,
    pub enforced: Enforced,
}

impl Policy {
    /// The rules for one run. Paths that do not exist are left out (Landlock needs a file).
    pub fn prepare(&self) -> Prepared {
        let abi = landlock_abi();
        let ruleset = if abi > 0 { self.ruleset().ok() } else { None };
        let netns = netns_available();
        let root = is_root();
        // SAFETY: getuid has no failure mode.
        let uid = unsafe { libc::getuid() };
        Prepared {
            enforced: Enforced {
                landlock_abi: if ruleset.is_some() { abi } else { 0 },
                network_namespace: netns,
                root,
            },
            ruleset,
            netns,
            drop_caps: root,
            nproc: tasks_of(uid) + TASK_ALLOWANCE,
        }
    }

    /// Every path the rules name, as (read-only, read-write): the policy's own plus the system
    /// locations and device files every run needs; paths that do not exist are left out. The
    /// zygote's children apply the same lists as their own Landlock layer (`zygote.py`).
    pub fn expanded(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let existing = |paths: Vec<PathBuf>| -> Vec<PathBuf> {
            paths.into_iter().filter(|p| p.exists()).collect()
        };
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        read.extend(self.read.iter().cloned());
        let mut write: Vec<PathBuf> = DEVICES_RW.iter().map(PathBuf::from).collect();
        write.extend(cuda_devices());
        write.extend(self.write.iter().cloned());
        (existing(read), existing(write))
    }

    fn ruleset(&self) -> Result<RulesetCreated, landlock::RulesetError> {
        let (read, write) = self.expanded();
        Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI_WANTED))?
            .handle_access(AccessNet::from_all(ABI_WANTED))?
            .scope(Scope::from_all(ABI_WANTED))?
            .create()?
            .add_rules(path_beneath_rules(read, AccessFs::from_read(ABI_WANTED)))?
            .add_rules(path_beneath_rules(write, AccessFs::from_all(ABI_WANTED)))
    }
}

fn cuda_devices() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nvidia") || n == "dri")
        })
        .collect()
}

impl Prepared {
    /// In the child, between fork and exec: network namespace, task limit, Landlock, and (as
    /// root) every capability dropped from the bounding set so the exec'd program has none.
    /// Only system calls; no allocation unless an error is returned.
    pub fn apply_in_child(&mut self) -> std::io::Result<()> {
        // SAFETY (all blocks below): plain system calls on this (single-threaded) child.
        if self.netns && unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let lim = libc::rlimit {
            rlim_cur: self.nproc as libc::rlim_t,
            rlim_max: self.nproc as libc::rlim_t,
        };
        unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &lim) };
        if let Some(rs) = self.ruleset.take() {
            rs.restrict_self()
                .map_err(|e| std::io::Error::other(format!("landlock: {e}")))?;
        } else {
            unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        }
        if self.drop_caps {
            // without CAP_SYS_RESOURCE and CAP_SYS_ADMIN, RLIMIT_NPROC holds for root too
            for cap in (0..=63).filter(|&c| c != CAP_SETPCAP) {
                unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
            }
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, CAP_SETPCAP, 0, 0, 0) };
        }
        Ok(())
    }
}

/// Children the runner started and still waits for; every other process reparented to the
/// grader (it is a child subreaper) is a stray: a daemon or an orphan of a finished run.
fn live_children() -> &'static Mutex<HashSet<i32>> {
    static LIVE: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Make the grader the reaper of its descendants' orphans, so no double fork escapes the sweep.
pub fn become_subreaper() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: prctl with constant arguments.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    });
}

fn track(pid: u32) {
    live_children()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pid as i32);
}

/// Held while a child is spawned and registered, while a short-lived helper child lives, and
/// while strays are swept: a sweep in one thread never mistakes another thread's child, started
/// a moment ago and not yet registered, for a stray (`grade check --jobs`, `grade batch`).
fn spawn_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spawn `cmd` and register it as a live child, with no sweep in between.
pub fn spawn_tracked(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    let _held = spawn_lock();
    let child = cmd.spawn()?;
    track(child.id());
    Ok(child)
}

/// Run a short-lived helper child (`f` spawns and waits for it) with no sweep meanwhile.
pub fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let _held = spawn_lock();
    f()
}

pub fn untrack(pid: u32) {
    live_children()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(pid as i32));
}

fn parent_of(pid: &Path) -> Option<i32> {
    let stat = std::fs::read_to_string(pid.join("stat")).ok()?;
    // pid (comm) state ppid …: comm may hold spaces and parentheses; split after the last ')'
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Kill and reap every stray reparented to the grader. Returns how many were found.
pub fn sweep_strays() -> usize {
    let _held = spawn_lock();
    // SAFETY: getpid has no failure mode.
    let me = unsafe { libc::getpid() };
    let mut killed = 0;
    for _round in 0..50 {
        let live = live_children()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let strays: Vec<i32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                (parent_of(&e.path()) == Some(me) && !live.contains(&pid)).then_some(pid)
            })
            .collect();
        if strays.is_empty() {
            break;
        }
        for pid in strays {
            // SAFETY: signalling and reaping a process whose parent is this process.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            for _ in 0..200 {
                // SAFETY: as above; WNOHANG never blocks on a process stuck in the kernel.
                if unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } != 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            killed += 1;
        }
    }
    killed
}
