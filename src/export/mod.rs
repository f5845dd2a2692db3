//! `grade export`: what a grading platform runs, built from this course. `grade export gradescope
//! ID` writes Gradescope's autograder zip (`gradescope.rs`). PrairieLearn needs no export: its
//! questions name the course image (`Containerfile`) and `examples/prairielearn/entrypoint.sh`.
pub mod gradescope;

use crate::course::Course;
use crate::error::{exit, GradeError};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum ExportCommand {
    /// Gradescope's autograder zip: setup.sh and run_autograder at its root, the course in course/.
    /// Upload it on the assignment's "Configure Autograder" page.
    Gradescope(GradescopeArgs),
}

#[derive(Args, Debug)]
pub struct GradescopeArgs {
    /// Exercise id the autograder grades
    pub id: String,
    /// Where to write the zip
    #[arg(long, default_value = "autograder.zip")]
    pub out: PathBuf,
}

pub fn run(course: &Course, cmd: &ExportCommand) -> Result<i32, GradeError> {
    match cmd {
        ExportCommand::Gradescope(a) => {
            let done = gradescope::export(course, &a.id, &a.out)?;
            eprintln!("{}", gradescope::advice(&done, &a.out));
            Ok(exit::PASS)
        }
    }
}
