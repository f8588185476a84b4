//! The JobManager's side of checkpoint storage I/O: queuing a job's
//! storage commands under the lock, and running them off it (a drain task
//! per job, or [`JobManager::run_storage`] when the caller steps them).
//! The commands themselves are in `storage_io`.

use super::*;

impl JobManager {
    /// Queues a storage command of `job`, to run after those queued before
    /// it, and starts the job's drain task if none runs. Called under the
    /// job's lock: it does no I/O.
    pub(crate) fn enqueue(&self, job: &mut Job, command: StorageCommand) {
        if job.storage.push(command)
            && self.storage_io == StorageIo::Background
            && let Some(jm) = self.me.upgrade()
        {
            self.handle.spawn(jm.drain(job.id.clone()));
        }
    }

    /// Job `id`'s drain task: runs its storage commands in order on the
    /// blocking pool, without the job's lock, and records what they did,
    /// until none is left.
    pub(crate) async fn drain(self: Arc<Self>, id: String) {
        let mut batch = self.take_storage(&id);
        while let Some(commands) = batch {
            let storage = self.storage.clone();
            let job = id.clone();
            let outcomes = self
                .handle
                .spawn_blocking(move || {
                    commands
                        .into_iter()
                        .map(|c| storage_io::run(&job, c, storage.as_ref()))
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
            batch = self.record_storage(&id, outcomes);
            self.changed();
        }
    }

    /// Runs every queued storage command on this thread, in order per job,
    /// without the job's lock ([`StorageIo::Stepped`]); returns how many
    /// ran.
    pub fn run_storage(&self) -> usize {
        let mut ran = 0;
        let busy: Vec<String> = self
            .job_cells()
            .iter()
            .map(|cell| self.lock_job(cell))
            .filter(|j| !j.storage.is_idle())
            .map(|j| j.id.clone())
            .collect();
        for id in busy {
            let mut batch = self.take_storage(&id);
            while let Some(commands) = batch {
                ran += commands.len();
                let outcomes = commands
                    .into_iter()
                    .map(|c| storage_io::run(&id, c, self.storage.as_ref()))
                    .collect();
                batch = self.record_storage(&id, outcomes);
            }
        }
        self.changed();
        ran
    }

    /// Takes job `id`'s queued storage commands; `None` (and the queue
    /// idle) when there are none.
    pub(crate) fn take_storage(&self, id: &str) -> Option<Vec<StorageCommand>> {
        let cell = self.job_cell(id).ok()?;
        self.lock_job(&cell).storage.take()
    }

    /// Records what job `id`'s storage commands did; takes the commands
    /// queued meanwhile.
    pub(crate) fn record_storage(
        &self,
        id: &str,
        outcomes: Vec<Outcome>,
    ) -> Option<Vec<StorageCommand>> {
        let cell = self.job_cell(id).ok()?;
        let mut job = self.lock_job(&cell);
        for outcome in outcomes {
            job.record(outcome, &self.taskmanagers);
        }
        job.storage.take()
    }
}
