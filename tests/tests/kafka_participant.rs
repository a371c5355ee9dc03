//! Apache Kafka 4.4.0 as the participant (data broker) behind the standalone daemon: one KRaft
//! node (`txn_tests::kafka_node`, the jars of `TXN_TEST_KAFKA_CLASSPATH`) formatted with
//! `transaction.version` 1 and run with `transaction.partition.verification.enable=false`;
//! `txn-coordinator serve --bootstrap-servers <that node>` coordinates, and writes its
//! WriteTxnMarkers to it. The test drives both sides request by request: FindCoordinator,
//! InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (TV1 versions) to the daemon; transactional
//! Produce, TxnOffsetCommit, Fetch (read_committed), ListOffsets and OffsetFetch to Kafka.
//!
//! One Kafka node serves every case (it takes 10-20 s to start); each case runs its own daemon
//! (own ports, data directory and log) on topics and transactional ids of its own, as a task of
//! its own: a failing case is reported by name and the others still run. The directory with
//! Kafka's log (`kafka.log`) and each daemon's log is kept when a case fails, and its path
//! printed. `TXN_TEST_KAFKA_PARTICIPANT_CASES=name,name` runs only the cases whose names
//! contain one of them. Skipped (and passing) without `TXN_TEST_KAFKA_CLASSPATH`, as the other
//! Kafka tests.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    self as km, ApiKey, BrokerId, GroupId, ProducerId as WireProducerId, TopicName,
    TransactionalId as WireTransactionalId,
};
use kafka_protocol::protocol::Request;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use markers::participant::{DataBatch, RecordTimestamps};
use txn_log::TransactionalId;
use txn_testkit::client::topic_layout;
use txn_testkit::pool::Pool;
use txn_testkit::requests::{add_errors, add_req_v3, await_txn_state, end_req, init_req};
use txn_testkit::wire::{free_port, produce, sb};
use txn_tests::e2e;
use txn_tests::fault::process::{Proc, Spec};
use txn_tests::kafka_node::{KafkaNode, KafkaNodeOptions};

/// `offsets.topic.num.partitions` of the node and of every daemon: they must agree, since
/// AddOffsetsToTxn makes the daemon add `__consumer_offsets-<hash(group) % n>`.
const OFFSETS_PARTITIONS: u32 = 5;
/// The daemon's `transaction.state.log.num.partitions` (its default).
const LOG_PARTITIONS: u32 = 50;
/// A bound for each wait on the other side (a state, a stable offset, a metric).
const WAIT: Duration = Duration::from_secs(30);
/// A bound for a whole case.
const CASE_BOUND: Duration = Duration::from_secs(150);

/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
/// CONCURRENT_TRANSACTIONS: the answers a transactional client retries.
const RETRIABLE: [i16; 4] = [14, 15, 16, 51];
const INVALID_PRODUCER_EPOCH: i16 = 47;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const PRODUCER_FENCED: i16 = 90;

