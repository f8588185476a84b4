//! A job's exception history (Flink's): every failure of the job, with its
//! root cause, where it happened and when, kept across restarts, newest
//! last, at most [`MAX_EXCEPTIONS`]. `control::fail` and
//! `control::not_committed` record into it; `GET /v1/jobs/{id}` shows it
//! as `exceptions`, newest first.
//!
//! One entry per failed attempt: the first failure of an attempt opens
//! it; a root cause found later in the same attempt (a subtask's own
//! error after another was only aborted) replaces its cause but keeps its
//! time.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Entries kept per job: the oldest leave first. Flink keeps 16 by
/// default; a hundred covers a long crash loop's start and its end.
pub const MAX_EXCEPTIONS: usize = 100;

/// What failed, and where: the message and the parts of it a UI links to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cause {
    /// The root cause, for a human.
    pub message: String,
    /// The task (its chain of vertices, `a+b`) whose subtask failed.
    pub task: Option<String>,
    /// That subtask's index.
    pub subtask: Option<u32>,
    /// The TaskManager it ran on, or the one lost.
    pub taskmanager: Option<String>,
}

impl Cause {
    /// A cause with only a message.
    pub fn new(message: impl Into<String>) -> Cause {
        Cause {
            message: message.into(),
            ..Cause::default()
        }
    }

    /// Names the TaskManager.
    pub fn on(mut self, taskmanager: &str) -> Cause {
        self.taskmanager = Some(taskmanager.to_owned());
        self
    }

    /// Names the task and subtask.
    pub fn at(mut self, task: &str, subtask: u32) -> Cause {
        self.task = Some(task.to_owned());
        self.subtask = Some(subtask);
        self
    }
}

/// One entry of `exceptions` in `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExceptionView {
    /// When the attempt failed, Unix ms.
    pub time_ms: u64,
    /// The deployment attempt that failed (0 first).
    pub attempt: u32,
    /// The root cause.
    pub root_cause: String,
    /// The task whose subtask failed, if a subtask did.
    #[serde(default)]
    pub task: Option<String>,
    /// The failed subtask's index.
    #[serde(default)]
    pub subtask: Option<u32>,
    /// The TaskManager where it failed, or the one that was lost.
    #[serde(default)]
    pub taskmanager: Option<String>,
}

/// A job's history (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Exceptions {
    entries: VecDeque<ExceptionView>,
}

impl Exceptions {
    /// A failure of `attempt` at `time_ms`. `replaces` says the attempt's
    /// failure is already recorded and `cause` is its better root cause.
    pub fn record(&mut self, attempt: u32, cause: Cause, time_ms: u64, replaces: bool) {
        let Cause {
            message,
            task,
            subtask,
            taskmanager,
        } = cause;
        if replaces && let Some(last) = self.entries.back_mut().filter(|e| e.attempt == attempt) {
            last.root_cause = message;
            last.task = task;
            last.subtask = subtask;
            last.taskmanager = taskmanager;
            return;
        }
        if self.entries.len() == MAX_EXCEPTIONS {
            self.entries.pop_front();
        }
        self.entries.push_back(ExceptionView {
            time_ms,
            attempt,
            root_cause: message,
            task,
            subtask,
            taskmanager,
        });
    }

    /// Newest first.
    pub fn newest_first(&self) -> Vec<ExceptionView> {
        self.entries.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_failed_attempt_bounded_and_newest_first() {
        let mut h = Exceptions::default();
        h.record(
            0,
            Cause::new("up (1/2) on tm-1 was aborted").on("tm-1"),
            10,
            false,
        );
        // The same attempt's root cause, found later: replaces, keeps the time.
        h.record(0, Cause::new("TaskManager tm-2 lost").on("tm-2"), 20, true);
        h.record(1, Cause::new("trap").at("up", 1).on("tm-1"), 30, false);
        let all = h.newest_first();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].root_cause, "trap");
        assert_eq!(all[0].task.as_deref(), Some("up"));
        assert_eq!(all[1].root_cause, "TaskManager tm-2 lost");
        assert_eq!(all[1].taskmanager.as_deref(), Some("tm-2"));
        assert_eq!(all[1].time_ms, 10);
        for a in 2..(2 + MAX_EXCEPTIONS as u32) {
            h.record(a, Cause::new(format!("failure {a}")), u64::from(a), false);
        }
        let all = h.newest_first();
        assert_eq!(all.len(), MAX_EXCEPTIONS);
        assert_eq!(all.last().unwrap().attempt, 2, "the oldest left first");
    }
}
