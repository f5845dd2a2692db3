//! The device a run grades on. Below every module that names it (the runner runs on it, the
//! rubric engine skips criteria `only_on` another one, `grade check` reads expectations per device).

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cpu,
    Cuda,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// libtorch's CUDA half (`libtorch_cuda.so` and the CUDA libraries it needs), loaded when this
/// machine has an NVIDIA driver (`libcuda.so.1` opens), before anything asks torch about CUDA:
/// its static registrations (the CUDA hooks, every CUDA kernel) then happen as they would had the
/// binary been linked against it, which it is not (build.rs): on a machine without a driver it
/// could never be used, and loading it is a third of `grade`'s own start (0.1 s of every
/// grading). Called first thing in `main`; later calls say what the first one found.
pub fn load_cuda_runtime() -> &'static CudaRuntime {
    static FOUND: std::sync::OnceLock<CudaRuntime> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        use std::ffi::{CStr, CString};
        let open = |name: &str, flags: libc::c_int| {
            let name = CString::new(name).expect("no NUL in a library name");
            // SAFETY: dlopen with a valid C string; the handle is kept for the process's life.
            // dlerror's message is copied at once, on this thread, as it documents.
            let handle = unsafe { libc::dlopen(name.as_ptr(), flags) };
            if handle.is_null() {
                let e = unsafe { libc::dlerror() };
                Err(if e.is_null() {
                    String::new()
                } else {
                    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
                })
            } else {
                Ok(())
            }
        };
        // (both found as the libraries the binary links are: its runpath, then the system's)
        if open("libcuda.so.1", libc::RTLD_LAZY | libc::RTLD_LOCAL).is_err() {
            return CudaRuntime::NoDriver;
        }
        match open("libtorch_cuda.so", libc::RTLD_NOW | libc::RTLD_GLOBAL) {
            Ok(()) => CudaRuntime::Loaded,
            Err(why) => CudaRuntime::Failed(why),
        }
    })
}

/// What `load_cuda_runtime` found: said when `--device cuda` cannot be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaRuntime {
    /// no NVIDIA driver (libcuda.so.1 does not open): libtorch_cuda was not loaded
    NoDriver,
    /// the driver is there and libtorch_cuda is loaded
    Loaded,
    /// the driver is there but libtorch_cuda.so did not load (dlerror's message)
    Failed(String),
}

impl std::fmt::Display for CudaRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CudaRuntime::NoDriver => write!(
                f,
                "no NVIDIA driver on this machine (libcuda.so.1 not found)"
            ),
            CudaRuntime::Loaded => write!(
                f,
                "the NVIDIA driver and libtorch_cuda are loaded, but torch sees no GPU"
            ),
            CudaRuntime::Failed(why) => write!(
                f,
                "the NVIDIA driver is there but libtorch_cuda.so did not load: {why}"
            ),
        }
    }
}
