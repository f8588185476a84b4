//! Kafka sources and sinks in the spec: what builds, and what is refused
//! with the field named.

use super::{SINK, SRC, assert_problem, edge, valid};
use crate::{KafkaDelivery, KafkaPartitioning, KafkaStart, SinkSpec, SourceSpec, VertexKind};

const KAFKA_SRC: &str = r#"
[[source]]
id = "orders"
type = "kafka"
bootstrap_servers = "127.0.0.1:9092,broker-2:9093"
"#;

const KAFKA_SINK: &str = r#"
[[sink]]
id = "totals"
type = "kafka"
bootstrap_servers = "127.0.0.1:9092"
topic = "totals"
"#;

#[test]
fn a_kafka_source_and_sink_build_with_their_defaults() {
    let graph = valid(&format!(
        "{KAFKA_SRC}topics = [\"orders\", \"refunds\"]\nparallelism = 3\n{KAFKA_SINK}{}",
        edge("orders", "totals")
    ));
    let VertexKind::Source(SourceSpec::Kafka(source)) = &graph.vertices[0].kind else {
        panic!("{:?}", graph.vertices[0].kind)
    };
    assert_eq!(source.topics, ["orders", "refunds"]);
    assert_eq!(source.start, KafkaStart::Earliest);
    assert!(!source.bounded);
    assert_eq!(source.partition_discovery_ms, 10_000);
    assert!(!source.envelope);
    assert_eq!(graph.vertices[0].parallelism, 3);
    let VertexKind::Sink(SinkSpec::Kafka(sink)) = &graph.vertices[1].kind else {
        panic!("{:?}", graph.vertices[1].kind)
    };
    assert_eq!(sink.topic, "totals");
    assert_eq!(sink.delivery, KafkaDelivery::AtLeastOnce);
    assert_eq!(sink.partitioning, KafkaPartitioning::KeyHash);
}

#[test]
fn kafka_start_options_build() {
    for (fields, start) in [
        ("start = \"latest\"", KafkaStart::Latest),
        (
            "start = \"committed\"\ngroup_id = \"readers\"",
            KafkaStart::Committed,
        ),
        (
            "start = \"timestamp\"\nstart_timestamp_ms = 1700000000000",
            KafkaStart::Timestamp(1_700_000_000_000),
        ),
    ] {
        let graph = valid(&format!(
            "{KAFKA_SRC}topic = \"orders\"\n{fields}\n{KAFKA_SINK}delivery = \"none\"\npartitioning = \"round-robin\"\n{}",
            edge("orders", "totals")
        ));
        let VertexKind::Source(SourceSpec::Kafka(source)) = &graph.vertices[0].kind else {
            panic!()
        };
        assert_eq!(source.start, start);
        let VertexKind::Sink(SinkSpec::Kafka(sink)) = &graph.vertices[1].kind else {
            panic!()
        };
        assert_eq!(sink.delivery, KafkaDelivery::None);
        assert_eq!(sink.partitioning, KafkaPartitioning::RoundRobin);
    }
}

#[test]
fn a_kafka_source_needs_brokers_and_topics_and_refuses_other_fields() {
    let body = format!(
        "[[source]]\nid = \"orders\"\ntype = \"kafka\"\npath = \"x.txt\"\nstream = \"S\"\n{SINK}{}",
        edge("orders", "out")
    );
    assert_problem(
        &body,
        "source[0] \"orders\".bootstrap_servers",
        &["missing", "host:port"],
    );
    assert_problem(&body, "source[0] \"orders\".topics", &["missing"]);
    assert_problem(
        &body,
        "source[0] \"orders\".path",
        &["not allowed for type = \"kafka\""],
    );
    assert_problem(
        &body,
        "source[0] \"orders\".stream",
        &["not allowed for type = \"kafka\""],
    );
}

#[test]
fn bad_kafka_values_are_named() {
    let body = format!(
        "[[source]]\nid = \"orders\"\ntype = \"kafka\"\nbootstrap_servers = \"nohost\"\ntopics = [\"a b\", \"ok\", \"ok\"]\nstart = \"timestamp\"\n{KAFKA_SINK}transaction_timeout_ms = 10\n{}",
        edge("orders", "totals")
    );
    assert_problem(
        &body,
        "source[0] \"orders\".bootstrap_servers",
        &["\"nohost\"", "host:port"],
    );
    assert_problem(
        &body,
        "source[0] \"orders\".topics[0]",
        &["\"a b\"", "topic name"],
    );
    assert_problem(&body, "source[0] \"orders\".topics", &["twice"]);
    assert_problem(
        &body,
        "source[0] \"orders\".start_timestamp_ms",
        &["missing"],
    );
    assert_problem(
        &body,
        "sink[0] \"totals\".transaction_timeout_ms",
        &["found 10"],
    );
    let body = format!(
        "{KAFKA_SRC}topic = \"a\"\ntopics = [\"b\"]\nstart = \"committed\"\nbounded = true\npartition_discovery_ms = 5\n{KAFKA_SINK}{}",
        edge("orders", "totals")
    );
    assert_problem(&body, "source[0] \"orders\".topic", &["not both"]);
    assert_problem(&body, "source[0] \"orders\".group_id", &["committed"]);
    assert_problem(
        &body,
        "source[0] \"orders\".partition_discovery_ms",
        &["bounded"],
    );
}

