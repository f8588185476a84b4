//! Fuzz properties of the control codec: [`read_frame`] fed arbitrary
//! bytes, JSON-like bodies in valid frames, and mutated encodings of real
//! messages (truncated, bit-flipped, a length prefix set to a huge value);
//! and the round trip [`write_frame`] → [`read_frame`] of every message
//! type. See `weir_fuzz` for how to run them longer.
//!
//! What must hold: no panic; a prefix over [`MAX_FRAME`] is refused before
//! the body is read; the buffer never runs ahead of the bytes received (a
//! prefix alone allocates nothing near its claim); valid frames decode to
//! what was written.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use serde::Serialize;
use tokio::io::{AsyncRead, ReadBuf};

use super::*;
use crate::checkpoint::fuzz_tests::{json_value, subtask_checkpoint};
use crate::job::{JobGraph, JobSpec};
use weir_fuzz::{config, mutate, mutations};

/// Runs a future over an in-memory reader, which never waits.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a reader over bytes never waits"),
    }
}

/// A reader over `data` that hands out a few bytes per read and records
/// the largest buffer it was offered: what the decoder had allocated
/// ahead of the bytes.
struct Probe<'a> {
    data: &'a [u8],
    largest_offer: usize,
}

impl AsyncRead for Probe<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.largest_offer = self.largest_offer.max(buf.remaining());
        let n = buf.remaining().min(self.data.len()).min(61);
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// Reads one `T` from `bytes` through a [`Probe`]; checks that no buffer
/// much larger than the input was offered to the reader.
fn read<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<Option<T>, FrameError> {
    let mut probe = Probe {
        data: bytes,
        largest_offer: 0,
    };
    let result = now(read_frame::<_, T>(&mut probe));
    assert!(
        probe.largest_offer <= 2 * bytes.len() + 64,
        "offered a buffer of {} bytes to read a frame of {} bytes",
        probe.largest_offer,
        bytes.len()
    );
    result
}

/// Every decoder of control frames on `bytes`.
fn read_every_type(bytes: &[u8]) {
    let _ = read::<ToJobManager>(bytes);
    let _ = read::<ToTaskManager>(bytes);
    let _ = read::<FetchModule>(bytes);
    let _ = read::<ModuleHeader>(bytes);
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let mut out = Vec::new();
    now(write_frame(&mut out, message)).expect("a small frame");
    out
}

/// Equality through JSON: the message types do not implement `PartialEq`.
fn same<T: Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_value(a).unwrap() == serde_json::to_value(b).unwrap()
}

/// A graph to deploy: built once from a fixed spec.
fn graph() -> JobGraph {
    let spec = "[job]\nname = \"fuzz\"\n\
        [[source]]\nid = \"src\"\ntype = \"generator\"\nkind = \"sequence\"\n\
        [[operator]]\nid = \"op\"\nmodule = \"op.wasm\"\nkey_by = \"key\"\n\
        [[sink]]\nid = \"out\"\ntype = \"blackhole\"\n\
        [[edge]]\nfrom = \"src\"\nto = \"op\"\n[[edge]]\nfrom = \"op\"\nto = \"out\"\n";
    JobGraph::from_spec(JobSpec::parse(spec, "/specs/fuzz.toml", &[]).unwrap()).unwrap()
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

fn address() -> impl Strategy<Value = SocketAddr> {
    // `SocketAddr::new` leaves IPv6 flow info and scope at 0, which is all
    // the JSON form carries.
    (any::<IpAddr>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port))
}

fn task_state() -> impl Strategy<Value = TaskState> {
    prop_oneof![
        Just(TaskState::Deploying),
        Just(TaskState::Running),
        Just(TaskState::Finished),
        Just(TaskState::Failed),
        Just(TaskState::Canceled),
    ]
}

fn job_report() -> impl Strategy<Value = JobReport> {
    (
        text(),
        prop::collection::vec(any::<[u64; 5]>(), 0..4).prop_map(|v| {
            v.into_iter()
                .map(|c| VertexReport {
                    records_in: c[0],
                    records_out: c[1],
                    busy_ms: c[2],
                    idle_ms: c[3],
                    backpressured_ms: c[4],
                    watermark: (c[0] % 3 != 0).then_some(c[1] as i64),
                    latency_ms: (0..c[2] % 4).map(|i| (c[3] >> i) as u32).collect(),
                })
                .collect()
        }),
    )
        .prop_map(|(job, vertices)| JobReport {
            job,
            vertices,
            max_queued_batches: 0,
            logs: Vec::new(),
            state_bytes: 0,
        })
}

