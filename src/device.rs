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
