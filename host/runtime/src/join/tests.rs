//! Joins against hand-computed pairs, and state bounded by the watermark
//! over a long run (counted in a RocksDB backend).

use super::*;
use crate::state::{BackendConfig, BackendKind, KeyGroupRange, open_backend};

fn open(kind: JoinKind, backend: BackendKind, dir: &std::path::Path) -> JoinOperator {
    let states = join_states();
    let backend = open_backend(BackendConfig {
        kind: backend,
        dir,
        states: &states,
        key_groups: KeyGroupRange::all(128),
        max_parallelism: 128,
    })
    .unwrap();
    let mut op = JoinOperator::new(
        "j",
        JoinSpec {
            kind,
            key_by: crate::job::KeySelector::RecordKey,
        },
    );
    op.attach_state(backend);
    op
}

fn batch(records: &[(&str, &str, i64)]) -> Batch {
    let mut b = Batch::new();
    for (k, v, ts) in records {
        b.push(Some(k.as_bytes()), v.as_bytes(), *ts);
    }
    b
}

fn values(e: &Emitted) -> Vec<String> {
    e.main
        .iter()
        .map(|r| String::from_utf8_lossy(r.value).into_owned())
        .collect()
}

fn late(e: &Emitted) -> Vec<String> {
    e.side
        .iter()
        .filter(|s| s.tag == LATE_TAG)
        .flat_map(|s| {
            s.records
                .iter()
                .map(|r| String::from_utf8_lossy(r.value).into_owned())
        })
        .collect()
}

#[test]
fn an_interval_join_emits_each_pair_once_when_the_later_record_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let mut op = open(
        JoinKind::Interval {
            lower_ms: -5,
            upper_ms: 10,
        },
        BackendKind::Heap,
        dir.path(),
    );
    let out = op
        .process(0, &batch(&[("a", "l1", 100), ("b", "l2", 100)]))
        .unwrap();
    assert!(values(&out).is_empty());
    // Right at 95 (= 100 - 5) and 110 (= 100 + 10) join l1; 111 does not;
    // b's right joins l2. A JSON value is embedded as is.
    let out = op
        .process(
            1,
            &batch(&[
                ("a", "95", 95),
                ("a", "r", 111),
                ("a", "{\"x\":1}", 110),
                ("b", "rb", 96),
            ]),
        )
        .unwrap();
    assert_eq!(
        values(&out),
        [
            r#"{"key":"a","left":"l1","right":95}"#,
            r#"{"key":"a","left":"l1","right":{"x":1}}"#,
            r#"{"key":"b","left":"l2","right":"rb"}"#,
        ]
    );
    assert_eq!(
        out.main.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
        [100, 110, 100]
    );
    // A later left record finds the buffered rights: 111 - 10 <= 101.
    let out = op.process(0, &batch(&[("a", "l3", 101)])).unwrap();
    assert_eq!(
        values(&out),
        [
            r#"{"key":"a","left":"l3","right":{"x":1}}"#,
            r#"{"key":"a","left":"l3","right":"r"}"#,
        ]
    );
    // Watermark 200: everything is cleaned up; older records are late.
    op.advance_watermark(200).unwrap();
    assert_eq!(op.state_entries().unwrap(), 0);
    let out = op.process(1, &batch(&[("a", "old", 150)])).unwrap();
    assert_eq!(late(&out), ["old"]);
}

#[test]
fn a_window_join_pairs_both_sides_of_a_window_when_it_fires() {
    let dir = tempfile::tempdir().unwrap();
    let mut op = open(
        JoinKind::Window { size_ms: 10 },
        BackendKind::Heap,
        dir.path(),
    );
    op.process(
        0,
        &batch(&[("a", "l1", 1), ("a", "l2", 9), ("a", "l3", 12)]),
    )
    .unwrap();
    op.process(
        1,
        &batch(&[("a", "r1", 5), ("b", "r2", 5), ("a", "r3", 15)]),
    )
    .unwrap();
    let fired = op.advance_watermark(9).unwrap();
    assert_eq!(
        values(&fired[0]),
        [
            r#"{"key":"a","start":0,"end":10,"left":"l1","right":"r1"}"#,
            r#"{"key":"a","start":0,"end":10,"left":"l2","right":"r1"}"#,
        ],
        "b has no left record: no pair"
    );
    // The fired window's records are gone; a record for it is late.
    let out = op.process(0, &batch(&[("a", "late", 3)])).unwrap();
    assert_eq!(late(&out), ["late"]);
    let fired = op.advance_watermark(i64::MAX).unwrap();
    assert_eq!(
        values(&fired[0]),
        [r#"{"key":"a","start":10,"end":20,"left":"l3","right":"r3"}"#]
    );
    assert_eq!(op.state_entries().unwrap(), 0);
}

/// A long run of both sides with the watermark following: the entries in
/// RocksDB stay bounded by the records within the join's reach, not by
/// the records seen.
#[test]
fn join_state_stays_bounded_over_a_long_run() {
    for kind in [
        JoinKind::Interval {
            lower_ms: -50,
            upper_ms: 50,
        },
        JoinKind::Window { size_ms: 100 },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut op = open(kind, BackendKind::RocksDb, dir.path());
        let mut most = 0;
        for step in 0..200i64 {
            // 20 keys, 50 records a side per step, 10 ms of event time.
            let records: Vec<(String, i64)> = (0..50)
                .map(|i| (format!("k{}", i % 20), step * 10 + i % 10))
                .collect();
            let records: Vec<(&str, &str, i64)> = records
                .iter()
                .map(|(k, ts)| (k.as_str(), "v", *ts))
                .collect();
            op.process(0, &batch(&records)).unwrap();
            op.process(1, &batch(&records)).unwrap();
            op.advance_watermark(step * 10 + 9).unwrap();
            most = most.max(op.state_entries().unwrap());
        }
        // Within reach: at most ~100 ms of timestamps × 20 keys × 2 sides
        // (each a distinct entry per timestamp), against 20 000 seen.
        assert!(most <= 2 * 20 * 120, "{kind:?}: {most} entries");
        op.advance_watermark(i64::MAX).unwrap();
        assert_eq!(op.state_entries().unwrap(), 0, "{kind:?}");
    }
}
