//! Modules and jobs coming in: module upload and delete, and a job's
//! submission: validation, module resolution and loading (each operator
//! checked against its place in the graph), placement, deployment.

use super::*;

/// A checked job: its graph (modules by hash), the hashes, and the loaded
/// modules.
pub(crate) type Prepared = (JobGraph, HashSet<String>, LoadedModules);

/// The declared states of every keyed operator (and window) of `graph`, by vertex.
pub(crate) fn keyed_states(
    graph: &JobGraph,
    loaded: &LoadedModules,
) -> HashMap<usize, Vec<weir_runtime::state::StateDescriptor>> {
    graph
        .vertices
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match &v.kind {
            VertexKind::Operator(op) if op.key_by.is_some() => {
                let (_, info) = loaded.get(&i)?;
                Some((i, weir_runtime::local::state_descriptors(info)))
            }
            VertexKind::Window(_) => Some((i, weir_runtime::window::window_states())),
            VertexKind::Join(_) => Some((i, weir_runtime::join::join_states())),
            _ => None,
        })
        .collect()
}

/// Whether a job spec can refer to a module named `name` (`name@version`):
/// the spec's id rule, stricter than the store's.
pub(crate) fn check_spec_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= weir_runtime::job::MAX_ID_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "bad module name `{name}`: expected [a-z0-9][a-z0-9_-]*, at most {} bytes, \
             so that a job spec can name it as \"name@version\"",
            weir_runtime::job::MAX_ID_LEN
        )))
    }
}

impl JobManager {
    /// The module store.
    pub fn store(&self) -> &ModuleStore {
        &self.store
    }

    /// The largest module upload, in bytes.
    pub fn max_module_bytes(&self) -> usize {
        self.max_module_bytes
    }

