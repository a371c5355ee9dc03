//! The same requests to Apache Kafka 4.4.0 (a KRaft single node run from the jars of
//! `TXN_TEST_KAFKA_CLASSPATH`, `txn_tests::kafka_node`) and to refbroker with its embedded coordinator get the same
//! answers: ListTransactions v2 (KIP-1152) with transactional-id patterns, over the same
//! transactional ids. Skipped (and passing) without `TXN_TEST_KAFKA_CLASSPATH`, as the Kafka
//! tool tests; with it any difference fails.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use kafka_protocol::messages::{
    FindCoordinatorRequest, InitProducerIdRequest, ListTransactionsRequest, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use txn_testkit::wire::{self, Conn};
use txn_tests::kafka_node::{KafkaNode, KafkaNodeOptions};
use txn_tests::refbroker::process::BrokerProcess;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

async fn connect(addr: SocketAddr) -> Conn {
    wire::connect(addr, "differential").await
}

/// InitProducerId for `id` at its coordinator, retried while the coordinator gets ready
/// (Kafka creates `__transaction_state` on the first request; bounded: 120 s).
async fn init(bootstrap: SocketAddr, id: &str) {
    let mut c = connect(bootstrap).await;
    for _ in 0..240 {
        let fc = c
            .call(
                &FindCoordinatorRequest::default()
                    .with_key_type(1)
                    .with_key(sb(id)),
                2,
            )
            .await
            .expect("FindCoordinator");
        if fc.error_code == 0 {
            let at = SocketAddr::from(([127, 0, 0, 1], u16::try_from(fc.port).expect("port")));
            let mut req = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(sb(id))))
                .with_transaction_timeout_ms(60_000);
            req.producer_id = ProducerId(-1);
            req.producer_epoch = -1;
            let r = connect(at)
                .await
                .call(&req, 4)
                .await
                .expect("InitProducerId");
            if r.error_code == 0 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("InitProducerId({id}) at {bootstrap} never succeeded");
}

/// ListTransactions v2 with `pattern`: the error code and the ids listed, sorted.
async fn list(addr: SocketAddr, pattern: &str) -> (i16, Vec<String>) {
    let req = ListTransactionsRequest::default().with_transactional_id_pattern(Some(sb(pattern)));
    let r = connect(addr)
        .await
        .call(&req, 2)
        .await
        .expect("ListTransactions v2");
    let mut ids: Vec<String> = r
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.0.to_string())
        .collect();
    ids.sort();
    (r.error_code, ids)
}

fn sorted(ids: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// Transactional ids both sides get, chosen to tell whole-id matching, case and escapes apart.
const IDS: [&str; 6] = [
    "orders-1",
    "orders-22",
    "payments-1",
    "Orders-3",
    "o.x",
    "oax",
];

/// Patterns in the syntax both sides read (RE2's is a subset of Java's), and bad ones.
const PATTERNS: [&str; 14] = [
    "",
    ".*",
    "orders-.*",
    "orders",
    "orders-\\d",
    "orders-\\d+",
    ".*-1",
    "(?i)orders-.*",
    "o.x",
    "o\\.x",
    "payments-1|oax",
    "[a-z]+-[0-9]{2}",
    "(",
    "[z-a]",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_transactions_v2_patterns_answer_as_kafka_does() {
    let Ok(classpath) = std::env::var("TXN_TEST_KAFKA_CLASSPATH") else {
        eprintln!(
            "list_transactions_v2_patterns_answer_as_kafka_does: SKIPPED: \
             TXN_TEST_KAFKA_CLASSPATH is not set"
        );
        return;
    };
    let kafka_dir = tempfile::tempdir().expect("dir");
    let kafka = KafkaNode::start(&classpath, kafka_dir.path(), &KafkaNodeOptions::default())
        .await
        .expect("Apache Kafka starts");
    let ours_dir = tempfile::tempdir().expect("dir");
    let args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        ours_dir.path().to_str().expect("utf-8"),
        "--topics",
        "t:1",
        "--embedded-coordinator",
        "--set",
        "transaction.state.log.num.partitions=1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let ours = BrokerProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_refbroker")),
        &args,
        Duration::from_secs(30),
    )
    .expect("refbroker starts");

    for id in IDS {
        init(kafka.addr(), id).await;
        init(ours.addr(), id).await;
    }
    // The reference itself, so that agreeing on nothing cannot pass.
    assert_eq!(list(kafka.addr(), ".*").await, (0, sorted(&IDS)));
    assert_eq!(
        list(kafka.addr(), "orders-.*").await,
        (0, sorted(&["orders-1", "orders-22"]))
    );
    assert_eq!(
        list(kafka.addr(), "(").await.0,
        128,
        "INVALID_REGULAR_EXPRESSION"
    );
    let mut differences = Vec::new();
    for pattern in PATTERNS {
        let theirs = list(kafka.addr(), pattern).await;
        let mine = list(ours.addr(), pattern).await;
        if theirs != mine {
            differences.push(format!(
                "pattern {pattern:?}: Kafka {theirs:?}, refbroker {mine:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
