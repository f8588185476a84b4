//! Validation of each source, operator and sink table: its settings, its
//! paths resolved against the spec's folder, its module reference.

use super::*;

impl Builder {
    pub(super) fn source(
        &mut self,
        label: &str,
        t: &SourceTable,
        settings: &JobSettings,
    ) -> Vertex {
        let id = self.id(label, &t.id);
        let (spec, parallelism) = match t.source_type {
            SourceType::File => {
                let what = "for type = \"file\" (a generator field)";
                let max_record_bytes = t
                    .max_record_bytes
                    .unwrap_or(crate::config::DEFAULT_MAX_RECORD_BYTES);
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
                let format_name = match format {
                    SourceFormat::Lines => "lines",
                    SourceFormat::JsonLines => "json-lines",
                    SourceFormat::Csv => "csv",
                };
                if format == SourceFormat::Lines {
                    let what = "for format = \"lines\" (json-lines and csv only)";
                    self.not_for(label, "key_field", &t.key_field, what);
                    self.not_for(label, "timestamp_field", &t.timestamp_field, what);
                    self.not_for(label, "value_field", &t.value_field, what);
                }
                let header = t.header.unwrap_or(true);
                let mut delimiter = b',';
                if format == SourceFormat::Csv {
                    let what = "for format = \"csv\" (a CSV file is read whole by one subtask)";
                    self.not_for(label, "split_bytes", &t.split_bytes, what);
                    self.not_for(
                        label,
                        "follow",
                        &t.follow.filter(|&f| f),
                        "for format = \"csv\" (lines and json-lines only)",
                    );
                    if let Some(d) = &t.delimiter {
                        match d.as_bytes() {
                            [b] if b.is_ascii() && *b != b'\n' && *b != b'\r' && *b != b'"' => {
                                delimiter = *b
                            }
                            _ => self.problem(
                                format!("{label}.delimiter"),
                                format!(
                                    "found {d:?}, expected one ASCII character (not a quote or a line ending), like \",\" or \"\\t\""
                                ),
                            ),
                        }
                    }
                    if !header {
                        for (field, value) in [
                            ("key_field", &t.key_field),
                            ("timestamp_field", &t.timestamp_field),
                            ("value_field", &t.value_field),
                        ] {
                            if let Some(v) = value.as_deref().filter(|v| v.parse::<u32>().is_err())
                            {
                                self.problem(
                                    format!("{label}.{field}"),
                                    format!(
                                        "found {v:?}, expected a 0-based column number (\"0\", \"1\", …): \
                                         with header = false columns have no names"
                                    ),
                                );
                            }
                        }
                    }
                } else {
                    let what = format!("for format = {format_name:?} (csv only)");
                    self.not_for(label, "header", &t.header, &what);
                    self.not_for(label, "delimiter", &t.delimiter, &what);
                }
                for (field, value) in [
                    ("key_field", &t.key_field),
                    ("timestamp_field", &t.timestamp_field),
                    ("value_field", &t.value_field),
                ] {
                    if value.as_deref() == Some("") {
                        self.problem(
                            format!("{label}.{field}"),
                            "found \"\", expected the name of a top-level JSON field or a CSV column",
                        );
                    }
                }
                let follow = t.follow.unwrap_or(false);
                if follow {
                    if t.monitor_interval_ms.is_some() {
                        self.problem(
                            format!("{label}.follow"),
                            "not allowed with monitor_interval_ms: follow reads one growing file, \
                             monitor_interval_ms watches a folder or pattern for new files",
                        );
                    }
                    let text = path.to_string_lossy();
                    if text.contains(['*', '?', '[']) {
                        self.problem(
                            format!("{label}.follow"),
                            "not allowed with a glob pattern: follow reads one growing file \
                             (use monitor_interval_ms to watch for new files)",
                        );
                    }
                    if text.ends_with(".gz") || text.ends_with(".zst") {
                        self.problem(
                            format!("{label}.follow"),
                            "not allowed for a compressed file (.gz, .zst): it cannot be read while it grows",
                        );
                    }
                }
                if let Some(ms) = t.monitor_interval_ms {
                    self.check_range(
                        &format!("{label}.monitor_interval_ms"),
                        ms,
                        1,
                        crate::MAX_WATERMARK_MS,
                    );
                }
                let split_bytes = t.split_bytes.unwrap_or(crate::DEFAULT_SPLIT_BYTES);
                self.check_range(&format!("{label}.split_bytes"), split_bytes, 1, 1 << 40);
                if t.rate == Some(0) {
                    self.problem(
                        format!("{label}.rate"),
                        "must be at least 1 line per second",
                    );
                }
                let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
                let spec = SourceSpec::File(FileSourceSpec {
                    path,
                    rate: t.rate,
                    format,
                    key_field: t.key_field.clone(),
                    timestamp_field: t.timestamp_field.clone(),
                    value_field: t.value_field.clone(),
                    follow,
                    max_record_bytes,
                    monitor_interval_ms: t.monitor_interval_ms,
                    split_bytes,
                    header,
                    delimiter,
                });
                (spec, parallelism)
            }
            SourceType::Generator => {
                let what = "for type = \"generator\" (a file-source field)";
                self.not_for(label, "path", &t.path, what);
                self.not_for(label, "format", &t.format, what);
                self.not_for(label, "key_field", &t.key_field, what);
                self.not_for(label, "timestamp_field", &t.timestamp_field, what);
                self.not_for(label, "value_field", &t.value_field, what);
                self.not_for(label, "max_record_bytes", &t.max_record_bytes, what);
                self.not_for(label, "follow", &t.follow, what);
                self.not_for(label, "monitor_interval_ms", &t.monitor_interval_ms, what);
                self.not_for(label, "split_bytes", &t.split_bytes, what);
                self.not_for(label, "header", &t.header, what);
                self.not_for(label, "delimiter", &t.delimiter, what);
                let kind_name = match t.kind {
                    Some(kind) => kind,
                    None => {
                        self.problem(
                            format!("{label}.kind"),
                            "missing; expected \"sequence\", \"transactions\", \"words\" or \"nexmark\"",
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
                if kind_name != GeneratorKindName::Nexmark {
                    self.not_for(label, "event_rate", &t.event_rate, &only("nexmark"));
                } else {
                    // The nexmark crate derives every event from its number
                    // alone: there is nothing to seed.
                    self.not_for(
                        label,
                        "seed",
                        &t.seed,
                        "for kind = \"nexmark\" (its events are fixed by their number)",
                    );
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
                    GeneratorKindName::Nexmark => {
                        let event_rate = t.event_rate.unwrap_or(DEFAULT_NEXMARK_EVENT_RATE);
                        self.check_range(
                            &format!("{label}.event_rate"),
                            event_rate,
                            1,
                            MAX_NEXMARK_EVENT_RATE,
                        );
                        GeneratorKind::Nexmark { event_rate }
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
            SourceType::Nats => (self.nats_source(label, t), 1),
            SourceType::Kafka => {
                let spec = self.kafka_source(label, t);
                let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
                (SourceSpec::Kafka(spec), parallelism)
            }
        };
        self.nats_fields_only_for_nats(label, t);
        self.kafka_fields_only_for_kafka(label, t);
        let watermark = t.watermark.unwrap_or_default();
        let strategy = WatermarkStrategy {
            max_out_of_orderness_ms: watermark.max_out_of_orderness_ms.unwrap_or(0),
            idle_timeout_ms: watermark.idle_timeout_ms,
        };
        self.check_range(
            &format!("{label}.watermark.max_out_of_orderness_ms"),
            strategy.max_out_of_orderness_ms,
            0,
            crate::MAX_WATERMARK_MS,
        );
        if let Some(idle) = strategy.idle_timeout_ms {
            self.check_range(
                &format!("{label}.watermark.idle_timeout_ms"),
                idle,
                1,
                crate::MAX_WATERMARK_MS,
            );
        }
        Vertex {
            id,
            parallelism,
            slot_sharing_group: self.group(label, &t.slot_sharing_group),
            kind: VertexKind::Source(spec),
            watermark: Some(strategy),
        }
    }

    pub(super) fn operator(
        &mut self,
        label: &str,
        t: &OperatorTable,
        settings: &JobSettings,
    ) -> Vertex {
        let id = self.id(label, &t.id);
        let key_by = match t.key_by.as_deref().map(parse_key_selector).transpose() {
            Ok(key_by) => key_by,
            Err(message) => {
                self.problem(format!("{label}.key_by"), message);
                None
            }
        };
        let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
        let kind = match (&t.window, &t.join) {
            (Some(_), Some(_)) => {
                self.problem(
                    format!("{label}.join"),
                    "an operator is a window or a join, not both (a window join is \
                     `join = { type = \"window\", size_ms = … }`)",
                );
                VertexKind::Operator(OperatorSpec {
                    module: ModuleRef::Path(PathBuf::new()),
                    config: Vec::new(),
                    key_by,
                })
            }
            (Some(window), None) => VertexKind::Window(self.window(label, t, window, key_by)),
            (None, Some(join)) => VertexKind::Join(self.join(label, t, join, key_by)),
            (None, None) => {
                let what = "without a `window` (a window-operator field)";
                self.not_for(label, "aggregate", &t.aggregate, what);
                self.not_for(label, "field", &t.field, what);
                self.not_for(label, "allowed_lateness_ms", &t.allowed_lateness_ms, what);
                let module = match t.module.as_deref().map(parse_module) {
                    Some(Ok(ModuleRef::Path(path))) => ModuleRef::Path(self.resolve(&path)),
                    Some(Ok(named)) => named,
                    Some(Err(message)) => {
                        self.problem(format!("{label}.module"), message);
                        ModuleRef::Path(PathBuf::new())
                    }
                    None => {
                        self.problem(
                            format!("{label}.module"),
                            "missing; an operator needs a module (a .wasm path, \"name@version\" \
                             or \"sha256:<hex>\"), or a `window` with a built-in `aggregate`",
                        );
                        ModuleRef::Path(PathBuf::new())
                    }
                };
                VertexKind::Operator(OperatorSpec {
                    module,
                    config: flatten_config(&t.config),
                    key_by,
                })
            }
        };
        Vertex {
            id,
            parallelism,
            slot_sharing_group: self.group(label, &t.slot_sharing_group),
            kind,
            watermark: None,
        }
    }

    /// The join of `[[operator]]` `t`, whose `join` is `join`.
    fn join(
        &mut self,
        label: &str,
        t: &OperatorTable,
        join: &JoinTable,
        key_by: Option<KeySelector>,
    ) -> JoinSpec {
        if t.module.is_some() {
            self.problem(
                format!("{label}.module"),
                "a join is built in; two-input functions in Wasm (co-process) are not \
                 supported yet (drop `module`)",
            );
        }
        if !t.config.is_empty() {
            self.problem(
                format!("{label}.config"),
                "a join takes no `config`; its settings are `join` and `key_by`",
            );
        }
        let what = "for a join (a window-operator field)";
        self.not_for(label, "aggregate", &t.aggregate, what);
        self.not_for(label, "field", &t.field, what);
        self.not_for(label, "allowed_lateness_ms", &t.allowed_lateness_ms, what);
        let kind = match *join {
            JoinTable::Interval { lower_ms, upper_ms } => {
                let max = MAX_WINDOW_MS as i64;
                for (name, bound) in [("lower_ms", lower_ms), ("upper_ms", upper_ms)] {
                    if !(-max..=max).contains(&bound) {
                        self.problem(
                            format!("{label}.join.{name}"),
                            format!("found {bound}, expected -{max}..={max}"),
                        );
                    }
                }
                if lower_ms > upper_ms {
                    self.problem(
                        format!("{label}.join.upper_ms"),
                        format!(
                            "found {upper_ms}, below lower_ms = {lower_ms}; expected \
                             lower_ms <= upper_ms (right.ts in [left.ts + lower_ms, left.ts + upper_ms])"
                        ),
                    );
                }
                JoinKind::Interval { lower_ms, upper_ms }
            }
            JoinTable::Window { size_ms } => {
                self.check_range(&format!("{label}.join.size_ms"), size_ms, 1, MAX_WINDOW_MS);
                JoinKind::Window { size_ms }
            }
        };
        let key_by = key_by.unwrap_or_else(|| {
            self.problem(
                format!("{label}.key_by"),
                "missing; a join matches records by key: expected \"key\", \"value\" or \"json:<field>\"",
            );
            KeySelector::RecordKey
        });
        JoinSpec { kind, key_by }
    }

    /// The window operator of `[[operator]]` `t`, whose `window` is `window`.
    fn window(
        &mut self,
        label: &str,
        t: &OperatorTable,
        window: &WindowTable,
        key_by: Option<KeySelector>,
    ) -> WindowSpec {
        let module = t.module.as_deref().map(|m| match parse_module(m) {
            Ok(ModuleRef::Path(path)) => ModuleRef::Path(self.resolve(&path)),
            Ok(named) => named,
            Err(message) => {
                self.problem(format!("{label}.module"), message);
                ModuleRef::Path(PathBuf::new())
            }
        });
        if module.is_none() && !t.config.is_empty() {
            self.problem(
                format!("{label}.config"),
                "a window with a built-in `aggregate` takes no `config`; its settings are \
                 `window`, `aggregate`, `field` and `allowed_lateness_ms` (`config` goes to \
                 a window function in a `module`)",
            );
        }
        let window_field = |name: &str| format!("{label}.window.{name}");
        let assigner = match *window {
            WindowTable::Tumbling { size_ms } => {
                self.check_range(&window_field("size_ms"), size_ms, 1, MAX_WINDOW_MS);
                WindowAssigner::Tumbling { size_ms }
            }
            WindowTable::Sliding { size_ms, slide_ms } => {
                self.check_range(&window_field("size_ms"), size_ms, 1, MAX_WINDOW_MS);
                self.check_range(&window_field("slide_ms"), slide_ms, 1, MAX_WINDOW_MS);
                if slide_ms > 0 && size_ms / slide_ms > MAX_WINDOWS_PER_RECORD {
                    self.problem(
                        window_field("slide_ms"),
                        format!(
                            "found {slide_ms}: each record would be in {} windows of {size_ms} ms; \
                             expected at most {MAX_WINDOWS_PER_RECORD} (a larger slide)",
                            size_ms / slide_ms
                        ),
                    );
                }
                WindowAssigner::Sliding { size_ms, slide_ms }
            }
            WindowTable::Session { gap_ms } => {
                self.check_range(&window_field("gap_ms"), gap_ms, 1, MAX_WINDOW_MS);
                WindowAssigner::Session { gap_ms }
            }
            WindowTable::Global { count } => {
                self.check_range(&window_field("count"), count, 1, u64::MAX);
                WindowAssigner::Global { count }
            }
        };
        let (aggregate, field) = if module.is_some() {
            let what = "with a window function in a `module` (built-in aggregates only)";
            self.not_for(label, "aggregate", &t.aggregate, what);
            self.not_for(label, "field", &t.field, what);
            (Aggregate::Count, None)
        } else {
            self.builtin_aggregate(label, t)
        };
        let allowed_lateness_ms = t.allowed_lateness_ms.unwrap_or(0);
        self.check_range(
            &format!("{label}.allowed_lateness_ms"),
            allowed_lateness_ms,
            0,
            MAX_WINDOW_MS,
        );
        let key_by = key_by.unwrap_or_else(|| {
            self.problem(
                format!("{label}.key_by"),
                "missing; a window is per key: expected \"key\", \"value\" or \"json:<field>\"",
            );
            KeySelector::RecordKey
        });
        let function = module.map(|module| OperatorSpec {
            module,
            config: flatten_config(&t.config),
            key_by: Some(key_by.clone()),
        });
        WindowSpec {
            assigner,
            aggregate,
            field,
            allowed_lateness_ms,
            key_by,
            function,
        }
    }

    /// The built-in `aggregate` of window `[[operator]]` `t` and its `field`.
    fn builtin_aggregate(
        &mut self,
        label: &str,
        t: &OperatorTable,
    ) -> (Aggregate, Option<KeySelector>) {
        let aggregate = match t.aggregate {
            Some(AggregateName::Count) => Aggregate::Count,
            Some(AggregateName::Sum) => Aggregate::Sum,
            Some(AggregateName::Min) => Aggregate::Min,
            Some(AggregateName::Max) => Aggregate::Max,
            Some(AggregateName::Avg) => Aggregate::Avg,
            None => {
                self.problem(
                    format!("{label}.aggregate"),
                    "missing; a window needs \"count\", \"sum\", \"min\", \"max\" or \"avg\", \
                     or a window function in a `module`",
                );
                Aggregate::Count
            }
        };
        let field = match (aggregate, t.field.as_deref()) {
            (Aggregate::Count, None) => None,
            (Aggregate::Count, Some(_)) => {
                self.problem(
                    format!("{label}.field"),
                    "not for aggregate = \"count\" (it counts records, whatever they hold)",
                );
                None
            }
            (_, field) => match parse_key_selector(field.unwrap_or("value")) {
                Ok(KeySelector::RecordKey) | Err(_) => {
                    self.problem(
                        format!("{label}.field"),
                        format!(
                            "found {:?}, expected \"value\" (the value as a decimal number) \
                             or \"json:<field>\" (a top-level number of a JSON value)",
                            field.unwrap_or_default()
                        ),
                    );
                    None
                }
                Ok(selector) => Some(selector),
            },
        };
        (aggregate, field)
    }

    pub(super) fn sink(&mut self, label: &str, t: &SinkTable, settings: &JobSettings) -> Vertex {
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
            SinkType::Nats => self.nats_sink(label, t),
            SinkType::Kafka => self.kafka_sink(label, t),
        };
        self.nats_sink_fields_only_for_nats(label, t);
        self.kafka_sink_fields_only_for_kafka(label, t);
        let parallelism = self.vertex_parallelism(label, t.parallelism, settings);
        Vertex {
            id,
            parallelism,
            slot_sharing_group: self.group(label, &t.slot_sharing_group),
            kind: VertexKind::Sink(spec),
            watermark: None,
        }
    }
}
