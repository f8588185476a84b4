//! Validation of `type = "nats"` sources and sinks: required fields,
//! fields of other types refused, and NATS fields refused on other types.
//! Whether the server is reachable and the stream exists is checked where
//! the job is submitted and deployed (`weir_runtime::connectors::nats`),
//! not here: this pass does no I/O.

use super::*;
use crate::nats::{NatsDelivery, NatsSinkSpec, NatsSourceSpec, NatsStart};
use crate::spec::{DeliveryName, StartName};

impl Builder {
    /// The spec of NATS source `t`.
    pub(super) fn nats_source(&mut self, label: &str, t: &SourceTable) -> SourceSpec {
        let what = "for type = \"nats\"";
        for (field, set) in [
            ("path", t.path.is_some()),
            ("format", t.format.is_some()),
            ("key_field", t.key_field.is_some()),
            ("timestamp_field", t.timestamp_field.is_some()),
            ("value_field", t.value_field.is_some()),
            ("max_record_bytes", t.max_record_bytes.is_some()),
            ("follow", t.follow.is_some()),
            ("kind", t.kind.is_some()),
            ("count", t.count.is_some()),
            ("seed", t.seed.is_some()),
            ("rate", t.rate.is_some()),
            ("accounts", t.accounts.is_some()),
            ("record_bytes", t.record_bytes.is_some()),
            ("keys", t.keys.is_some()),
            ("vocabulary", t.vocabulary.is_some()),
            ("bootstrap_servers", t.bootstrap_servers.is_some()),
            ("topics", t.topics.is_some()),
            ("topic", t.topic.is_some()),
            ("group_id", t.group_id.is_some()),
            ("start_timestamp_ms", t.start_timestamp_ms.is_some()),
            ("bounded", t.bounded.is_some()),
            ("partition_discovery_ms", t.partition_discovery_ms.is_some()),
            ("envelope", t.envelope.is_some()),
            ("topic_pattern", t.topic_pattern.is_some()),
        ] {
            if set {
                self.problem(
                    format!("{label}.{field}"),
                    format!("not allowed {what} (its fields: url, stream, subject, start, key_header, key_subject_token)"),
                );
            }
        }
        let url = self.required(
            label,
            "url",
            &t.url,
            "the server, like \"nats://127.0.0.1:4222\"",
        );
        let stream = self.required(
            label,
            "stream",
            &t.stream,
            "the name of the JetStream stream to read",
        );
        if stream.contains(['.', '*', '>', ' ']) {
            self.problem(
                format!("{label}.stream"),
                format!("found {stream:?}, expected a stream name (no '.', '*', '>' or spaces)"),
            );
        }
        if t.key_header.is_some() && t.key_subject_token.is_some() {
            self.problem(
                format!("{label}.key_subject_token"),
                "set either key_header or key_subject_token, not both",
            );
        }
        if let Some(subject) = &t.subject {
            self.check_subject(label, subject, true);
        }
        if let Some(p) = t.parallelism.filter(|&p| p != 1) {
            self.problem(
                format!("{label}.parallelism"),
                format!(
                    "found {p}, expected 1: a NATS stream is read by one subtask, in order \
                     (omit parallelism, or use `partition = \"rebalance\"` on its edge to spread records)"
                ),
            );
        }
        let start = match t.start {
            None | Some(StartName::Earliest) => NatsStart::Earliest,
            Some(StartName::Latest) => NatsStart::Latest,
            Some(other) => {
                self.problem(
                    format!("{label}.start"),
                    format!(
                        "found {:?}, expected \"earliest\" or \"latest\" for type = \"nats\"",
                        start_name(other)
                    ),
                );
                NatsStart::Earliest
            }
        };
        SourceSpec::Nats(NatsSourceSpec {
            url,
            stream,
            subject: t.subject.clone(),
            start,
            key_header: t.key_header.clone(),
            key_subject_token: t.key_subject_token,
        })
    }

