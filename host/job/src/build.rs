//! Validation: from a [`JobSpec`] (the document as written) to a
//! [`JobGraph`] (typed, resolved, consistent).
//!
//! One pass collects every problem it can find — settings, then each
//! source, operator and sink, then each edge, then the graph as a whole
//! (inputs, cycles) — and fails with all of them in one
//! [`JobError::Invalid`]. A problem names its field the way a user finds it
//! in the file: `operator[1] "count".parallelism`, `edge[3].from`.
//!
//! This file holds the [`Builder`], the job settings and the shared checks;
//! `vertices` validates each source, operator and sink, `edges` the edges
//! and the graph as a whole.
//!
//! Pure: no file system, no clock. The only side effect is a
//! `tracing::warn!` per warning.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::graph::{
    self, Aggregate, FileSinkSpec, FileSourceSpec, GeneratorKind, GeneratorSpec, JobEdge, JobGraph,
    JobSettings, JoinKind, JoinSpec, KeySelector, ModuleRef, OperatorLimits, OperatorSpec,
    Partitioner, SinkFormat, SinkSpec, SourceFormat, SourceSpec, StateBackendKind, Vertex,
    VertexId, VertexKind, WatermarkStrategy, WindowAssigner, WindowSpec,
};
use super::spec::{
    AggregateName, Document, EdgeTable, GeneratorKindName, InputName, JobTable, JoinTable,
    OperatorTable, PartitionName, SinkTable, SinkType, SourceTable, SourceType, WindowTable,
};
use super::{
    DEFAULT_BATCH_SIZE, DEFAULT_BUFFER_TIMEOUT_MS, DEFAULT_CALL_TIMEOUT_MS,
    DEFAULT_CHANNEL_CAPACITY, DEFAULT_MAX_OUTPUT_MB, DEFAULT_MAX_PARALLELISM, DEFAULT_MEMORY_MB,
    DEFAULT_PARALLELISM, DEFAULT_SLOT_SHARING_GROUP, MAX_BATCH_SIZE, MAX_CALL_TIMEOUT_MS,
    MAX_FILE_RECORD_BYTES, MAX_ID_LEN, MAX_MAX_PARALLELISM, MAX_MEMORY_MB, MAX_RECORD_BYTES,
    MAX_WINDOW_MS, MAX_WINDOWS_PER_RECORD,
};
use super::{JobError, JobSpec, Problem};

mod edges;
mod kafka;
mod nats;
mod vertices;

/// Default `accounts` of a transactions generator.
const DEFAULT_ACCOUNTS: u64 = 100;
/// Default `vocabulary` of a words generator.
const DEFAULT_VOCABULARY: u32 = 1000;
/// Default `event_rate` of a nexmark generator: the Nexmark suite's
/// default of 10,000 events per second (of event time).
const DEFAULT_NEXMARK_EVENT_RATE: u64 = 10_000;
/// Largest `event_rate`: one event per microsecond, the generator's clock.
const MAX_NEXMARK_EVENT_RATE: u64 = 1_000_000;

impl JobGraph {
    /// Validates `spec` and builds its graph. Reports every problem found
    /// as one [`JobError::Invalid`]. (Here, not in `graph.rs`: the graph's
    /// types do not depend on their validation.)
    pub fn from_spec(spec: JobSpec) -> Result<JobGraph, JobError> {
        build(spec)
    }
}

fn build(spec: JobSpec) -> Result<JobGraph, JobError> {
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
                    e.from == edge.from
                        && e.to == edge.to
                        && e.from_tag == edge.from_tag
                        && e.input == edge.input
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
        let watermark_interval_ms = job
            .watermark_interval_ms
            .unwrap_or(super::DEFAULT_WATERMARK_INTERVAL_MS);
        self.check_range(
            "job.watermark_interval_ms",
            watermark_interval_ms,
            0,
            super::MAX_WATERMARK_MS,
        );
        let latency_tracking_interval_ms = job.latency_tracking_interval_ms.unwrap_or(0);
        self.check_range(
            "job.latency_tracking_interval_ms",
            latency_tracking_interval_ms,
            0,
            super::MAX_WATERMARK_MS,
        );
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
            watermark_interval_ms,
            latency_tracking_interval_ms,
            metrics: job.metrics.unwrap_or(true),
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

    // ---- [[operator]] -----------------------------------------------------

    // ---- [[sink]] ---------------------------------------------------------

    // ---- ids --------------------------------------------------------------

    // ---- [[edge]] ---------------------------------------------------------

    // ---- the graph --------------------------------------------------------
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
        GeneratorKindName::Nexmark => "nexmark",
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
