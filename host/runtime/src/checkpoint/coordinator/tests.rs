//! Tests of [`super`] (`coordinator.rs`).

use super::*;

/// A simulated clock: `at(ms)` is `ms` after the start.
struct Sim {
    start: Instant,
}

/// Wall-clock time at the start of every simulation.
const EPOCH_MS: u64 = 1_700_000_000_000;

impl Sim {
    fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    fn coordinator(&self, config: CheckpointConfig, subtasks: &[SubtaskId]) -> Coordinator<String> {
        Coordinator::new(config, subtasks.to_vec(), 1, self.at(0), EPOCH_MS)
    }
}

fn config(interval_ms: u64) -> CheckpointConfig {
    CheckpointConfig::every(Duration::from_millis(interval_ms))
}

const TWO: &[SubtaskId] = &[(0, 0), (1, 0)];
const ALIGN: Duration = Duration::ZERO;

fn triggers(actions: &[Action<String>]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Trigger { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

fn completed(actions: &[Action<String>]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Complete(c) => Some(c.id),
            _ => None,
        })
        .collect()
}

fn discarded(actions: &[Action<String>]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Discard(c) => Some(c.id),
            _ => None,
        })
        .collect()
}

fn aborted(actions: &[Action<String>]) -> Vec<(u64, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Abort { id, reason, .. } => Some((*id, reason.clone())),
            _ => None,
        })
        .collect()
}

/// Acks `id` from every subtask of `subtasks` at `now`; returns all actions.
fn ack_all(
    c: &mut Coordinator<String>,
    id: u64,
    subtasks: &[SubtaskId],
    now: Instant,
) -> Vec<Action<String>> {
    let mut actions = Vec::new();
    for &s in subtasks {
        actions.extend(c.ack(id, s, format!("{id}@{s:?}"), ALIGN, now));
    }
    actions
}

#[test]
fn trigger_now_ignores_the_interval_and_pending_checkpoints_but_not_a_suspension() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(1_000), TWO);
    // Long before the first periodic trigger.
    let (first, actions) = c.trigger_now(sim.at(10)).unwrap();
    assert_eq!(triggers(&actions), vec![first]);
    // Beside a pending one.
    let (second, actions) = c.trigger_now(sim.at(20)).unwrap();
    assert_eq!(triggers(&actions), vec![second]);
    assert!(second > first);
    let mut done = Vec::new();
    for s in TWO {
        done.extend(c.ack(second, *s, format!("{s:?}"), ALIGN, sim.at(30)));
    }
    assert_eq!(completed(&done), vec![second]);
    c.suspend("stopping", sim.at(40));
    assert!(c.trigger_now(sim.at(50)).is_none());
}

#[test]
fn first_trigger_waits_one_interval() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(500), TWO);
    assert!(c.tick(sim.at(0)).is_empty());
    assert!(c.tick(sim.at(499)).is_empty());
    assert_eq!(
        c.tick(sim.at(500)),
        vec![Action::Trigger {
            id: 1,
            timestamp_ms: EPOCH_MS + 500
        }]
    );
}

#[test]
fn triggers_every_interval_when_checkpoints_finish_quickly() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(500), TWO);
    let mut trigger_times = Vec::new();
    for ms in (0..=2600).step_by(10) {
        let now = sim.at(ms);
        let actions = c.tick(now);
        for id in triggers(&actions) {
            trigger_times.push(ms);
            // Completes 50 ms later; acks arrive on the next ticks.
            assert!(c.tick(sim.at(ms + 5)).is_empty());
            assert_eq!(
                completed(&ack_all(&mut c, id, TWO, sim.at(ms + 50))),
                vec![id]
            );
        }
    }
    assert_eq!(trigger_times, vec![500, 1000, 1500, 2000, 2500]);
    assert_eq!(c.latest().map(|c| c.id), Some(5));
}