fn to_job_manager() -> impl Strategy<Value = ToJobManager> {
    prop_oneof![
        (text(), any::<u32>(), address(), text()).prop_map(|(id, slots, data_address, version)| {
            ToJobManager::Register {
                id,
                slots,
                data_address,
                version,
            }
        }),
        (any::<[u64; 9]>(), prop::collection::vec(job_report(), 0..3)).prop_map(|(n, jobs)| {
            ToJobManager::Heartbeat {
                net: crate::net::NetStats {
                    buffered_bytes: n[0],
                    max_buffered_bytes: n[1],
                    bytes_sent: n[2],
                    bytes_received: n[3],
                    channels_out: n[4],
                    channels_in: n[5],
                    buffers_in_flight: n[6],
                    credits_available: n[7],
                    credit_wait_ns: n[8],
                },
                jobs,
                memory: (n[0] % 2 == 0).then_some(crate::telemetry::memory::ProcessMemory {
                    rss_bytes: n[1],
                    peak_rss_bytes: n[2],
                }),
            }
        }),
        (
            text(),
            any::<(u32, u64, u32, u32, u64)>(),
            subtask_checkpoint()
        )
            .prop_map(
                |(job, (attempt, checkpoint, task, subtask, alignment_ms), snapshot)| {
                    ToJobManager::Ack {
                        job,
                        attempt,
                        checkpoint,
                        task,
                        subtask,
                        snapshot,
                        alignment_ms,
                    }
                }
            ),
        (text(), any::<(u32, u64, u32, u32)>(), text()).prop_map(
            |(job, (attempt, checkpoint, task, subtask), reason)| ToJobManager::Decline {
                job,
                attempt,
                checkpoint,
                task,
                subtask,
                reason,
            }
        ),
        (
            text(),
            any::<(u32, u32, u32)>(),
            task_state(),
            prop::option::of(text())
        )
            .prop_map(|(job, (attempt, task, subtask), state, error)| {
                ToJobManager::TaskState {
                    job,
                    attempt,
                    task,
                    subtask,
                    state,
                    error,
                }
            }),
    ]
}

fn deployment() -> impl Strategy<Value = Deployment> {
    let slot = (text(), any::<u32>()).prop_map(|(taskmanager, slot)| SlotRef { taskmanager, slot });
    let restore = (
        any::<u64>(),
        prop::collection::vec((any::<(u32, u32)>(), subtask_checkpoint()), 0..3),
    )
        .prop_map(|(checkpoint, subtasks)| RestorePoint {
            checkpoint,
            subtasks,
        });
    (
        text(),
        prop::collection::vec(prop::collection::vec(slot, 0..3), 0..3),
        prop::collection::vec((text(), address()), 0..3),
        any::<u32>(),
        prop::option::of("/[a-z]{1,12}"),
        prop::option::of(restore),
    )
        .prop_map(
            |(job, placement, peers, attempt, storage, restore)| Deployment {
                job,
                graph: graph(),
                tasks: Vec::new(),
                placement,
                peers: peers.into_iter().collect::<HashMap<_, _>>(),
                attempt,
                checkpoints: storage.map(|s| CheckpointDeploy { storage: s.into() }),
                restore,
                savepoint: None,
            },
        )
}

fn to_task_manager() -> impl Strategy<Value = ToTaskManager> {
    prop_oneof![
        any::<u64>().prop_map(|heartbeat_interval_ms| ToTaskManager::Registered {
            heartbeat_interval_ms
        }),
        text().prop_map(|reason| ToTaskManager::Rejected { reason }),
        deployment().prop_map(|d| ToTaskManager::Deploy(Box::new(d))),
        text().prop_map(|job| ToTaskManager::Cancel { job }),
        (text(), any::<u32>(), any::<u64>()).prop_map(|(job, attempt, checkpoint)| {
            ToTaskManager::TriggerCheckpoint {
                job,
                attempt,
                checkpoint,
            }
        }),
        (text(), any::<u32>(), any::<u64>()).prop_map(|(job, attempt, checkpoint)| {
            ToTaskManager::CheckpointComplete {
                job,
                attempt,
                checkpoint,
            }
        }),
        (text(), any::<u32>(), any::<u64>()).prop_map(|(job, attempt, checkpoint)| {
            ToTaskManager::CheckpointAborted {
                job,
                attempt,
                checkpoint,
            }
        }),
        (text(), any::<u32>())
            .prop_map(|(job, attempt)| ToTaskManager::JobFinished { job, attempt }),
    ]
}

