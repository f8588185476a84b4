//! Validation: from a [`JobSpec`] (the document as written) to a
//! [`JobGraph`] (typed, resolved, consistent).
//!
//! One pass collects every problem it can find — settings, then each
//! source, operator and sink, then each edge, then the graph as a whole
//! (inputs, cycles) — and fails with all of them in one
//! [`JobError::Invalid`]. A problem names its field the way a user finds it
//! in the file: `operator[1] "count".parallelism`, `edge[3].from`.
//!
//! Pure: no file system, no clock. The only side effect is a
//! `tracing::warn!` per warning.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::graph::{
    self, FileSinkSpec, FileSourceSpec, GeneratorKind, GeneratorSpec, JobEdge, JobGraph,
    JobSettings, KeySelector, ModuleRef, OperatorLimits, OperatorSpec, Partitioner, SinkFormat,
    SinkSpec, SourceFormat, SourceSpec, StateBackendKind, Vertex, VertexId, VertexKind,
};
use super::spec::{
    Document, EdgeTable, GeneratorKindName, JobTable, OperatorTable, PartitionName, SinkTable,
    SinkType, SourceTable, SourceType,
};
use super::{
    DEFAULT_BATCH_SIZE, DEFAULT_BUFFER_TIMEOUT_MS, DEFAULT_CALL_TIMEOUT_MS,
    DEFAULT_CHANNEL_CAPACITY, DEFAULT_MAX_OUTPUT_MB, DEFAULT_MAX_PARALLELISM, DEFAULT_MEMORY_MB,
    DEFAULT_PARALLELISM, DEFAULT_SLOT_SHARING_GROUP, MAX_BATCH_SIZE, MAX_CALL_TIMEOUT_MS,
    MAX_FILE_RECORD_BYTES, MAX_ID_LEN, MAX_MAX_PARALLELISM, MAX_MEMORY_MB, MAX_RECORD_BYTES,
};
use super::{JobError, JobSpec, Problem};

/// Default `accounts` of a transactions generator.
const DEFAULT_ACCOUNTS: u64 = 100;
/// Default `vocabulary` of a words generator.
const DEFAULT_VOCABULARY: u32 = 1000;

