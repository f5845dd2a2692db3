//! Helpers the end-to-end test files share (`mod support;`).
use serde_json::Value;

/// `id  STATUS` per line: the stable part of a graded report, as snapshotted.
#[allow(dead_code)]
pub fn verdict_table(report: &Value) -> String {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{:<28} {}",
                v["id"].as_str().unwrap(),
                v["status"].as_str().unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A page as headless Chromium rendered it: the DOM after its scripts ran, and every console
/// message (our pages log nothing, so any is a defect).
#[allow(dead_code)]
pub struct Rendered {
    pub dom: String,
    pub console: Vec<String>,
}

/// Debian's `chromium` (test.sh installs it). None when absent; in CI (`CI` set) that is a failure.
#[allow(dead_code)]
pub fn chromium() -> Option<std::path::PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|n| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(n))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed (test.sh installs it: apt-get install -y chromium)"
        );
        eprintln!("note: no chromium here; the rendered-page checks are skipped (CI runs them)");
    }
    found
}

/// Render `page` (a file, `#fragment` allowed) in headless Chromium: the DOM after its scripts
/// ran, console messages, and a screenshot into `shot`.
#[allow(dead_code)]
pub fn render(chromium: &std::path::Path, page: &str, shot: &std::path::Path) -> Rendered {
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[String]| {
        let o = std::process::Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("file://{page}"))
            .output()
            .expect("chromium runs");
        assert!(
            o.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    let o = run(&["--dump-dom".into()]);
    let console = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(String::from)
        .collect();
    if let Some(dir) = shot.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    run(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1200,2400".into(),
        "--hide-scrollbars".into(),
    ]);
    assert!(shot.is_file(), "a screenshot at {}", shot.display());
    Rendered {
        dom: String::from_utf8_lossy(&o.stdout).into_owned(),
        console,
    }
}
