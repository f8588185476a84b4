//! The deployment of a job's subtasks: turns a [`JobGraph`] into running
//! subtasks in this process. TaskManagers (the daemon's and the embedded
//! cluster's, `weir_host::embedded`) deploy their share of a job through it.
//!
//! # What it does
//!
//! 1. Loads every operator's component through the process's [`Runtime`]
//!    (compiled cache) and asks it to `describe` itself; an operator that
//!    declares keyed state must have a keyed input.
//! 2. Takes the graph's tasks as chained by the JobManager (checked by the
//!    TaskManager with [`crate::job::check_tasks`] when the deployment
//!    arrives: it never chains again) and creates one
//!    bounded channel per downstream subtask (or asks the [`Exchange`] for
//!    a channel to a subtask on another TaskManager).
//! 3. Builds every subtask: its source or input gate, its operator instances
//!    (each with its own state backend under the work directory when keyed),
//!    its sink and its partitioned outputs.
//! 4. Runs each subtask on a tokio blocking thread.
//!
//! File sources and sinks are confined to the cluster's [`AllowedRoots`]
//! (default: none): [`check_connectors`] refuses a job whose paths lie
//! elsewhere (or whose NATS servers or streams are not there) before any
//! subtask starts, and every file is opened through the roots again.
//!
//! It must not contain operator logic, connector logic or channel protocol:
//! those live in [`crate::wasm`], [`crate::connectors`] and
//! [`crate::taskmanager`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

pub use crate::channel::{AllLocal, Exchange};
use crate::connectors::{
    AllowedRoots, BlackholeSink, CsvFormat, FileFormat, FileSink, FileSource, FileSourceConfig,
    GeneratorConfig, GeneratorKind as GenKind, GeneratorSource, OutputFormat, Sink, Source,
    StdoutSink, TransactionalFileSink,
};
use crate::job::{
    GeneratorKind, JobGraph, KeySelector, ModuleRef, Partitioner, SinkFormat, SinkSpec,
    SourceFormat, SourceSpec, StateBackendKind, TaskSpec, VertexKind, task_edges,
};
use crate::join::{JoinOperator, join_states};
use crate::state::{
    BackendConfig, BackendKind, StateDescriptor, StateKind, key_group_range_for_subtask,
    open_backend, restore_backend,
};
use crate::taskmanager::{
    Abort, ChainedOperator, ChannelSender, Checkpointing, Head, JobMetrics, KeyExtractor, Message,
    Operator, Output, Partitioning, Subtask, TailSink, TakenSnapshot, TaskError,
};
use crate::wasm::{
    InstanceConfig, OperatorError, OperatorInfo, OperatorModule, Runtime, WindowFunctionKind,
};
use crate::window::{WindowOperator, window_states};

/// Why a job could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// An operator's module could not be loaded or instantiated.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// The job cannot run as specified (beyond what spec validation checks).
    #[error("{0}")]
    Plan(String),
    /// A keyed state backend could not be restored from the files given
    /// (RocksDB refused them): the checkpoint they came from cannot be
    /// restored here, whatever their hashes said.
    #[error("{0}")]
    Restore(String),
    /// Setting up the work directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl RunError {
    /// The operator failure behind this error, if there is one.
    pub fn operator_error(&self) -> Option<&OperatorError> {
        match self {
            RunError::Operator(e) => Some(e),
            _ => None,
        }
    }
}

/// What deploys subtasks: a Wasm runtime, a work directory, a tokio runtime
/// and the directories file connectors may use.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    runtime: Arc<Runtime>,
    handle: tokio::runtime::Handle,
    roots: AllowedRoots,
}

impl LocalCluster {
    /// Deploys subtasks onto `handle`'s blocking threads. It allows no file
    /// source or sink until given roots
    /// ([`with_allowed_roots`](Self::with_allowed_roots)).
    pub fn new(runtime: Arc<Runtime>, handle: tokio::runtime::Handle) -> Self {
        LocalCluster {
            runtime,
            handle,
            roots: AllowedRoots::none(),
        }
    }

    /// The same cluster, letting file sources and sinks use `roots`.
    pub fn with_allowed_roots(mut self, roots: AllowedRoots) -> Self {
        self.roots = roots;
        self
    }

    /// Where file sources and sinks may read and write.
    pub fn allowed_roots(&self) -> &AllowedRoots {
        &self.roots
    }