pub(super) fn build(spec: JobSpec) -> Result<JobGraph, JobError> {
    let base_dir = spec.base_dir().to_owned();
    let mut builder = Builder {
        base_dir,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let graph = builder.graph(&spec.path, spec.doc);
    if !builder.problems.is_empty() {
        return Err(JobError::Invalid {
            path: spec.path,
            problems: builder.problems,
        });
    }
    for warning in &graph.warnings {
        tracing::warn!(spec = %spec.path.display(), "{warning}");
    }
    Ok(graph)
}

struct Builder {
    base_dir: PathBuf,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

/// A vertex while the graph is being built: its label for messages.
struct Declared {
    vertex: Vertex,
    /// `operator[1] "count"`.
    label: String,
}

impl Builder {
    fn problem(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(field, message));
    }

    fn graph(&mut self, origin: &Path, doc: Document) -> JobGraph {
        let settings = self.settings(&doc.job);
        if doc.sources.is_empty() {
            self.problem(
                "[[source]]",
                "the job has no source; expected at least one [[source]]",
            );
        }
        if doc.sinks.is_empty() {
            self.problem(
                "[[sink]]",
                "the job has no sink; expected at least one [[sink]]",
            );
        }

        let mut declared: Vec<Declared> = Vec::new();
        for (i, table) in doc.sources.iter().enumerate() {
            let label = format!("source[{i}] {:?}", table.id);
            let vertex = self.source(&label, table, &settings);
            declared.push(Declared { vertex, label });
        }
        for (i, table) in doc.operators.iter().enumerate() {
            let label = format!("operator[{i}] {:?}", table.id);
            let vertex = self.operator(&label, table, &settings);
            declared.push(Declared { vertex, label });
        }
        for (i, table) in doc.sinks.iter().enumerate() {
            let label = format!("sink[{i}] {:?}", table.id);
            let vertex = self.sink(&label, table, &settings);
            declared.push(Declared { vertex, label });
        }
        self.unique_ids(&declared);
        self.unique_sink_paths(&declared);

        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, d) in declared.iter().enumerate() {
            index.entry(d.vertex.id.as_str()).or_insert(i);
        }
        let mut edges: Vec<JobEdge> = Vec::new();
        // For each entry of `edges`, its position in the document.
        let mut edge_positions: Vec<usize> = Vec::new();
        for (i, table) in doc.edges.iter().enumerate() {
            if let Some(edge) = self.edge(i, table, &declared, &index) {
                if let Some(first) = edges.iter().position(|e| {
                    e.from == edge.from && e.to == edge.to && e.from_tag == edge.from_tag
                }) {
                    self.problem(
                        format!("edge[{i}]"),
                        format!(
                            "duplicate edge from {:?} to {:?}: the same as edge[{}] (records would be delivered twice)",
                            table.from, table.to, edge_positions[first]
                        ),
                    );
                    continue;
                }
                edges.push(edge);
                edge_positions.push(i);
            }
        }
        self.connectivity(&declared, &edges);
        self.cycles(&declared, &edges, &edge_positions);

        let warnings = std::mem::take(&mut self.warnings)
            .into_iter()
            .map(|w| w.to_string())
            .collect();
        JobGraph {
            name: doc.job.name.clone(),
            origin: origin.to_owned(),
            settings,
            vertices: declared.into_iter().map(|d| d.vertex).collect(),
            edges,
            warnings,
        }
    }

    // ---- [job] ------------------------------------------------------------

    fn settings(&mut self, job: &JobTable) -> JobSettings {
        if let Err(message) = check_id(&job.name) {
            self.problem("job.name", message);
        }
        let max_parallelism = job.max_parallelism.unwrap_or(DEFAULT_MAX_PARALLELISM);
        if !(1..=MAX_MAX_PARALLELISM).contains(&max_parallelism) {
            self.problem(
                "job.max_parallelism",
                format!("found {max_parallelism}, expected 1..={MAX_MAX_PARALLELISM}"),
            );
        }
        let max_parallelism = max_parallelism.clamp(1, MAX_MAX_PARALLELISM);
        let parallelism = job.parallelism.unwrap_or(DEFAULT_PARALLELISM);
        self.check_parallelism("job.parallelism", parallelism, max_parallelism);
        let batch_size = job.batch_size.unwrap_or(DEFAULT_BATCH_SIZE);
        self.check_range(
            "job.batch_size",
            batch_size.into(),
            1,
            MAX_BATCH_SIZE.into(),
        );
        let channel_capacity = job.channel_capacity.unwrap_or(DEFAULT_CHANNEL_CAPACITY);
        self.check_range(
            "job.channel_capacity",
            channel_capacity.into(),
            1,
            u32::MAX.into(),
        );
        let checkpoints = job.checkpoints.clone();
        if let Some(c) = &checkpoints
            && let Err(e) = c.validate()
        {
            self.problem("job.checkpoints", e.to_string());
        }
        let limits = job.limits.clone().unwrap_or_default();
        let limits = OperatorLimits {
            memory_mb: limits.memory_mb.unwrap_or(DEFAULT_MEMORY_MB),
            call_timeout_ms: limits.call_timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS),
            max_output_mb: limits.max_output_mb.unwrap_or(DEFAULT_MAX_OUTPUT_MB),
        };
        self.check_range(
            "job.limits.memory_mb",
            limits.memory_mb.into(),
            1,
            MAX_MEMORY_MB.into(),
        );
        self.check_range(
            "job.limits.call_timeout_ms",
            limits.call_timeout_ms,
            1,
            MAX_CALL_TIMEOUT_MS,
        );
        self.check_range(
            "job.limits.max_output_mb",
            limits.max_output_mb.into(),
            1,
            u32::MAX.into(),
        );
        JobSettings {
            parallelism,
            max_parallelism,
            state_backend: job.state_backend.unwrap_or(StateBackendKind::RocksDb),
            batch_size,
            channel_capacity,
            buffer_timeout_ms: job.buffer_timeout_ms.unwrap_or(DEFAULT_BUFFER_TIMEOUT_MS),
            limits,
            restart: job.restart.unwrap_or(if checkpoints.is_some() {
                super::config::RestartStrategy::WITH_CHECKPOINTS
            } else {
                super::config::RestartStrategy::None
            }),
            checkpoints,
        }
    }

    fn check_range(&mut self, field: &str, found: u64, min: u64, max: u64) {
        if found < min || found > max {
            let expected = if max == u64::MAX || max == u64::from(u32::MAX) {
                format!("at least {min}")
            } else {
                format!("{min}..={max}")
            };
            self.problem(field, format!("found {found}, expected {expected}"));
        }
    }

    fn check_parallelism(&mut self, field: &str, parallelism: u32, max_parallelism: u32) {
        if parallelism == 0 || parallelism > max_parallelism {
            self.problem(
                field,
                format!(
                    "found {parallelism}, expected 1..={max_parallelism} (1 up to job.max_parallelism)"
                ),
            );
        }
    }

    /// A vertex's parallelism: its own value, else the job's default.
    fn vertex_parallelism(&mut self, label: &str, own: Option<u32>, settings: &JobSettings) -> u32 {
        match own {
            Some(p) => {
                self.check_parallelism(
                    &format!("{label}.parallelism"),
                    p,
                    settings.max_parallelism,
                );
                p
            }
            None => settings.parallelism,
        }
    }

    fn id(&mut self, label: &str, id: &str) -> VertexId {
        if let Err(message) = check_id(id) {
            self.problem(format!("{label}.id"), message);
        }
        VertexId(id.to_owned())
    }

    /// `slot_sharing_group`, default `"default"`.
    fn group(&mut self, label: &str, group: &Option<String>) -> String {
        match group {
            None => DEFAULT_SLOT_SHARING_GROUP.to_owned(),
            Some(g) => {
                if let Err(message) = check_id(g) {
                    self.problem(format!("{label}.slot_sharing_group"), message);
                }
                g.clone()
            }
        }
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        self.base_dir.join(path)
    }

    /// Reports `field` as not applicable when it is set.
    fn not_for<T>(&mut self, label: &str, field: &str, value: &Option<T>, what: &str) {
        if value.is_some() {
            self.problem(format!("{label}.{field}"), format!("not allowed {what}"));
        }
    }

    // ---- [[source]] -------------------------------------------------------

    fn source(&mut self, label: &str, t: &SourceTable, settings: &JobSettings) -> Vertex {
        let id = self.id(label, &t.id);
        let (spec, parallelism) = match t.source_type {
            SourceType::File => {
                let what = "for type = \"file\" (a generator field)";
                let max_record_bytes = t
                    .max_record_bytes
                    .unwrap_or(super::config::DEFAULT_MAX_RECORD_BYTES);
                self.check_range(
                    &format!("{label}.max_record_bytes"),
                    max_record_bytes,
                    1,
                    MAX_FILE_RECORD_BYTES,
                );
                self.not_for(label, "kind", &t.kind, what);
                self.not_for(label, "count", &t.count, what);
                self.not_for(label, "seed", &t.seed, what);
                self.not_for(label, "accounts", &t.accounts, what);
                self.not_for(label, "record_bytes", &t.record_bytes, what);
                self.not_for(label, "keys", &t.keys, what);
                self.not_for(label, "vocabulary", &t.vocabulary, what);
                let path = match &t.path {
                    Some(path) => self.resolve(path),
                    None => {
                        self.problem(
                            format!("{label}.path"),
                            "missing; a file source needs the path of the file to read",
                        );
                        PathBuf::new()
                    }
                };
                let format = t.format.unwrap_or(SourceFormat::Lines);
                if format != SourceFormat::JsonLines {
                    let what = "for format = \"lines\" (json-lines only)";
                    self.not_for(label, "key_field", &t.key_field, what);
                    self.not_for(label, "timestamp_field", &t.timestamp_field, what);
                }
                for (field, value) in [
                    ("key_field", &t.key_field),
                    ("timestamp_field", &t.timestamp_field),
                ] {
                    if value.as_deref() == Some("") {
                        self.problem(
                            format!("{label}.{field}"),
                            "found \"\", expected the name of a top-level JSON field",
                        );
                    }
                }
                // A file is read by one subtask: the default is 1 whatever
                // job.parallelism says, and nothing else is allowed.
                if let Some(p) = t.parallelism.filter(|&p| p != 1) {
                    self.problem(
                        format!("{label}.parallelism"),
                        format!(
                            "found {p}, expected 1: a file source is read by one subtask \
                             (omit parallelism, or use `partition = \"rebalance\"` on its edge to spread records)"
                        ),
                    );
                }
                if t.rate == Some(0) {
                    self.problem(
                        format!("{label}.rate"),
                        "must be at least 1 line per second",
                    );
                }
                let spec = SourceSpec::File(FileSourceSpec {
                    path,
                    rate: t.rate,
                    format,
                    key_field: t.key_field.clone(),
                    timestamp_field: t.timestamp_field.clone(),
                    max_record_bytes,
                });
                (spec, 1)
            }
            SourceType::Generator => {
                let what = "for type = \"generator\" (a file-source field)";
                self.not_for(label, "path", &t.path, what);
                self.not_for(label, "format", &t.format, what);
                self.not_for(label, "key_field", &t.key_field, what);
                self.not_for(label, "timestamp_field", &t.timestamp_field, what);
                self.not_for(label, "max_record_bytes", &t.max_record_bytes, what);
                let kind_name = match t.kind {
                    Some(kind) => kind,
                    None => {
                        self.problem(
                            format!("{label}.kind"),
                            "missing; expected \"sequence\", \"transactions\" or \"words\"",
                        );
                        GeneratorKindName::Sequence
                    }
                };
                let only =
                    |kind: &str| format!("for kind = {:?} ({kind} only)", kind_name_str(kind_name));
                if kind_name != GeneratorKindName::Transactions {
                    self.not_for(label, "accounts", &t.accounts, &only("transactions"));
                }
                if kind_name != GeneratorKindName::Sequence {
                    self.not_for(label, "record_bytes", &t.record_bytes, &only("sequence"));
                    self.not_for(label, "keys", &t.keys, &only("sequence"));
                }
                if kind_name != GeneratorKindName::Words {
                    self.not_for(label, "vocabulary", &t.vocabulary, &only("words"));
                }
                let kind = match kind_name {
                    GeneratorKindName::Sequence => {
                        if let Some(bytes) = t.record_bytes {
                            self.check_range(
                                &format!("{label}.record_bytes"),
                                bytes.into(),
                                1,
                                MAX_RECORD_BYTES.into(),
                            );
                        }
                        if let Some(keys) = t.keys {
                            self.check_range(&format!("{label}.keys"), keys, 1, u64::MAX);
                        }
                        GeneratorKind::Sequence {
                            record_bytes: t.record_bytes,
                            keys: t.keys,
                        }
                    }
                    GeneratorKindName::Transactions => {
                        let accounts = t.accounts.unwrap_or(DEFAULT_ACCOUNTS);
                        self.check_range(&format!("{label}.accounts"), accounts, 1, u64::MAX);
                        GeneratorKind::Transactions { accounts }
                    }
                    GeneratorKindName::Words => {
                        let vocabulary = t.vocabulary.unwrap_or(DEFAULT_VOCABULARY);
                        self.check_range(
                            &format!("{label}.vocabulary"),
                            vocabulary.into(),
                            1,
                            u64::MAX,
                        );
                        GeneratorKind::Words { vocabulary }
                    }
                };
                if let Some(rate) = t.rate {
                    self.check_range(&format!("{label}.rate"), rate, 1, u64::MAX);
                }
                let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
                let spec = SourceSpec::Generator(GeneratorSpec {
                    kind,
                    count: t.count,
                    seed: t.seed.unwrap_or(0),
                    rate: t.rate,
                });
                (spec, parallelism)
            }
        };
        Vertex {
            id,
            parallelism,
            slot_sharing_group: self.group(label, &t.slot_sharing_group),
            kind: VertexKind::Source(spec),
        }
    }

    // ---- [[operator]] -----------------------------------------------------

    fn operator(&mut self, label: &str, t: &OperatorTable, settings: &JobSettings) -> Vertex {
        let id = self.id(label, &t.id);
        let module = match parse_module(&t.module) {
            Ok(ModuleRef::Path(path)) => ModuleRef::Path(self.resolve(&path)),
            Ok(named) => named,
            Err(message) => {
                self.problem(format!("{label}.module"), message);
                ModuleRef::Path(PathBuf::new())
            }
        };
        let key_by = match t.key_by.as_deref().map(parse_key_selector).transpose() {
            Ok(key_by) => key_by,
            Err(message) => {
                self.problem(format!("{label}.key_by"), message);
                None
            }
        };
        let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
        Vertex {
            id,
            parallelism,
            slot_sharing_group: self.group(label, &t.slot_sharing_group),
            kind: VertexKind::Operator(OperatorSpec {
                module,
                config: flatten_config(&t.config),
                key_by,
            }),
        }
    }

    // ---- [[sink]] ---------------------------------------------------------

    fn sink(&mut self, label: &str, t: &SinkTable, settings: &JobSettings) -> Vertex {
        let id = self.id(label, &t.id);
        let format = t.format.unwrap_or(SinkFormat::Value);
        let spec = match t.sink_type {
            SinkType::File => {
                let path = match &t.path {
                    Some(path) => self.resolve(path),
                    None => {
                        self.problem(
                            format!("{label}.path"),
                            "missing; a file sink needs the path of the file to write",
                        );
                        PathBuf::new()
                    }
                };
                self.not_for(
                    label,
                    "rate",
                    &t.rate,
                    "for type = \"file\" (blackhole only)",
                );
                SinkSpec::File(FileSinkSpec { path, format })
            }
            SinkType::Stdout => {
                self.not_for(label, "path", &t.path, "for type = \"stdout\" (file only)");
                self.not_for(
                    label,
                    "rate",
                    &t.rate,
                    "for type = \"stdout\" (blackhole only)",
                );
                SinkSpec::Stdout { format }
            }
            SinkType::Blackhole => {
                let what = "for type = \"blackhole\" (it writes nothing)";
                self.not_for(label, "path", &t.path, what);
                self.not_for(label, "format", &t.format, what);
                if t.rate == Some(0) {
                    self.problem(
                        format!("{label}.rate"),
                        "must be at least 1 record per second",
                    );
                }
                SinkSpec::Blackhole { rate: t.rate }
            }
        };
        let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
        Vertex {
            id,
            parallelism,
            slot_sharing_group: self.group(label, &t.slot_sharing_group),
            kind: VertexKind::Sink(spec),
        }
    }

    // ---- ids --------------------------------------------------------------

    fn unique_ids(&mut self, declared: &[Declared]) {
        let mut first: HashMap<&str, &str> = HashMap::new();
        for d in declared {
            if let Some(previous) = first.get(d.vertex.id.as_str()) {
                let message = format!(
                    "duplicate id {:?}: already used by {previous}; ids must be unique across sources, operators and sinks",
                    d.vertex.id.0
                );
                self.problem(format!("{}.id", d.label), message);
            } else {
                first.insert(d.vertex.id.as_str(), &d.label);
            }
        }
    }

    fn unique_sink_paths(&mut self, declared: &[Declared]) {
        let mut first: HashMap<&Path, &str> = HashMap::new();
        for d in declared {
            if let VertexKind::Sink(SinkSpec::File(sink)) = &d.vertex.kind {
                if sink.path.as_os_str().is_empty() {
                    continue;
                }
                if let Some(previous) = first.get(sink.path.as_path()) {
                    let message = format!(
                        "{} is also written by {previous}; expected a distinct file per sink",
                        sink.path.display()
                    );
                    self.problem(format!("{}.path", d.label), message);
                } else {
                    first.insert(&sink.path, &d.label);
                }
            }
        }
    }

    // ---- [[edge]] ---------------------------------------------------------

    /// Resolves and checks one edge; `None` when an endpoint is unusable.
    /// Problems are recorded.
    fn edge(
        &mut self,
        i: usize,
        t: &EdgeTable,
        declared: &[Declared],
        index: &HashMap<&str, usize>,
    ) -> Option<JobEdge> {
        let producers = ids_with_role(declared, |k| !matches!(k, VertexKind::Sink(_)));
        let consumers = ids_with_role(declared, |k| !matches!(k, VertexKind::Source(_)));

        // from = "id" or "operator-id:tag"
        let (from_id, from_tag) = match t.from.split_once(':') {
            Some((id, tag)) => (id, Some(tag)),
            None => (t.from.as_str(), None),
        };
        let from = match index.get(from_id) {
            None => {
                self.problem(
                    format!("edge[{i}].from"),
                    format!(
                        "found {:?}, but there is no source or operator with id {from_id:?}; expected one of: {producers}",
                        t.from
                    ),
                );
                None
            }
            Some(&v) => match (&declared[v].vertex.kind, from_tag) {
                (VertexKind::Sink(_), _) => {
                    self.problem(
                        format!("edge[{i}].from"),
                        format!(
                            "found {:?}, which is a sink; sinks have no outputs (expected a source or operator: {producers})",
                            t.from
                        ),
                    );
                    None
                }
                (VertexKind::Source(_), Some(_)) => {
                    self.problem(
                        format!("edge[{i}].from"),
                        format!(
                            "found {:?}, but {from_id:?} is a source; only operators have side outputs (\"op:tag\")",
                            t.from
                        ),
                    );
                    None
                }
                (_, Some(tag)) if check_id(tag).is_err() => {
                    self.problem(
                        format!("edge[{i}].from"),
                        format!(
                            "found side-output tag {tag:?}; expected a tag matching [a-z0-9][a-z0-9_-]* (\"op:tag\")"
                        ),
                    );
                    None
                }
                _ => Some(v),
            },
        };
        let to = match index.get(t.to.as_str()) {
            None => {
                let hint = if t.to.contains(':') {
                    " (side-output tags belong in `from`)"
                } else {
                    ""
                };
                self.problem(
                    format!("edge[{i}].to"),
                    format!(
                        "found {:?}, but there is no operator or sink with that id{hint}; expected one of: {consumers}",
                        t.to
                    ),
                );
                None
            }
            Some(&v) if matches!(declared[v].vertex.kind, VertexKind::Source(_)) => {
                self.problem(
                    format!("edge[{i}].to"),
                    format!(
                        "found {:?}, which is a source; sources have no inputs (expected an operator or sink: {consumers})",
                        t.to
                    ),
                );
                None
            }
            Some(&v) => Some(v),
        };
        let (from, to) = (from?, to?);
        // A bad partition is recorded, and the edge still counts as the
        // consumer's input (no spurious "has no input"): the graph is
        // discarded anyway once there is a problem.
        let partitioner = self
            .partitioner(i, t, &declared[from], &declared[to])
            .unwrap_or(Partitioner::Rebalance);
        Some(JobEdge {
            from,
            from_tag: from_tag.map(str::to_owned),
            to,
            partitioner,
        })
    }

    /// The edge's partitioner: as given, or the default; checked against
    /// the consumer's key_by and both parallelisms.
    fn partitioner(
        &mut self,
        i: usize,
        t: &EdgeTable,
        from: &Declared,
        to: &Declared,
    ) -> Option<Partitioner> {
        let key_by = match &to.vertex.kind {
            VertexKind::Operator(op) => op.key_by.clone(),
            _ => None,
        };
        let (p_from, p_to) = (from.vertex.parallelism, to.vertex.parallelism);
        let field = format!("edge[{i}].partition");
        match (t.partition, key_by) {
            (None | Some(PartitionName::Hash), Some(key)) => Some(Partitioner::Hash(key)),
            (Some(other), Some(key)) => {
                self.problem(
                    field,
                    format!(
                        "found {:?}, expected \"hash\" (or no partition): {} has key_by = \"{key}\", so every input edge must be hash-partitioned",
                        partition_str(other),
                        to.label
                    ),
                );
                None
            }
            (Some(PartitionName::Hash), None) => {
                self.problem(
                    field,
                    format!(
                        "found \"hash\", but {} has no key_by; expected \"forward\", \"rebalance\" or \"broadcast\", or set key_by on the consumer",
                        to.label
                    ),
                );
                None
            }
            (Some(PartitionName::Forward), None) if p_from != p_to => {
                self.problem(
                    field,
                    format!(
                        "found \"forward\", which needs equal parallelism, but {} has {p_from} and {} has {p_to}; expected \"rebalance\" or \"broadcast\", or equal parallelism",
                        from.label, to.label
                    ),
                );
                None
            }
            (Some(PartitionName::Forward), None) => Some(Partitioner::Forward),
            (Some(PartitionName::Rebalance), None) => Some(Partitioner::Rebalance),
            (Some(PartitionName::Broadcast), None) => Some(Partitioner::Broadcast),
            (None, None) if p_from == p_to => Some(Partitioner::Forward),
            (None, None) => Some(Partitioner::Rebalance),
        }
    }

    // ---- the graph --------------------------------------------------------

    /// Operators and sinks need an input; a source or operator without an
    /// output is a warning (its records are dropped).
    fn connectivity(&mut self, declared: &[Declared], edges: &[JobEdge]) {
        for (v, d) in declared.iter().enumerate() {
            let has_input = edges.iter().any(|e| e.to == v);
            let has_output = edges.iter().any(|e| e.from == v);
            match d.vertex.kind {
                VertexKind::Source(_) => {}
                VertexKind::Operator(_) | VertexKind::Sink(_) if !has_input => {
                    self.problem(
                        d.label.clone(),
                        format!(
                            "has no input; expected an [[edge]] with to = {:?}",
                            d.vertex.id.0
                        ),
                    );
                }
                _ => {}
            }
            if !has_output && !matches!(d.vertex.kind, VertexKind::Sink(_)) {
                self.warnings.push(Problem::new(
                    d.label.clone(),
                    format!(
                        "has no output: its records are dropped (no [[edge]] has from = {:?})",
                        d.vertex.id.0
                    ),
                ));
            }
        }
    }

    /// Reports each cycle (well, one per strongly connected tangle) by the
    /// ids on it.
    fn cycles(&mut self, declared: &[Declared], edges: &[JobEdge], edge_positions: &[usize]) {
        let pairs = edges.iter().map(|e| (e.from, e.to));
        let placed: BTreeSet<usize> = graph::topological_order(declared.len(), pairs.clone())
            .into_iter()
            .collect();
        let mut unplaced: BTreeSet<usize> = (0..declared.len())
            .filter(|v| !placed.contains(v))
            .collect();
        // Vertices left by Kahn's algorithm are on a cycle or downstream of
        // one. Walk back from any of them along unplaced predecessors until
        // a vertex repeats: that closes a cycle.
        while let Some(&start) = unplaced.first() {
            let mut path: Vec<usize> = vec![start];
            let mut edge_path: Vec<usize> = Vec::new();
            let cycle_start = loop {
                let v = *path.last().expect("path starts non-empty");
                let (k, e) = edges
                    .iter()
                    .enumerate()
                    .find(|(_, e)| e.to == v && unplaced.contains(&e.from))
                    .expect("an unplaced vertex has an unplaced predecessor");
                edge_path.push(k);
                if let Some(pos) = path.iter().position(|&u| u == e.from) {
                    break pos;
                }
                path.push(e.from);
            };
            // path[cycle_start..] walks the cycle backwards.
            let mut cycle: Vec<usize> = path[cycle_start..].to_vec();
            cycle.reverse();
            // Start at the vertex declared first, so the message is stable.
            let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
            cycle.rotate_left(first);
            let mut cycle_edges: Vec<usize> = edge_path[cycle_start..]
                .iter()
                .map(|&k| edge_positions[k])
                .collect();
            cycle_edges.sort_unstable();
            let mut names: Vec<String> = cycle
                .iter()
                .map(|&v| format!("{:?}", declared[v].vertex.id.0))
                .collect();
            names.push(names[0].clone());
            let edge_names: Vec<String> =
                cycle_edges.iter().map(|k| format!("edge[{k}]")).collect();
            self.problem(
                "[[edge]]",
                format!(
                    "cycle {} (through {}); expected an acyclic graph",
                    names.join(" -> "),
                    edge_names.join(", ")
                ),
            );
            // Drop the cycle and everything downstream of it only.
            let mut stack = cycle.clone();
            while let Some(v) = stack.pop() {
                if unplaced.remove(&v) {
                    stack.extend(edges.iter().filter(|e| e.from == v).map(|e| e.to));
                }
            }
        }
    }
}