#[test]
fn ids_start_at_next_id_and_strictly_increase() {
    let sim = Sim::new();
    let mut c: Coordinator<String> =
        Coordinator::new(config(100), TWO.to_vec(), 42, sim.at(0), EPOCH_MS);
    let mut ids = Vec::new();
    for step in 1..=5 {
        let now = sim.at(step * 100);
        let actions = c.tick(now);
        let id = triggers(&actions)[0];
        ids.push(id);
        // Alternate completion and decline: both free the slot.
        if step % 2 == 0 {
            ack_all(&mut c, id, TWO, now);
        } else {
            c.decline(id, (0, 0), "disk full".into(), now);
        }
    }
    assert_eq!(ids, vec![42, 43, 44, 45, 46]);
    assert_eq!(c.next_id(), 47);
}

#[test]
fn never_more_than_one_pending_by_default() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    assert_eq!(triggers(&c.tick(sim.at(100))), vec![1]);
    for ms in (110..=5000).step_by(10) {
        assert!(triggers(&c.tick(sim.at(ms))).is_empty(), "at {ms} ms");
    }
    assert_eq!(c.pending().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn max_concurrent_bounds_pending_checkpoints() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.max_concurrent = 3;
    let mut c = sim.coordinator(cfg, TWO);
    let mut all = Vec::new();
    for ms in (0..=2000).step_by(10) {
        all.extend(triggers(&c.tick(sim.at(ms))));
        assert!(c.pending().count() <= 3);
    }
    assert_eq!(all, vec![1, 2, 3]);
    // Completing the oldest frees exactly one slot.
    ack_all(&mut c, 1, TWO, sim.at(2000));
    assert_eq!(triggers(&c.tick(sim.at(2000))), vec![4]);
    assert!(triggers(&c.tick(sim.at(3000))).is_empty());
}

#[test]
fn late_checkpoint_triggers_next_at_once_without_a_burst() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    assert_eq!(triggers(&c.tick(sim.at(100))), vec![1]);
    // Takes 1 s, ten intervals: the next is due at once, and only one.
    ack_all(&mut c, 1, TWO, sim.at(1100));
    assert_eq!(triggers(&c.tick(sim.at(1100))), vec![2]);
    ack_all(&mut c, 2, TWO, sim.at(1110));
    assert!(triggers(&c.tick(sim.at(1110))).is_empty());
    assert!(triggers(&c.tick(sim.at(1199))).is_empty());
    assert_eq!(triggers(&c.tick(sim.at(1200))), vec![3]);
}

#[test]
fn min_pause_counts_from_the_end_of_the_last_checkpoint() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.min_pause = Duration::from_millis(300);
    let mut c = sim.coordinator(cfg, TWO);
    assert_eq!(triggers(&c.tick(sim.at(100))), vec![1]);
    ack_all(&mut c, 1, TWO, sim.at(150));
    // Interval says 200; min pause says 150 + 300.
    assert!(triggers(&c.tick(sim.at(200))).is_empty());
    assert!(triggers(&c.tick(sim.at(449))).is_empty());
    assert_eq!(triggers(&c.tick(sim.at(450))), vec![2]);
    // An abort is an end too.
    c.decline(2, (1, 0), "upload failed".into(), sim.at(460));
    assert!(triggers(&c.tick(sim.at(759))).is_empty());
    assert_eq!(triggers(&c.tick(sim.at(760))), vec![3]);
}

#[test]
fn min_pause_means_one_checkpoint_at_a_time() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.max_concurrent = 3;
    cfg.min_pause = Duration::from_millis(10);
    let mut c = sim.coordinator(cfg, TWO);
    let mut all = Vec::new();
    for ms in (0..=1000).step_by(10) {
        all.extend(triggers(&c.tick(sim.at(ms))));
    }
    assert_eq!(all, vec![1]);
}