/// Evaluates `$attempt` (an error code; it may `.await`) until the code is not retriable, at
/// most 100 times 100 ms apart: that code. (A macro, not `txn_steps::until_not_retriable`:
/// a future holding an async closure is not `Send` for `tokio::spawn`.)
macro_rules! retried {
    ($what:expr, $attempt:expr) => {{
        let mut attempts = 0;
        loop {
            let code: i16 = $attempt;
            if !RETRIABLE.contains(&code) {
                break code;
            }
            attempts += 1;
            assert!(
                attempts < 100,
                "{}: still retriable after 100 attempts",
                $what
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }};
}

/// What every case shares: the Kafka node and the directory of the logs.
struct Ctx {
    kafka: KafkaNode,
    dir: PathBuf,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_kafka_as_participant_behind_the_daemon() {
    let Some(classpath) = e2e::kafka_classpath_or_skip("kafka_participant") else {
        return;
    };
    let daemon = e2e::daemon_bin();
    assert!(
        daemon.exists(),
        "{} is missing: cargo build --release -p coordinator --bin txn-coordinator",
        daemon.display()
    );
    let dir = tempfile::Builder::new()
        .prefix("kafka-participant-")
        .tempdir()
        .expect("dir");
    let started = Instant::now();
    let options = KafkaNodeOptions::default()
        .feature("transaction.version", 1)
        .property("transaction.partition.verification.enable", "false")
        .property("offsets.topic.num.partitions", OFFSETS_PARTITIONS)
        .property("group.initial.rebalance.delay.ms", "0")
        .property("auto.create.topics.enable", "false");
    let kafka = KafkaNode::start(&classpath, dir.path(), &options)
        .await
        .expect("Apache Kafka starts");
    eprintln!(
        "kafka_participant: Kafka on {} after {:.1?} (log {})",
        kafka.addr(),
        started.elapsed(),
        kafka.log().display()
    );
    let ctx = Arc::new(Ctx {
        kafka,
        dir: dir.path().to_path_buf(),
    });
    check_kafka_features(&ctx).await;

    let only: Vec<String> = std::env::var("TXN_TEST_KAFKA_PARTICIPANT_CASES")
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let mut ran = 0;
    let mut failed = Vec::new();
    macro_rules! case {
        ($name:literal, $f:ident) => {
            if wanted($name) {
                ran += 1;
                if !run_case($name, $f(Arc::clone(&ctx))).await {
                    failed.push($name);
                }
            }
        };
    }
    case!("1_commit_and_abort_across_two_topics", commit_and_abort);
    case!("2_offsets_in_a_transaction", offsets_in_a_transaction);
    case!("3_zombie_fencing", zombie_fencing);
    case!(
        "4_daemon_killed_before_the_markers",
        daemon_killed_before_markers
    );
    case!("5_reaper_aborts_a_timed_out_transaction", reaper);
    case!("6_refused_marker", refused_marker);
    case!("7_producer_ids_apart_from_kafkas", producer_ids);
    assert!(
        ran > 0,
        "TXN_TEST_KAFKA_PARTICIPANT_CASES={only:?} selects no case"
    );
    eprintln!(
        "kafka_participant: {ran} cases in {:.1?}",
        started.elapsed()
    );
    if !failed.is_empty() {
        drop(ctx);
        let kept = dir.keep();
        panic!(
            "kafka_participant: failed cases: {failed:?}; Kafka's and the daemons' logs are in {}",
            kept.display()
        );
    }
}

/// Runs one case as a task of its own, bounded; true when it passed.
async fn run_case(name: &str, case: impl Future<Output = ()> + Send + 'static) -> bool {
    let started = Instant::now();
    eprintln!("kafka_participant: case {name}: start");
    let outcome = tokio::spawn(tokio::time::timeout(CASE_BOUND, case)).await;
    let verdict = match outcome {
        Ok(Ok(())) => "passed".to_owned(),
        Ok(Err(_)) => format!("FAILED: not done within {CASE_BOUND:?}"),
        Err(e) if e.is_panic() => "FAILED (panic above)".to_owned(),
        Err(e) => format!("FAILED: {e}"),
    };
    eprintln!(
        "kafka_participant: case {name}: {verdict} in {:.1?}",
        started.elapsed()
    );
    verdict == "passed"
}

/// The node runs what the cases assume: `transaction.version` finalized at 1. Prints the
/// WriteTxnMarkers versions it lists (the daemon sends the highest both speak).
async fn check_kafka_features(ctx: &Ctx) {
    let mut pool = pool();
    let v = call(
        &mut pool,
        ctx.kafka.addr(),
        &km::ApiVersionsRequest::default()
            .with_client_software_name(sb("kafka-participant"))
            .with_client_software_version(sb("1")),
        3,
    )
    .await;
    let tv = v
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .map(|f| f.max_version_level);
    assert_eq!(tv, Some(1), "Kafka finalized transaction.version 1");
    let markers = v
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::WriteTxnMarkers as i16)
        .map(|k| (k.min_version, k.max_version));
    eprintln!("kafka_participant: Kafka lists WriteTxnMarkers {markers:?}");
}

// ---------------------------------------------------------------------------------------------
// The cases

/// Commits and an abort over two topics of two partitions each: read_committed sees exactly
/// the committed records, the aborted ones are listed as aborted and filtered out, and the last
/// stable offset reaches the high watermark on every partition.
async fn commit_and_abort(ctx: Arc<Ctx>) {
    let topics = ["c1-x", "c1-y"];
    for t in topics {
        create_topic(&ctx, t, 2).await;
    }
    let d = Daemon::start(&ctx, "c1", &[]);
    let mut p = Producer::init(&ctx, &d, "c1-txn", 60_000).await;
    let all: Vec<(&str, i32)> = topics.iter().flat_map(|t| [(*t, 0), (*t, 1)]).collect();
    let third: [(&str, i32); 2] = [("c1-x", 0), ("c1-y", 1)];
    for (txn, parts, commit) in [
        ("t1", &all[..], true),
        ("t2", &all[..], false),
        ("t3", &third[..], true),
    ] {
        p.add(parts).await;
        for &(t, i) in parts {
            assert_eq!(p.produce(t, i, &[&format!("{txn}-{t}-{i}")]).await, 0);
        }
        assert_eq!(p.end(commit).await, 0, "EndTxn {txn}");
    }
    for &(t, i) in &all {
        let view = stable_view(&ctx, t, i).await;
        let mut committed = vec![format!("t1-{t}-{i}")];
        if third.contains(&(t, i)) {
            committed.push(format!("t3-{t}-{i}"));
        }
        assert_eq!(view.committed, committed, "{t}-{i} read_committed");
        assert!(
            view.uncommitted.contains(&format!("t2-{t}-{i}")),
            "{t}-{i}: the aborted record is in the log: {view:?}"
        );
        assert_eq!(
            view.aborted,
            vec![p.pid],
            "{t}-{i}: one aborted transaction"
        );
        // One data batch and one marker per transaction on the partition.
        let txns = i64::try_from(committed.len()).expect("small") + 1;
        assert_eq!(view.high_watermark, 2 * txns, "{t}-{i}: {view:?}");
        assert_eq!(
            list_offset(&ctx, t, i, true).await,
            list_offset(&ctx, t, i, false).await,
            "{t}-{i}: ListOffsets read_committed (LSO) = read_uncommitted (HW)"
        );
    }
    let state = describe(&d, "c1-txn").await;
    assert_eq!(state.transaction_state.as_str(), "CompleteCommit");
}

/// AddOffsetsToTxn to the daemon, TxnOffsetCommit to Kafka's group coordinator: OffsetFetch
/// with require_stable shows the offset once the transaction committed, and not the one of an
/// aborted transaction.
async fn offsets_in_a_transaction(ctx: Arc<Ctx>) {
    create_topic(&ctx, "c2-in", 1).await;
    create_topic(&ctx, "c2-out", 1).await;
    let group = "c2-group";
    let groups = group_coordinator(&ctx, group).await;
    let d = Daemon::start(&ctx, "c2", &[]);
    let mut p = Producer::init(&ctx, &d, "c2-txn", 60_000).await;

    for (txn, offset, commit) in [("o1", 5, true), ("o2", 9, false)] {
        p.add(&[("c2-out", 0)]).await;
        assert_eq!(p.produce("c2-out", 0, &[txn]).await, 0);
        p.add_offsets(group).await;
        p.txn_offset_commit(groups, group, "c2-in", 0, offset).await;
        assert_eq!(
            offset_fetch(groups, group, "c2-in", 0).await.0,
            UNSTABLE_OFFSET_COMMIT,
            "{txn}: the staged offset makes require_stable answer UNSTABLE_OFFSET_COMMIT"
        );
        assert_eq!(p.end(commit).await, 0, "EndTxn {txn}");
        assert_eq!(
            stable_offset(groups, group, "c2-in", 0).await,
            5,
            "{txn} (commit {commit}): the committed offset"
        );
    }
    assert_eq!(stable_view(&ctx, "c2-out", 0).await.committed, ["o1"]);
    let state = describe(&d, "c2-txn").await;
    assert_eq!(state.transaction_state.as_str(), "CompleteAbort");
}

/// A second InitProducerId for the same transactional id fences the first producer: its open
/// transaction is aborted at a bumped epoch, Kafka then refuses the old epoch's Produce, and
/// the daemon its EndTxn.
async fn zombie_fencing(ctx: Arc<Ctx>) {
    create_topic(&ctx, "c3", 1).await;
    let d = Daemon::start(&ctx, "c3", &[]);
    let mut old = Producer::init(&ctx, &d, "c3-txn", 60_000).await;
    old.add(&[("c3", 0)]).await;
    assert_eq!(old.produce("c3", 0, &["zombie-1"]).await, 0);

    let mut new = Producer::init(&ctx, &d, "c3-txn", 60_000).await;
    assert_eq!(new.pid, old.pid, "same producer id");
    assert!(
        new.epoch > old.epoch,
        "the epoch is bumped: {} -> {}",
        old.epoch,
        new.epoch
    );
    // The abort's marker reached Kafka: the partition is stable again.
    let view = stable_view(&ctx, "c3", 0).await;
    assert!(view.committed.is_empty(), "{view:?}");
    assert_eq!(view.aborted, vec![old.pid]);

    assert_eq!(
        old.produce("c3", 0, &["zombie-2"]).await,
        INVALID_PRODUCER_EPOCH,
        "Kafka refuses the old epoch after the new epoch's marker"
    );
    assert_eq!(
        old.end(true).await,
        PRODUCER_FENCED,
        "the daemon fences the old epoch's EndTxn"
    );

    new.add(&[("c3", 0)]).await;
    assert_eq!(new.produce("c3", 0, &["new-1"]).await, 0);
    assert_eq!(new.end(true).await, 0);
    let view = stable_view(&ctx, "c3", 0).await;
    assert_eq!(view.committed, ["new-1"]);
    assert!(
        !view.uncommitted.contains(&"zombie-2".to_owned()),
        "the refused batch is not in the log: {view:?}"
    );
}

/// The daemon SIGKILLed between EndTxn and its markers: Kafka is stopped (SIGSTOP) so that no
/// marker lands, EndTxn(commit) is answered once PrepareCommit is durable (TV1), the daemon is
/// killed, Kafka continued, and the daemon restarted on the same data directory re-sends the
/// markers.
async fn daemon_killed_before_markers(ctx: Arc<Ctx>) {
    create_topic(&ctx, "c4", 2).await;
    let mut d = Daemon::start(&ctx, "c4", &[]);
    let mut p = Producer::init(&ctx, &d, "c4-txn", 60_000).await;
    p.add(&[("c4", 0), ("c4", 1)]).await;
    for i in 0..2 {
        assert_eq!(p.produce("c4", i, &[&format!("k-{i}")]).await, 0);
    }
    {
        let _stopped = Stopped::new(&ctx.kafka);
        assert_eq!(p.end(true).await, 0, "EndTxn(commit) with Kafka stopped");
        let state = describe(&d, "c4-txn").await;
        assert_eq!(
            state.transaction_state.as_str(),
            "PrepareCommit",
            "no marker can have landed"
        );
        d.kill();
    }
    d.restart();
    let state = await_state(&d, "c4-txn", "CompleteCommit").await;
    assert_eq!(partitions_of(&state), Vec::<(String, i32)>::new());
    // The restarted process sent them (its counters start at 0).
    assert!(metric(&d, "txn_coordinator_marker_jobs_total").await >= 1.0);
    assert!(metric(&d, "txn_coordinator_transactions_committed_total").await >= 1.0);
    for i in 0..2 {
        let view = stable_view(&ctx, "c4", i).await;
        assert_eq!(view.committed, [format!("k-{i}")], "c4-{i}");
    }
}

/// A transaction left open past its timeout (2 s) is aborted by the daemon's reaper: its
/// markers reach Kafka, the last stable offset moves on, its records stay invisible.
async fn reaper(ctx: Arc<Ctx>) {
    create_topic(&ctx, "c5", 1).await;
    let d = Daemon::start(
        &ctx,
        "c5",
        &["transaction.abort.timed.out.transaction.cleanup.interval.ms=200"],
    );
    let mut p = Producer::init(&ctx, &d, "c5-txn", 2_000).await;
    p.add(&[("c5", 0)]).await;
    assert_eq!(p.produce("c5", 0, &["timed-out"]).await, 0);
    await_state(&d, "c5-txn", "CompleteAbort").await;
    let view = stable_view(&ctx, "c5", 0).await;
    assert!(view.committed.is_empty(), "{view:?}");
    assert_eq!(view.uncommitted, ["timed-out"]);
    assert_eq!(view.aborted, vec![p.pid]);
    assert_eq!(view.high_watermark, 2, "the record and the ABORT marker");
    assert!(metric(&d, "txn_coordinator_transactions_timed_out_total").await >= 1.0);
    assert_eq!(
        p.end(true).await,
        PRODUCER_FENCED,
        "the reaper fenced the producer"
    );
}

/// A marker Kafka refuses: the transaction adds A and B, writes to A, and an idempotent
/// (non-transactional) producer with the daemon's producer id at the next epoch writes to B,
/// so Kafka answers the COMMIT marker for B with INVALID_PRODUCER_EPOCH. The daemon commits
/// A, keeps the transaction in PrepareCommit with B alone, keeps serving the other ids of the
/// same log partition, says so in its metrics and its log; once B is deleted,
/// `force-terminate` completes the transaction.
async fn refused_marker(ctx: Arc<Ctx>) {
    let (a, b) = ("c6-a", "c6-b");
    create_topic(&ctx, a, 1).await;
    create_topic(&ctx, b, 1).await;
    let id = "c6-txn";
    let other = same_log_partition(id, "c6-other");
    let d = Daemon::start(&ctx, "c6", &[]);
    let mut p = Producer::init(&ctx, &d, id, 60_000).await;
    p.add(&[(a, 0), (b, 0)]).await;
    assert_eq!(p.produce(a, 0, &["a-1"]).await, 0);
    let (code, _) = produce(
        &mut p.data,
        b,
        0,
        batch((p.pid, p.epoch + 1, 0), false, &["b-idempotent"]),
        None,
    )
    .await;
    assert_eq!(
        code, 0,
        "Kafka takes the idempotent batch at the next epoch"
    );
    assert_eq!(p.end(true).await, 0, "EndTxn(commit)");

    // A's marker lands: its record is committed.
    let view = stable_view(&ctx, a, 0).await;
    assert_eq!(view.committed, ["a-1"]);
    // B's is refused: the transaction stays in PrepareCommit with B only.
    let deadline = Instant::now() + WAIT;
    let refused = loop {
        let refused = metric(&d, "txn_coordinator_markers_refused_total").await;
        if refused >= 1.0 || Instant::now() > deadline {
            break refused;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        refused >= 1.0,
        "txn_coordinator_markers_refused_total {refused}; daemon log:\n{}",
        d.tail(30)
    );
    assert_eq!(
        metric(&d, "txn_coordinator_transactions_refused").await,
        1.0,
        "gauge txn_coordinator_transactions_refused"
    );
    let state = describe(&d, id).await;
    assert_eq!(state.error_code, 0, "DescribeTransactions({id})");
    assert_eq!(state.transaction_state.as_str(), "PrepareCommit");
    assert_eq!(partitions_of(&state), [(b.to_owned(), 0)]);
    assert_eq!(
        txn_testkit::http::get(d.metrics, "/ready")
            .await
            .map(|(s, _)| s),
        Some(200),
        "/ready"
    );
    let log = d.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("transactional_id={id}"))
                && l.contains(&format!("producer_id={}", p.pid))
                && l.contains(&format!("producer_epoch={}", p.epoch))
                && l.contains(&format!("partition={b}-0"))
                && l.contains("INVALID_PRODUCER_EPOCH")),
        "a log line names {id}, producer {} epoch {}, {b}-0 and INVALID_PRODUCER_EPOCH:\n{}",
        p.pid,
        p.epoch,
        d.tail(30)
    );

    // The log partition still serves its other ids.
    let mut q = Producer::init(&ctx, &d, &other, 60_000).await;
    q.add(&[(a, 0)]).await;
    assert_eq!(q.produce(a, 0, &["other-1"]).await, 0);
    assert_eq!(q.end(true).await, 0, "EndTxn({other})");
    await_state(&d, &other, "CompleteCommit").await;
    assert_eq!(stable_view(&ctx, a, 0).await.committed, ["a-1", "other-1"]);

    // The operator deletes B, then force-terminates the transaction.
    delete_topic(&ctx, b).await;
    let out = force_terminate(&d, id).await;
    assert!(
        out.status.success(),
        "force-terminate {id}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let state = describe(&d, id).await;
    assert_eq!(state.error_code, 0);
    // Its InitProducerId completed the commit (B's marker dropped with the topic), then
    // bumped the epoch: Empty.
    assert_ne!(state.transaction_state.as_str(), "PrepareCommit");
    assert_eq!(
        (
            metric(&d, "txn_coordinator_transactions_committed_total").await,
            metric(&d, "txn_coordinator_transactions_aborted_total").await
        ),
        (2.0, 0.0),
        "{other}'s commit and {id}'s, no abort"
    );
    assert_eq!(
        metric(&d, "txn_coordinator_transactions_refused").await,
        0.0,
        "no refused transaction left"
    );
}

/// Producer ids: the daemon hands out ids from `producer.id.start` (10^15 by default), Kafka
/// its own from 0, so an idempotent producer of Kafka never shares an id with a transactional
/// producer of the daemon.
async fn producer_ids(ctx: Arc<Ctx>) {
    const DAEMON_START: i64 = 1_000_000_000_000_000;
    let d = Daemon::start(&ctx, "c7", &[]);
    let mut pool = pool();
    // Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its controller granted a block of ids.
    let mut kafka: km::InitProducerIdResponse;
    let code = retried!("InitProducerId (idempotent) to Kafka", {
        kafka = call(&mut pool, ctx.kafka.addr(), &init_req(None, 60_000), 4).await;
        kafka.error_code
    });
    assert_eq!(code, 0, "InitProducerId (idempotent) to Kafka");
    let idempotent = call(&mut pool, d.addr, &init_req(None, 60_000), 4).await;
    assert_eq!(
        idempotent.error_code, 0,
        "InitProducerId (idempotent) to the daemon"
    );
    let txn = Producer::init(&ctx, &d, "c7-txn", 60_000).await;
    let ids = format!(
        "Kafka's idempotent producer id {}, the daemon's transactional {} and idempotent {}",
        kafka.producer_id.0, txn.pid, idempotent.producer_id.0
    );
    assert!(
        txn.pid >= DAEMON_START && idempotent.producer_id.0 >= DAEMON_START,
        "{ids}: the daemon's are not from {DAEMON_START} up"
    );
    assert!(
        (0..DAEMON_START / 1000).contains(&kafka.producer_id.0),
        "{ids}: Kafka's is not far below the daemon's"
    );
}

// ---------------------------------------------------------------------------------------------
// The daemon

/// A `txn-coordinator serve` in front of the Kafka node, on fixed free ports (a restart keeps
/// them), its data in `DIR/NAME-data`, its log in `DIR/NAME.log`.
struct Daemon {
    proc: Proc,
    addr: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Daemon {
    /// Starts it with `--set` for each of `settings` (and `offsets.topic.num.partitions` as
    /// the node's); waits until it serves.
    fn start(ctx: &Ctx, name: &str, settings: &[&str]) -> Self {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let data = ctx.dir.join(format!("{name}-data"));
        let log = ctx.dir.join(format!("{name}.log"));
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            addr.to_string(),
            "--bootstrap-servers".into(),
            ctx.kafka.addr().to_string(),
            "--data-dir".into(),
            data.display().to_string(),
            "--metrics-listen".into(),
            metrics.to_string(),
            "--set".into(),
            format!("offsets.topic.num.partitions={OFFSETS_PARTITIONS}"),
        ];
        for s in settings {
            args.push("--set".into());
            args.push((*s).to_owned());
        }
        let proc = Proc::start(
            Spec {
                name: format!("daemon {name}"),
                bin: e2e::daemon_bin(),
                args,
                ready_prefix: "txn-coordinator listening on ".into(),
                log_file: Some(log.clone()),
                env: vec![("RUST_LOG".into(), "info".into())],
            },
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("daemon {name} starts: {e:#}\n{}", e2e::tail(&log, 30)));
        Self {
            proc,
            addr,
            metrics,
            log,
        }
    }

    /// SIGKILL.
    fn kill(&mut self) {
        self.proc.kill();
    }

    /// Starts it again with the same arguments; waits until it serves.
    fn restart(&mut self) {
        self.proc
            .restart(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("daemon restarts: {e:#}\n{}", self.tail(30)));
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self, n: usize) -> String {
        e2e::tail(&self.log, n)
    }
}

/// `txn-coordinator force-terminate` of `id` against `d`, bounded by its own `--timeout-ms`.
async fn force_terminate(d: &Daemon, id: &str) -> std::process::Output {
    let args = [
        "force-terminate".to_owned(),
        "--bootstrap-server".to_owned(),
        d.addr.to_string(),
        "--transactional-id".to_owned(),
        id.to_owned(),
        "--timeout-ms".to_owned(),
        "30000".to_owned(),
    ];
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(e2e::daemon_bin())
            .args(args)
            .output()
            .expect("run txn-coordinator force-terminate")
    })
    .await
    .expect("force-terminate thread")
}

