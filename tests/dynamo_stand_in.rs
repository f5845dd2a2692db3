//! The driver's torch._dynamo stand-in (`src/driver/instruments.py`, `_dynamo_on_demand`): an
//! eager run never imports dynamo, and whatever does import it gets the real one, in the order and
//! with the results it would have had without the stand-in (issue 42: 0.75 s of lessons 03, 04, 06).
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn case(name: &str, plain: bool) -> Value {
    let out = Command::new(root().join(".venv/bin/python"))
        .current_dir(root())
        .arg("-I")
        .arg("tests/support/dynamo_cases.py")
        .arg(name)
        .arg(if plain { "plain" } else { "stand-in" })
        .arg(root().join("src/driver"))
        .output()
        .expect("running tests/support/dynamo_cases.py (./setup.sh makes .venv)");
    assert!(
        out.status.success(),
        "dynamo_cases.py {name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("one JSON line")
}

#[test]
fn eager_torch_never_imports_dynamo_and_computes_the_same() {
    let with = case("eager", false);
    let without = case("eager", true);
    assert_eq!(with["stand_in"], true, "{with}");
    assert_eq!(with["one_module"], true);
    assert_eq!(with["weights"], without["weights"]);
    assert_eq!(with["meta"], without["meta"]);
}

#[test]
fn a_submodule_import_loads_the_real_package() {
    let got = case("submodule", false);
    assert_eq!(got["submodule"], "torch._dynamo.eval_frame");
    assert_eq!(got["stand_in"], false, "{got}");
    assert_eq!(got["one_module"], true);
}

#[test]
fn compiling_after_the_stand_in_served_is_compiling_without_it() {
    let with = case("compile", false);
    let without = case("compile", true);
    assert_eq!(with["stand_in"], false, "{with}");
    assert_eq!(with["one_module"], true);
    for key in ["frames", "graph_breaks", "weights", "cached_disable"] {
        assert_eq!(with[key], without[key], "{key}: {with} vs {without}");
    }
    assert_eq!(
        with["cached_disable"],
        serde_json::json!(["_dynamo", "eval_frame.py"])
    );
}
