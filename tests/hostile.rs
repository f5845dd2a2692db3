//! The hostile suite: submissions in tests/fixtures/hostile/ that attack the grader, each graded
//! end to end by the real binary (lesson 04's scenario). Each must get FAIL on every criterion with
//! a clear reason, the grader must answer with a report (exit 1, never a crash or a hang), nothing
//! outside the run's temp dir may change (a canary file under target/ is checked), and nothing the
//! submission started may outlive the run.
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::RwLock;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fork bomb raises the user's task count to its limit: nothing else may spawn meanwhile.
static EXCLUSIVE: RwLock<()> = RwLock::new(());

const CANARY: &str = "the canary is alive\n";

fn canary_path() -> PathBuf {
    root().join("target/hostile-canary/canary.txt")
}

fn plant_canary() {
    std::fs::create_dir_all(canary_path().parent().unwrap()).unwrap();
    std::fs::write(canary_path(), CANARY).unwrap();
}

struct Graded {
    code: i32,
    report: Value,
    took: Duration,
}

fn grade(name: &str, extra: &[&str]) -> Graded {
    grade_file(
        name,
        &root().join(format!("tests/fixtures/hostile/{name}.py")),
        extra,
    )
}

/// As `grade`, the submission `name` read from `path`.
fn grade_file(name: &str, path: &std::path::Path, extra: &[&str]) -> Graded {
    plant_canary();
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args([
            "exercise",
            "04-checkpoint",
            "--format",
            "json",
            "--seed",
            "5",
        ])
        .arg("--submission")
        .arg(path)
        .args(extra)
        .env("GRADE_ROOT", root())
        .env_remove("GRADE_PYTHON")
        // the sandbox meets each attack itself: the course's Python would refuse most first
        .env("GRADE_POLICY", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{name}: the grader did not answer with a report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let g = Graded {
        code: out.status.code().unwrap_or(-1),
        report,
        took: start.elapsed(),
    };
    assert_eq!(g.code, 1, "{name}: graded as failing (exit 1)");
    for v in g.report["verdicts"].as_array().unwrap() {
        if v["status"] != "SKIP" && v["id"] != "instruments_intact" {
            assert_eq!(v["status"], "FAIL", "{name}: {} must fail", v["id"]);
            assert!(
                !v["why"]["en"].as_str().unwrap().is_empty(),
                "{name}: a reason"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(canary_path()).ok().as_deref(),
        Some(CANARY),
        "{name}: the canary outside the temp dir changed"
    );
    g
}

/// The run's failure or, when the run finished, the first failed criterion's reason.
fn reason(g: &Graded) -> String {
    if let Some(f) = g.report["run_failure"]["en"].as_str() {
        return f.to_string();
    }
    g.report["verdicts"][0]["why"]["en"]
        .as_str()
        .unwrap()
        .to_string()
}

fn stderr(g: &Graded) -> String {
    g.report["stderr_tail"].as_str().unwrap_or("").to_string()
}

#[test]
fn busy_threads_are_killed_at_the_timeout() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("busy_threads", &["--timeout", "6"]);
    assert!(
        reason(&g).contains("ran past its 6 s limit"),
        "{}",
        reason(&g)
    );
    assert!(g.took < Duration::from_secs(40));
}

#[test]
fn a_fork_bomb_is_contained() {
    let _alone = EXCLUSIVE.write().unwrap();
    let g = grade("fork_bomb", &["--timeout", "10"]);
    let why = reason(&g);
    assert!(
        why.contains("ran past its 10 s limit") || why.contains("processes (a fork bomb?)"),
        "{why}"
    );
    assert!(g.took < Duration::from_secs(60));
}

#[test]
fn a_gigabyte_of_output_is_capped() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("gigabyte_output", &[]);
    assert!(
        reason(&g).contains("gigabyte_output: no answer"),
        "{}",
        reason(&g)
    );
    assert!(stderr(&g).len() < 64 * 1024, "only the tail is kept");
}

#[test]
fn a_ten_gigabyte_file_stops_at_the_file_size_limit() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("ten_gigabyte_file", &[]);
    // Python ignores SIGXFSZ, so the write past RLIMIT_FSIZE raises EFBIG instead of killing it
    let why = reason(&g);
    assert!(
        why.contains("File too large") || why.contains("SIGXFSZ"),
        "{why}"
    );
}

