//! The window operator against hand-computed windows, on the heap backend.

use super::*;
use crate::job::{Aggregate, KeySelector};
use crate::state::{BackendConfig, BackendKind, KeyGroupRange, open_backend};

fn spec(assigner: WindowAssigner, aggregate: Aggregate, lateness: u64) -> WindowSpec {
    WindowSpec {
        assigner,
        aggregate,
        field: (aggregate != Aggregate::Count).then_some(KeySelector::JsonField("x".into())),
        allowed_lateness_ms: lateness,
        key_by: KeySelector::RecordKey,
        function: None,
    }
}

fn open(spec: WindowSpec) -> WindowOperator {
    let states = window_states();
    let backend = open_backend(BackendConfig {
        kind: BackendKind::Heap,
        dir: std::path::Path::new("/nonexistent"),
        states: &states,
        key_groups: KeyGroupRange::all(128),
        max_parallelism: 128,
    })
    .unwrap();
    let mut op = WindowOperator::new("w", spec);
    op.attach_state(backend);
    op
}

/// Main output values and late record values of one call.
fn split(e: Emitted) -> (Vec<String>, Vec<String>) {
    let text = |b: &Batch| -> Vec<String> {
        b.iter()
            .map(|r| String::from_utf8_lossy(r.value).into_owned())
            .collect()
    };
    let late = e
        .side
        .iter()
        .filter(|s| s.tag == LATE_TAG)
        .flat_map(|s| text(&s.records))
        .collect();
    (text(&e.main), late)
}

