//! The coordinator's wire answers, checked the same way against both places it runs: the
//! standalone daemon (with refbrokers as its brokers) and a refbroker that embeds it. The two
//! modes share the engine and the protocol conversions; these checks keep what each adds
//! around them (the broker-side partition check, version handling) from drifting apart.
//! Error codes are Apache Kafka's for the same requests.

use std::net::SocketAddr;
use std::time::Duration;

use kafka_protocol::messages as km;
use txn_testkit::pool::Pool;
use txn_testkit::requests::{add_errors, add_req_v3, end_req, init_req};
use txn_testkit::wire::sb as s;
use txn_tests::e2e::{Cluster, ClusterSpec, Mode, find_coordinator};

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// The coordinator of `id` (FindCoordinator through the first broker), once it answers.
async fn coordinator_of(cluster: &Cluster, id: &str) -> SocketAddr {
    let bootstrap = cluster.brokers[0].addr;
    for _ in 0..300 {
        if let Ok(addr) = find_coordinator(bootstrap, id) {
            return addr;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no coordinator for {id}:\n{}", cluster.logs());
}

/// InitProducerId until the coordinator has loaded its log partition (COORDINATOR_LOAD_IN_
/// PROGRESS and NOT_COORDINATOR are retried, bounded).
async fn init_ok(pool: &mut Pool, at: SocketAddr, id: &str, timeout_ms: i32) -> (i64, i16) {
    for _ in 0..300 {
        let r = pool.call(at, &init_req(Some(id), timeout_ms), 4).await;
        match r.map(|r| (r.error_code, r.producer_id.0, r.producer_epoch)) {
            Ok((0, pid, epoch)) => return (pid, epoch),
            Ok((14 | 15 | 16 | 51, ..)) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok((e, ..)) => panic!("InitProducerId({id}) failed with {e}"),
        }
    }
    panic!("InitProducerId({id}) kept being retriable");
}

/// One mode's cluster and a pool of connections to the coordinator of "x", the id every
/// check uses.
struct Probe {
    mode: Mode,
    cluster: Cluster,
    pool: Pool,
    at: SocketAddr,
}

impl Probe {
    /// The answer to `req` (sent as `version`), or a panic with the servers' logs.
    async fn ask<R: kafka_protocol::protocol::Request>(
        &mut self,
        req: &R,
        version: i16,
    ) -> R::Response {
        let r = self.pool.call(self.at, req, version).await;
        r.unwrap_or_else(|e| panic!("{:?}: {e}\n{}", self.mode, self.cluster.logs()))
    }

    /// The partition errors of AddPartitionsToTxn (v0-3, sent as `version`) of `parts` to
    /// x's transaction as producer `pid` at `epoch`.
    async fn add(
        &mut self,
        (pid, epoch): (i64, i16),
        parts: &[(&str, i32)],
        version: i16,
    ) -> Vec<(String, i32, i16)> {
        add_errors(&self.ask(&add_req_v3("x", pid, epoch, parts), version).await)
    }
}

/// Kafka's answers to the error paths of the transaction APIs and to the broker-side
/// partition check, asked of whichever process hosts the coordinator.
async fn error_paths_match_kafka(mode: Mode) {
    let cluster =
        Cluster::start(ClusterSpec::new(mode, &["t:2"]).set("transaction.max.timeout.ms=100000"));
    let mut pool = Pool::new("wire-conformance", Duration::from_secs(10));
    let at = coordinator_of(&cluster, "x").await;
    let (pid, epoch) = init_ok(&mut pool, at, "x", 10_000).await;
    let mut x = Probe {
        mode,
        cluster,
        pool,
        at,
    };
    let t0 = [("t", 0)];

    // Empty id -> INVALID_REQUEST; timeout above the max -> INVALID_TRANSACTION_TIMEOUT.
    let r = x.ask(&init_req(Some(""), 1000), 1).await;
    assert_eq!(r.error_code, INVALID_REQUEST, "{mode:?}");
    let r = x.ask(&init_req(Some("x"), 100_001), 4).await;
    assert_eq!(r.error_code, INVALID_TRANSACTION_TIMEOUT, "{mode:?}");
    // EndTxn with nothing open: INVALID_TXN_STATE.
    let r = x.ask(&end_req("x", pid, epoch, true), 1).await;
    assert_eq!(r.error_code, INVALID_TXN_STATE, "{mode:?}");
    // Wrong epoch on AddPartitionsToTxn v0 (PRODUCER_FENCED mapped for old versions).
    assert_eq!(
        x.add((pid, epoch + 1), &t0, 0).await,
        [("t".into(), 0, INVALID_PRODUCER_EPOCH)],
        "{mode:?}"
    );
    // Wrong producer id: INVALID_PRODUCER_ID_MAPPING.
    assert_eq!(
        x.add((pid + 12345, epoch), &t0, 3).await,
        [("t".into(), 0, INVALID_PRODUCER_ID_MAPPING)],
        "{mode:?}"
    );
    // A topic no broker has, and a partition beyond a topic's count: UNKNOWN_TOPIC_OR_PARTITION
    // for them, OPERATION_NOT_ATTEMPTED for the rest of the transaction; nothing is added.
    assert_eq!(
        x.add((pid, epoch), &[("t", 0), ("nope", 0), ("t", 7)], 3)
            .await,
        [
            ("nope".into(), 0, UNKNOWN_TOPIC_OR_PARTITION),
            ("t".into(), 0, OPERATION_NOT_ATTEMPTED),
            ("t".into(), 7, UNKNOWN_TOPIC_OR_PARTITION),
        ],
        "{mode:?}"
    );
    let r = x.ask(&end_req("x", pid, epoch, false), 1).await;
    assert_eq!(
        r.error_code, INVALID_TXN_STATE,
        "{mode:?}: the refused add opened nothing"
    );
    // Unknown id: DescribeTransactions says TRANSACTIONAL_ID_NOT_FOUND.
    let describe = km::DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![km::TransactionalId(s("never"))]);
    let r = x.ask(&describe, 0).await;
    assert_eq!(
        r.transaction_states[0].error_code, TRANSACTIONAL_ID_NOT_FOUND,
        "{mode:?}"
    );
    // A second InitProducerId bumps the epoch; the old epoch is fenced: PRODUCER_FENCED from
    // v2 on, INVALID_PRODUCER_EPOCH below.
    let (pid2, epoch2) = init_ok(&mut x.pool, at, "x", 10_000).await;
    assert_eq!((pid2, epoch2), (pid, epoch + 1), "{mode:?}");
    assert_eq!(
        x.add((pid, epoch), &t0, 3).await,
        [("t".into(), 0, PRODUCER_FENCED)],
        "{mode:?}"
    );
    assert_eq!(
        x.add((pid, epoch), &t0, 1).await,
        [("t".into(), 0, INVALID_PRODUCER_EPOCH)],
        "{mode:?}"
    );
    // EndTxn v5 (TV2) on an open transaction returns the next producer id and epoch.
    assert_eq!(
        x.add((pid2, epoch2), &t0, 3).await,
        [("t".into(), 0, NONE)],
        "{mode:?}"
    );
    let r = x.ask(&end_req("x", pid2, epoch2, false), 5).await;
    assert_eq!(r.error_code, NONE, "{mode:?}");
    assert_eq!(
        (r.producer_id.0, r.producer_epoch),
        (pid2, epoch2 + 1),
        "{mode:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_daemon_answers_as_kafka() {
    error_paths_match_kafka(Mode::Standalone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_coordinator_answers_as_kafka() {
    error_paths_match_kafka(Mode::Embedded).await;
}
