//! Link the `grade` binary against libtorch found the same way torch-sys finds it, and bake an
//! rpath so the binary runs without LD_LIBRARY_PATH. Only libtorch's CPU half is linked (no symbol
//! of libtorch_cuda is referenced, and the linker's `--as-needed` drops it): `main` loads
//! libtorch_cuda itself where an NVIDIA driver is installed (`device::load_cuda_runtime`), so a
//! machine without one does not pay for loading the CUDA libraries at every start.
use std::path::PathBuf;
use std::process::Command;

fn torch_lib_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("LIBTORCH") {
        return Some(PathBuf::from(dir).join("lib"));
    }
    let python = std::env::var("PYTHON_SYS_EXECUTABLE").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .args([
            "-c",
            "import torch, os; print(os.path.dirname(torch.__file__))",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("lib"))
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    println!("cargo:rerun-if-env-changed=PYTHON_SYS_EXECUTABLE");
    if let Some(lib) = torch_lib_dir() {
        println!("cargo:rustc-link-arg=-Wl,-rpath={}", lib.display());
        println!("cargo:rustc-link-search=native={}", lib.display());
    }
}