/// `[a-z0-9][a-z0-9_-]*`, at most [`MAX_ID_LEN`] bytes.
fn check_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    let well_formed = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !well_formed {
        return Err(format!(
            "found {id:?}, expected [a-z0-9][a-z0-9_-]* (lowercase letters, digits, '_' and '-', not starting with '_' or '-')"
        ));
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!(
            "found {} bytes, expected at most {MAX_ID_LEN}",
            id.len()
        ));
    }
    Ok(())
}

/// `path/to/x.wasm`, `name@version` or `sha256:<64 hex>`.
fn parse_module(module: &str) -> Result<ModuleRef, String> {
    if module.ends_with(".wasm") {
        return Ok(ModuleRef::Path(PathBuf::from(module)));
    }
    if let Some(hex) = module.strip_prefix("sha256:") {
        if hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Ok(ModuleRef::Hash(module.to_owned()));
        }
        return Err(format!(
            "found {module:?}, expected sha256: followed by 64 lowercase hex digits"
        ));
    }
    if let Some((name, version)) = module.split_once('@') {
        let version_ok = !version.is_empty()
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c));
        if check_id(name).is_ok() && version_ok {
            return Ok(ModuleRef::Named {
                name: name.to_owned(),
                version: version.to_owned(),
            });
        }
    }
    Err(format!(
        "found {module:?}, expected a path ending in .wasm, an uploaded module as \"name@version\", or \"sha256:<hex>\""
    ))
}

