//! Markers per second through the marker writer to 1, 3 and 10 in-process brokers.
//!
//! `cargo run --release -p markers --example writer_bench [decisions]`
//!
//! Each decision has 3 partitions of a 30-partition topic spread round-robin over the brokers;
//! every broker acknowledges every marker at once (in process, no IO), so this measures the
//! writer itself: planning, batching, leader lookups, completions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use markers::writer::{
    BrokerEndpoint, InProcessTransport, LeaderLookup, MarkerOutcome, MarkerWriter,
    StaticLeaderResolver, TxnMarkerRequest, WriterConfig, build_response, codes,
};
use tokio::sync::mpsc;
use txn_log::{
    CoordinatorEpoch, LogPartition, ProducerEpoch, ProducerId, TopicPartition, TransactionalId,
    TxnResult,
};

const PARTITIONS: i32 = 30;
const PER_DECISION: i32 = 3;

async fn run(brokers: i32, decisions: usize) -> (Duration, u64, u64) {
    let resolver = Arc::new(StaticLeaderResolver::new(LeaderLookup::TopicGone));
    for p in 0..PARTITIONS {
        let node = p % brokers;
        resolver.set(
            TopicPartition::new("bench", p),
            LeaderLookup::Leader(BrokerEndpoint::new(node, "in-process", 0)),
        );
    }
    let transport = Arc::new(InProcessTransport::from_fn(|_, request, _| {
        Ok(build_response(&request, |_, _, _| codes::NONE))
    }));
    let (tx, mut rx) = mpsc::channel(4096);
    let writer = MarkerWriter::spawn(resolver, transport, WriterConfig::default(), tx);
    let start = Instant::now();
    let w = writer.clone();
    let producer = tokio::spawn(async move {
        for i in 0..decisions {
            let first = (i as i32 * 7) % PARTITIONS;
            let partitions = (0..PER_DECISION)
                .map(|k| TopicPartition::new("bench", (first + k) % PARTITIONS))
                .collect();
            w.submit(TxnMarkerRequest {
                transactional_id: TransactionalId::new(format!("txn-{i}")).expect("id"),
                producer_id: ProducerId(i as i64),
                producer_epoch: ProducerEpoch(0),
                coordinator_epoch: CoordinatorEpoch(0),
                log_partition: LogPartition((i % 50) as u32),
                result: TxnResult::Commit,
                partitions,
                txn_version: txn_log::TxnVersion::V2,
            })
            .await
            .expect("writer running");
        }
    });
    for _ in 0..decisions {
        let c = rx.recv().await.expect("completion");
        assert_eq!(c.outcome, MarkerOutcome::Completed);
    }
    let elapsed = start.elapsed();
    producer.await.expect("producer");
    let st = writer.stats();
    assert_eq!(st.pending_decisions, 0);
    (elapsed, st.markers_acked, st.requests_sent.max(1))
}

fn main() {
    let decisions: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "marker writer, in-process brokers, {decisions} decisions x {PER_DECISION} partitions"
    );
    println!(
        "{:>8} {:>10} {:>14} {:>14} {:>12} {:>16}",
        "brokers", "secs", "markers/s", "decisions/s", "requests", "markers/request"
    );
    for brokers in [1, 3, 10] {
        let (elapsed, markers, requests) = rt.block_on(run(brokers, decisions));
        let secs = elapsed.as_secs_f64();
        println!(
            "{:>8} {:>10.3} {:>14.0} {:>14.0} {:>12} {:>16.1}",
            brokers,
            secs,
            markers as f64 / secs,
            decisions as f64 / secs,
            requests,
            markers as f64 / requests as f64
        );
    }
}
