//! The results channel's protocol (version 2), grader side: the driver sends each record the
//! moment it is made (see `_Channel` in `src/driver/driver.py`); here they are checked and
//! assembled into `Observations` and tensors. Nothing the run recorded can be rewritten later,
//! and anything that is not exactly the driver's records fails the run.
//!
//! ```text
//! GRADE-RESULTS 2 <nonce>\n                 once, before the submission is imported
//! J <bytes>\n<json>                         ["metric", key, value] | ["event", stream, fields]
//!                                           | ["trace", name, stream] | ["rows", name, [rows]]
//!                                           | ["row", name, row] | ["probe", name, null|record]
//!                                           | ["audit", findings]
//!                                           | ["tick", name] | ["tally", name, n]
//!                                           | ["timings", {...}] (just before END)
//! T <bytes>\n<safetensors>                  one named tensor
//! END <records> <driver seconds>\n          last
//! ```
use crate::i18n::Text;
use crate::observations::{Event, Observations, ProbeRecord};
use crate::text;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What the channel carried.
#[derive(Debug, Default)]
pub struct Received {
    pub obs: Observations,
    /// safetensors blobs, one tensor each, in order.
    pub tensors: Vec<Vec<u8>>,
    /// `END` arrived and every count matched.
    pub complete: bool,
}

/// Why the channel's contents cannot be believed (tampered, forged or garbled).
pub fn tampered(what: &str) -> Text {
    text!(
        format!("结果通道上的数据不是评分驱动按顺序写下的记录（{what}）：结果被篡改或伪造"),
        format!("the results channel did not carry exactly the grader's driver's records ({what}): tampered or fabricated results")
    )
}

/// `Ok(None)`: nothing arrived at all. `Ok(Some(r))` with `r.complete == false`: the run ended
/// before the driver finished (what arrived is kept: the audit, the probes that ran). `Err`:
/// something arrived that the driver did not write, with the audit if it had arrived before.
pub fn parse(bytes: &[u8], nonce: &str) -> Result<Option<Received>, (Text, Option<Value>)> {
    let mut partial = None;
    parse_into(bytes, nonce, &mut partial).map_err(|why| (why, partial))
}

fn parse_into(
    bytes: &[u8],
    nonce: &str,
    audit: &mut Option<Value>,
) -> Result<Option<Received>, Text> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut at = 0usize;
    let line = |at: &mut usize| -> Option<&str> {
        let nl = bytes[*at..].iter().position(|&c| c == b'\n')?;
        let s = std::str::from_utf8(&bytes[*at..*at + nl]).ok()?;
        *at += nl + 1;
        Some(s)
    };
    match line(&mut at).map(|h| h.split(' ').collect::<Vec<_>>()) {
        Some(f) if f.len() == 3 && f[0] == "GRADE-RESULTS" && f[1] == "2" => {
            if f[2] != nonce {
                return Err(text!(
                    "结果不是评分驱动写的（随机令牌不符）：结果被伪造",
                    "the results were not written by the grader's driver (nonce mismatch): fabricated results"
                ));
            }
        }
        _ => return Err(tampered("header")),
    }
    let mut rx = Received {
        obs: Observations {
            nonce: nonce.to_string(),
            ..Observations::default()
        },
        ..Received::default()
    };
    let mut asm = Assembler::default();
    let mut records = 0usize;
    while at < bytes.len() {
        let Some(head) = line(&mut at) else {
            // a record cut short: the run died while writing it
            return Ok(Some(rx));
        };
        let f: Vec<&str> = head.split(' ').collect();
        match f.as_slice() {
            ["END", n, secs] => {
                if n.parse::<usize>().ok() != Some(records) {
                    return Err(tampered(&format!(
                        "{records} records where the driver sent {n}"
                    )));
                }
                if at != bytes.len() {
                    return Err(tampered(&format!(
                        "{} bytes after the end",
                        bytes.len() - at
                    )));
                }
                rx.obs.driver_s = secs.parse().unwrap_or(0.0);
                rx.complete = true;
                return Ok(Some(rx));
            }
            [kind @ ("J" | "T"), len] => {
                let len: usize = len.parse().map_err(|_| tampered("record header"))?;
                if at + len > bytes.len() {
                    return Ok(Some(rx)); // cut short
                }
                let body = &bytes[at..at + len];
                at += len;
                records += 1;
                if *kind == "T" {
                    rx.tensors.push(body.to_vec());
                } else {
                    let rec: Value = serde_json::from_slice(body)
                        .map_err(|_| tampered("a record is not JSON"))?;
                    asm.take(rec, &mut rx)?;
                    audit.clone_from(&rx.obs.audit);
                }
            }
            _ => return Err(tampered("record header")),
        }
    }
    Ok(Some(rx)) // no END: the run ended early
}