/// Bodies that look like JSON enough to get past the first byte: brackets,
/// quotes, the messages' field and variant names, numbers.
fn json_soup() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(",".to_owned()),
        Just(":".to_owned()),
        Just("null".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("1e999".to_owned()),
        Just("\"\\ud800\"".to_owned()),
        prop::sample::select(vec![
            "Register",
            "Heartbeat",
            "Ack",
            "Deploy",
            "Cancel",
            "job",
            "graph",
            "snapshot",
            "states",
            "files",
            "path",
            "size",
            "hash",
            "data_address",
            "placement",
            "restore",
        ])
        .prop_map(|name| format!("\"{name}\"")),
        "[0-9]{1,4}",
    ];
    prop::collection::vec(token, 0..48).prop_map(|tokens| tokens.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_the_control_codec(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        read_every_type(&bytes);
        read_every_type(&frame(&bytes));
    }

    #[test]
    fn json_like_frames_never_panic_the_control_codec(body in json_soup()) {
        read_every_type(&frame(body.as_bytes()));
    }

    #[test]
    fn mutated_control_frames_never_panic(
        message in to_job_manager(),
        reply in to_task_manager(),
        mutations in mutations(),
    ) {
        read_every_type(&mutate(encode(&message), &mutations));
        read_every_type(&mutate(encode(&reply), &mutations));
    }

    #[test]
    fn control_messages_round_trip(
        message in to_job_manager(),
        reply in to_task_manager(),
        hash in text(),
        size in prop::option::of(any::<u64>()),
        error in prop::option::of(text()),
    ) {
        // Two frames back to back, then a clean end.
        let mut bytes = encode(&message);
        bytes.extend(encode(&reply));
        let mut input = &bytes[..];
        let got: ToJobManager = now(read_frame(&mut input)).unwrap().unwrap();
        prop_assert!(same(&got, &message));
        let got: ToTaskManager = now(read_frame(&mut input)).unwrap().unwrap();
        prop_assert!(same(&got, &reply));
        prop_assert!(now(read_frame::<_, FetchModule>(&mut input)).unwrap().is_none());

        let fetch = FetchModule { hash };
        let got: FetchModule = read(&encode(&fetch)).unwrap().unwrap();
        prop_assert!(same(&got, &fetch));
        let header = ModuleHeader { size, error };
        let got: ModuleHeader = read(&encode(&header)).unwrap().unwrap();
        prop_assert!(same(&got, &header));
    }

    #[test]
    fn an_oversized_prefix_is_refused_before_the_body(
        len in (MAX_FRAME as u32 + 1)..=u32::MAX,
        body in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let mut probe = Probe { data: &bytes, largest_offer: 0 };
        let result = now(read_frame::<_, ToJobManager>(&mut probe));
        prop_assert!(matches!(result, Err(FrameError::TooLarge(n)) if n == len as usize));
        prop_assert_eq!(probe.data.len(), body.len(), "the body was not read");
    }

    #[test]
    fn a_truncated_frame_is_an_error_and_allocates_only_what_arrived(
        len in 1..=MAX_FRAME as u32,
        body in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        prop_assume!((body.len() as u32) < len);
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&body);
        // `read` asserts the buffer stayed near the bytes received.
        prop_assert!(matches!(read::<ToJobManager>(&bytes), Err(FrameError::Io(_))));
    }

    #[test]
    fn free_form_json_in_a_frame_round_trips(value in json_value()) {
        let ack = ToJobManager::Ack {
            job: "j".into(),
            attempt: 0,
            checkpoint: 1,
            task: 0,
            subtask: 0,
            snapshot: SubtaskCheckpoint { source: Some(value), ..SubtaskCheckpoint::default() },
            alignment_ms: 0,
        };
        let got: ToJobManager = read(&encode(&ack)).unwrap().unwrap();
        prop_assert!(same(&got, &ack));
    }
}

/// Before the fix, `read_frame` allocated (and zeroed) the announced length
/// before reading the body: four bytes from a peer made the JobManager
/// allocate 16 MiB, on each of the up to 65,536 streams a connection may
/// open. Found while writing `a_truncated_frame_is_an_error_and_allocates_only_what_arrived`.
#[test]
fn a_length_prefix_alone_does_not_allocate_the_frame() {
    let bytes = (MAX_FRAME as u32).to_be_bytes();
    let mut probe = Probe {
        data: &bytes,
        largest_offer: 0,
    };
    let result = now(read_frame::<_, ToJobManager>(&mut probe));
    assert!(
        matches!(&result, Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{result:?}"
    );
    assert!(
        probe.largest_offer < 4096,
        "a buffer of {} bytes was offered for a frame whose body never came",
        probe.largest_offer
    );
}

/// Nesting deeper than serde_json's recursion limit (128) is an error, not
/// a stack overflow, in every place a control message holds free-form JSON.
#[test]
fn deeply_nested_json_in_a_frame_is_an_error_not_a_stack_overflow() {
    for depth in [200, 100_000] {
        let body = format!(
            "{{\"Ack\":{{\"job\":\"j\",\"attempt\":0,\"checkpoint\":1,\"task\":0,\"subtask\":0,\
             \"alignment_ms\":0,\"snapshot\":{{\"finished\":false,\"states\":[],\"timers\":null,\
             \"sink\":null,\"source\":{}{}}}}}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(matches!(
            read::<ToJobManager>(&frame(body.as_bytes())),
            Err(FrameError::Malformed(e)) if e.to_string().contains("recursion limit")
        ));
    }
}
