//! `junit.xml`: one testsuite per student and exercise, one testcase per criterion (FAIL is a
//! failure, SKIP skipped); a missing submission is one failed testcase.
use super::{write_atomic, Gradebook, GradebookExporter, GRADED};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::path::Path;
use std::time::Duration;

pub struct JunitExporter;

pub fn render(book: &Gradebook) -> anyhow::Result<String> {
    let mut report = Report::new("grade");
    for r in book.rows() {
        let mut suite = TestSuite::new(format!("{}/{}", r.student, r.exercise));
        if r.outcome != GRADED {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
            st.set_message("no submission / 未提交");
            let mut tc = TestCase::new("submission", st);
            tc.set_classname(format!("{}.{}", r.student, r.exercise));
            suite.add_test_case(tc);
        }
        for c in &r.verdicts {
            let status = match c.status.as_str() {
                "PASS" => TestCaseStatus::success(),
                "SKIP" => {
                    let mut st = TestCaseStatus::skipped();
                    st.set_message(c.why.en.clone());
                    st
                }
                _ => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    st.set_message(c.why.en.clone());
                    st.set_description(format!(
                        "{}\n{}\nmeasured / 实测: {}\nbound / 要求: {}",
                        c.why.zh, c.why.en, c.measured.en, c.bound.en
                    ));
                    st
                }
            };
            let mut tc = TestCase::new(c.id.clone(), status);
            tc.set_classname(format!("{}.{}", r.student, r.exercise));
            suite.add_test_case(tc);
        }
        suite.set_time(Duration::from_secs_f64(r.run_s.max(0.0)));
        report.add_test_suite(suite);
    }
    Ok(report.to_string()?)
}

impl GradebookExporter for JunitExporter {
    fn name(&self) -> &'static str {
        "junit.xml"
    }
    fn export(&self, book: &Gradebook, out: &Path) -> anyhow::Result<()> {
        write_atomic(&out.join("junit.xml"), render(book)?.as_bytes())
    }
}
