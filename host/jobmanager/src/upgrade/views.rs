//! The upgrade's REST types: what `POST /v1/jobs/{id}/upgrades` asks for,
//! what it and `GET` answer, and the version history in a job's detail.

use super::*;

/// What `POST /v1/jobs/{id}/upgrades` asks for.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UpgradeRequest {
    /// Operator uid → the module it runs next (`name@version`, `name` for
    /// the latest version, or a hash).
    #[serde(default)]
    pub modules: BTreeMap<String, String>,
    /// Spec changes, as `--set key=value` gives them
    /// (`operator.count.parallelism=4`).
    #[serde(default)]
    pub set: Vec<String>,
    /// Upgrade even if the new version drops state the old one holds.
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// Only check: answer what would change and be migrated, stop nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a dry run (`weir upgrade --dry-run`) answers: the upgrade as it
/// would go, checked, with nothing stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpgradePlan {
    /// What changes, one line each.
    #[serde(default)]
    pub changes: Vec<String>,
    /// The states the new modules would migrate (`entries` 0: the
    /// savepoint is not taken).
    #[serde(default)]
    pub migrated: Vec<MigratedState>,
}

/// Where an upgrade stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpgradeStatus {
    /// The savepoint is being taken; the old version runs.
    Stopping,
    /// Stopped at the savepoint; the new version is being deployed and
    /// restored (state migrated on the way in).
    Restoring,
    /// The new version runs; its first checkpoint is not completed yet
    /// (a failure until then rolls back).
    Running,
    /// Done: the new version runs and has checkpointed.
    Completed,
    /// The new version failed; the job runs its old version again, from
    /// the savepoint. `failure` says why.
    RolledBack,
    /// Nothing changed: the savepoint failed, or the job ended meanwhile.
    Failed,
}

impl UpgradeStatus {
    /// Its name in the REST API and on the terminal.
    pub fn as_str(self) -> &'static str {
        match self {
            UpgradeStatus::Stopping => "stopping",
            UpgradeStatus::Restoring => "restoring",
            UpgradeStatus::Running => "running",
            UpgradeStatus::Completed => "completed",
            UpgradeStatus::RolledBack => "rolled_back",
            UpgradeStatus::Failed => "failed",
        }
    }

    /// Whether it has ended.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            UpgradeStatus::Completed | UpgradeStatus::RolledBack | UpgradeStatus::Failed
        )
    }
}

/// One operator's module in a version of the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningModule {
    /// The operator's uid.
    pub operator: String,
    /// The module as the store names it (`name@version`), or its hash.
    pub module: String,
    /// `sha256:<hex>` of the module.
    pub hash: String,
    /// The operator's own version (`operator-info.version`).
    pub version: String,
}

/// One version of a job: the modules it ran, from when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionView {
    /// 1 for the version submitted, then +1 per completed upgrade.
    pub version: u32,
    /// Since when (Unix ms).
    pub since_ms: u64,
    /// The upgrade that made it, if any.
    #[serde(default)]
    pub upgrade: Option<u32>,
    /// Every operator's module.
    #[serde(default)]
    pub modules: Vec<RunningModule>,
}

/// A state migrated by an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedState {
    /// The operator's uid.
    pub operator: String,
    /// The state's name.
    pub state: String,
    /// The old module's version.
    pub from_version: String,
    /// The new module's version.
    pub to_version: String,
    /// Entries in the savepoint (values, lists or maps), once it is written.
    #[serde(default)]
    pub entries: u64,
}

/// One upgrade of a job (`GET /v1/jobs/{id}/upgrades`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpgradeView {
    /// 1 for the job's first upgrade, then +1.
    pub id: u32,
    /// Where it stands.
    pub status: UpgradeStatus,
    /// What changes, one line each (`count: word-count@1 → word-count@2`).
    #[serde(default)]
    pub changes: Vec<String>,
    /// The states the new modules migrate.
    #[serde(default)]
    pub migrated: Vec<MigratedState>,
    /// The savepoint it stops at and restores from.
    pub savepoint: String,
    /// When it was requested (Unix ms).
    pub requested_at_ms: u64,
    /// When the old version published its last record: the savepoint's
    /// barrier (Unix ms).
    #[serde(default)]
    pub stopped_at_ms: Option<u64>,
    /// When the savepoint was written (Unix ms).
    #[serde(default)]
    pub written_at_ms: Option<u64>,
    /// When the new version's deployment was sent (Unix ms).
    #[serde(default)]
    pub deployed_at_ms: Option<u64>,
    /// When every subtask of the new version was running (Unix ms).
    #[serde(default)]
    pub resumed_at_ms: Option<u64>,
    /// From `stopped_at_ms` to `resumed_at_ms`.
    #[serde(default)]
    pub downtime_ms: Option<u64>,
    /// When it completed, rolled back or failed (Unix ms).
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
    /// Why it rolled back or failed.
    #[serde(default)]
    pub failure: Option<String>,
}
