//! The job lifecycle: the states a job goes through and the one table of
//! legal moves between them.
//!
//! A pure function in the style of the checkpoint coordinator: no clock,
//! no TaskManagers, no storage. The JobManager's shell (`lib.rs`) decides
//! *which* [`Event`] happened (a subtask failed, every subtask stopped, the
//! restart strategy allows another attempt) and carries out what the new
//! state implies (cancel messages, slot release, checkpoint suspension);
//! [`JobState::on`] decides only the next state.
//!
//! # The table
//!
//! ```text
//! state        event                                  next
//! ───────────  ─────────────────────────────────────  ──────────
//! Running      TaskFailed                             Failing
//! Running      Cancel                                 Canceling
//! Running      Stopped { all_finished, committers>0 } Finishing
//! Running      Stopped { all_finished, committers=0 } Finished
//! Running      Stopped { not all finished }           → as Failing
//! Failing      Cancel                                 Canceling
//! Failing      Stopped { restart: true }              Restarting
//! Failing      Stopped { restart: false }             Failed
//! Canceling    Stopped                                Canceled
//! Restarting   Cancel                                 Canceling (settles at once: nothing runs)
//! Restarting   Redeployed                             Running
//! Running      Upgrade                                Upgrading
//! Upgrading    Cancel                                 Canceling
//! Upgrading    Stopped                                Restarting (with the new modules)
//! Finishing    Committed { last: true }               Finished
//! Finishing    CommitFailed                           Failing
//! ```
//!
//! Every other pair is refused with [`Illegal`]: the state stays. The
//! ended states (`Finished`, `Failed`, `Canceled`) refuse everything.
//!
//! # Invariants
//! * A job reaches `Finished` only through every subtask finishing, and,
//!   when TaskManagers must commit final output (`committers > 0`), only
//!   after the last of them confirms ([`Event::Committed`]).
//! * A user's cancel always ends in `Canceled`, also while the job is
//!   failing or waiting to restart; never during `Finishing` (the output
//!   is being published: the job is as good as finished).
//! * `Restarting` is entered only when the restart strategy allowed it,
//!   or for an upgrade (`weir upgrade`: stopped at its savepoint, the job
//!   restarts from it with new modules, or back on its old ones).

use serde::{Deserialize, Serialize};

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Deployed; subtasks running (or starting).
    Running,
    /// A subtask failed; the others are being canceled.
    Failing,
    /// Canceled by a user; subtasks are stopping.
    Canceling,
    /// Stopped at a savepoint for an upgrade (`weir upgrade`); subtasks
    /// are stopping, then it restarts from the savepoint with new modules.
    Upgrading,
    /// Failed; waiting (restart delay, free slots) to restart from the
    /// latest completed checkpoint.
    Restarting,
    /// Every subtask finished; the TaskManagers are committing the sinks'
    /// final output (jobs with checkpoints).
    Finishing,
    /// Every subtask finished (and, with checkpoints, every final commit
    /// is done).
    Finished,
    /// Failed; `failure` says why.
    Failed,
    /// Canceled by a user.
    Canceled,
}

/// What happened to a job, as the lifecycle needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A subtask failed (or was aborted, or its TaskManager was lost).
    TaskFailed,
    /// A user canceled the job.
    Cancel,
    /// The savepoint of an upgrade is written: the job stops to restart
    /// with new modules.
    Upgrade,
    /// Every subtask of the attempt has stopped.
    Stopped {
        /// Whether all of them finished (end of input), rather than
        /// failing or being canceled.
        all_finished: bool,
        /// TaskManagers that must confirm their final commits before the
        /// job is finished (0 without checkpoints).
        committers: usize,
        /// Whether the restart strategy allows another attempt (asked
        /// only when the attempt failed).
        restart: bool,
    },
    /// A restarting job was deployed again.
    Redeployed,
    /// A TaskManager confirmed its final commits; `last`: it was the last
    /// one the job waited for.
    Committed {
        /// Whether no other TaskManager is left to confirm.
        last: bool,
    },
    /// A final commit failed, or a TaskManager was lost before confirming.
    CommitFailed,
}