/// Kafka's JVM stopped (SIGSTOP) while this lives, continued on drop (a failing case too).
struct Stopped<'a>(&'a KafkaNode);

impl<'a> Stopped<'a> {
    fn new(kafka: &'a KafkaNode) -> Self {
        kafka.pause().expect("SIGSTOP Kafka");
        Self(kafka)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

// ---------------------------------------------------------------------------------------------
// The client

fn pool() -> Pool {
    Pool::new("kafka-participant", Duration::from_secs(15))
}

/// One request at `addr`; panics when it gets no answer.
async fn call<R: Request>(pool: &mut Pool, addr: SocketAddr, req: &R, version: i16) -> R::Response {
    pool.call(addr, req, version)
        .await
        .unwrap_or_else(|e| panic!("{:?} v{version} to {addr}: {e}", R::KEY))
}

/// A transactional producer: its coordinator side at the daemon, its data side at Kafka, and
/// the next sequence number of each partition at its current epoch.
struct Producer {
    id: String,
    pid: i64,
    epoch: i16,
    daemon: SocketAddr,
    coord: Pool,
    data: txn_testkit::wire::Conn,
    sequences: HashMap<(String, i32), i32>,
}

impl Producer {
    /// InitProducerId (v4) for `id` with `timeout_ms`, retried while retriable.
    /// The coordinator is the one the daemon names (FindCoordinator v3), asserted to be itself.
    async fn init(ctx: &Ctx, d: &Daemon, id: &str, timeout_ms: i32) -> Self {
        let mut coord = pool();
        let find = km::FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_key(sb(id));
        let mut at: String;
        let code = retried!("FindCoordinator", {
            let r = call(&mut coord, d.addr, &find, 3).await;
            at = format!("{}:{}", r.host, r.port);
            r.error_code
        });
        assert_eq!(code, 0, "FindCoordinator({id})");
        let at: SocketAddr = at.parse().expect("the coordinator's address");
        assert_eq!(at, d.addr, "the daemon coordinates {id}");
        let mut got: (i64, i16);
        let code = retried!("InitProducerId", {
            let r = call(&mut coord, at, &init_req(Some(id), timeout_ms), 4).await;
            got = (r.producer_id.0, r.producer_epoch);
            r.error_code
        });
        assert_eq!(code, 0, "InitProducerId({id})");
        Self {
            id: id.to_owned(),
            pid: got.0,
            epoch: got.1,
            daemon: at,
            coord,
            data: txn_testkit::wire::connect(ctx.kafka.addr(), "kafka-participant").await,
            sequences: HashMap::new(),
        }
    }

    /// AddPartitionsToTxn (v3) of `parts`, retried while retriable; asserts every partition
    /// was added.
    async fn add(&mut self, parts: &[(&str, i32)]) {
        let req = add_req_v3(&self.id, self.pid, self.epoch, parts);
        let mut errors: Vec<(String, i32, i16)>;
        retried!("AddPartitionsToTxn", {
            errors = add_errors(&call(&mut self.coord, self.daemon, &req, 3).await);
            errors.iter().map(|e| e.2).find(|&c| c != 0).unwrap_or(0)
        });
        assert!(
            errors.iter().all(|e| e.2 == 0),
            "AddPartitionsToTxn({}): {errors:?}",
            self.id
        );
    }

    /// AddOffsetsToTxn (v3) of `group`, retried while retriable; asserts success.
    async fn add_offsets(&mut self, group: &str) {
        let req = km::AddOffsetsToTxnRequest::default()
            .with_transactional_id(WireTransactionalId(sb(&self.id)))
            .with_producer_id(WireProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_group_id(GroupId(sb(group)));
        let code = retried!(
            "AddOffsetsToTxn",
            call(&mut self.coord, self.daemon, &req, 3).await.error_code
        );
        assert_eq!(code, 0, "AddOffsetsToTxn({}, {group})", self.id);
    }

    /// TxnOffsetCommit (v3) of `topic`/`partition` at `offset` for `group` to its coordinator,
    /// retried while retriable; asserts success.
    async fn txn_offset_commit(
        &mut self,
        groups: SocketAddr,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) {
        use km::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        let req = km::TxnOffsetCommitRequest::default()
            .with_transactional_id(WireTransactionalId(sb(&self.id)))
            .with_group_id(GroupId(sb(group)))
            .with_producer_id(WireProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_generation_id(-1)
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(sb(topic)))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(partition)
                            .with_committed_offset(offset),
                    ]),
            ]);
        let mut pool = pool();
        let code = retried!("TxnOffsetCommit", {
            let r = call(&mut pool, groups, &req, 3).await;
            r.topics[0].partitions[0].error_code
        });
        assert_eq!(code, 0, "TxnOffsetCommit({}, {group})", self.id);
    }

    /// A transactional Produce of `values` (one batch) to `topic`/`partition` at this
    /// producer's epoch and the partition's next sequence: the error code.
    async fn produce(&mut self, topic: &str, partition: i32, values: &[&str]) -> i16 {
        let key = (topic.to_owned(), partition);
        let seq = self.sequences.get(&key).copied().unwrap_or(0);
        let records = batch((self.pid, self.epoch, seq), true, values);
        let (code, _) = produce(&mut self.data, topic, partition, records, Some(&self.id)).await;
        if code == 0 {
            let n = i32::try_from(values.len()).expect("few values");
            self.sequences.insert(key, seq + n);
        }
        code
    }

    /// EndTxn (v3, TV1), retried while retriable: the final error code.
    async fn end(&mut self, commit: bool) -> i16 {
        let req = end_req(&self.id, self.pid, self.epoch, commit);
        retried!(
            "EndTxn",
            call(&mut self.coord, self.daemon, &req, 3).await.error_code
        )
    }
}