#[test]
fn completes_only_when_every_subtask_acked() {
    let sim = Sim::new();
    let subtasks = &[(0, 0), (0, 1), (1, 0)];
    let mut c = sim.coordinator(config(100), subtasks);
    c.tick(sim.at(100));
    let a = c.ack(1, (0, 0), "a".into(), Duration::from_millis(3), sim.at(110));
    assert!(a.is_empty());
    let a = c.ack(1, (1, 0), "c".into(), Duration::from_millis(9), sim.at(120));
    assert!(a.is_empty());
    assert!(c.latest().is_none());
    let a = c.ack(1, (0, 1), "b".into(), Duration::from_millis(4), sim.at(130));
    let expected = CompletedCheckpoint {
        id: 1,
        triggered_at_ms: EPOCH_MS + 100,
        completed_at_ms: EPOCH_MS + 130,
        acks: BTreeMap::from([
            ((0, 0), "a".to_owned()),
            ((0, 1), "b".to_owned()),
            ((1, 0), "c".to_owned()),
        ]),
        max_alignment: Duration::from_millis(9),
    };
    assert_eq!(a, vec![Action::Complete(expected.clone())]);
    assert_eq!(c.latest(), Some(&expected));
    assert_eq!(c.pending().count(), 0);
}

#[test]
fn duplicate_ack_is_ignored_and_keeps_the_first_payload() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    c.tick(sim.at(100));
    assert!(
        c.ack(1, (0, 0), "first".into(), ALIGN, sim.at(110))
            .is_empty()
    );
    // A duplicate does not count as the second subtask's ack.
    assert!(
        c.ack(1, (0, 0), "second".into(), ALIGN, sim.at(120))
            .is_empty()
    );
    assert_eq!(c.history()[0].acked, 1);
    let a = c.ack(1, (1, 0), "other".into(), ALIGN, sim.at(130));
    assert_eq!(completed(&a), vec![1]);
    assert_eq!(c.latest().unwrap().acks[&(0, 0)], "first");
    // And a duplicate after completion is ignored too.
    assert!(
        c.ack(1, (1, 0), "late".into(), ALIGN, sim.at(140))
            .is_empty()
    );
}

#[test]
fn acks_for_unknown_or_aborted_ids_and_from_unknown_subtasks_are_ignored() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    // Nothing triggered yet.
    assert!(c.ack(1, (0, 0), "x".into(), ALIGN, sim.at(10)).is_empty());
    assert!(c.decline(1, (0, 0), "x".into(), sim.at(10)).is_empty());
    c.tick(sim.at(100));
    // Wrong id, and a subtask that is not part of the job.
    assert!(c.ack(7, (0, 0), "x".into(), ALIGN, sim.at(110)).is_empty());
    assert!(c.ack(1, (9, 9), "x".into(), ALIGN, sim.at(110)).is_empty());
    assert!(c.decline(1, (9, 9), "x".into(), sim.at(110)).is_empty());
    assert_eq!(c.pending().collect::<Vec<_>>(), vec![1]);
    // Abort 1, then every ack for it is ignored.
    assert_eq!(
        aborted(&c.decline(1, (0, 0), "no".into(), sim.at(120))).len(),
        1
    );
    assert!(ack_all(&mut c, 1, TWO, sim.at(130)).is_empty());
    assert!(c.decline(1, (1, 0), "again".into(), sim.at(130)).is_empty());
    assert!(c.latest().is_none());
}

#[test]
fn timeout_aborts_naming_the_missing_subtasks() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.timeout = Duration::from_millis(1000);
    let subtasks = &[(0, 0), (0, 1), (1, 0)];
    let mut c = sim.coordinator(cfg, subtasks);
    c.tick(sim.at(100));
    c.ack(1, (0, 1), "b".into(), ALIGN, sim.at(200));
    assert!(c.tick(sim.at(1099)).is_empty());
    let a = c.tick(sim.at(1100));
    let Action::Abort { id, reason, acked } = &a[0] else {
        panic!("expected an abort first, got {a:?}");
    };
    assert_eq!(*id, 1);
    assert_eq!(
        reason,
        "timed out after 1s waiting for 2 of 3 subtasks: task 0 subtask 0, task 1 subtask 0"
    );
    assert_eq!(acked, &vec![((0, 1), "b".to_owned())]);
    // The slot is free and the interval long past: the next one starts.
    assert_eq!(triggers(&a), vec![2]);
    let stats = &c.history()[1];
    assert_eq!(stats.status, CheckpointStatus::Aborted);
    assert_eq!(stats.duration_ms, Some(1000));
    assert_eq!(stats.failure.as_deref(), Some(reason.as_str()));
}

