//! The results channel (protocol 2, `src/runner/channel.rs`): records assembled in order; every
//! way a submission could add to or rewrite what the driver sent fails the run.
use grade::runner::channel::parse;

const NONCE: &str = "0123abcd";

/// A channel as the driver writes it: the header, `J` records, `END`.
fn stream(records: &[&str], end: Option<usize>) -> Vec<u8> {
    let mut b = format!("GRADE-RESULTS 2 {NONCE}\n").into_bytes();
    for r in records {
        b.extend(format!("J {}\n{r}", r.len()).bytes());
    }
    if let Some(n) = end {
        b.extend(format!("END {n} 1.5\n").bytes());
    }
    b
}

fn en(t: grade::i18n::Text) -> String {
    t.en
}

#[test]
fn records_assemble_into_observations() {
    let b = stream(
        &[
            r#"["audit",[]]"#,
            r#"["probe","load",null]"#,
            r#"["probe","load",{"ok":true,"error":null,"seconds":0.1}]"#,
            r#"["metric","a.b",3]"#,
            r#"["event",0,{"e":"timer","v":1.0}]"#,
            r#"["event",0,{"e":"sync"}]"#,
            r#"["trace","run1",0]"#,
            r#"["rows","ref",[{"e":"row","x":1}]]"#,
            r#"["row","forwards.x",{"e":"forward"}]"#,
            r#"["row","forwards.x",{"e":"forward"}]"#,
        ],
        Some(10),
    );
    let rx = parse(&b, NONCE).unwrap().unwrap();
    assert!(rx.complete);
    let o = rx.obs;
    assert_eq!(o.metrics["a.b"], 3);
    assert_eq!(o.traces["run1"].len(), 2);
    assert_eq!(o.traces["run1"][1].e, "sync");
    assert_eq!(o.traces["ref"].len(), 1);
    assert_eq!(o.traces["forwards.x"].len(), 2);
    assert!(o.probes["load"].ok);
    assert_eq!(o.audit, Some(serde_json::json!([])));
    assert_eq!(o.driver_s, 1.5);
}