/// A v2 record batch of `values` by producer (id, epoch, base sequence), transactional or
/// idempotent, stamped now: Kafka rolls a segment (and would delete it after the retention
/// check) for records older than `log.roll.ms` (7 days).
fn batch(producer: (i64, i16, i32), transactional: bool, values: &[&str]) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis();
    DataBatch {
        producer_id: txn_log::ProducerId(producer.0),
        producer_epoch: txn_log::ProducerEpoch(producer.1),
        base_sequence: producer.2,
        transactional,
        timestamps: RecordTimestamps::Ascending(i64::try_from(now).expect("ms fit i64")),
        ..DataBatch::default()
    }
    .encode(
        values
            .iter()
            .map(|v| (None, Some(Bytes::from((*v).to_owned())))),
    )
    .expect("encode a batch")
}

/// DescribeTransactions (v0) of `id` at the daemon.
async fn describe(d: &Daemon, id: &str) -> km::describe_transactions_response::TransactionState {
    let req = km::DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![WireTransactionalId(sb(id))]);
    let r = call(&mut pool(), d.addr, &req, 0).await;
    r.transaction_states
        .into_iter()
        .next()
        .expect("one transaction state")
}

/// DescribeTransactions of `id` polled until it is in `state` (bounded).
async fn await_state(
    d: &Daemon,
    id: &str,
    state: &str,
) -> km::describe_transactions_response::TransactionState {
    await_txn_state(&mut pool(), d.addr, id, state).await
}