#[test]
fn timeout_reason_counts_missing_subtasks_beyond_the_named_ones() {
    let sim = Sim::new();
    let subtasks: Vec<SubtaskId> = (0..25).map(|i| (0, i)).collect();
    let mut cfg = config(100);
    cfg.timeout = Duration::from_millis(50);
    let mut c = sim.coordinator(cfg, &subtasks);
    c.tick(sim.at(100));
    let (_, reason) = aborted(&c.tick(sim.at(150))).remove(0);
    assert!(reason.contains("25 of 25 subtasks"), "{reason}");
    assert!(reason.contains("task 0 subtask 9, and 15 more"), "{reason}");
    assert!(!reason.contains("subtask 10"), "{reason}");
}

#[test]
fn ack_at_the_deadline_is_too_late() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.timeout = Duration::from_millis(1000);
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    c.ack(1, (0, 0), "a".into(), ALIGN, sim.at(500));
    // No tick in between: the ack itself notices the deadline.
    let a = c.ack(1, (1, 0), "b".into(), ALIGN, sim.at(1100));
    assert!(completed(&a).is_empty());
    assert_eq!(aborted(&a)[0].0, 1);
    assert!(aborted(&a)[0].1.contains("task 1 subtask 0"));
    assert!(c.latest().is_none());
}

#[test]
fn decline_aborts_with_the_subtask_and_reason() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    c.tick(sim.at(100));
    c.ack(1, (0, 0), "a".into(), ALIGN, sim.at(110));
    let a = c.decline(1, (1, 0), "upload failed: no space".into(), sim.at(120));
    assert_eq!(
        a,
        vec![Action::Abort {
            id: 1,
            reason: "declined by task 1 subtask 0: upload failed: no space".into(),
            acked: vec![((0, 0), "a".into())],
        }]
    );
    assert_eq!(c.pending().count(), 0);
}

#[test]
fn a_newer_completion_subsumes_older_pending_checkpoints() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.max_concurrent = 3;
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    c.tick(sim.at(200));
    c.tick(sim.at(300));
    c.ack(1, (0, 0), "1a".into(), ALIGN, sim.at(310));
    let a = ack_all(&mut c, 2, TWO, sim.at(320));
    assert_eq!(completed(&a), vec![2]);
    assert_eq!(
        aborted(&a),
        vec![(1, "subsumed by checkpoint 2".to_owned())]
    );
    // Complete comes before the abort of what it subsumes.
    assert!(matches!(a[0], Action::Complete(_)));
    let Action::Abort { acked, .. } = &a[1] else {
        panic!("{a:?}")
    };
    assert_eq!(acked, &vec![((0, 0), "1a".to_owned())]);
    // The newer pending one is untouched.
    assert_eq!(c.pending().collect::<Vec<_>>(), vec![3]);
    assert!(ack_all(&mut c, 1, TWO, sim.at(330)).is_empty());
}

#[test]
fn retention_discards_oldest_first_beyond_retain() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.retain = 2;
    let mut c = sim.coordinator(cfg, TWO);
    let mut all_discarded = Vec::new();
    for step in 1..=5 {
        let now = sim.at(step * 100);
        let id = triggers(&c.tick(now))[0];
        let a = ack_all(&mut c, id, TWO, now);
        assert_eq!(completed(&a), vec![id]);
        all_discarded.extend(discarded(&a));
        assert!(c.retained().count() <= 2);
    }
    assert_eq!(all_discarded, vec![1, 2, 3]);
    assert_eq!(c.retained().map(|c| c.id).collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(c.latest().unwrap().id, 5);
}