fn batch_of(records: &[(&str, i64)]) -> Batch {
    let mut batch = Batch::new();
    for (key, ts) in records {
        batch.push(
            Some(key.as_bytes()),
            format!(r#"{{"x":{ts}}}"#).as_bytes(),
            *ts,
        );
    }
    batch
}

fn feed(op: &mut WindowOperator, records: &[(&str, i64)]) -> (Vec<String>, Vec<String>) {
    split(op.process(&batch_of(records)).unwrap())
}

fn fire(op: &mut WindowOperator, watermark: i64) -> Vec<String> {
    let mut out = Vec::new();
    for e in op.advance_watermark(watermark).unwrap() {
        out.extend(split(e).0);
    }
    out
}

#[test]
fn tumbling_windows_fire_once_at_their_last_millisecond() {
    let mut op = open(spec(
        WindowAssigner::Tumbling { size_ms: 10 },
        Aggregate::Count,
        0,
    ));
    let (main, late) = feed(
        &mut op,
        &[("a", 0), ("a", 9), ("b", 3), ("a", 10), ("a", -1)],
    );
    assert!(main.is_empty() && late.is_empty());
    assert_eq!(
        fire(&mut op, 8),
        [r#"{"key":"a","start":-10,"end":0,"count":1}"#]
    );
    assert_eq!(
        fire(&mut op, 9),
        [
            r#"{"key":"a","start":0,"end":10,"count":2}"#,
            r#"{"key":"b","start":0,"end":10,"count":1}"#
        ]
    );
    assert!(fire(&mut op, 9).is_empty(), "fired once");
    // The output carries the window's max timestamp.
    let mut op2 = open(spec(
        WindowAssigner::Tumbling { size_ms: 10 },
        Aggregate::Count,
        0,
    ));
    feed(&mut op2, &[("k", 4)]);
    let e = op2.advance_watermark(100).unwrap().remove(0);
    assert_eq!(e.main.iter().next().unwrap().timestamp, 9);
    assert_eq!(e.main.iter().next().unwrap().key, Some(&b"k"[..]));
    // A record of a fired window is late.
    let (main, late) = feed(&mut op, &[("a", 5), ("a", 12)]);
    assert!(main.is_empty());
    assert_eq!(late, [r#"{"x":5}"#]);
    assert_eq!(
        fire(&mut op, i64::MAX),
        [r#"{"key":"a","start":10,"end":20,"count":2}"#]
    );
    assert_eq!(op.core().timers.len(), 0);
}

#[test]
fn a_record_is_in_every_sliding_window_that_covers_it() {
    let mut op = open(spec(
        WindowAssigner::Sliding {
            size_ms: 10,
            slide_ms: 5,
        },
        Aggregate::Sum,
        0,
    ));
    feed(&mut op, &[("a", 7), ("a", 12)]);
    assert_eq!(
        fire(&mut op, i64::MAX),
        [
            r#"{"key":"a","start":0,"end":10,"sum":7}"#,
            r#"{"key":"a","start":5,"end":15,"sum":19}"#,
            r#"{"key":"a","start":10,"end":20,"sum":12}"#,
        ]
    );
}

#[test]
fn a_record_that_bridges_two_sessions_merges_them() {
    let mut op = open(spec(
        WindowAssigner::Session { gap_ms: 10 },
        Aggregate::Max,
        0,
    ));
    feed(&mut op, &[("a", 0), ("a", 5), ("a", 30), ("b", 16)]);
    // a: [0, 15) and [30, 40); the record at 16 bridges nothing for a yet.
    feed(&mut op, &[("a", 20)]);
    // [20, 30) touches [30, 40): merged to [20, 40).
    feed(&mut op, &[("a", 12)]);
    // [12, 22) bridges [0, 15) and [20, 40): one session [0, 40).
    assert_eq!(
        fire(&mut op, i64::MAX),
        [
            r#"{"key":"b","start":16,"end":26,"max":16}"#,
            r#"{"key":"a","start":0,"end":40,"max":30}"#,
        ]
    );
    assert_eq!(op.windows_of(b"a").unwrap(), []);
}

#[test]
fn sessions_merge_the_same_within_one_batch_as_across_batches() {
    let mut op = open(spec(
        WindowAssigner::Session { gap_ms: 10 },
        Aggregate::Max,
        0,
    ));
    // The records of the test above, in one batch: the batch's windows are
    // merged in memory, with the accumulators of windows a record joins.
    feed(
        &mut op,
        &[
            ("a", 0),
            ("a", 5),
            ("a", 30),
            ("b", 16),
            ("a", 20),
            ("a", 12),
        ],
    );
    assert_eq!(
        fire(&mut op, i64::MAX),
        [
            r#"{"key":"b","start":16,"end":26,"max":16}"#,
            r#"{"key":"a","start":0,"end":40,"max":30}"#,
        ]
    );
}

#[test]
fn a_record_inside_a_stored_session_joins_it_without_growing_it() {
    let mut op = open(spec(
        WindowAssigner::Session { gap_ms: 10 },
        Aggregate::Count,
        0,
    ));
    // [0, 15) is stored after the first batch; 3's own session [3, 13)
    // lies inside it, so the merge leaves it as it is (this used to find
    // the window neither merged nor loaded, and panic).
    feed(&mut op, &[("a", 0), ("a", 5)]);
    feed(&mut op, &[("a", 3)]);
    feed(&mut op, &[("a", 4), ("a", 1)]);
    assert_eq!(
        fire(&mut op, i64::MAX),
        [r#"{"key":"a","start":0,"end":15,"count":5}"#]
    );
}

#[test]
fn a_growing_session_keeps_one_timer_per_session() {
    for lateness in [0, 7] {
        let mut op = open(spec(
            WindowAssigner::Session { gap_ms: 10 },
            Aggregate::Count,
            lateness,
        ));
        // One session growing by a record per batch, another key's beside
        // it: the absorbed sessions' timers go (they used to stay, one per
        // record, each reading all the key's windows when it came due).
        for t in 0..50 {
            feed(&mut op, &[("a", t * 5), ("b", 1000)]);
        }
        let per_window = if lateness > 0 { 2 } else { 1 };
        assert_eq!(
            op.core().timers.len(),
            2 * per_window,
            "lateness {lateness}"
        );
        assert_eq!(
            fire(&mut op, i64::MAX),
            [
                r#"{"key":"a","start":0,"end":255,"count":50}"#,
                r#"{"key":"b","start":1000,"end":1010,"count":50}"#,
            ]
        );
    }
}

#[test]
fn late_records_within_the_lateness_in_one_batch_fire_one_by_one() {
    let mut op = open(spec(
        WindowAssigner::Tumbling { size_ms: 10 },
        Aggregate::Count,
        100,
    ));
    feed(&mut op, &[("a", 1)]);
    assert_eq!(
        fire(&mut op, 50),
        [r#"{"key":"a","start":0,"end":10,"count":1}"#]
    );
    // Two late records of the fired window and one of an open window, in one
    // batch: each late record fires the window with what came before it.
    let (main, late) = feed(&mut op, &[("a", 2), ("a", 60), ("a", 3)]);
    assert_eq!(
        main,
        [
            r#"{"key":"a","start":0,"end":10,"count":2}"#,
            r#"{"key":"a","start":0,"end":10,"count":3}"#,
        ]
    );
    assert!(late.is_empty());
    assert_eq!(
        fire(&mut op, 69),
        [r#"{"key":"a","start":60,"end":70,"count":1}"#]
    );
}

#[test]
fn allowed_lateness_refires_then_sends_to_the_late_output() {
    let mut op = open(spec(
        WindowAssigner::Tumbling { size_ms: 10 },
        Aggregate::Avg,
        5,
    ));
    feed(&mut op, &[("a", 2), ("a", 4)]);
    assert_eq!(
        fire(&mut op, 9),
        [r#"{"key":"a","start":0,"end":10,"avg":3}"#]
    );
    // Within the lateness: updates and fires again at once.
    let (main, late) = feed(&mut op, &[("a", 9)]);
    assert_eq!(main, [r#"{"key":"a","start":0,"end":10,"avg":5}"#]);
    assert!(late.is_empty());
    // At 9 + 5 the window is late: cleaned up, and its records are late.
    assert!(fire(&mut op, 14).is_empty());
    assert_eq!(op.windows_of(b"a").unwrap(), []);
    let (main, late) = feed(&mut op, &[("a", 1)]);
    assert!(main.is_empty());
    assert_eq!(late, [r#"{"x":1}"#]);
}

#[test]
fn a_global_window_fires_and_empties_every_count_records() {
    let mut op = open(spec(WindowAssigner::Global { count: 3 }, Aggregate::Min, 0));
    let (main, _) = feed(&mut op, &[("a", 5), ("a", 3), ("b", 1), ("a", 4), ("a", 1)]);
    assert_eq!(main, [r#"{"key":"a","min":3}"#]);
    let (main, _) = feed(&mut op, &[("a", 7), ("a", 0)]);
    assert_eq!(main, [r#"{"key":"a","min":0}"#]);
    // Partial windows do not fire at the end.
    assert!(fire(&mut op, i64::MAX).is_empty());
}

#[test]
fn a_record_without_the_number_fails_with_its_key_and_value() {
    let mut op = open(spec(
        WindowAssigner::Tumbling { size_ms: 10 },
        Aggregate::Sum,
        0,
    ));
    let mut batch = Batch::new();
    batch.push(Some(b"acct-1"), br#"{"y":1}"#, 0);
    let e = op.process(&batch).unwrap_err();
    assert!(e.message.contains("acct-1"), "{e}");
    assert!(e.message.contains("no number in field `x`"), "{e}");
    let mut op = open(WindowSpec {
        field: Some(KeySelector::Value),
        ..spec(WindowAssigner::Tumbling { size_ms: 10 }, Aggregate::Sum, 0)
    });
    batch.clear();
    batch.push(Some(b"k"), b" 2.5 ", 0);
    batch.push(Some(b"k"), b"1", 1);
    op.process(&batch).unwrap();
    assert_eq!(
        fire(&mut op, 9),
        [r#"{"key":"k","start":0,"end":10,"sum":3.5}"#]
    );
    batch.clear();
    // (At 20: the window at 0 has fired, so a record there would be late,
    // sent to the late output without being read.)
    batch.push(Some(b"k"), b"NaN", 20);
    assert!(op.process(&batch).is_err(), "NaN is not a decimal number");
}

#[test]
fn windows_and_accumulators_round_trip_their_encoding_in_order() {
    let ws = [
        Window { start: -5, end: 5 },
        Window { start: 0, end: 10 },
        GLOBAL,
        Window { start: 7, end: 8 },
    ];
    for w in ws {
        assert_eq!(Window::decode(&w.encode()), Some(w));
    }
    assert!(Window { start: -5, end: 5 }.encode() < Window { start: 0, end: 1 }.encode());
    // A record's user key sorts right after its window's and before the
    // next window's.
    let w = Window { start: 0, end: 10 };
    let next = Window { start: 1, end: 2 };
    assert!(w.encode()[..] < element_key(w, 0)[..]);
    assert!(element_key(w, 0) < element_key(w, 1));
    assert!(element_key(w, u64::MAX)[..] < next.encode()[..]);
}

#[test]
fn the_stored_window_value_is_the_count_then_the_running_number() {
    // The layout savepoints of built-in aggregates hold: 8 bytes of count,
    // 8 of f64.
    let mut op = open(spec(
        WindowAssigner::Tumbling { size_ms: 10 },
        Aggregate::Sum,
        0,
    ));
    feed(&mut op, &[("a", 2), ("a", 3)]);
    let w = Window { start: 0, end: 10 };
    let stored = op
        .core
        .backend()
        .unwrap()
        .map_get(STATE, b"a", &w.encode())
        .unwrap()
        .unwrap();
    let mut expected = 2u64.to_le_bytes().to_vec();
    expected.extend_from_slice(&5f64.to_le_bytes());
    assert_eq!(stored, expected);
    // Garbage there fails the key's next record, naming it.
    op.core
        .backend()
        .unwrap()
        .map_put(STATE, b"a", &w.encode(), b"short")
        .unwrap();
    let e = op.process(&batch_of(&[("a", 4)])).unwrap_err();
    assert!(e.message.contains("corrupt state for key \"a\""), "{e}");
}

impl WindowOperator {
    /// Every key in the session index with the windows it holds, against
    /// the windows in the state: they must be the same.
    fn check_session_index(&mut self) {
        let indexed: Vec<(Vec<u8>, Vec<Window>)> = self
            .sessions
            .windows
            .iter()
            .map(|(k, w)| (k.clone(), w.clone()))
            .collect();
        for (key, windows) in indexed {
            let mut stored = self.windows_of(&key).unwrap();
            let mut windows = windows;
            windows.sort_by_key(|w| (w.start, w.end));
            stored.sort_by_key(|w| (w.start, w.end));
            assert_eq!(windows, stored, "key {}", String::from_utf8_lossy(&key));
        }
    }
}

/// Sessions over many batches and watermarks, with lateness and records
/// out of order: the session index always holds what the state holds, and
/// an operator that forgets it before every call (reading every key's
/// windows from the state, as before the index) emits the same.
#[test]
fn the_session_index_matches_the_state_and_changes_no_result() {
    let session = || {
        open(spec(
            WindowAssigner::Session { gap_ms: 10 },
            Aggregate::Count,
            5,
        ))
    };
    let (mut indexed, mut forgetful) = (session(), session());
    let keys = ["a", "b", "c", "d", "e"];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut time, mut watermark) = (0i64, i64::MIN);
    let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        let mut records = Vec::new();
        for _ in 0..=next(5) {
            time += next(6) as i64;
            // Some records a little behind: late, or within the lateness.
            let ts = time - next(4) as i64 * next(12) as i64;
            records.push((keys[next(5) as usize], ts));
        }
        out_a.push(feed(&mut indexed, &records));
        forgetful.sessions.windows.clear();
        out_b.push(feed(&mut forgetful, &records));
        indexed.check_session_index();
        if next(3) == 0 {
            watermark = watermark.max(time - 12);
            out_a.push((fire(&mut indexed, watermark), Vec::new()));
            forgetful.sessions.windows.clear();
            out_b.push((fire(&mut forgetful, watermark), Vec::new()));
            indexed.check_session_index();
        }
    }
    out_a.push((fire(&mut indexed, i64::MAX), Vec::new()));
    out_b.push((fire(&mut forgetful, i64::MAX), Vec::new()));
    indexed.check_session_index();
    assert_eq!(out_a, out_b);
    let fired: usize = out_a.iter().map(|(main, _)| main.len()).sum();
    let late: usize = out_a.iter().map(|(_, late)| late.len()).sum();
    assert!(fired > 50 && late > 0, "{fired} fired, {late} late");
}