/// `key`, `value` or `json:<field>`.
fn parse_key_selector(key_by: &str) -> Result<KeySelector, String> {
    match key_by {
        "key" => Ok(KeySelector::RecordKey),
        "value" => Ok(KeySelector::Value),
        _ => match key_by.strip_prefix("json:") {
            Some(field) if !field.is_empty() => Ok(KeySelector::JsonField(field.to_owned())),
            _ => Err(format!(
                "found {key_by:?}, expected \"key\" (the record key), \"value\" (the whole value) or \"json:<field>\" (a top-level field of a JSON value)"
            )),
        },
    }
}

/// The config table as the guest sees it: strings as they are, other
/// scalars in TOML syntax, tables and arrays as JSON.
fn flatten_config(config: &toml::Table) -> Vec<(String, String)> {
    config
        .iter()
        .map(|(key, value)| {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Array(_) | toml::Value::Table(_) => to_json(value).to_string(),
                scalar => scalar.to_string(),
            };
            (key.clone(), text)
        })
        .collect()
}

/// TOML to JSON; datetimes (and non-finite floats) become strings.
fn to_json(value: &toml::Value) -> serde_json::Value {
    use serde_json::Value as Json;
    match value {
        toml::Value::String(s) => Json::String(s.clone()),
        toml::Value::Integer(i) => Json::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(value.to_string())),
        toml::Value::Boolean(b) => Json::Bool(*b),
        toml::Value::Datetime(d) => Json::String(d.to_string()),
        toml::Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        toml::Value::Table(table) => {
            Json::Object(table.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

fn ids_with_role(declared: &[Declared], keep: impl Fn(&VertexKind) -> bool) -> String {
    let ids: Vec<&str> = declared
        .iter()
        .filter(|d| keep(&d.vertex.kind))
        .map(|d| d.vertex.id.as_str())
        .collect();
    if ids.is_empty() {
        "(none)".to_owned()
    } else {
        ids.join(", ")
    }
}

fn kind_name_str(kind: GeneratorKindName) -> &'static str {
    match kind {
        GeneratorKindName::Sequence => "sequence",
        GeneratorKindName::Transactions => "transactions",
        GeneratorKindName::Words => "words",
    }
}

fn partition_str(partition: PartitionName) -> &'static str {
    match partition {
        PartitionName::Forward => "forward",
        PartitionName::Hash => "hash",
        PartitionName::Rebalance => "rebalance",
        PartitionName::Broadcast => "broadcast",
    }
}