#[test]
fn retain_zero_still_keeps_the_latest() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.retain = 0;
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    assert!(discarded(&ack_all(&mut c, 1, TWO, sim.at(100))).is_empty());
    c.tick(sim.at(200));
    let a = ack_all(&mut c, 2, TWO, sim.at(200));
    assert_eq!(discarded(&a), vec![1]);
    assert_eq!(c.latest().unwrap().id, 2);
}

#[test]
fn actions_come_in_order_complete_abort_discard() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.max_concurrent = 2;
    cfg.retain = 1;
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    ack_all(&mut c, 1, TWO, sim.at(150));
    c.tick(sim.at(200));
    c.tick(sim.at(300));
    let a = ack_all(&mut c, 3, TWO, sim.at(350));
    let kinds: Vec<(&str, u64)> = a
        .iter()
        .map(|a| match a {
            Action::Trigger { id, .. } => ("trigger", *id),
            Action::Complete(c) => ("complete", c.id),
            Action::Discard(c) => ("discard", c.id),
            Action::Abort { id, .. } => ("abort", *id),
        })
        .collect();
    assert_eq!(kinds, vec![("complete", 3), ("abort", 2), ("discard", 1)]);
}

#[test]
fn suspend_aborts_everything_pending_and_stops_triggering() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.max_concurrent = 2;
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    ack_all(&mut c, 1, TWO, sim.at(110));
    c.tick(sim.at(200));
    c.tick(sim.at(300));
    c.ack(3, (1, 0), "3b".into(), ALIGN, sim.at(310));
    let a = c.suspend("TaskManager tm-1 lost", sim.at(320));
    assert_eq!(
        a,
        vec![
            Action::Abort {
                id: 2,
                reason: "TaskManager tm-1 lost".into(),
                acked: vec![]
            },
            Action::Abort {
                id: 3,
                reason: "TaskManager tm-1 lost".into(),
                acked: vec![((1, 0), "3b".into())]
            },
        ]
    );
    assert!(c.is_suspended());
    // The latest completed checkpoint survives: it is what we restore.
    assert_eq!(c.latest().unwrap().id, 1);
    // Late acks from the failed attempt are ignored.
    assert!(ack_all(&mut c, 2, TWO, sim.at(330)).is_empty());
    for ms in (330..=5000).step_by(10) {
        assert!(c.tick(sim.at(ms)).is_empty(), "at {ms} ms");
    }
    assert_eq!(c.next_wakeup(), None);
    // Resume: the next trigger waits an interval, with a fresh id.
    c.resume(sim.at(5000));
    assert!(!c.is_suspended());
    assert!(c.tick(sim.at(5099)).is_empty());
    assert_eq!(triggers(&c.tick(sim.at(5100))), vec![4]);
}

#[test]
fn resume_without_suspend_changes_nothing() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    c.resume(sim.at(90));
    assert_eq!(triggers(&c.tick(sim.at(100))), vec![1]);
}

#[test]
fn resume_still_honours_min_pause() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.min_pause = Duration::from_millis(500);
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    c.suspend("restart", sim.at(200));
    c.resume(sim.at(250));
    assert!(c.tick(sim.at(350)).is_empty());
    assert!(c.tick(sim.at(699)).is_empty());
    assert_eq!(triggers(&c.tick(sim.at(700))), vec![2]);
}

#[test]
fn job_without_subtasks_completes_on_trigger() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), &[]);
    let a = c.tick(sim.at(100));
    assert_eq!(triggers(&a), vec![1]);
    assert_eq!(completed(&a), vec![1]);
}

#[test]
fn next_wakeup_is_the_next_trigger_or_the_earliest_timeout() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.timeout = Duration::from_millis(250);
    cfg.max_concurrent = 2;
    let mut c = sim.coordinator(cfg, TWO);
    assert_eq!(c.next_wakeup(), Some(sim.at(100)));
    c.tick(sim.at(100));
    assert_eq!(c.next_wakeup(), Some(sim.at(200)));
    c.tick(sim.at(200));
    // Both slots taken: the timeout of checkpoint 1 is next.
    assert_eq!(c.next_wakeup(), Some(sim.at(350)));
    // Ticking at every wakeup drives the machine without polling.
    let a = c.tick(c.next_wakeup().unwrap());
    assert_eq!(aborted(&a)[0].0, 1);
    assert_eq!(triggers(&a), vec![3]);
}