#[test]
fn kafka_fields_are_refused_on_other_types_and_nats_choices_stay_nats() {
    let body = format!(
        "{SRC}topic = \"x\"\n[[sink]]\nid = \"out\"\ntype = \"blackhole\"\npartitioning = \"round-robin\"\n{}",
        edge("src", "out")
    );
    assert_problem(&body, "source[0] \"src\".topic", &["Kafka-source field"]);
    assert_problem(&body, "sink[0] \"out\".partitioning", &["Kafka-sink field"]);
    let body = format!("{SRC}envelope = true\n{SINK}{}", edge("src", "out"));
    assert_problem(&body, "source[0] \"src\".envelope", &["Kafka-source field"]);
    let body = format!(
        "[[source]]\nid = \"orders\"\ntype = \"nats\"\nurl = \"nats://h:4222\"\nstream = \"S\"\nenvelope = true\n{SINK}{}",
        edge("orders", "out")
    );
    assert_problem(&body, "source[0] \"orders\".envelope", &["not allowed"]);
    let graph = valid(&format!(
        "{KAFKA_SRC}topic = \"orders\"\nenvelope = true\n{KAFKA_SINK}{}",
        edge("orders", "totals")
    ));
    let VertexKind::Source(SourceSpec::Kafka(source)) = &graph.vertices[0].kind else {
        panic!("{:?}", graph.vertices[0].kind)
    };
    assert!(source.envelope);
    // A topic pattern, instead of topics; valid and bounded in size.
    let graph = valid(&format!(
        "{KAFKA_SRC}topic_pattern = \"orders-(eu|us)\"\n{KAFKA_SINK}{}",
        edge("orders", "totals")
    ));
    let VertexKind::Source(SourceSpec::Kafka(source)) = &graph.vertices[0].kind else {
        panic!("{:?}", graph.vertices[0].kind)
    };
    assert_eq!(source.topic_pattern.as_deref(), Some("orders-(eu|us)"));
    assert!(source.topics.is_empty());
    for (fields, needles) in [
        (
            "topic_pattern = \"orders-(\"",
            &["not a regular expression"][..],
        ),
        ("topic_pattern = \"o.*\"\ntopic = \"x\"", &["not both"][..]),
    ] {
        let body = format!(
            "{KAFKA_SRC}{fields}\n{KAFKA_SINK}{}",
            edge("orders", "totals")
        );
        assert_problem(&body, "source[0] \"orders\".topic_pattern", needles);
    }
    let long = "a".repeat(crate::kafka::MAX_TOPIC_PATTERN_BYTES + 1);
    let body = format!(
        "{KAFKA_SRC}topic_pattern = \"{long}\"\n{KAFKA_SINK}{}",
        edge("orders", "totals")
    );
    assert_problem(&body, "source[0] \"orders\".topic_pattern", &["at most"]);
    let body = format!("{SRC}topic_pattern = \"x\"\n{SINK}{}", edge("src", "out"));
    assert_problem(
        &body,
        "source[0] \"src\".topic_pattern",
        &["Kafka-source field"],
    );
    // A NATS source has no `committed` start, a NATS sink no `none`.
    let body = format!(
        "[[source]]\nid = \"orders\"\ntype = \"nats\"\nurl = \"nats://h:4222\"\nstream = \"S\"\nstart = \"committed\"\n\
         [[sink]]\nid = \"out\"\ntype = \"nats\"\nurl = \"nats://h:4222\"\nsubject = \"a.b\"\ndelivery = \"none\"\ntopic = \"t\"\n{}",
        edge("orders", "out")
    );
    assert_problem(
        &body,
        "source[0] \"orders\".start",
        &["\"committed\"", "nats"],
    );
    assert_problem(&body, "sink[0] \"out\".delivery", &["\"none\"", "nats"]);
    assert_problem(&body, "sink[0] \"out\".topic", &["not allowed"]);
}