#[test]
fn a_segfault_and_an_abort_are_reported() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("segfault", &[]);
    assert!(reason(&g).contains("SIGSEGV"), "{}", reason(&g));
    let g = grade("abort", &[]);
    assert!(reason(&g).contains("SIGABRT"), "{}", reason(&g));
}

#[test]
fn patching_torch_and_the_driver_is_caught() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("fake_closeness", &[]);
    let intact = g.report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "instruments_intact")
        .unwrap();
    assert_eq!(intact["status"], "FAIL");
    let why = intact["why"]["en"].as_str().unwrap();
    for patched in ["torch.allclose", "torch.equal", "Ctx.save_tensor"] {
        assert!(why.contains(patched), "{patched} not named: {why}");
    }
}

#[test]
fn the_solution_and_other_submissions_cannot_be_read() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("read_solution", &[]);
    assert!(
        reason(&g).contains("could not read the solution"),
        "{}",
        reason(&g)
    );
    assert!(stderr(&g).contains("Permission denied"), "{}", stderr(&g));
}

#[test]
fn files_outside_the_temp_dir_cannot_be_deleted() {
    let _shared = EXCLUSIVE.read().unwrap();
    let rubric = root().join("rubrics/04-checkpoint.yaml");
    let before = std::fs::read(&rubric).unwrap();
    let g = grade("delete_outside", &[]);
    assert!(stderr(&g).contains("PermissionError"), "{}", stderr(&g));
    assert_eq!(
        std::fs::read(&rubric).unwrap(),
        before,
        "the rubric is untouched"
    );
}

#[test]
fn the_graders_files_in_the_run_folder_are_read_only() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("rewrite_own_run", &[]);
    let err = stderr(&g);
    assert!(!err.contains("REWROTE"), "{err}");
    assert!(
        err.contains("denied 7 of 7; scratch written"),
        "every grader's file refused, the working directory writable: {err}"
    );
}

#[test]
fn no_network() {
    let _shared = EXCLUSIVE.read().unwrap();
    // a port of our own (two suites at once on one machine must not share one): the fixture's
    // 47831 becomes it
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let sub = tmp.path().join("open_socket.py");
    let src =
        std::fs::read_to_string(root().join("tests/fixtures/hostile/open_socket.py")).unwrap();
    std::fs::write(&sub, src.replace("47831", &port.to_string())).unwrap();
    let g = grade_file("open_socket", &sub, &[]);
    assert!(
        listener.accept().is_err(),
        "the submission reached a listener on the grader's loopback"
    );
    assert!(!stderr(&g).contains("connected to"), "{}", stderr(&g));
}

fn running(pattern: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(pattern)
            })
            .unwrap_or(false)
    })
}

#[test]
fn a_daemon_does_not_outlive_the_run() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("daemon", &[]);
    assert!(reason(&g).contains("daemon: no answer"), "{}", reason(&g));
    assert!(!running("sleep 987654"), "the daemon is still running");
}

#[test]
fn results_cannot_be_rewritten_after_the_driver_wrote_them() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("tamper_results", &[]);
    assert!(
        reason(&g).contains("did not carry exactly the grader's driver's records"),
        "{}",
        reason(&g)
    );
}

#[test]
fn neighbours_and_the_parent_are_out_of_reach() {
    let _shared = EXCLUSIVE.read().unwrap();
    let g = grade("attack_siblings", &[]);
    assert!(
        reason(&g).contains("attack_siblings: no answer"),
        "{}",
        reason(&g)
    );
    let tail = stderr(&g);
    assert_eq!(tail.matches(": refused: ").count(), 2, "{tail}");
    assert!(!tail.contains("succeeded"), "{tail}");
}