    /// The Wasm runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Loads every operator module of `graph` and checks it against its
    /// place in the graph, without running anything (`weir validate`).
    pub fn check(&self, graph: &JobGraph) -> Result<Vec<(String, OperatorInfo)>, RunError> {
        let modules = self.load_modules(graph)?;
        Ok(graph
            .vertices
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                modules
                    .get(&i)
                    .map(|(_, info)| (v.id.0.clone(), info.clone()))
            })
            .collect())
    }

    /// Loads (compiles, or takes from the cache) every operator module of
    /// `graph`, which must name them by path, and checks each against its
    /// place in the graph.
    pub fn load_modules(&self, graph: &JobGraph) -> Result<LoadedModules, RunError> {
        // Described once per module, under the job's memory cap per
        // instance (see `Runtime::describe_within`).
        let memory_limit = (graph.settings.limits.memory_mb as usize) << 20;
        type Described = (
            Arc<OperatorModule>,
            OperatorInfo,
            Option<WindowFunctionKind>,
        );
        let mut by_path: HashMap<PathBuf, Described> = HashMap::new();
        let mut out = HashMap::new();
        for (i, v) in graph.vertices.iter().enumerate() {
            let Some(op) = v.kind.module_spec() else {
                continue;
            };
            let path = match &op.module {
                ModuleRef::Path(p) => p.clone(),
                other @ (ModuleRef::Named { .. } | ModuleRef::Hash(_)) => {
                    return Err(RunError::Plan(format!(
                        "operator `{}`: module `{other}` is a cluster module; \
                         `weir run` needs a path to a .wasm file (or submit the job to a \
                         cluster with `weir submit`)",
                        v.id.0
                    )));
                }
            };
            let entry = match by_path.get(&path) {
                Some(e) => e.clone(),
                None => {
                    // Errors name the operator and its file.
                    let named = |mut e: OperatorError| {
                        e.operator = format!("{} ({})", v.id.0, path.display());
                        e
                    };
                    let module = self.runtime.load(&path).map_err(named)?;
                    let (info, kind) = self
                        .runtime
                        .describe_with_window_kind(&module, memory_limit)
                        .map_err(named)?;
                    by_path.insert(path.clone(), (module.clone(), info.clone(), kind));
                    (module, info, kind)
                }
            };
            let (module, info, kind) = entry;
            let is_window_function = matches!(
                kind,
                Some(WindowFunctionKind::Aggregate | WindowFunctionKind::ProcessWindow)
            );
            let entry = (module, info);
            if let VertexKind::Window(_) = &v.kind {
                // A window's function: an aggregate or a process-window
                // function; the window operator keeps the state.
                if !is_window_function {
                    return Err(RunError::Plan(format!(
                        "operator `{}` ({}): {}",
                        v.id.0,
                        entry.1.name,
                        crate::window::not_a_window_function(kind)
                    )));
                }
                out.insert(i, entry);
                continue;
            }
            if is_window_function {
                return Err(RunError::Plan(format!(
                    "operator `{}` ({}) is a window function (an aggregate or process-window \
                     function): use it as the `module` of an [[operator]] with a `window` \
                     table, e.g. window = {{ type = \"tumbling\", size_ms = 1000 }}",
                    v.id.0, entry.1.name
                )));
            }
            let keyed_input = graph
                .inputs(i)
                .any(|e| matches!(e.partitioner, Partitioner::Hash(_)));
            if (entry.1.keyed || !entry.1.states.is_empty()) && !keyed_input {
                return Err(RunError::Plan(format!(
                    "operator `{}` ({}) is keyed (it declares keyed state or timers) but its \
                     input is not: add key_by = \"key\" (or \"value\", or \"json:<field>\") \
                     to its [[operator]] table",
                    v.id.0, entry.1.name
                )));
            }
            if graph.inputs(i).any(|e| e.input == 1) && !self.runtime.exports_two_input(&entry.0) {
                return Err(RunError::Plan(format!(
                    "operator `{}` ({}) has an edge with input = \"right\", but its module does \
                     not export `weir:operator/two-input`: build it with a two-input function \
                     (the Rust SDK's `export_keyed_co!`), or drop `input`",
                    v.id.0, entry.1.name
                )));
            }
            out.insert(i, entry);
        }
        Ok(out)
    }

    /// Builds and starts the subtasks of `graph` that `exchange` says run
    /// here; outputs to subtasks elsewhere go through `exchange`. `tasks`
    /// is the graph's chaining as the JobManager computed it (task and
    /// subtask indexes refer to it), already checked with
    /// [`check_tasks`](crate::job::check_tasks) where the deployment
    /// arrived (the TaskManager's `check_deployment`). Blocking:
    /// instantiates every operator before returning.
    pub fn deploy(
        &self,
        graph: &JobGraph,
        tasks: &[TaskSpec],
        modules: &LoadedModules,
        work_dir: PathBuf,
        exchange: &dyn Exchange,
        options: &DeployOptions<'_>,
    ) -> Result<Deployed, RunError> {
        let settings = &graph.settings;
        let max_parallelism = u16::try_from(settings.max_parallelism).map_err(|_| {
            RunError::Plan(format!(
                "max_parallelism {} is over {}",
                settings.max_parallelism,
                u16::MAX
            ))
        })?;
        // Again here: a TaskManager does not rely on its JobManager's check.
        check_connectors(graph, &self.roots).map_err(RunError::Plan)?;
        let tasks = tasks.to_vec();
        let edges = task_edges(graph, &tasks);
        let capacity = settings.channel_capacity.max(1) as usize;
        let batch_size = settings.batch_size.max(1) as usize;
        std::fs::create_dir_all(&work_dir).map_err(|source| RunError::Io {
            path: work_dir.clone(),
            source,
        })?;

        // One channel per subtask of every task with inputs; a subtask that
        // runs elsewhere is reached through the exchange.
        let mut senders: Vec<Vec<Option<mpsc::Sender<Message>>>> = Vec::new();
        let mut remote: HashMap<(usize, u32), mpsc::Sender<Message>> = HashMap::new();
        let mut receivers: Vec<Vec<Option<mpsc::Receiver<Message>>>> = Vec::new();
        let mut channel_counts = vec![0u32; tasks.len()];
        let mut channel_base = vec![0u32; edges.len()];
        // Which input of its task's head each channel feeds (a join's left
        // or right; 0 for every other vertex).
        let mut channel_inputs: Vec<Vec<u8>> = vec![Vec::new(); tasks.len()];
        for (e, edge) in edges.iter().enumerate() {
            channel_base[e] = channel_counts[edge.to_task];
            let n = match edge.partitioner {
                Partitioner::Forward => 1,
                _ => tasks[edge.from_task].parallelism,
            };
            channel_counts[edge.to_task] += n;
            let input = graph.edges[edge.edge].input;
            channel_inputs[edge.to_task].extend(std::iter::repeat_n(input, n as usize));
        }
        for (t, task) in tasks.iter().enumerate() {
            let (mut txs, mut rxs) = (Vec::new(), Vec::new());
            if channel_counts[t] > 0 {
                for s in 0..task.parallelism {
                    if exchange.is_local(t, s) {
                        let (tx, rx) = mpsc::channel(capacity);
                        exchange.register_input(t, s, channel_counts[t], tx.clone());
                        txs.push(Some(tx));
                        rxs.push(Some(rx));
                    } else {
                        // Created on first use: only if a local subtask sends to it.
                        txs.push(None);
                        rxs.push(None);
                    }
                }
            }
            senders.push(txs);
            receivers.push(rxs);
        }

        let abort = Abort::new();
        let sender = |remote: &mut HashMap<(usize, u32), mpsc::Sender<Message>>,
                      t: usize,
                      s: u32|
         -> mpsc::Sender<Message> {
            match &senders[t][s as usize] {
                Some(tx) => tx.clone(),
                None => remote
                    .entry((t, s))
                    .or_insert_with(|| exchange.remote_sender(t, s, &abort))
                    .clone(),
            }
        };
        let metrics = Arc::new(JobMetrics::with_detail(
            graph.vertices.len(),
            graph.settings.metrics,
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let drain = Arc::new(AtomicBool::new(false));
        let mut subtasks = Vec::new();
        let mut triggers = HashMap::new();
        for (t, task) in tasks.iter().enumerate() {
            let task_is_source =
                matches!(graph.vertices[task.vertices[0]].kind, VertexKind::Source(_));
            for s in (0..task.parallelism).filter(|s| exchange.is_local(t, *s)) {
                let name = format!("{} ({}/{})", task.id.as_str(), s + 1, task.parallelism);
                let mut build = || -> Result<Subtask, RunError> {
                    let head_vertex = task.vertices[0];
                    let restored = options.restore.and_then(|r| r.get(&(t, s)));
                    let finished = restored.is_some_and(|r| r.finished);
                    let head = match &graph.vertices[head_vertex].kind {
                        _ if finished => Head::Finished {
                            rx: receivers[t].get_mut(s as usize).and_then(Option::take),
                            channels: channel_counts[t],
                        },
                        VertexKind::Source(spec) => {
                            let mut source = build_source(
                                graph,
                                head_vertex,
                                spec,
                                s,
                                task.parallelism,
                                &self.roots,
                            )?;
                            if let Some(position) = restored.and_then(|r| r.source.as_ref()) {
                                source.seek(position).map_err(|e| {
                                    RunError::Plan(format!(
                                        "source `{}`: {e}",
                                        graph.vertices[head_vertex].id
                                    ))
                                })?;
                            }
                            Head::Source {
                                vertex: head_vertex,
                                id: graph.vertices[head_vertex].id.0.clone(),
                                source,
                                watermarks: graph.vertices[head_vertex]
                                    .watermark
                                    .unwrap_or_default(),
                            }
                        }
                        _ => Head::Input {
                            rx: receivers[t][s as usize].take().ok_or_else(|| {
                                RunError::Plan(format!("task {} has no input", task.id.as_str()))
                            })?,
                            channels: channel_counts[t],
                            inputs: channel_inputs[t].clone(),
                        },
                    };
                    let mut operators = Vec::new();
                    let mut sink = None;
                    for &v in &task.vertices {
                        let vertex = &graph.vertices[v];
                        // This subtask's keyed state of vertex `v`, fresh
                        // or restored, with the key groups it owns.
                        let keyed_backend = |states: &[crate::state::StateDescriptor]| {
                            let range =
                                key_group_range_for_subtask(max_parallelism, vertex.parallelism, s);
                            let dir = work_dir.join(sanitize(&vertex.id.0)).join(s.to_string());
                            let config = BackendConfig {
                                kind: match settings.state_backend {
                                    StateBackendKind::RocksDb => BackendKind::RocksDb,
                                    StateBackendKind::Heap => BackendKind::Heap,
                                },
                                dir: &dir,
                                states,
                                key_groups: range,
                                max_parallelism,
                            };
                            let from = restored.and_then(|r| r.states.get(&v));
                            let backend = match from {
                                Some(from) => restore_backend(config, from).map_err(|e| {
                                    RunError::Restore(format!(
                                        "operator `{}`: cannot restore its state: {e}",
                                        vertex.id.0
                                    ))
                                }),
                                None => open_backend(config).map_err(|e| {
                                    RunError::Plan(format!(
                                        "operator `{}`: cannot open its state backend: {e}",
                                        vertex.id.0
                                    ))
                                }),
                            }?;
                            Ok::<_, RunError>((backend, range))
                        };
                        let instance = match &vertex.kind {
                            VertexKind::Operator(op) => {
                                let (module, info) = &modules[&v];
                                let mut instance = self.runtime.instantiate(
                                    module,
                                    instance_config(
                                        &vertex.id.0,
                                        s,
                                        vertex.parallelism,
                                        max_parallelism,
                                        op.config.clone(),
                                        &settings.limits,
                                        &abort,
                                        options.attempt,
                                        &metrics.vertices[v].subtask(s).telemetry,
                                    ),
                                )?;
                                if op.key_by.is_some() {
                                    let (backend, range) = keyed_backend(&state_descriptors(info))?;
                                    instance.attach_state(backend, range);
                                    instance.enable_processing_timers(info.states.len() as u32)?;
                                }
                                Some(Operator::Wasm(instance))
                            }
                            VertexKind::Join(spec) => {
                                let mut join = JoinOperator::new(&vertex.id.0, spec.clone());
                                join.attach_state(keyed_backend(&join_states())?.0);
                                Some(Operator::Join(join))
                            }
                            VertexKind::Window(spec) => {
                                let mut window = match &spec.function {
                                    None => WindowOperator::new(&vertex.id.0, spec.clone()),
                                    Some(function) => {
                                        let (module, _) = &modules[&v];
                                        let instance = self.runtime.instantiate(
                                            module,
                                            instance_config(
                                                &vertex.id.0,
                                                s,
                                                vertex.parallelism,
                                                max_parallelism,
                                                function.config.clone(),
                                                &settings.limits,
                                                &abort,
                                                options.attempt,
                                                &metrics.vertices[v].subtask(s).telemetry,
                                            ),
                                        )?;
                                        WindowOperator::with_function(
                                            &vertex.id.0,
                                            spec.clone(),
                                            instance,
                                        )?
                                    }
                                };
                                window.attach_state(keyed_backend(&window_states())?.0);
                                Some(Operator::Window(window))
                            }
                            VertexKind::Sink(_) | VertexKind::Source(_) => None,
                        };
                        if let Some(mut instance) = instance {
                            if let Some(timers) = restored.and_then(|r| r.timers.get(&v)) {
                                instance.restore_timers(timers.clone());
                            }
                            operators.push(ChainedOperator {
                                vertex: v,
                                instance,
                                state_sampled: None,
                            });
                        }
                        match &vertex.kind {
                            VertexKind::Sink(spec) => {
                                sink =
                                    Some(TailSink {
                                        vertex: v,
                                        id: vertex.id.0.clone(),
                                        sink: match (spec, &options.checkpoints) {
                                            (SinkSpec::File(f), Some(_)) => Box::new(
                                                TransactionalFileSink::open(
                                                    &self.roots,
                                                    &f.path,
                                                    s,
                                                    output_format(f.format),
                                                    restored.and_then(|r| r.sink.as_ref()),
                                                )
                                                .map_err(|e| {
                                                    RunError::Plan(format!(
                                                        "sink `{}`: {e}",
                                                        vertex.id
                                                    ))
                                                })?,
                                            ),
                                            (SinkSpec::Nats(n), checkpoints) => Box::new(
                                                crate::connectors::nats::NatsSink::open(
                                                    &graph.name,
                                                    &vertex.id.0,
                                                    s,
                                                    n,
                                                    checkpoints.is_some(),
                                                    restored.and_then(|r| r.sink.as_ref()),
                                                )
                                                .map_err(|e| RunError::Plan(e.to_string()))?,
                                            ),
                                            (SinkSpec::Kafka(k), checkpoints) => Box::new(
                                                crate::connectors::kafka::KafkaSink::open(
                                                    &graph.name,
                                                    &vertex.id.0,
                                                    s,
                                                    k,
                                                    checkpoints.is_some(),
                                                    restored.and_then(|r| r.sink.as_ref()),
                                                )
                                                .map_err(|e| RunError::Plan(e.to_string()))?,
                                            ),
                                            _ => build_sink(graph, v, spec, s, &self.roots)?,
                                        },
                                    });
                            }
                            VertexKind::Source(_)
                            | VertexKind::Operator(_)
                            | VertexKind::Window(_)
                            | VertexKind::Join(_) => {}
                        }
                    }
                    let mut outputs = Vec::new();
                    for (e, edge) in edges.iter().enumerate().filter(|(_, e)| e.from_task == t) {
                        let down = &tasks[edge.to_task];
                        let (partitioning, targets) = match &edge.partitioner {
                            Partitioner::Forward => (
                                Partitioning::Forward,
                                vec![ChannelSender {
                                    tx: sender(&mut remote, edge.to_task, s),
                                    channel: channel_base[e],
                                }],
                            ),
                            other => {
                                let p = match other {
                                    Partitioner::Hash(key) => Partitioning::Hash {
                                        key: match key {
                                            KeySelector::RecordKey => KeyExtractor::RecordKey,
                                            KeySelector::Value => KeyExtractor::Value,
                                            KeySelector::JsonField(f) => {
                                                KeyExtractor::JsonField(f.clone())
                                            }
                                        },
                                        max_parallelism,
                                    },
                                    Partitioner::Broadcast => Partitioning::Broadcast,
                                    _ => Partitioning::Rebalance,
                                };
                                let targets = (0..down.parallelism)
                                    .map(|d| ChannelSender {
                                        tx: sender(&mut remote, edge.to_task, d),
                                        channel: channel_base[e] + s,
                                    })
                                    .collect();
                                (p, targets)
                            }
                        };
                        outputs.push(Output::new(
                            edge.from_tag.clone(),
                            partitioning,
                            targets,
                            edge.to_vertex,
                            graph.vertices[edge.to_vertex].id.0.clone(),
                        ));
                    }
                    Ok(Subtask {
                        name: name.clone(),
                        head_vertex: task.head(),
                        head,
                        operators,
                        sink,
                        outputs,
                        index: s,
                        batch_size,
                        watermark_interval: Duration::from_millis(settings.watermark_interval_ms),
                        latency_interval: (settings.latency_tracking_interval_ms > 0)
                            .then(|| Duration::from_millis(settings.latency_tracking_interval_ms)),
                        metrics: metrics.clone(),
                        stop: stop.clone(),
                        drain: drain.clone(),
                        abort: abort.clone(),
                        handle: self.handle.clone(),
                        checkpointing: options.checkpoints.as_ref().map(|c| {
                            let requested = Arc::new(AtomicU64::new(0));
                            if task_is_source {
                                triggers.insert((t, s), requested.clone());
                            }
                            Checkpointing {
                                requested,
                                local_dir: c.local_dir.join(format!("{t}-{s}")),
                                taken: c.taken.clone(),
                                task: t as u32,
                                subtask: s,
                            }
                        }),
                        subtask_metrics: Vec::new(),
                    })
                };
                match build() {
                    Ok(st) => subtasks.push((t, s, name, st)),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&work_dir);
                        return Err(e);
                    }
                }
            }
        }
        // Only subtasks hold senders now: a channel closes when its producers end.
        drop(senders);
        drop(remote);

        let started = Instant::now();
        let subtasks = subtasks
            .into_iter()
            .map(|(task, subtask, name, st)| DeployedSubtask {
                task,
                subtask,
                name,
                join: self.handle.spawn_blocking(move || st.run()),
            })
            .collect();
        Ok(Deployed {
            started,
            metrics,
            stop,
            drain,
            abort,
            subtasks,
            tasks,
            work_dir,
            triggers,
        })
    }
}