/// The (topic, partition) pairs a description lists, sorted.
fn partitions_of(s: &km::describe_transactions_response::TransactionState) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = s
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
        .collect();
    v.sort();
    v
}

/// A transactional id other than `id` whose `__transaction_state` partition (Kafka's
/// `abs(javaHashCode(id)) % 50`) is `id`'s: `PREFIX-N` for the first such N.
fn same_log_partition(id: &str, prefix: &str) -> String {
    let of = |s: &str| {
        coordinator::partition_for(
            &TransactionalId::new(s.to_owned()).expect("id"),
            LOG_PARTITIONS,
        )
    };
    let want = of(id);
    (0..100_000)
        .map(|n| format!("{prefix}-{n}"))
        .find(|c| of(c) == want)
        .expect("an id in the same log partition")
}

// ---------------------------------------------------------------------------------------------
// Kafka's side

/// Creates `topic` with `partitions` on the node and waits for its leaders.
async fn create_topic(ctx: &Ctx, topic: &str, partitions: i32) {
    let layout = topic_layout(&ctx.kafka.addr().to_string(), topic, Some(partitions))
        .await
        .unwrap_or_else(|e| panic!("create {topic}: {e:#}"));
    assert_eq!(
        layout.leaders,
        vec![1; usize::try_from(partitions).expect("count")]
    );
}

