//! One job's lock and its queue of events ([`JobCell`]), and taking the
//! lock: waiting ([`JobManager::lock_job`]: queries, cancel, storage
//! outcomes) or not ([`JobManager::try_lock_job`]: the clock), and queuing
//! an event for whoever holds it ([`JobManager::queue_event`]: what
//! TaskManagers say). The crate docs say why ("One queue per job").

use super::*;

/// One job: its state behind its own lock, and its queue of events.
///
/// What TaskManagers say about a job (and losing one of them) joins the
/// job's queue ([`JobEvent`]); whoever holds the job's lock takes the
/// queue's events in order before letting go ([`JobManager::drain_queue`]).
/// So a connection's reader or the clock never waits for a busy job: it
/// queues and goes on to the next job (Arroyo's per-job loop, without a
/// task per job, so a simulation stays one deterministic thread).
pub(crate) struct JobCell {
    job: Mutex<Job>,
    queue: Mutex<VecDeque<JobEvent>>,
}

/// An event for one job, taken in arrival order under its lock.
pub(crate) enum JobEvent {
    /// A message of TaskManager `tm` in session `session` about the job.
    Message {
        tm: String,
        session: u64,
        message: ToJobManager,
    },
    /// Heartbeat metrics of TaskManager `tm` for the job.
    Report { tm: String, report: JobReport },
    /// TaskManager `tm` was lost (marked in the registry first).
    Lost {
        tm: String,
        address: SocketAddr,
        reason: String,
    },
}

impl JobCell {
    pub(crate) fn new(job: Job) -> Arc<JobCell> {
        Arc::new(JobCell {
            job: Mutex::new(job),
            queue: Mutex::default(),
        })
    }

    pub(crate) fn queue(&self) -> MutexGuard<'_, VecDeque<JobEvent>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, Job>> {
        match self.job.try_lock() {
            Ok(job) => Some(job),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A job's lock, held; on drop it takes the events queued meanwhile.
pub(crate) struct JobGuard<'a> {
    jm: &'a JobManager,
    cell: &'a JobCell,
    job: Option<MutexGuard<'a, Job>>,
}

impl std::ops::Deref for JobGuard<'_> {
    type Target = Job;
    fn deref(&self) -> &Job {
        self.job.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for JobGuard<'_> {
    fn deref_mut(&mut self) -> &mut Job {
        self.job.as_mut().expect("held until dropped")
    }
}

impl Drop for JobGuard<'_> {
    fn drop(&mut self) {
        if let Some(mut job) = self.job.take() {
            let ran = self.jm.take_queue(&mut job, self.cell);
            drop(job);
            if ran > 0 {
                self.jm.changed();
            }
            self.jm.drain_queue(self.cell);
        }
    }
}

impl JobManager {
    /// Takes job `cell`'s lock, waiting for it (queries, cancel, storage
    /// outcomes). Events queued meanwhile are taken before it is let go.
    pub(crate) fn lock_job<'a>(&'a self, cell: &'a JobCell) -> JobGuard<'a> {
        JobGuard {
            jm: self,
            cell,
            job: Some(cell.job.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Takes job `cell`'s lock if it is free (the clock: a busy job is
    /// ticked at the next tick).
    pub(crate) fn try_lock_job<'a>(&'a self, cell: &'a JobCell) -> Option<JobGuard<'a>> {
        cell.try_lock().map(|job| JobGuard {
            jm: self,
            cell,
            job: Some(job),
        })
    }

    /// Queues `event` for job `cell` and takes the job's queue if its lock
    /// is free; if not, its holder takes it.
    pub(crate) fn queue_event(&self, cell: &JobCell, event: JobEvent) {
        cell.queue().push_back(event);
        self.drain_queue(cell);
    }

    /// Takes the events of job `cell`'s queue while its lock is free.
    /// Checking the queue again after letting go of the lock means an
    /// event queued by someone who found the lock taken is never left
    /// behind.
    pub(crate) fn drain_queue(&self, cell: &JobCell) {
        while !cell.queue().is_empty() {
            let Some(mut job) = cell.try_lock() else {
                return;
            };
            let ran = self.take_queue(&mut job, cell);
            drop(job);
            if ran > 0 {
                self.changed();
            }
        }
    }

    /// Takes every event queued for `job`, in order; returns how many.
    pub(crate) fn take_queue(&self, job: &mut Job, cell: &JobCell) -> usize {
        let mut ran = 0;
        loop {
            let Some(event) = cell.queue().pop_front() else {
                return ran;
            };
            self.on_event(job, event);
            ran += 1;
        }
    }
}