/// Compiled modules of a job's operators with what they declared, by vertex index.
pub type LoadedModules = HashMap<usize, (Arc<OperatorModule>, OperatorInfo)>;

/// One started subtask.
#[derive(Debug)]
pub struct DeployedSubtask {
    /// Task index (into [`Deployed::tasks`]).
    pub task: usize,
    /// Subtask index.
    pub subtask: u32,
    /// e.g. `tokenize+count (2/4)`.
    pub name: String,
    /// Its thread; the result is its outcome.
    pub join: tokio::task::JoinHandle<Result<(), TaskError>>,
}

/// What [`LocalCluster::deploy`] started.
#[derive(Debug)]
pub struct Deployed {
    /// When the subtasks were started.
    pub started: Instant,
    /// Live metrics of the local subtasks.
    pub metrics: Arc<JobMetrics>,
    /// Stops the sources gracefully.
    pub stop: Arc<AtomicBool>,
    /// Drains the sources: the final watermark, then nothing more until
    /// cleared (see [`crate::rpc::ToTaskManager::Drain`]).
    pub drain: Arc<AtomicBool>,
    /// Aborts every local subtask.
    pub abort: Abort,
    /// The local subtasks.
    pub subtasks: Vec<DeployedSubtask>,
    /// The job's tasks after chaining.
    pub tasks: Vec<crate::job::TaskSpec>,
    /// The job's state directory (the caller removes it when the job ends).
    pub work_dir: PathBuf,
    /// With checkpoints: each local source subtask's barrier trigger (set
    /// it to a checkpoint id to inject that barrier).
    pub triggers: HashMap<(usize, u32), Arc<AtomicU64>>,
}