#[test]
fn the_drivers_timings_are_kept_as_sent() {
    let b = stream(
        &[
            r#"["probe","load",null]"#,
            r#"["probe","load",{"ok":true,"error":null,"seconds":0.1}]"#,
            r#"["timings",{"t0":100.5,"imports_s":1.25,"import_s":0.1,"probes":[{"name":"load","start_s":1.5,"seconds":0.1,"channel_s":0.01}],"channel_s":0.02,"recording_s":0.0,"end_s":2.0}]"#,
        ],
        Some(3),
    );
    let t = parse(&b, NONCE).unwrap().unwrap().obs.timings.unwrap();
    assert_eq!((t.t0, t.imports_s, t.end_s), (100.5, 1.25, 2.0));
    assert_eq!(t.probes[0].name, "load");
    assert_eq!(t.probes[0].start_s, 1.5);
    assert_eq!(t.setup_s, 0.0, "a stage not sent is 0");
    // no timings (an older driver, a run cut short before them): none, and nothing else changes
    let b = stream(&[r#"["metric","a",1]"#], Some(1));
    assert!(parse(&b, NONCE).unwrap().unwrap().obs.timings.is_none());
}

#[test]
fn nothing_at_all_and_a_run_cut_short() {
    assert!(parse(b"", NONCE).unwrap().is_none());
    // the audit arrived, then the run died: kept, incomplete
    let b = stream(
        &[r#"["audit",[{"line":1}]]"#, r#"["probe","load",null]"#],
        None,
    );
    let rx = parse(&b, NONCE).unwrap().unwrap();
    assert!(!rx.complete);
    assert!(rx.obs.audit.is_some());
    assert_eq!(
        rx.obs.probes["load"].error.as_deref(),
        Some("did not finish")
    );
    // a record cut in the middle
    let mut b = stream(&[r#"["metric","a",1]"#], None);
    b.extend(b"J 40\n[\"metric\"");
    assert!(!parse(&b, NONCE).unwrap().unwrap().complete);
}

#[test]
fn anything_written_twice_or_after_the_end_is_tampering() {
    let cases: [(&[&str], Option<usize>, &str, &str); 8] = [
        (
            &[r#"["metric","a",1]"#, r#"["metric","a",2]"#],
            Some(2),
            "",
            "metric `a` written twice",
        ),
        (
            &[r#"["rows","t",[]]"#, r#"["rows","t",[]]"#],
            Some(2),
            "",
            "trace `t` written twice",
        ),
        (
            &[r#"["probe","p",null]"#, r#"["probe","p",null]"#],
            Some(2),
            "",
            "probe `p` started twice",
        ),
        (
            &[r#"["probe","p",{"ok":true,"error":null,"seconds":1}]"#],
            Some(1),
            "",
            "ended twice or never began",
        ),
        (
            &[r#"["metric","a",1]"#],
            Some(2),
            "",
            "1 records where the driver sent 2",
        ),
        (
            &[r#"["metric","a",1]"#],
            Some(1),
            "J 2\n{}",
            "bytes after the end",
        ),
        (&[r#"["nonsense"]"#], Some(1), "", "unknown record"),
        (
            &[r#"["timings",{"t0":1}]"#, r#"["timings",{"t0":2}]"#],
            Some(2),
            "",
            "the timings written twice",
        ),
    ];
    for (records, end, extra, why) in cases {
        let mut b = stream(records, end);
        b.extend(extra.bytes());
        let (err, _) = parse(&b, NONCE).expect_err(why);
        assert!(en(err.clone()).contains(why), "{why}: {}", en(err));
    }
}

#[test]
fn a_forged_header_or_nonce_is_refused() {
    let (err, _) = parse(b"GRADE-RESULTS 1 2 0\n{}", NONCE).unwrap_err();
    assert!(en(err).contains("header"));
    let mut b = stream(&[], Some(0));
    b[16] = b'f';
    let (err, _) = parse(&b, NONCE).unwrap_err();
    assert!(en(err).contains("nonce mismatch"));
    let (err, _) = parse(b"GRADE-RESULTS 2 0123abcd\nX 1\nz", NONCE).unwrap_err();
    assert!(en(err).contains("record header"));
    // what arrived before the tampering: the audit is still reported
    let b = stream(
        &[
            r#"["audit",[]]"#,
            r#"["metric","a",1]"#,
            r#"["metric","a",2]"#,
        ],
        Some(3),
    );
    let (_, audit) = parse(&b, NONCE).unwrap_err();
    assert_eq!(audit, Some(serde_json::json!([])));
}

/// An instrument's counter lives in the submission's process: each call is a `tick` as it
/// happens, and every count the driver reads (`tally`) must equal the calls sent so far. A
/// counter lowered (lesson 04's checkpoint calls hidden) or raised fails the run, naming it.
#[test]
fn a_call_count_must_match_the_calls_sent() {
    let ok = stream(
        &[
            r#"["tally","ckpt",0]"#,
            r#"["tick","ckpt"]"#,
            r#"["tick","ckpt"]"#,
            r#"["tick","empty_cache"]"#,
            r#"["tally","ckpt",2]"#,
            r#"["tally","empty_cache",1]"#,
        ],
        Some(6),
    );
    assert!(parse(&ok, NONCE).unwrap().unwrap().complete);
    for (records, read) in [
        (
            &[
                r#"["tick","ckpt"]"#,
                r#"["tick","ckpt"]"#,
                r#"["tally","ckpt",0]"#,
            ][..],
            "read 0 after 2 calls",
        ),
        (
            &[r#"["tick","ckpt"]"#, r#"["tally","ckpt",5]"#][..],
            "read 5 after 1 calls",
        ),
        (&[r#"["tally","ckpt",1]"#][..], "read 1 after 0 calls"),
        (&[r#"["tally","ckpt","1"]"#][..], "read \"1\" after 0 calls"),
    ] {
        let (why, _) = parse(&stream(records, Some(records.len())), NONCE).unwrap_err();
        let why = en(why);
        assert!(
            why.contains(read) && why.contains("`ckpt` call counter"),
            "{why}"
        );
    }
}