/// Deletes `topic` and waits until Metadata no longer lists it.
async fn delete_topic(ctx: &Ctx, topic: &str) {
    let mut pool = pool();
    let req = km::DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(sb(topic))])
        .with_timeout_ms(30_000);
    let r = call(&mut pool, ctx.kafka.addr(), &req, 5).await;
    assert_eq!(r.responses[0].error_code, 0, "DeleteTopics({topic})");
    let deadline = Instant::now() + WAIT;
    loop {
        let md = call(
            &mut pool,
            ctx.kafka.addr(),
            &km::MetadataRequest::default().with_topics(None),
            12,
        )
        .await;
        if !md
            .topics
            .iter()
            .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} still listed after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kafka's group coordinator of `group` (FindCoordinator retried while `__consumer_offsets` is
/// created and loaded).
async fn group_coordinator(ctx: &Ctx, group: &str) -> SocketAddr {
    let mut pool = pool();
    let req = km::FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_key(sb(group));
    let mut last = 0;
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let r = call(&mut pool, ctx.kafka.addr(), &req, 3).await;
        if r.error_code == 0 {
            return format!("{}:{}", r.host, r.port).parse().expect("address");
        }
        last = r.error_code;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no group coordinator for {group} within {WAIT:?}: error {last}")
}

/// OffsetFetch (v7, require_stable) of `topic`/`partition` for `group`: (error, offset).
async fn offset_fetch(groups: SocketAddr, group: &str, topic: &str, partition: i32) -> (i16, i64) {
    use km::offset_fetch_request::OffsetFetchRequestTopic;
    let req = km::OffsetFetchRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(sb(topic)))
                .with_partition_indexes(vec![partition]),
        ]));
    let r = call(&mut pool(), groups, &req, 7).await;
    assert_eq!(r.error_code, 0, "OffsetFetch({group})");
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.committed_offset)
}

