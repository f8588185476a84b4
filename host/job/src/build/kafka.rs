//! Validation of `type = "kafka"` sources and sinks: required fields,
//! fields of other types refused, and Kafka fields refused on other types.
//! Whether the brokers are reachable and the topics exist is checked where
//! the job is submitted and deployed (`weir_runtime::connectors::kafka`),
//! not here: this pass does no I/O.

use super::nats::start_name;
use super::*;
use crate::kafka::{
    DEFAULT_PARTITION_DISCOVERY_MS, DEFAULT_TRANSACTION_TIMEOUT_MS, KafkaDelivery, KafkaSinkSpec,
    KafkaSourceSpec, KafkaStart,
};
use crate::spec::{DeliveryName, StartName};

/// The longest `transaction_timeout_ms` accepted: Kafka brokers refuse
/// more than their `transaction.max.timeout.ms`, 15 minutes by default.
const MAX_TRANSACTION_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// The longest `partition_discovery_ms` accepted (a day).
const MAX_PARTITION_DISCOVERY_MS: u64 = 24 * 60 * 60 * 1000;

impl Builder {
    /// The spec of Kafka source `t`.
    pub(super) fn kafka_source(&mut self, label: &str, t: &SourceTable) -> KafkaSourceSpec {
        let what = "for type = \"kafka\" (its fields: bootstrap_servers, topics or topic or topic_pattern, \
                    group_id, start, start_timestamp_ms, bounded, partition_discovery_ms, envelope)";
        for (field, set) in [
            ("path", t.path.is_some()),
            ("format", t.format.is_some()),
            ("key_field", t.key_field.is_some()),
            ("timestamp_field", t.timestamp_field.is_some()),
            ("value_field", t.value_field.is_some()),
            ("max_record_bytes", t.max_record_bytes.is_some()),
            ("follow", t.follow.is_some()),
            ("monitor_interval_ms", t.monitor_interval_ms.is_some()),
            ("split_bytes", t.split_bytes.is_some()),
            ("header", t.header.is_some()),
            ("delimiter", t.delimiter.is_some()),
            ("url", t.url.is_some()),
            ("stream", t.stream.is_some()),
            ("subject", t.subject.is_some()),
            ("key_header", t.key_header.is_some()),
            ("key_subject_token", t.key_subject_token.is_some()),
            ("kind", t.kind.is_some()),
            ("count", t.count.is_some()),
            ("seed", t.seed.is_some()),
            ("rate", t.rate.is_some()),
            ("accounts", t.accounts.is_some()),
            ("record_bytes", t.record_bytes.is_some()),
            ("keys", t.keys.is_some()),
            ("vocabulary", t.vocabulary.is_some()),
            ("event_rate", t.event_rate.is_some()),
        ] {
            if set {
                self.problem(format!("{label}.{field}"), format!("not allowed {what}"));
            }
        }
        let bootstrap_servers = self.bootstrap_servers(label, &t.bootstrap_servers);
        let topic_pattern = match (&t.topic_pattern, &t.topics, &t.topic) {
            (None, ..) => None,
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                self.problem(
                    format!("{label}.topic_pattern"),
                    "set either topic_pattern or topics (or topic), not both",
                );
                None
            }
            (Some(pattern), None, None) => match crate::kafka::topic_pattern(pattern) {
                Ok(_) => Some(pattern.clone()),
                Err(why) => {
                    self.problem(
                        format!("{label}.topic_pattern"),
                        format!("{pattern:?} {why}"),
                    );
                    None
                }
            },
        };
        let topics = match (&t.topics, &t.topic) {
            _ if t.topic_pattern.is_some() => Vec::new(),
            (Some(_), Some(_)) => {
                self.problem(
                    format!("{label}.topic"),
                    "set either topic or topics, not both",
                );
                Vec::new()
            }
            (Some(list), None) if list.is_empty() => {
                self.problem(
                    format!("{label}.topics"),
                    "found [], expected at least one topic name",
                );
                Vec::new()
            }
            (Some(list), None) => list.clone(),
            (None, Some(one)) => vec![one.clone()],
            (None, None) => {
                self.problem(
                    format!("{label}.topics"),
                    "missing; expected the topics to read, like topics = [\"orders\"] (or topic = \"orders\", or topic_pattern = \"orders-.*\")",
                );
                Vec::new()
            }
        };
        for (i, topic) in topics.iter().enumerate() {
            let field = if t.topic.is_some() {
                format!("{label}.topic")
            } else {
                format!("{label}.topics[{i}]")
            };
            self.check_topic(&field, topic);
        }
        let mut seen = BTreeSet::new();
        for topic in &topics {
            if !seen.insert(topic) {
                self.problem(format!("{label}.topics"), format!("names {topic:?} twice"));
            }
        }
        if let Some(group) = &t.group_id
            && (group.trim().is_empty() || group.len() > 255)
        {
            self.problem(
                format!("{label}.group_id"),
                format!("found {group:?}, expected a consumer group name (1 to 255 characters)"),
            );
        }
        let start = match (t.start, t.start_timestamp_ms) {
            (Some(StartName::Timestamp), Some(ms)) if ms >= 0 => KafkaStart::Timestamp(ms),
            (Some(StartName::Timestamp), Some(ms)) => {
                self.problem(
                    format!("{label}.start_timestamp_ms"),
                    format!("found {ms}, expected milliseconds since the Unix epoch (at least 0)"),
                );
                KafkaStart::Earliest
            }
            (Some(StartName::Timestamp), None) => {
                self.problem(
                    format!("{label}.start_timestamp_ms"),
                    "missing; start = \"timestamp\" needs it (milliseconds since the Unix epoch)",
                );
                KafkaStart::Earliest
            }
            (other, Some(_)) => {
                self.problem(
                    format!("{label}.start_timestamp_ms"),
                    format!(
                        "only with start = \"timestamp\" (start is {:?})",
                        other.map_or("earliest", start_name)
                    ),
                );
                KafkaStart::Earliest
            }
            (None | Some(StartName::Earliest), None) => KafkaStart::Earliest,
            (Some(StartName::Latest), None) => KafkaStart::Latest,
            (Some(StartName::Committed), None) => {
                if t.group_id.is_none() {
                    self.problem(
                        format!("{label}.group_id"),
                        "missing; start = \"committed\" begins from this consumer group's offsets",
                    );
                }
                KafkaStart::Committed
            }
        };
        let bounded = t.bounded.unwrap_or(false);
        let partition_discovery_ms = t
            .partition_discovery_ms
            .unwrap_or(DEFAULT_PARTITION_DISCOVERY_MS);
        self.check_range(
            &format!("{label}.partition_discovery_ms"),
            partition_discovery_ms,
            0,
            MAX_PARTITION_DISCOVERY_MS,
        );
        if bounded && t.partition_discovery_ms.is_some_and(|ms| ms > 0) {
            self.problem(
                format!("{label}.partition_discovery_ms"),
                "not with bounded = true: a bounded source reads the partitions it found at start",
            );
        }
        KafkaSourceSpec {
            bootstrap_servers,
            topics,
            topic_pattern,
            group_id: t.group_id.clone(),
            start,
            bounded,
            partition_discovery_ms: if bounded { 0 } else { partition_discovery_ms },
            envelope: t.envelope.unwrap_or(false),
        }
    }

    /// The spec of Kafka sink `t`.
    pub(super) fn kafka_sink(&mut self, label: &str, t: &SinkTable) -> SinkSpec {
        let what = "for type = \"kafka\" (its fields: bootstrap_servers, topic, delivery, \
                    partitioning, transaction_timeout_ms; the record's key and value are the message's)";
        self.not_for(label, "path", &t.path, what);
        self.not_for(label, "format", &t.format, what);
        self.not_for(label, "rate", &t.rate, what);
        let bootstrap_servers = self.bootstrap_servers(label, &t.bootstrap_servers);
        let topic = self.required(label, "topic", &t.topic, "the topic to write to");
        if !topic.is_empty() {
            self.check_topic(&format!("{label}.topic"), &topic);
        }
        let delivery = match t.delivery {
            Some(DeliveryName::ExactlyOnce) => KafkaDelivery::ExactlyOnce,
            None | Some(DeliveryName::AtLeastOnce) => KafkaDelivery::AtLeastOnce,
            Some(DeliveryName::None) => KafkaDelivery::None,
        };
        let transaction_timeout_ms = t
            .transaction_timeout_ms
            .unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS);
        self.check_range(
            &format!("{label}.transaction_timeout_ms"),
            transaction_timeout_ms,
            1000,
            MAX_TRANSACTION_TIMEOUT_MS,
        );
        SinkSpec::Kafka(KafkaSinkSpec {
            bootstrap_servers,
            topic,
            delivery,
            partitioning: t.partitioning.unwrap_or_default(),
            transaction_timeout_ms,
        })
    }

    /// Refuses the Kafka fields of a source of another type (a NATS
    /// source lists them itself, with its own fields).
    pub(super) fn kafka_fields_only_for_kafka(&mut self, label: &str, t: &SourceTable) {
        if matches!(t.source_type, SourceType::Kafka | SourceType::Nats) {
            return;
        }
        let what = "here (a Kafka-source field; this source's type is not \"kafka\")";
        self.not_for(label, "bootstrap_servers", &t.bootstrap_servers, what);
        self.not_for(label, "topics", &t.topics, what);
        self.not_for(label, "topic", &t.topic, what);
        self.not_for(label, "topic_pattern", &t.topic_pattern, what);
        self.not_for(label, "group_id", &t.group_id, what);
        self.not_for(label, "start_timestamp_ms", &t.start_timestamp_ms, what);
        self.not_for(label, "bounded", &t.bounded, what);
        self.not_for(
            label,
            "partition_discovery_ms",
            &t.partition_discovery_ms,
            what,
        );
        self.not_for(label, "envelope", &t.envelope, what);
    }

    /// Refuses the Kafka fields of a sink of another type (a NATS sink
    /// lists them itself).
    pub(super) fn kafka_sink_fields_only_for_kafka(&mut self, label: &str, t: &SinkTable) {
        if matches!(t.sink_type, SinkType::Kafka | SinkType::Nats) {
            return;
        }
        let what = "here (a Kafka-sink field; this sink's type is not \"kafka\")";
        self.not_for(label, "bootstrap_servers", &t.bootstrap_servers, what);
        self.not_for(label, "topic", &t.topic, what);
        self.not_for(label, "partitioning", &t.partitioning, what);
        self.not_for(
            label,
            "transaction_timeout_ms",
            &t.transaction_timeout_ms,
            what,
        );
    }

    /// `bootstrap_servers`: comma-separated `host:port`, each with a port.
    fn bootstrap_servers(&mut self, label: &str, value: &Option<String>) -> String {
        let servers = self.required(
            label,
            "bootstrap_servers",
            value,
            "the brokers, like \"127.0.0.1:9092\" (host:port, comma-separated)",
        );
        if servers.is_empty() {
            return servers;
        }
        for server in servers.split(',').map(str::trim) {
            let port_ok = server.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !port_ok || server.contains(['/', ' ']) {
                self.problem(
                    format!("{label}.bootstrap_servers"),
                    format!("found {server:?}, expected host:port, like \"127.0.0.1:9092\""),
                );
            }
        }
        servers
    }

    /// A topic name as Kafka allows it: 1 to 249 of `[a-zA-Z0-9._-]`, not
    /// `.` or `..`.
    fn check_topic(&mut self, field: &str, topic: &str) {
        let ok = !topic.is_empty()
            && topic.len() <= 249
            && topic != "."
            && topic != ".."
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok {
            self.problem(
                field,
                format!(
                    "found {topic:?}, expected a topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')"
                ),
            );
        }
    }
}