    /// Validates `bytes` as an operator component and stores it.
    pub async fn upload_module(
        self: &Arc<Self>,
        name: String,
        version: Option<String>,
        bytes: Vec<u8>,
    ) -> Result<(ModuleInfo, bool), ApiError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            // Check the names first: compiling is the expensive part.
            check_spec_name(&name)?;
            if let Some(v) = &version {
                modules::check_name("version", v)?;
            }
            let module = this
                .runtime
                .load_bytes(&name, &bytes)
                .map_err(|e| ApiError::bad_request(format!("{name}: {}", e.message)))?;
            this.runtime
                .describe(&module)
                .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))?;
            Ok(this.store.put(&bytes, &name, version.as_deref())?)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    }

    /// Deletes a module entry unless a job that has not ended uses it.
    pub fn delete_module(&self, reference: &str) -> Result<Vec<ModuleInfo>, ApiError> {
        let info = self.store.resolve(reference)?;
        // Held while deleting: `admit` checks the blob under it.
        let index = self.index();
        // A bare hash deletes every entry with it; a name@version only that
        // one, but the blob goes with its last entry: refuse either way
        // while a live job needs the content.
        if let Some(job) = index
            .values()
            .map(|cell| self.lock_job(cell))
            .find(|j| !j.state.is_terminal() && j.modules.contains(&info.hash))
        {
            return Err(ApiError::conflict(format!(
                "module {}@{} is used by job {} ({}), which is {}; cancel it first",
                info.name,
                info.version,
                job.id,
                job.name,
                job.state.as_str()
            )));
        }
        Ok(self.store.delete(reference)?)
    }

    /// Validates, schedules and deploys a job; `from` a savepoint if given
    /// (read and checked against the job first).
    pub async fn submit(
        self: &Arc<Self>,
        spec: String,
        from: Option<FromSavepoint>,
    ) -> Result<JobCreated, ApiError> {
        self.submit_with(spec, Vec::new(), from).await
    }

    /// [`JobManager::submit`] with `--set` overrides applied to the spec
    /// (kept with the job: its upgrades apply them too).
    pub async fn submit_with(
        self: &Arc<Self>,
        spec: String,
        overrides: Vec<(String, String)>,
        from: Option<FromSavepoint>,
    ) -> Result<JobCreated, ApiError> {
        let this = self.clone();
        let spec_text = spec.clone();
        let kept = overrides.clone();
        let turn = self.check_turn().await?;
        let (graph, modules, loaded, savepoint) = tokio::task::spawn_blocking(move || {
            let (graph, modules, loaded) = this.prepare_with(&spec, &overrides)?;
            let savepoint = this.savepoint_for(&graph, &loaded, from.as_ref())?;
            Ok::<_, ApiError>((graph, modules, loaded, savepoint))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
        drop(turn);
        self.admit(graph, modules, &loaded, savepoint, Some((spec_text, kept)))
    }

    /// A turn to check a job ([`MAX_CONCURRENT_CHECKS`] at once), waited for.
    pub(crate) async fn check_turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ApiError> {
        self.checks
            .acquire()
            .await
            .map_err(|_| ApiError::internal("the JobManager is stopping"))
    }

    /// The savepoint `from` names, checked against `graph` (blocking I/O).
    fn savepoint_for(
        &self,
        graph: &JobGraph,
        loaded: &LoadedModules,
        from: Option<&FromSavepoint>,
    ) -> Result<Option<weir_runtime::rpc::SavepointDeploy>, ApiError> {
        from.map(|from| self.load_savepoint(from, graph, &keyed_states(graph, loaded)))
            .transpose()
    }

    /// Validates, schedules and deploys a job of the embedded cluster
    /// (`weir run`): its operators may name `.wasm` files, which are put
    /// into the module store by content. Returns the checked modules too:
    /// while the caller holds them, the TaskManager's load of the same
    /// bytes shares them ([`Runtime::load_bytes`]) instead of loading again.
    pub async fn submit_graph(
        self: &Arc<Self>,
        graph: JobGraph,
        from: Option<FromSavepoint>,
    ) -> Result<(JobCreated, LoadedModules), ApiError> {
        let this = self.clone();
        let turn = self.check_turn().await?;
        let (graph, modules, loaded, savepoint) = tokio::task::spawn_blocking(move || {
            let (graph, modules, loaded) = this.prepare_graph(graph, true)?;
            let savepoint = this.savepoint_for(&graph, &loaded, from.as_ref())?;
            Ok::<_, ApiError>((graph, modules, loaded, savepoint))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
        drop(turn);
        Ok((
            self.admit(graph, modules, &loaded, savepoint, None)?,
            loaded,
        ))
    }

    /// Admits a prepared job: records it (a submitted `spec`, with its
    /// `--set` overrides), reserves its slots and deploys it.
    pub(crate) fn admit(
        &self,
        graph: JobGraph,
        modules: HashSet<String>,
        loaded: &LoadedModules,
        savepoint: Option<weir_runtime::rpc::SavepointDeploy>,
        spec: Option<(String, Vec<(String, String)>)>,
    ) -> Result<JobCreated, ApiError> {
        let states = keyed_states(&graph, loaded);
        let running = running_modules(&graph, loaded, &self.store);
        let tasks = chain(&graph);
        let mut index = self.index();
        // A module deleted since `prepare` looked it up (deletion holds the
        // job index's lock too, so after this check it stays until the job
        // ends).
        for hash in &modules {
            if !self.store.blob_path(hash).exists() {
                return Err(ApiError::conflict(format!(
                    "module {hash} was deleted while the job was being submitted; upload it again"
                )));
            }
        }
        let id = loop {
            let id = format!("{:016x}", random_u64());
            if !index.contains_key(&id) {
                break id;
            }
        };
        let now = self.clock.now();
        let checkpoints = job_checkpoints(&graph, &tasks, 1, now);
        let mut job = Job::new(id.clone(), graph, tasks, modules, states, checkpoints);
        job.from_savepoint = savepoint.map(Arc::new);
        job.versions[0].modules = running;
        // A submitted job is recorded before it is deployed: a JobManager
        // restarted from here on takes it back ([`crate::recovery`]).
        if let Some((spec, overrides)) = spec {
            job.journal = self.journal.get().cloned();
            job.spec = Some(spec);
            job.overrides = overrides;
        }
        job.persist().map_err(|m| {
            ApiError::internal(format!(
                "cannot record job {id} in the JobManager's data dir: {m}"
            ))
        })?;
        deploy(
            &self.taskmanagers,
            &mut job,
            self.scheduling,
            &self.checkpoint_root,
        )
        .map_err(|m| {
            job.forget();
            ApiError {
                status: 503,
                message: m,
            }
        })?;
        tracing::info!(job = %id, name = %job.name, "submitted");
        let created = JobCreated {
            id: id.clone(),
            name: job.name.clone(),
        };
        index.insert(id, JobCell::new(job));
        Ok(created)
    }

    /// Parses and checks a spec with `--set` overrides applied to it;
    /// resolves its modules to hashes.
    pub(crate) fn prepare_with(
        &self,
        spec: &str,
        overrides: &[(String, String)],
    ) -> Result<Prepared, ApiError> {
        // A submitted spec has no folder of its own: its file paths must be
        // absolute (`weir submit` makes them so), never resolved against
        // this daemon's working directory, which messages do not reveal.
        let origin = std::path::Path::new("/submitted-job.toml");
        let spec = JobSpec::parse(spec, origin, overrides)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some((field, path)) = spec.relative_file_paths().into_iter().next() {
            return Err(ApiError::bad_request(format!(
                "{field}: found the relative path {:?}; a job submitted to a cluster names \
                 its files by absolute path (`weir submit` makes the paths of a spec \
                 absolute, against the spec's folder)",
                path.display().to_string()
            )));
        }
        let graph = JobGraph::from_spec(spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
        self.prepare_graph(graph, false)
    }

    /// Checks a job graph; resolves its modules to hashes (with
    /// `embedded`, a `.wasm` path is read and stored by content), and
    /// loads each one to check it against its place in the graph.
    pub(crate) fn prepare_graph(
        &self,
        mut graph: JobGraph,
        embedded: bool,
    ) -> Result<Prepared, ApiError> {
        // Refused here, before any TaskManager is involved: files outside
        // the allowed roots (or not regular files, where this host sees them).
        weir_runtime::local::check_connectors(&graph, self.checker.allowed_roots())
            .map_err(|m| ApiError::bad_request(format!("job `{}` refused: {m}", graph.name)))?;
        let mut hashes = HashSet::new();
        let mut local = graph.clone();
        for (v, vertex) in graph.vertices.iter_mut().enumerate() {
            let Some(op) = vertex.kind.module_spec_mut() else {
                continue;
            };
            let reference = match &op.module {
                ModuleRef::Path(p) if embedded => {
                    let bytes = std::fs::read(p).map_err(|e| {
                        ApiError::bad_request(format!(
                            "operator `{}`: cannot read module {}: {e}",
                            vertex.id,
                            p.display()
                        ))
                    })?;
                    let hash = modules::sha256_ref(&bytes);
                    self.store.put_blob(&hash, &bytes)?;
                    // The check below loads it by its own path, so errors
                    // name the file the user wrote.
                    op.module = ModuleRef::Hash(hash.clone());
                    hashes.insert(hash);
                    continue;
                }
                ModuleRef::Path(p) => {
                    return Err(ApiError::bad_request(format!(
                        "operator `{}`: module {} is a file path; upload it first \
                         (`weir upload FILE --name N`) and refer to it as \"name@version\", \
                         or use `weir submit`, which uploads the files a spec names",
                        vertex.id,
                        p.display()
                    )));
                }
                other => other.to_string(),
            };
            let info = self.store.resolve(&reference).map_err(|e| match e {
                StoreError::NotFound(_) => ApiError::bad_request(format!(
                    "operator `{}`: unknown module `{reference}`; upload it with \
                     `weir upload FILE --name N --version V` (`weir modules` lists the uploaded ones)",
                    vertex.id
                )),
                other => ApiError::from(other),
            })?;
            op.module = ModuleRef::Hash(info.hash.clone());
            if let Some(lop) = local.vertices[v].kind.module_spec_mut() {
                lop.module = ModuleRef::Path(self.store.blob_path(&info.hash));
            }
            hashes.insert(info.hash);
        }
        // Load every module (compiled cache) and check it against the graph,
        // so a bad job is refused here rather than failing on TaskManagers.
        let loaded = self
            .checker
            .load_modules(&local)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok((graph, hashes, loaded))
    }
}

/// Every subtask of a job chained into `tasks`, as (task, subtask): what
/// each checkpoint must hear from.
pub(crate) fn subtask_ids(tasks: &[TaskSpec]) -> impl Iterator<Item = (u32, u32)> + '_ {
    tasks
        .iter()
        .enumerate()
        .flat_map(|(t, spec)| (0..spec.parallelism).map(move |s| (t as u32, s)))
}

/// The checkpoint coordinator and registry of a job of `graph` chained
/// into `tasks`, numbering from `next_id`; `None` without checkpoints.
pub(crate) fn job_checkpoints(
    graph: &JobGraph,
    tasks: &[TaskSpec],
    next_id: u64,
    now: Instant,
) -> Option<JobCheckpoints> {
    graph.settings.checkpoints.clone().map(|config| {
        let subtasks = subtask_ids(tasks).collect();
        JobCheckpoints {
            coordinator: Coordinator::new(config, subtasks, next_id, now, now_ms()),
            registry: SharedStateRegistry::new(),
            unrestorable: BTreeSet::new(),
            stored: BTreeSet::new(),
            unannounced: BTreeSet::new(),
        }
    })
}

impl Job {
    /// A job about to be deployed for the first time (`running`, attempt
    /// 0, version 1 with no modules listed yet); its caller fills in the
    /// rest.
    pub(crate) fn new(
        id: String,
        graph: JobGraph,
        tasks: Vec<TaskSpec>,
        modules: HashSet<String>,
        states: HashMap<usize, Vec<weir_runtime::state::StateDescriptor>>,
        checkpoints: Option<JobCheckpoints>,
    ) -> Job {
        Job {
            id,
            name: graph.name.clone(),
            // Nothing placed until it is deployed: views and cancels see
            // no subtask (one empty list per task, as after an upgrade's
            // swap).
            subtasks: tasks.iter().map(|_| Vec::new()).collect(),
            restarts: Restarts::new(graph.settings.restart),
            placement: tasks.iter().map(|_| Vec::new()).collect(),
            tasks,
            graph,
            state: JobState::Running,
            failure: None,
            failure_is_root: false,
            submitted_at_ms: now_ms(),
            ended_at_ms: None,
            modules,
            reports: HashMap::new(),
            attempt: 0,
            restart_at: None,
            checkpoints,
            deferred: Vec::new(),
            committing: BTreeSet::new(),
            storage: StorageQueue::default(),
            sweep: None,
            states,
            savepoints: Vec::new(),
            from_savepoint: None,
            spec: None,
            overrides: Vec::new(),
            versions: vec![VersionView {
                version: 1,
                since_ms: now_ms(),
                upgrade: None,
                modules: Vec::new(),
            }],
            upgrades: Vec::new(),
            upgrade: None,
            rollback_of: None,
            fatal: false,
            logs: JobLogs::default(),
            exceptions: Exceptions::default(),
            load: LoadWindow::default(),
            journal: None,
            recorded: None,
        }
    }
}