/// Checkpointing and restore for [`LocalCluster::deploy`].
#[derive(Debug, Default)]
pub struct DeployOptions<'a> {
    /// Set when the job takes checkpoints.
    pub checkpoints: Option<CheckpointSetup>,
    /// What each local subtask restores, by (task, subtask).
    pub restore: Option<&'a HashMap<(usize, u32), SubtaskRestore>>,
    /// The job's deployment attempt, which operators see.
    pub attempt: u32,
}

/// Where a job's subtasks put their snapshots.
#[derive(Debug)]
pub struct CheckpointSetup {
    /// Scratch directory for synchronous snapshot parts.
    pub local_dir: PathBuf,
    /// Receives every subtask's snapshots.
    pub taken: mpsc::UnboundedSender<TakenSnapshot>,
}

/// What one subtask restores from a checkpoint (its state already
/// downloaded to local directories).
#[derive(Debug, Default, Clone)]
pub struct SubtaskRestore {
    /// The subtask had finished: it only ends its outputs.
    pub finished: bool,
    /// Keyed state per operator vertex: a downloaded snapshot directory.
    pub states: HashMap<usize, PathBuf>,
    /// Timers per operator vertex.
    pub timers: HashMap<usize, Vec<(i64, Vec<u8>)>>,
    /// The source's position.
    pub source: Option<serde_json::Value>,
    /// The sink's committable.
    pub sink: Option<serde_json::Value>,
}

