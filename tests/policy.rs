//! The course's Python (`course.yaml` `policy:`, enforced by `src/driver/policy.py`), case by case
//! and outside any grading (`tests/fixtures/policy/`, its README): every careful style runs to its
//! end with no refusal and no graph break the guards add to `torch.compile`; every door a cheat
//! who has read the grader would try is refused at the line marked `# REFUSED`, before the file
//! runs or when it reaches the door. One Python process runs every case (~4 s with torch).
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cases(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(root().join("tests/fixtures/policy").join(kind))
            .expect("tests/fixtures/policy")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "py"))
            .collect();
    files.sort();
    files
}

/// The line a refused case marks `# REFUSED`.
fn marked_line(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .position(|l| l.contains("# REFUSED"))
        .map(|i| i as u64 + 1)
        .unwrap_or_else(|| panic!("{} marks no line `# REFUSED`", path.display()))
}

fn run(files: &[PathBuf]) -> Vec<Value> {
    let course = grade::course::Course::locate(Some(root())).expect("the course");
    let policy = course.file().expect("course.yaml").policy;
    let dir = tempfile::tempdir().unwrap();
    let policy_json = dir.path().join("policy.json");
    std::fs::write(&policy_json, serde_json::to_vec(&policy).unwrap()).unwrap();
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("tests/support/policy_cases.py"))
        .arg(&policy_json)
        .arg(root().join("src/driver/policy.py"))
        .args(files)
        .output()
        .expect("running tests/support/policy_cases.py (./setup.sh makes .venv)");
    assert!(
        out.status.success(),
        "policy_cases.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("policy_cases.py's JSON")
}

fn lines(findings: &Value) -> Vec<String> {
    findings
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| format!("line {}: {}", f["line"], f["en"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn careful_styles_run_and_every_door_is_refused_at_its_line() {
    let allowed = cases("allowed");
    let refused = cases("refused");
    assert!(allowed.len() >= 6 && refused.len() >= 20);
    let mut files = allowed.clone();
    files.extend(refused.iter().cloned());
    let results = run(&files);
    assert_eq!(results.len(), files.len());
    let mut problems = Vec::new();
    for (path, r) in files.iter().zip(&results) {
        let name = path.file_name().unwrap().to_string_lossy();
        let found: Vec<String> = lines(&r["static"])
            .into_iter()
            .chain(lines(&r["runtime"]))
            .collect();
        if allowed.contains(path) {
            if !found.is_empty() || !r["error"].is_null() {
                problems.push(format!(
                    "allowed/{name}: refused or failed: {found:?} {}",
                    r["error"]
                ));
            }
            if r["graph_breaks"] != 0 {
                problems.push(format!(
                    "allowed/{name}: torch.compile saw {} graph breaks",
                    r["graph_breaks"]
                ));
            }
        } else {
            let want = marked_line(path);
            let first = r["static"]
                .get(0)
                .or_else(|| r["runtime"].get(0))
                .and_then(|f| f["line"].as_u64());
            if first != Some(want) {
                problems.push(format!(
                    "refused/{name}: expected a refusal at line {want}, got {found:?} (error {})",
                    r["error"]
                ));
            }
            // a refusal at run time stops the file where it is refused
            if r["static"].as_array().is_some_and(|a| a.is_empty())
                && r["error"]["type"] != "PolicyRefusal"
            {
                problems.push(format!(
                    "refused/{name}: ran past its refusal: {}",
                    r["error"]
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_refusal_says_what_and_what_to_use_instead_in_both_languages() {
    let r = run(&[root().join("tests/fixtures/policy/refused/disable_torch_function.py")]);
    let f = &r[0]["runtime"][0];
    assert_eq!(f["code"], "policy");
    assert_eq!(f["what"], "torch._C");
    let en = f["en"].as_str().unwrap();
    let zh = f["zh"].as_str().unwrap();
    assert!(
        en.contains("not part of the course's Python") && en.contains("torch.no_grad()"),
        "{en}"
    );
    assert!(
        zh.contains("不属于课程的 Python") && zh.contains("torch.no_grad()"),
        "{zh}"
    );
}
