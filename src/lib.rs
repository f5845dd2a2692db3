//! `grade`: grades the PyTorch performance course's exercises. See ARCHITECTURE.md.
pub mod batch;
pub mod check;
pub mod checks;
pub mod cli;
pub mod course;
pub mod error;
pub mod export;
pub mod gradebook;
pub mod i18n;
pub mod measurement;
pub mod observations;
pub mod pipeline;
pub mod reference;
pub mod report;
pub mod runner;
pub mod spec;
pub mod workload;