/// How subtask `subtask` of operator `operator` is instantiated.
#[allow(clippy::too_many_arguments)]
fn instance_config(
    operator: &str,
    subtask: u32,
    parallelism: u32,
    max_parallelism: u16,
    config: Vec<(String, String)>,
    limits: &weir_job::OperatorLimits,
    abort: &Abort,
    attempt: u32,
    telemetry: &Arc<crate::telemetry::OperatorTelemetry>,
) -> InstanceConfig {
    InstanceConfig {
        operator: operator.to_owned(),
        subtask_index: subtask,
        parallelism,
        max_parallelism,
        config,
        memory_limit: (limits.memory_mb as usize) << 20,
        call_timeout: Duration::from_millis(limits.call_timeout_ms),
        max_output: (limits.max_output_mb as usize) << 20,
        cancel: abort.flag(),
        attempt,
        telemetry: telemetry.clone(),
    }
}

/// The keyed states of a keyed Wasm operator, as the state backends take
/// them: the ones it declares (a state's id is its index, as the guest
/// sees it), then the host's hidden
/// [`PROCESSING_TIMERS_STATE`](crate::wasm::PROCESSING_TIMERS_STATE).
pub fn state_descriptors(info: &OperatorInfo) -> Vec<StateDescriptor> {
    use crate::wasm::StateKind as WitKind;
    info.states
        .iter()
        .map(|d| StateDescriptor {
            name: d.name.clone(),
            kind: match d.kind {
                WitKind::Value => StateKind::Value,
                WitKind::List => StateKind::List,
                WitKind::Map => StateKind::Map,
            },
            ttl: d.ttl_ms.map(Duration::from_millis),
        })
        .chain(std::iter::once(StateDescriptor {
            name: crate::wasm::PROCESSING_TIMERS_STATE.to_owned(),
            kind: StateKind::Map,
            ttl: None,
        }))
        .collect()
}

