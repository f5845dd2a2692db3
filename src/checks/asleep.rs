//! The asleep rule's words: why a stream's timed windows fail `IdleSpec::asleep_over` (time
//! neither computing nor waiting for a CPU, on a CPU device), shared by the check kinds that
//! hold windows to an `idle:` clause (`step_time`, `trace`'s samples, `call_windows`).
use super::fmt_num;
use crate::i18n::Text;
use crate::spec::rubric::Asleep;
use crate::text;

impl Asleep {
    /// Why: `label` names the stream (may be empty).
    pub fn why(&self, label: &str) -> Text {
        let (n, secs, limit) = (self.n, fmt_num(self.secs), fmt_num(self.limit));
        let at = if label.is_empty() {
            String::new()
        } else {
            format!("{label}: ")
        };
        let at_zh = if label.is_empty() {
            String::new()
        } else {
            format!("{label}：")
        };
        let (which_zh, which_en) = match self.window {
            Some(k) => (
                format!("第 {} 个计时窗口", k + 1),
                format!("window #{} of the {n} timed windows", k + 1),
            ),
            None => (
                format!("{n} 个计时窗口的中位数"),
                format!("the median of the {n} timed windows"),
            ),
        };
        text!(
            format!(
                "{at_zh}{which_zh}在交给你的调用之外有 {secs} s 既没在 CPU 上运行、也没在等 CPU（sleep、阻塞等待；评分器的时钟），超过允许的 {limit} s：在 CPU 设备上，窗口计时的是计算，不是等待"
            ),
            format!(
                "{at}{which_en} spent {secs} s asleep outside the calls handed over (neither running on a CPU nor waiting for one: a sleep, a blocking wait; the grader's clocks), more than the {limit} s allowed: on a CPU device a window times computation, not waiting"
            )
        )
    }
}
