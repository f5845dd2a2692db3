//! `grade export`: what a grading platform runs, built from this course. `grade export gradescope
//! ID` writes Gradescope's autograder zip (`gradescope.rs`). PrairieLearn needs no export: its
//! questions name the course image (`Containerfile`) and `examples/prairielearn/entrypoint.sh`.
pub mod gradescope;

use crate::cli::ExportCommand;
use crate::course::Course;
use crate::error::{exit, GradeError};

pub fn run(course: &Course, cmd: &ExportCommand) -> Result<i32, GradeError> {
    match cmd {
        ExportCommand::Gradescope(a) => {
            let done = gradescope::export(course, &a.id, &a.out)?;
            eprintln!("{}", gradescope::advice(&done, &a.out));
            Ok(exit::PASS)
        }
    }
}