/// `s` as a file or folder name: anything but `[A-Za-z0-9_-]` becomes `_`.
pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn build_source(
    graph: &JobGraph,
    v: usize,
    spec: &SourceSpec,
    subtask: u32,
    parallelism: u32,
    roots: &AllowedRoots,
) -> Result<Box<dyn Source>, RunError> {
    let id = &graph.vertices[v].id.0;
    Ok(match spec {
        SourceSpec::File(f) => {
            let fields = || {
                (
                    f.key_field.clone(),
                    f.timestamp_field.clone(),
                    f.value_field.clone(),
                )
            };
            let format = match f.format {
                SourceFormat::Lines => FileFormat::Lines,
                SourceFormat::JsonLines => {
                    let (key_field, timestamp_field, value_field) = fields();
                    FileFormat::JsonLines {
                        key_field,
                        timestamp_field,
                        value_field,
                    }
                }
                SourceFormat::Csv => {
                    let (key_field, timestamp_field, value_field) = fields();
                    FileFormat::Csv(CsvFormat {
                        header: f.header,
                        delimiter: f.delimiter,
                        key_field,
                        timestamp_field,
                        value_field,
                    })
                }
            };
            let config = FileSourceConfig {
                path: f.path.clone(),
                format,
                max_record_bytes: f.max_record_bytes,
                split_bytes: f.split_bytes,
                monitor_interval: f.monitor_interval_ms.map(Duration::from_millis),
                follow: f.follow,
            };
            let source = FileSource::new(roots, config, subtask, parallelism)
                .map_err(|e| RunError::Plan(format!("source `{id}`: {e}")))?;
            Box::new(match f.rate {
                // `rate` is the source's total: each subtask reads its share.
                Some(rate) => source.with_total_rate(rate as f64),
                None => source,
            })
        }
        SourceSpec::Generator(g) => {
            let kind = match &g.kind {
                GeneratorKind::Sequence { record_bytes, keys } => GenKind::Sequence {
                    record_bytes: record_bytes.map(|b| b as usize),
                    keys: *keys,
                },
                GeneratorKind::Transactions { accounts } => GenKind::Transactions {
                    accounts: *accounts,
                },
                GeneratorKind::Words { vocabulary } => GenKind::Words {
                    vocabulary: u64::from(*vocabulary),
                    words_per_record: 1,
                },
                GeneratorKind::Nexmark { event_rate } => GenKind::Nexmark {
                    event_rate: *event_rate,
                },
            };
            Box::new(GeneratorSource::new(
                GeneratorConfig {
                    kind,
                    count: g.count,
                    seed: g.seed,
                    rate: g.rate.map(|r| r as f64),
                    interval_ms: 10,
                },
                subtask,
                parallelism,
            ))
        }
        SourceSpec::Nats(n) => Box::new(
            crate::connectors::nats::NatsSource::open(id, n)
                .map_err(|e| RunError::Plan(e.to_string()))?,
        ),
        SourceSpec::Kafka(k) => Box::new(
            crate::connectors::kafka::KafkaSource::open(&graph.name, id, subtask, parallelism, k)
                .map_err(|e| RunError::Plan(e.to_string()))?,
        ),
    })
}

