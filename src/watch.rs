//! `grade watch ID`: regrade the working copy (or `--submission FILE`, `.py` or `.ipynb`) each
//! time it is saved, like `rustlings watch`: file events from `notify` (debounced; the folder is
//! watched, so editors that save by renaming a new file over the old one count), the screen
//! cleared, the compact report and the time it took; a crash, syntax error or unreadable notebook
//! is shown and the watch goes on; `q` (or Ctrl-C) quits, `r` regrades now.
use crate::cli::WatchArgs;
use crate::course::Course;
use crate::device::Device;
use crate::error::{exit, GradeError};
use crate::i18n::Lang;
use crate::pipeline::{self, GradeRequest};
use crate::report;
use crate::runner::Executor;
use notify_debouncer_full::notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{new_debouncer, DebounceEventResult};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What wakes the watch up.
#[derive(Debug, PartialEq)]
enum Wake {
    Saved,
    Regrade,
    Quit,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM: quit after the grading in progress (its Python runs in its own process
/// group, so the terminal's Ctrl-C does not reach it).
fn catch_signals() {
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART; // the grading in progress reads and waits on
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// The terminal without line buffering or echo while the watch runs (keys arrive one by one);
/// restored when dropped. Ctrl-C still raises SIGINT.
struct KeyMode {
    orig: libc::termios,
}

impl KeyMode {
    fn enable() -> Option<KeyMode> {
        if !std::io::stdin().is_terminal() {
            return None;
        }
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return None;
            }
            let orig = t;
            t.c_lflag &= !(libc::ICANON | libc::ECHO);
            t.c_cc[libc::VMIN] = 1;
            t.c_cc[libc::VTIME] = 0;
            (libc::tcsetattr(0, libc::TCSANOW, &t) == 0).then_some(KeyMode { orig })
        }
    }
}

impl Drop for KeyMode {
    fn drop(&mut self) {
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.orig);
        }
    }
}

/// Keys from stdin, one byte at a time (a line at a time when stdin is not a terminal).
fn read_keys(tx: mpsc::Sender<Wake>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut b = [0u8; 1];
        while let Ok(1) = stdin.read(&mut b) {
            let wake = match b[0] {
                b'q' | b'Q' | 3 | 4 => Wake::Quit,
                b'r' | b'R' => Wake::Regrade,
                _ => continue,
            };
            if tx.send(wake).is_err() {
                break;
            }
        }
    });
}

/// Watch `file`'s folder; a debounced batch of events touching `file` (not mere reads) is one save.
fn watch_file(
    file: &Path,
    tx: mpsc::Sender<Wake>,
) -> Result<impl Drop, notify_debouncer_full::notify::Error> {
    let name = file.file_name().map(|n| n.to_os_string());
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut debouncer = new_debouncer(
        Duration::from_millis(200),
        None,
        move |res: DebounceEventResult| {
            let Ok(events) = res else { return };
            let saved = events.iter().any(|e| {
                !matches!(e.kind, EventKind::Access(_))
                    && e.paths
                        .iter()
                        .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
            });
            if saved {
                let _ = tx.send(Wake::Saved);
            }
        },
    )?;
    debouncer.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(debouncer)
}

/// `grade watch`: grade, then wait for a save, `r`, `q` or Ctrl-C; exit 0 when asked to quit.
pub fn run(course: &Course, args: &WatchArgs, executor: &dyn Executor) -> Result<i32, GradeError> {
    course.check_id(&args.id)?;
    let file: PathBuf = args
        .submission
        .clone()
        .unwrap_or_else(|| course.starter(&args.id));
    if !file.is_file() {
        return Err(GradeError::SubmissionMissing {
            path: file,
            id: args.id.clone(),
        });
    }
    let device = args.device.resolve()?;
    let (tx, rx) = mpsc::channel();
    let _watcher = watch_file(
        &std::path::absolute(&file).unwrap_or(file.clone()),
        tx.clone(),
    )
    .map_err(|e| anyhow::anyhow!("watching {}: {e}", file.display()))?;
    catch_signals();
    let _keys = KeyMode::enable();
    read_keys(tx);
    let mut round = 0;
    loop {
        round += 1;
        grade_once(course, args, executor, &file, device, round);
        // wait for a save (several queued saves are one regrade), `r`, `q` or a signal
        let mut wake = None;
        while wake.is_none() {
            if STOP.load(Ordering::SeqCst) {
                return Ok(exit::PASS);
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(w) => wake = Some(w),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(exit::PASS),
            }
        }
        let mut queued = wake.into_iter().chain(rx.try_iter());
        if queued.any(|w| w == Wake::Quit) {
            return Ok(exit::PASS);
        }
    }
}

/// One grading: clear the screen, the header, the compact report (or why it could not grade),
/// the time it took and the keys.
fn grade_once(
    course: &Course,
    args: &WatchArgs,
    executor: &dyn Executor,
    file: &Path,
    device: Device,
    round: u32,
) {
    let lang = args.lang;
    let zh = lang == Lang::Zh;
    let tty = std::io::stdout().is_terminal();
    let mut out = String::new();
    if tty {
        out.push_str("\x1b[2J\x1b[3J\x1b[H");
    }
    out.push_str(&if zh {
        format!(
            "grade watch {} — {}（第 {round} 次评分）…\n",
            args.id,
            file.display()
        )
    } else {
        format!(
            "grade watch {} — {} (grading #{round}) …\n",
            args.id,
            file.display()
        )
    });
    print!("{out}");
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let result = pipeline::grade(
        course,
        &GradeRequest {
            id: args.id.clone(),
            submission: file.to_path_buf(),
            device,
            seed: args.seed,
            timeout: args.timeout,
            dump_observations: None,
            trusted: args.submission.is_none(),
        },
        executor,
    );
    let took = start.elapsed().as_secs_f64();
    let color = tty && std::env::var_os("NO_COLOR").is_none();
    let body = match &result {
        Ok(report) => {
            crate::state::record(course, &args.id, file, report);
            report::exporter(report::Format::Table, color).render(report, lang)
        }
        Err(e) => {
            if zh {
                format!("无法评分：{e}\n")
            } else {
                format!("could not grade: {e}\n")
            }
        }
    };
    let keys = if zh {
        format!(
            "\n评分用时 {took:.1} s。正在监视 {}：保存即重新评分，r 立即重评，q 退出\n",
            file.display()
        )
    } else {
        format!(
            "\ngraded in {took:.1} s. Watching {}: save to regrade, r to regrade now, q to quit\n",
            file.display()
        )
    };
    print!("{body}{keys}");
    let _ = std::io::stdout().flush();
}