/// Turns records into observations; refuses anything recorded twice.
#[derive(Default)]
struct Assembler {
    streams: BTreeMap<u64, Vec<Event>>,
    named: BTreeSet<String>,
    probes_started: BTreeSet<String>,
    /// `["tick", name]` records so far: the calls of each instrument, as they happened
    ticks: BTreeMap<String, u64>,
}

impl Assembler {
    fn take(&mut self, rec: Value, rx: &mut Received) -> Result<(), Text> {
        let bad = |what: &str| tampered(what);
        let arr = rec
            .as_array()
            .ok_or_else(|| bad("a record is not a list"))?;
        let op = arr.first().and_then(Value::as_str).unwrap_or("");
        let name = || {
            arr.get(1)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| bad("a record without a name"))
        };
        let obs = &mut rx.obs;
        match (op, arr.len()) {
            ("metric", 3) => {
                let key = name()?;
                if obs.metrics.insert(key.clone(), arr[2].clone()).is_some() {
                    return Err(bad(&format!("metric `{key}` written twice")));
                }
            }
            ("event", 3) => {
                let sid = arr[1]
                    .as_u64()
                    .ok_or_else(|| bad("an event without a stream"))?;
                let ev: Event =
                    serde_json::from_value(arr[2].clone()).map_err(|_| bad("an event"))?;
                self.streams.entry(sid).or_default().push(ev);
            }
            ("trace", 3) => {
                let key = name()?;
                let sid = arr[2]
                    .as_u64()
                    .ok_or_else(|| bad("a trace without a stream"))?;
                if !self.named.insert(key.clone()) {
                    return Err(bad(&format!("trace `{key}` written twice")));
                }
                let events = self.streams.remove(&sid).unwrap_or_default();
                obs.traces.insert(key, events);
            }
            ("rows", 3) => {
                let key = name()?;
                if !self.named.insert(key.clone()) {
                    return Err(bad(&format!("trace `{key}` written twice")));
                }
                let rows: Vec<Event> =
                    serde_json::from_value(arr[2].clone()).map_err(|_| bad("trace rows"))?;
                obs.traces.insert(key, rows);
            }
            ("row", 3) => {
                let key = name()?;
                let row: Event =
                    serde_json::from_value(arr[2].clone()).map_err(|_| bad("a trace row"))?;
                obs.traces.entry(key).or_default().push(row);
            }
            ("probe", 3) => {
                let key = name()?;
                if arr[2].is_null() {
                    if !self.probes_started.insert(key.clone()) {
                        return Err(bad(&format!("probe `{key}` started twice")));
                    }
                    obs.probes.insert(
                        key,
                        ProbeRecord {
                            ok: false,
                            error: Some("did not finish".into()),
                            seconds: None,
                        },
                    );
                } else {
                    let rec: ProbeRecord = serde_json::from_value(arr[2].clone())
                        .map_err(|_| bad("a probe record"))?;
                    match obs.probes.get(&key) {
                        Some(p) if p.seconds.is_none() => {
                            obs.probes.insert(key, rec);
                        }
                        _ => return Err(bad(&format!("probe `{key}` ended twice or never began"))),
                    }
                }
            }
            ("audit", 2) => {
                // sent before the import: there even when the run crashed
                if obs.audit.replace(arr[1].clone()).is_some() {
                    return Err(bad("the audit written twice"));
                }
            }
            ("timings", 2) => {
                // evidence of where the time went, never read by a criterion
                let t = serde_json::from_value(arr[1].clone()).map_err(|_| bad("the timings"))?;
                if obs.timings.replace(t).is_some() {
                    return Err(bad("the timings written twice"));
                }
            }
            // An instrument's call counter lives in the submission's process; each call is sent as
            // it happens, and every count the driver reads (`tally`) must match those calls.
            ("tick", 2) => *self.ticks.entry(name()?).or_default() += 1,
            ("tally", 3) => {
                let key = name()?;
                let read = arr[2].as_u64();
                let calls = self.ticks.get(&key).copied().unwrap_or(0);
                if read != Some(calls) {
                    return Err(bad(&format!(
                        "the grader's `{key}` call counter read {} after {calls} calls: rewritten by the submission",
                        arr[2]
                    )));
                }
            }
            _ => return Err(bad(&format!("an unknown record `{op}`"))),
        }
        Ok(())
    }
}