fn output_format(f: SinkFormat) -> OutputFormat {
    match f {
        SinkFormat::Value => OutputFormat::Value,
        SinkFormat::KeyValue => OutputFormat::KeyValue,
        SinkFormat::Json => OutputFormat::Json,
    }
}

fn build_sink(
    graph: &JobGraph,
    v: usize,
    spec: &SinkSpec,
    subtask: u32,
    roots: &AllowedRoots,
) -> Result<Box<dyn Sink>, RunError> {
    let id = &graph.vertices[v].id.0;
    Ok(match spec {
        SinkSpec::File(f) => Box::new(
            FileSink::create(roots, &f.subtask_path(subtask), output_format(f.format))
                .map_err(|e| RunError::Plan(format!("sink `{id}`: {e}")))?,
        ),
        SinkSpec::Stdout { format } => Box::new(StdoutSink::new(output_format(*format))),
        SinkSpec::Blackhole { rate } => Box::new(BlackholeSink::new(rate.map(|r| r as f64))),
        SinkSpec::Nats(n) => Box::new(
            crate::connectors::nats::NatsSink::open(&graph.name, id, subtask, n, false, None)
                .map_err(|e| RunError::Plan(e.to_string()))?,
        ),
        SinkSpec::Kafka(k) => Box::new(
            crate::connectors::kafka::KafkaSink::open(&graph.name, id, subtask, k, false, None)
                .map_err(|e| RunError::Plan(e.to_string()))?,
        ),
    })
}