/// A move the table does not allow; the job keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {state:?} job does not move on {event:?}")]
pub struct Illegal {
    /// The state the job is in.
    pub state: JobState,
    /// The event refused.
    pub event: Event,
}

impl JobState {
    /// Its name in the REST API and on the terminal (`running`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Failing => "failing",
            JobState::Canceling => "canceling",
            JobState::Upgrading => "upgrading",
            JobState::Restarting => "restarting",
            JobState::Finishing => "finishing",
            JobState::Finished => "finished",
            JobState::Failed => "failed",
            JobState::Canceled => "canceled",
        }
    }

    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Failed | JobState::Canceled
        )
    }

    /// The state after `event`: the one table of the module docs.
    pub fn on(self, event: Event) -> Result<JobState, Illegal> {
        use Event::*;
        use JobState::*;
        let failed = |restart: bool| if restart { Restarting } else { Failed };
        Ok(match (self, event) {
            (Running, TaskFailed) => Failing,
            (Running | Failing | Restarting | Upgrading, Cancel) => Canceling,
            (Running, Upgrade) => Upgrading,
            (Upgrading, Stopped { .. }) => Restarting,
            (
                Running,
                Stopped {
                    all_finished: true,
                    committers,
                    ..
                },
            ) => {
                if committers > 0 {
                    Finishing
                } else {
                    Finished
                }
            }
            (Running | Failing, Stopped { restart, .. }) => failed(restart),
            (Canceling, Stopped { .. }) => Canceled,
            (Restarting, Redeployed) => Running,
            (Finishing, Committed { last: true }) => Finished,
            (Finishing, Committed { last: false }) => Finishing,
            (Finishing, CommitFailed) => Failing,
            (state, event) => return Err(Illegal { state, event }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Event::*;
    use super::JobState::*;
    use super::*;

    const ALL: [JobState; 9] = [
        Running, Failing, Canceling, Upgrading, Restarting, Finishing, Finished, Failed, Canceled,
    ];

    #[test]
    fn names_are_the_api_names_both_ways() {
        for state in ALL {
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json, state.as_str(), "{state:?}");
            assert_eq!(serde_json::from_value::<JobState>(json).unwrap(), state);
        }
    }

    fn stopped(all_finished: bool, committers: usize, restart: bool) -> Event {
        Stopped {
            all_finished,
            committers,
            restart,
        }
    }

    fn events() -> Vec<Event> {
        let mut events = vec![
            TaskFailed,
            Cancel,
            Upgrade,
            Redeployed,
            Committed { last: true },
            Committed { last: false },
            CommitFailed,
        ];
        for all_finished in [false, true] {
            for committers in [0, 2] {
                for restart in [false, true] {
                    events.push(stopped(all_finished, committers, restart));
                }
            }
        }
        events
    }

    #[test]
    fn a_job_that_runs_to_the_end_finishes_after_its_commits() {
        let s = Running.on(stopped(true, 2, false)).unwrap();
        assert_eq!(s, Finishing);
        let s = s.on(Committed { last: false }).unwrap();
        assert_eq!(s, Finishing, "one TaskManager still commits");
        assert_eq!(s.on(Committed { last: true }), Ok(Finished));
        // Without checkpoints nobody commits later: finished at once.
        assert_eq!(Running.on(stopped(true, 0, false)), Ok(Finished));
    }

    #[test]
    fn a_failure_restarts_or_fails_as_the_strategy_says() {
        let s = Running.on(TaskFailed).unwrap();
        assert_eq!(s, Failing);
        assert_eq!(s.on(stopped(false, 0, true)), Ok(Restarting));
        assert_eq!(s.on(stopped(false, 0, false)), Ok(Failed));
        assert_eq!(Restarting.on(Redeployed), Ok(Running));
        // Every subtask stopped without a reported failure (aborted): the
        // attempt failed all the same.
        assert_eq!(Running.on(stopped(false, 0, true)), Ok(Restarting));
    }

    #[test]
    fn a_failed_final_commit_fails_the_job() {
        let s = Finishing.on(CommitFailed).unwrap();
        assert_eq!(s, Failing);
        assert_eq!(s.on(stopped(true, 2, true)), Ok(Restarting));
    }

    #[test]
    fn cancel_ends_canceled_from_every_state_that_still_runs_or_waits() {
        assert_eq!(
            Running.on(Cancel).unwrap().on(stopped(false, 0, true)),
            Ok(Canceled)
        );
        // A cancel while the job fails is not lost to a restart.
        assert_eq!(
            Failing.on(Cancel).unwrap().on(stopped(false, 0, true)),
            Ok(Canceled)
        );
        assert_eq!(
            Restarting.on(Cancel).unwrap().on(stopped(false, 0, true)),
            Ok(Canceled)
        );
        // Publishing the final output is not interrupted.
        assert!(Finishing.on(Cancel).is_err());
    }

    #[test]
    fn ended_jobs_refuse_every_event() {
        for state in ALL.into_iter().filter(|s| s.is_terminal()) {
            for event in events() {
                assert_eq!(state.on(event), Err(Illegal { state, event }));
            }
        }
    }

    #[test]
    fn the_table_is_exactly_the_documented_one() {
        // Every (state, event) pair: the legal ones are the table's rows.
        let mut legal = Vec::new();
        for state in ALL {
            for event in events() {
                if let Ok(next) = state.on(event) {
                    legal.push((state, event, next));
                }
            }
        }
        let expected: Vec<(JobState, Event, JobState)> = vec![
            (Running, TaskFailed, Failing),
            (Running, Cancel, Canceling),
            (Running, Upgrade, Upgrading),
            (Running, stopped(false, 0, false), Failed),
            (Running, stopped(false, 0, true), Restarting),
            (Running, stopped(false, 2, false), Failed),
            (Running, stopped(false, 2, true), Restarting),
            (Running, stopped(true, 0, false), Finished),
            (Running, stopped(true, 0, true), Finished),
            (Running, stopped(true, 2, false), Finishing),
            (Running, stopped(true, 2, true), Finishing),
            (Failing, Cancel, Canceling),
            (Failing, stopped(false, 0, false), Failed),
            (Failing, stopped(false, 0, true), Restarting),
            (Failing, stopped(false, 2, false), Failed),
            (Failing, stopped(false, 2, true), Restarting),
            (Failing, stopped(true, 0, false), Failed),
            (Failing, stopped(true, 0, true), Restarting),
            (Failing, stopped(true, 2, false), Failed),
            (Failing, stopped(true, 2, true), Restarting),
            (Canceling, stopped(false, 0, false), Canceled),
            (Canceling, stopped(false, 0, true), Canceled),
            (Canceling, stopped(false, 2, false), Canceled),
            (Canceling, stopped(false, 2, true), Canceled),
            (Canceling, stopped(true, 0, false), Canceled),
            (Canceling, stopped(true, 0, true), Canceled),
            (Canceling, stopped(true, 2, false), Canceled),
            (Canceling, stopped(true, 2, true), Canceled),
            (Upgrading, Cancel, Canceling),
            (Upgrading, stopped(false, 0, false), Restarting),
            (Upgrading, stopped(false, 0, true), Restarting),
            (Upgrading, stopped(false, 2, false), Restarting),
            (Upgrading, stopped(false, 2, true), Restarting),
            (Upgrading, stopped(true, 0, false), Restarting),
            (Upgrading, stopped(true, 0, true), Restarting),
            (Upgrading, stopped(true, 2, false), Restarting),
            (Upgrading, stopped(true, 2, true), Restarting),
            (Restarting, Cancel, Canceling),
            (Restarting, Redeployed, Running),
            (Finishing, Committed { last: true }, Finished),
            (Finishing, Committed { last: false }, Finishing),
            (Finishing, CommitFailed, Failing),
        ];
        assert_eq!(legal, expected);
    }
}