/// The committed offset once no transactional commit of it is pending (OffsetFetch polled
/// while it answers UNSTABLE_OFFSET_COMMIT; bounded).
async fn stable_offset(groups: SocketAddr, group: &str, topic: &str, partition: i32) -> i64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let (code, offset) = offset_fetch(groups, group, topic, partition).await;
        if code != UNSTABLE_OFFSET_COMMIT {
            assert_eq!(code, 0, "OffsetFetch({group}, {topic}-{partition})");
            return offset;
        }
        assert!(
            Instant::now() < deadline,
            "{group}'s offset of {topic}-{partition} still unstable after {WAIT:?}: no marker"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// ListOffsets (v5) latest of `topic`/`partition`: the last stable offset when
/// `read_committed`, else the high watermark.
async fn list_offset(ctx: &Ctx, topic: &str, partition: i32, read_committed: bool) -> i64 {
    use km::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = km::ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(i8::from(read_committed))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(sb(topic)))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_timestamp(-1),
                ]),
        ]);
    let r = call(&mut pool(), ctx.kafka.addr(), &req, 5).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "ListOffsets {topic}-{partition}");
    p.offset
}

/// A partition as a consumer sees it once it is stable.
#[derive(Debug)]
struct View {
    /// The data records a read_committed consumer delivers (aborted transactions filtered out
    /// with the fetch's aborted-transaction list, as Kafka's consumer does).
    committed: Vec<String>,
    /// Every data record in the log (read_uncommitted).
    uncommitted: Vec<String>,
    /// The producer ids of the aborted transactions the read_committed fetch lists.
    aborted: Vec<i64>,
    high_watermark: i64,
}