#[test]
fn history_is_newest_first_with_every_status() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.timeout = Duration::from_millis(1000);
    let mut c = sim.coordinator(cfg, TWO);
    c.tick(sim.at(100));
    c.ack(1, (0, 0), "a".into(), Duration::from_millis(7), sim.at(120));
    c.ack(1, (1, 0), "b".into(), Duration::from_millis(3), sim.at(140));
    c.tick(sim.at(200));
    c.decline(2, (0, 0), "boom".into(), sim.at(260));
    c.tick(sim.at(300));
    c.ack(3, (0, 0), "a".into(), ALIGN, sim.at(310));
    assert!(c.set_sizes(1, 1000, 400));
    assert!(!c.set_sizes(99, 1, 1));
    let h = c.history();
    assert_eq!(h.iter().map(|s| s.id).collect::<Vec<_>>(), vec![3, 2, 1]);
    assert_eq!(
        h[2],
        CheckpointStats {
            id: 1,
            status: CheckpointStatus::Completed,
            triggered_at_ms: EPOCH_MS + 100,
            duration_ms: Some(40),
            acked: 2,
            total: 2,
            max_alignment_ms: 7,
            failure: None,
            full_size: 1000,
            incremental_size: 400,
        }
    );
    assert_eq!(h[1].status, CheckpointStatus::Aborted);
    assert_eq!(h[1].duration_ms, Some(60));
    assert_eq!(
        h[1].failure.as_deref(),
        Some("declined by task 0 subtask 0: boom")
    );
    assert_eq!(h[0].status, CheckpointStatus::Pending);
    assert_eq!(h[0].duration_ms, None);
    assert_eq!((h[0].acked, h[0].total), (1, 2));
    let json = serde_json::to_value(&h[0]).unwrap();
    assert_eq!(json["status"], "pending");
    assert_eq!(serde_json::to_value(&h[1]).unwrap()["status"], "aborted");
    assert_eq!(serde_json::to_value(&h[2]).unwrap()["status"], "completed");
}

#[test]
fn history_is_bounded() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(10), TWO);
    for step in 1..=(HISTORY_LEN as u64 + 50) {
        let now = sim.at(step * 10);
        let id = triggers(&c.tick(now))[0];
        ack_all(&mut c, id, TWO, now);
    }
    let h = c.history();
    assert_eq!(h.len(), HISTORY_LEN);
    assert_eq!(h[0].id, HISTORY_LEN as u64 + 50);
    assert_eq!(h[HISTORY_LEN - 1].id, 51);
    assert!(!c.set_sizes(50, 1, 1));
}

#[test]
fn restores_are_recorded_oldest_first_and_bounded() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    c.record_restore(None, 10, 1);
    c.record_restore(Some(4), 20, 2);
    assert_eq!(
        c.restores(),
        &[
            RestoreRecord {
                checkpoint: None,
                at_ms: 10,
                attempt: 1,
                skipped: Vec::new(),
                upgrade: None,
            },
            RestoreRecord {
                checkpoint: Some(4),
                at_ms: 20,
                attempt: 2,
                skipped: Vec::new(),
                upgrade: None,
            },
        ]
    );
    for attempt in 3..=(RESTORE_HISTORY_LEN as u32 + 10) {
        c.record_restore(Some(5), 30, attempt);
    }
    assert_eq!(c.restores().len(), RESTORE_HISTORY_LEN);
    assert_eq!(c.restores()[0].attempt, 11);
    let json = serde_json::to_value(&c.restores()[0]).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"checkpoint": 5, "at_ms": 30, "attempt": 11})
    );
}