/// Checks the connectors of `graph`: every file source and sink against
/// `roots`, every NATS and Kafka address against `roots`' addresses, every
/// NATS source and sink against its server
/// ([`crate::connectors::nats::check`]) and every Kafka one against its
/// brokers ([`crate::connectors::kafka::check`]), before
/// anything is opened or created: a path outside every root, a symlink out
/// of one, a source file that is not a regular file (FIFO, device), a
/// source folder or pattern that reaches out of the roots or matches
/// nothing (unless the source is continuous), or a non-regular file (or
/// symlink) where a sink would write is refused. A file that does not
/// exist (yet) under a root passes: a sink creates it, and a source fails
/// when it opens it. The message names each refused
/// vertex and its path as the job gives it.
pub fn check_connectors(graph: &JobGraph, roots: &AllowedRoots) -> Result<(), String> {
    let mut problems = Vec::new();
    let missing = |e: &crate::connectors::ConfineError| {
        matches!(&e.reason, crate::connectors::confine::Reason::Io(io)
            if io.kind() == std::io::ErrorKind::NotFound)
    };
    for vertex in &graph.vertices {
        match &vertex.kind {
            VertexKind::Source(SourceSpec::File(f)) => {
                let continuous = f.monitor_interval_ms.is_some();
                match crate::connectors::file_source::check_path(roots, &f.path, continuous) {
                    Err(crate::connectors::ConnectorError::Confined(e)) if missing(&e) => {}
                    Err(e) => problems.push(format!("source `{}`: {e}", vertex.id)),
                    Ok(()) => {}
                }
            }
            VertexKind::Sink(SinkSpec::File(f)) => {
                for s in 0..vertex.parallelism {
                    if let Err(e) = roots.check_write(&f.subtask_path(s)) {
                        problems.push(format!("sink `{}`: {e}", vertex.id));
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    // Not files, but checked at the same two moments (submit, deploy):
    // first that their addresses are allowed (one refused is never
    // contacted, not even to say whether it answers), then NATS servers
    // reachable, streams present,
    use crate::connectors::kafka::KafkaConnector;
    use crate::connectors::nats::NatsConnector;
    let addresses = roots.addresses();
    let mut allowed = |what: &str, id: &str, list: &str, default_port: u16| {
        let refused = addresses.check(&format!("{what} `{id}`"), list, default_port);
        refused.map_err(|e| problems.push(e)).is_ok()
    };
    let nats: Vec<_> = nats_connectors(graph)
        .into_iter()
        .filter(|(id, c)| match c {
            NatsConnector::Source(s) => allowed("source", id, &s.url, NATS_PORT),
            NatsConnector::Sink(s) => allowed("sink", id, &s.url, NATS_PORT),
        })
        .collect();
    let kafka: Vec<_> = kafka_connectors(graph)
        .into_iter()
        .filter(|(id, c)| match c {
            KafkaConnector::Source(s) => allowed("source", id, &s.bootstrap_servers, KAFKA_PORT),
            KafkaConnector::Sink { spec, .. } => {
                allowed("sink", id, &spec.bootstrap_servers, KAFKA_PORT)
            }
        })
        .collect();
    problems.extend(crate::connectors::nats::check(&nats));
    // and Kafka brokers reachable, topics present.
    problems.extend(crate::connectors::kafka::check(&kafka));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// NATS's port where a URL names none.
const NATS_PORT: u16 = 4222;
/// Kafka's port where a broker address names none.
const KAFKA_PORT: u16 = 9092;

/// The NATS sources and sinks of `graph`, by id.
fn nats_connectors(graph: &JobGraph) -> Vec<(String, crate::connectors::nats::NatsConnector<'_>)> {
    use crate::connectors::nats::NatsConnector;
    graph
        .vertices
        .iter()
        .filter_map(|v| match &v.kind {
            VertexKind::Source(SourceSpec::Nats(s)) => {
                Some((v.id.0.clone(), NatsConnector::Source(s)))
            }
            VertexKind::Sink(SinkSpec::Nats(s)) => Some((v.id.0.clone(), NatsConnector::Sink(s))),
            _ => None,
        })
        .collect()
}

/// The Kafka sources and sinks of `graph`, by id.
fn kafka_connectors(
    graph: &JobGraph,
) -> Vec<(String, crate::connectors::kafka::KafkaConnector<'_>)> {
    use crate::connectors::kafka::KafkaConnector;
    graph
        .vertices
        .iter()
        .filter_map(|v| match &v.kind {
            VertexKind::Source(SourceSpec::Kafka(s)) => {
                Some((v.id.0.clone(), KafkaConnector::Source(s)))
            }
            VertexKind::Sink(SinkSpec::Kafka(s)) => Some((
                v.id.0.clone(),
                KafkaConnector::Sink {
                    spec: s,
                    transactional: s.delivery == crate::job::KafkaDelivery::ExactlyOnce
                        && graph.settings.checkpoints.is_some(),
                },
            )),
            _ => None,
        })
        .collect()
}

/// The default work directory: `$TMPDIR/weir`.
pub fn default_work_dir() -> PathBuf {
    std::env::temp_dir().join("weir")
}