    /// The spec of NATS sink `t`.
    pub(super) fn nats_sink(&mut self, label: &str, t: &SinkTable) -> SinkSpec {
        let what = "for type = \"nats\" (the value is the message's payload)";
        self.not_for(label, "path", &t.path, what);
        self.not_for(label, "format", &t.format, what);
        self.not_for(label, "rate", &t.rate, what);
        self.not_for(label, "bootstrap_servers", &t.bootstrap_servers, what);
        self.not_for(label, "topic", &t.topic, what);
        self.not_for(label, "partitioning", &t.partitioning, what);
        self.not_for(
            label,
            "transaction_timeout_ms",
            &t.transaction_timeout_ms,
            what,
        );
        let url = self.required(
            label,
            "url",
            &t.url,
            "the server, like \"nats://127.0.0.1:4222\"",
        );
        let subject = self.required(label, "subject", &t.subject, "the subject to publish to");
        if !subject.is_empty() {
            self.check_subject(label, &subject, false);
        }
        let delivery = match t.delivery {
            None | Some(DeliveryName::ExactlyOnce) => NatsDelivery::ExactlyOnce,
            Some(DeliveryName::AtLeastOnce) => NatsDelivery::AtLeastOnce,
            Some(DeliveryName::None) => {
                self.problem(
                    format!("{label}.delivery"),
                    "found \"none\", expected \"exactly-once\" or \"at-least-once\" for type = \"nats\"",
                );
                NatsDelivery::AtLeastOnce
            }
        };
        SinkSpec::Nats(NatsSinkSpec {
            url,
            subject,
            delivery,
            key_header: t.key_header.clone(),
        })
    }

    /// Refuses the NATS fields of a source of another type.
    pub(super) fn nats_fields_only_for_nats(&mut self, label: &str, t: &SourceTable) {
        if t.source_type == SourceType::Nats {
            return;
        }
        let what = "here (a NATS-source field; this source's type is not \"nats\")";
        self.not_for(label, "url", &t.url, what);
        self.not_for(label, "stream", &t.stream, what);
        self.not_for(label, "subject", &t.subject, what);
        if t.source_type != SourceType::Kafka {
            self.not_for(label, "start", &t.start, what);
        }
        self.not_for(label, "key_header", &t.key_header, what);
        self.not_for(label, "key_subject_token", &t.key_subject_token, what);
    }

    /// Refuses the NATS fields of a sink of another type.
    pub(super) fn nats_sink_fields_only_for_nats(&mut self, label: &str, t: &SinkTable) {
        if t.sink_type == SinkType::Nats {
            return;
        }
        let what = "here (a NATS-sink field; this sink's type is not \"nats\")";
        self.not_for(label, "url", &t.url, what);
        self.not_for(label, "subject", &t.subject, what);
        if t.sink_type != SinkType::Kafka {
            self.not_for(label, "delivery", &t.delivery, what);
        }
        self.not_for(label, "key_header", &t.key_header, what);
    }

    pub(super) fn required(
        &mut self,
        label: &str,
        field: &str,
        value: &Option<String>,
        what: &str,
    ) -> String {
        match value.as_deref() {
            Some(v) if !v.trim().is_empty() => v.to_owned(),
            Some(_) => {
                self.problem(
                    format!("{label}.{field}"),
                    format!("found \"\", expected {what}"),
                );
                String::new()
            }
            None => {
                self.problem(
                    format!("{label}.{field}"),
                    format!("missing; expected {what}"),
                );
                String::new()
            }
        }
    }

    /// A subject: `.`-separated non-empty tokens without spaces; `*` and
    /// `>` only as whole tokens, and only where `wildcards` are allowed.
    fn check_subject(&mut self, label: &str, subject: &str, wildcards: bool) {
        let tokens: Vec<&str> = subject.split('.').collect();
        let bad_token = tokens.iter().enumerate().any(|(i, tok)| {
            tok.is_empty()
                || tok.chars().any(char::is_whitespace)
                || (tok.contains(['*', '>']) && (!wildcards || (*tok != "*" && *tok != ">")))
                || (*tok == ">" && i + 1 != tokens.len())
        });
        if bad_token {
            let expected = if wildcards {
                "a subject filter like \"orders.*\" or \"orders.>\" ('.'-separated tokens, no spaces; '*' and a last '>' as whole tokens)"
            } else {
                "a subject like \"counts.out\" ('.'-separated tokens, no spaces, no wildcards)"
            };
            self.problem(
                format!("{label}.subject"),
                format!("found {subject:?}, expected {expected}"),
            );
        }
    }
}

/// The spelling of `start` in a spec.
pub(super) fn start_name(s: StartName) -> &'static str {
    match s {
        StartName::Earliest => "earliest",
        StartName::Latest => "latest",
        StartName::Committed => "committed",
        StartName::Timestamp => "timestamp",
    }
}