/// Fetches `topic`/`partition` read_committed until its last stable offset reaches a
/// non-zero high watermark (bounded: no marker means it never does), then reads it whole.
async fn stable_view(ctx: &Ctx, topic: &str, partition: i32) -> View {
    let mut pool = pool();
    let deadline = Instant::now() + WAIT;
    loop {
        let (p, _) = fetch(&mut pool, ctx, topic, partition, 0, true).await;
        if p.last_stable_offset == p.high_watermark && p.high_watermark > 0 {
            let (records, aborted) = read_all(&mut pool, ctx, topic, partition, true).await;
            let (all, _) = read_all(&mut pool, ctx, topic, partition, false).await;
            return View {
                committed: read_committed(&records, &aborted),
                uncommitted: all.iter().filter(|r| !r.control).map(value_of).collect(),
                aborted: aborted.iter().map(|a| a.0).collect(),
                high_watermark: p.high_watermark,
            };
        }
        assert!(
            Instant::now() < deadline,
            "{topic}-{partition} not stable after {WAIT:?}: last stable offset {}, high \
             watermark {}",
            p.last_stable_offset,
            p.high_watermark
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every record of `topic`/`partition` up to its last stable offset (`read_committed`) or
/// high watermark, in as many fetches as it takes (Kafka answers a fetch from one log
/// segment), and the aborted transactions (producer id, first offset) the fetches list.
async fn read_all(
    pool: &mut Pool,
    ctx: &Ctx,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> (Vec<Record>, Vec<(i64, i64)>) {
    let (mut records, mut aborted) = (Vec::<Record>::new(), Vec::new());
    let mut offset = 0;
    for _ in 0..1000 {
        let (p, got) = fetch(pool, ctx, topic, partition, offset, read_committed).await;
        for a in p.aborted_transactions.iter().flatten() {
            if !aborted.contains(&(a.producer_id.0, a.first_offset)) {
                aborted.push((a.producer_id.0, a.first_offset));
            }
        }
        records.extend(got.into_iter().filter(|r| r.offset >= offset));
        offset = records.last().map_or(offset, |r| r.offset + 1);
        let end = if read_committed {
            p.last_stable_offset
        } else {
            p.high_watermark
        };
        if offset >= end {
            return (records, aborted);
        }
    }
    panic!("{topic}-{partition}: no end after 1000 fetches (at offset {offset})")
}

/// One Fetch (v11) of `topic`/`partition` from `offset`: the partition's answer and its
/// records.
async fn fetch(
    pool: &mut Pool,
    ctx: &Ctx,
    topic: &str,
    partition: i32,
    offset: i64,
    read_committed: bool,
) -> (km::fetch_response::PartitionData, Vec<Record>) {
    let req = txn_tests::txn_steps::fetch_of(topic, partition, offset, read_committed);
    let r = call(pool, ctx.kafka.addr(), &req, 11).await;
    assert_eq!(r.error_code, 0, "Fetch {topic}-{partition}");
    let p = r
        .responses
        .into_iter()
        .next()
        .and_then(|t| t.partitions.into_iter().next())
        .expect("one partition");
    assert_eq!(p.error_code, 0, "Fetch {topic}-{partition}");
    let mut buf = p.records.clone().unwrap_or_default();
    let records = RecordBatchDecoder::decode_all(&mut buf)
        .expect("record batches")
        .into_iter()
        .flat_map(|set| set.records)
        .collect();
    (p, records)
}

/// The data records a read_committed consumer delivers: a transactional record of a producer
/// is dropped from its aborted transaction's first offset until that producer's ABORT marker.
fn read_committed(records: &[Record], aborted: &[(i64, i64)]) -> Vec<String> {
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    pending.sort_by_key(|a| a.1);
    let mut pending = pending.into_iter().peekable();
    let mut open: HashSet<i64> = HashSet::new();
    let mut out = Vec::new();
    for r in records {
        while let Some(&(pid, _)) = pending.peek().filter(|a| a.1 <= r.offset) {
            open.insert(pid);
            pending.next();
        }
        if r.control {
            // Control record key: version (int16), type (int16; 0 ABORT, 1 COMMIT).
            let key = r.key.as_deref().unwrap_or_default();
            if key.get(2..4) == Some(&[0, 0][..]) {
                open.remove(&r.producer_id);
            }
        } else if !(r.transactional && open.contains(&r.producer_id)) {
            out.push(value_of(r));
        }
    }
    out
}

fn value_of(r: &Record) -> String {
    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
}

// ---------------------------------------------------------------------------------------------
// The daemon's metrics endpoint

/// The sum of every series of metric `name` on the daemon's `/metrics` (0 when absent).
async fn metric(d: &Daemon, name: &str) -> f64 {
    let (status, body) = txn_testkit::http::get(d.metrics, "/metrics")
        .await
        .expect("/metrics answers");
    assert_eq!(status, 200, "/metrics");
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
