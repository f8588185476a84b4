//! Backpressure: an unbounded, fast generator into a deliberately slow sink.
//! The records in flight between them stay under a fixed bound (bounded
//! channels of bounded batches), and the source's rate falls to the sink's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weir_host::job::JobGraph;
use weir_host::jobmanager::JobState;
use weir_host::wasm::{Runtime, RuntimeConfig};
use weir_tests::artifacts;

use crate::util::toml_path;

const BATCH: u64 = 64;
const CAPACITY: u64 = 4;
const SINK_RATE: u64 = 20_000;

#[test]
fn slow_sink_bounds_records_in_flight_and_slows_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"
[job]
name = "backpressure"
batch_size = {BATCH}
channel_capacity = {CAPACITY}

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
record_bytes = 100

[[operator]]
id = "up"
module = {m}

[[sink]]
id = "slow"
type = "blackhole"
rate = {SINK_RATE}

[[edge]]
from = "gen"
to = "up"

[[edge]]
from = "up"
to = "slow"
partition = "rebalance"
"#,
        m = toml_path(Path::new(artifacts::UPPERCASE))
    );
    let path = dir.path().join("job.toml");
    std::fs::write(&path, spec).unwrap();
    let graph = JobGraph::from_file(&path, &[]).unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            cache_dir: Some(dir.path().join("cache")),
        })
        .unwrap(),
    );
    let mut cluster = rt
        .block_on(async { crate::embedded::cluster(dir.path(), runtime, None) })
        .unwrap();
    let job = rt.block_on(cluster.submit(graph.clone(), None)).unwrap();
    let metrics =
        crate::cluster::harness::wait_for("the job's subtasks to start", || cluster.metrics(&job));
    let (source, sink) = (
        graph.vertex_index("gen").unwrap(),
        graph.vertex_index("slow").unwrap(),
    );

    // One channel (gen+up → slow) of CAPACITY batches, one batch being
    // written by the sink, one being produced: the most that can be in flight.
    let bound = (CAPACITY + 2) * BATCH;
    let started = Instant::now();
    let mut max_in_flight = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let produced = metrics.vertices[source].records_out.load(Ordering::Relaxed);
        let consumed = metrics.vertices[sink].records_in.load(Ordering::Relaxed);
        max_in_flight = max_in_flight.max(produced.saturating_sub(consumed));
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let produced = metrics.vertices[source].records_out.load(Ordering::Relaxed);
    cluster.stop(&job);
    let detail = rt.block_on(cluster.wait(&job)).unwrap();
    assert_eq!(detail.summary.state, JobState::Finished, "{detail:?}");
    rt.block_on(async { cluster.shutdown() });

    assert!(
        max_in_flight <= bound,
        "{max_in_flight} records in flight, bound {bound}"
    );
    assert!(
        detail.max_queued_batches <= CAPACITY,
        "{} batches queued",
        detail.max_queued_batches
    );
    // Unthrottled, the generator makes millions of records per second; held
    // back, it can only get `bound` ahead of a sink consuming SINK_RATE/s.
    // Slack of 2 s: the sink's clock starts at submit, before sampling does.
    let allowed = (SINK_RATE as f64 * (elapsed + 2.0)) as u64 + bound;
    assert!(
        produced <= allowed,
        "source produced {produced} in {elapsed:.2}s, allowed {allowed}"
    );
    assert!(produced > 0);
    // After stop, everything produced was consumed: nothing lost.
    let v = |id: &str| detail.vertices.iter().find(|v| v.id == id).unwrap().clone();
    assert_eq!(v("gen").records_out, v("slow").records_in);
}