#[test]
fn adopted_checkpoint_is_latest_and_later_discarded() {
    let sim = Sim::new();
    let mut cfg = config(100);
    cfg.retain = 1;
    let mut c = sim.coordinator(cfg, TWO);
    let old = CompletedCheckpoint {
        id: 17,
        triggered_at_ms: 5,
        completed_at_ms: 9,
        acks: BTreeMap::from([((0, 0), "a".to_owned()), ((1, 0), "b".to_owned())]),
        max_alignment: ALIGN,
    };
    assert!(c.adopt(old.clone()).is_empty());
    assert!(c.adopt(old.clone()).is_empty());
    assert_eq!(c.latest(), Some(&old));
    assert_eq!(c.history()[0].duration_ms, Some(4));
    assert_eq!(c.history().len(), 1);
    assert_eq!(triggers(&c.tick(sim.at(100))), vec![18]);
    assert_eq!(discarded(&ack_all(&mut c, 18, TWO, sim.at(110))), vec![17]);
}

#[test]
fn config_reads_millisecond_fields_with_defaults() {
    let cfg: CheckpointConfig = serde_json::from_str(r#"{"interval_ms": 500}"#).unwrap();
    assert_eq!(cfg, CheckpointConfig::every(Duration::from_millis(500)));
    assert_eq!(cfg.timeout, Duration::from_secs(60));
    assert_eq!(
        (cfg.max_concurrent, cfg.min_pause, cfg.retain),
        (1, Duration::ZERO, 2)
    );
    let cfg: CheckpointConfig = toml::from_str(
        "interval_ms = 1000\ntimeout_ms = 5000\nmax_concurrent = 2\nmin_pause_ms = 100\nretain = 3",
    )
    .unwrap();
    assert_eq!(cfg.timeout, Duration::from_secs(5));
    assert_eq!(cfg.min_pause, Duration::from_millis(100));
    let back: CheckpointConfig =
        serde_json::from_value(serde_json::to_value(&cfg).unwrap()).unwrap();
    assert_eq!(back, cfg);
    assert!(serde_json::from_str::<CheckpointConfig>(r#"{"timeout_ms": 5}"#).is_err());
    assert!(
        serde_json::from_str::<CheckpointConfig>(r#"{"interval_ms": 5, "intervall": 1}"#).is_err()
    );
}

#[test]
fn config_validation_rejects_zeros() {
    let ok = config(100);
    assert_eq!(ok.validate(), Ok(()));
    let with = |f: fn(&mut CheckpointConfig)| {
        let mut c = ok.clone();
        f(&mut c);
        c.validate()
    };
    assert_eq!(
        with(|c| c.interval = Duration::ZERO),
        Err(ConfigError::ZeroInterval)
    );
    assert_eq!(
        with(|c| c.timeout = Duration::ZERO),
        Err(ConfigError::ZeroTimeout)
    );
    assert_eq!(
        with(|c| c.max_concurrent = 0),
        Err(ConfigError::ZeroMaxConcurrent)
    );
    assert_eq!(with(|c| c.retain = 0), Err(ConfigError::ZeroRetain));
}

/// A tiny deterministic generator, so the simulation needs no crate.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random acks, declines, duplicates, stale acks, suspends and resumes
/// on a simulated clock; checks the invariants after every event.
#[test]
fn random_simulation_keeps_the_invariants() {
    for seed in 1..=20u64 {
        let sim = Sim::new();
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let subtasks: Vec<SubtaskId> = vec![(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)];
        let mut cfg = config(100);
        cfg.timeout = Duration::from_millis(400);
        cfg.max_concurrent = 1 + (seed % 3) as u32;
        cfg.min_pause = Duration::from_millis(if seed % 4 == 0 { 30 } else { 0 });
        cfg.retain = 1 + (seed % 3) as u32;
        let mut c = sim.coordinator(cfg.clone(), &subtasks);

        let mut triggered = Vec::new();
        let mut ended = BTreeSet::new();
        let mut live_retained = BTreeSet::new();
        let mut check = |actions: Vec<Action<String>>, c: &Coordinator<String>| {
            for a in actions {
                match a {
                    Action::Trigger { id, .. } => {
                        assert!(triggered.last().is_none_or(|last| id > *last));
                        triggered.push(id);
                    }
                    Action::Complete(cp) => {
                        assert_eq!(cp.acks.len(), subtasks.len());
                        assert!(ended.insert(cp.id), "{} ended twice", cp.id);
                        live_retained.insert(cp.id);
                    }
                    Action::Abort { id, .. } => {
                        assert!(ended.insert(id), "{id} ended twice");
                    }
                    Action::Discard(cp) => {
                        assert!(live_retained.remove(&cp.id), "{} discarded twice", cp.id);
                        assert!(live_retained.iter().all(|&r| r > cp.id), "oldest first");
                    }
                }
            }
            assert!(c.pending().count() <= cfg.max_concurrent as usize);
            if !cfg.min_pause.is_zero() {
                assert!(c.pending().count() <= 1);
            }
            assert!(live_retained.len() <= cfg.retain as usize);
            // A completed checkpoint subsumes every older pending one.
            let latest = c.latest().map(|cp| cp.id);
            assert!(c.pending().all(|p| Some(p) > latest));
            assert_eq!(c.latest().map(|cp| cp.id), live_retained.last().copied());
            assert_eq!(
                c.retained().map(|cp| cp.id).collect::<BTreeSet<_>>(),
                live_retained
            );
            assert!(c.history().len() <= HISTORY_LEN);
        };

        let mut ms = 0;
        for _ in 0..3000 {
            ms += rng.below(20);
            let now = sim.at(ms);
            let actions = match rng.below(100) {
                0..=39 => c.tick(now),
                40..=89 => {
                    // Mostly the pending ids, sometimes stale or future ones.
                    let pending: Vec<u64> = c.pending().collect();
                    let id = if pending.is_empty() || rng.below(10) == 0 {
                        rng.below(c.next_id() + 2)
                    } else {
                        pending[rng.below(pending.len() as u64) as usize]
                    };
                    let s = subtasks[rng.below(subtasks.len() as u64) as usize];
                    c.ack(
                        id,
                        s,
                        format!("{id}"),
                        Duration::from_millis(rng.below(50)),
                        now,
                    )
                }
                90..=95 => {
                    let id = rng.below(c.next_id() + 1);
                    c.decline(id, subtasks[0], "random".into(), now)
                }
                96..=97 => c.suspend("random failure", now),
                _ => {
                    c.resume(now);
                    Vec::new()
                }
            };
            check(actions, &c);
        }
        // Everything triggered either ended or is still pending.
        for id in triggered {
            assert!(
                ended.contains(&id) ^ c.pending().any(|p| p == id),
                "seed {seed} id {id}"
            );
        }
        assert!(
            !live_retained.is_empty(),
            "seed {seed}: nothing ever completed"
        );
    }
}

#[test]
fn rescoping_discards_the_retained_checkpoints_and_keeps_the_history() {
    let sim = Sim::new();
    let mut c = sim.coordinator(config(100), TWO);
    let (id, _) = c.trigger_now(sim.at(10)).unwrap();
    assert_eq!(completed(&ack_all(&mut c, id, TWO, sim.at(20))), vec![id]);
    c.record_restore(None, 10, 1);
    let three = [(0, 0), (1, 0), (1, 1)];
    let actions = c.rescope(three.to_vec(), config(50), sim.at(30));
    assert_eq!(discarded(&actions), vec![id]);
    assert!(c.latest().is_none());
    assert_eq!(c.config().interval, Duration::from_millis(50));
    assert_eq!(c.history().len(), 1, "the history stays");
    c.mark_upgrade(1);
    assert_eq!(c.restores()[0].upgrade, Some(1));
    // The next checkpoint has the next id and needs the new subtasks.
    let (next, _) = c.trigger_now(sim.at(40)).unwrap();
    assert_eq!(next, id + 1);
    assert!(completed(&ack_all(&mut c, next, TWO, sim.at(50))).is_empty());
    assert_eq!(
        completed(&ack_all(&mut c, next, &[(1, 1)], sim.at(60))),
        vec![next]
    );
}
