//! The smallest broker hosting the transaction coordinator: one data partition `orders-0` with its
//! participant state, the coordinator on an in-memory log, markers applied in process, and one
//! committed transaction: InitProducerId -> AddPartitionsToTxn -> produce -> EndTxn(commit) ->
//! the COMMIT marker applied -> the last stable offset moves past the transaction.
//!
//! `cargo run -p coordinator --example embed_minimal`; walked through in
//! docs/broker-integration.md, "A minimal embedding".

use std::sync::Arc;

use coordinator::shell::Coordinator;
use coordinator::{AddPartitionsToTxnRequest, Config, EndTxnRequest, InitProducerIdRequest};
use markers::apply::{ApplyError, MarkerApplier};
use markers::participant::{
    BatchHeader, Marker, ParticipantConfig, PartitionState, ProduceDecision,
};
use txn_log::sync::Mutex;
use txn_log::{MemTxnLog, TopicPartition, TxnState};

/// The broker: one partition. A real one keeps a log per partition; here the offsets are enough.
struct Broker {
    orders: Mutex<PartitionState>,
}

#[coordinator::async_trait]
impl MarkerApplier for Broker {
    async fn apply_markers(
        &self,
        markers: Vec<(TopicPartition, Marker)>,
    ) -> Vec<Result<(), ApplyError>> {
        let mut results = Vec::new();
        for (partition, marker) in markers {
            if partition != TopicPartition::new("orders", 0) {
                results.push(Err(ApplyError::UnknownPartition));
                continue;
            }
            let mut p = self.orders.lock();
            results.push(match p.check_marker(&marker) {
                Err(refused) => Err(ApplyError::Rejected(refused)),
                Ok(pending) => {
                    // A real broker appends `pending.control_batch(offset, leader_epoch, now)
                    // .encode()` to its log here and makes it durable before answering.
                    let offset = p.next_offset();
                    let applied = p.complete_marker(pending, offset, now_ms());
                    let end = p.next_offset();
                    p.advance_high_watermark(end);
                    applied
                        .map(|_| ())
                        .map_err(|e| ApplyError::Storage(e.to_string()))
                }
            });
        }
        results
    }
}

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since_epoch.map_or(0, |d| d.as_millis() as i64)
}

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = Arc::new(Broker {
        orders: Mutex::new(PartitionState::new(ParticipantConfig::default(), 0)),
    });
    let config = Config {
        transaction_state_log_num_partitions: 1,
        ..Config::default()
    };
    let coordinator = Coordinator::builder(config, Arc::new(MemTxnLog::new()))
        .markers_in_process(broker.clone())
        .start()?;
    coordinator.load_all_partitions().await?;

    // The producer's calls, as the broker's request handlers would make them.
    let init = coordinator
        .init_producer_id(InitProducerIdRequest::new_producer(5, "app", 60_000))
        .await;
    assert!(init.error.is_none(), "InitProducerId: {}", init.error);
    let (producer_id, epoch) = (init.producer_id, init.producer_epoch);

    let orders = TopicPartition::new("orders", 0);
    let added = coordinator
        .add_partitions_to_txn(AddPartitionsToTxnRequest::add(
            3,
            "app",
            producer_id,
            epoch,
            &[orders],
        ))
        .await;
    assert!(added.results[0].partitions[0].1.is_none());

    // Produce three records in the transaction (the Produce handler of `orders-0`).
    {
        let mut p = broker.orders.lock();
        let batch = BatchHeader::transactional(producer_id, epoch, 0, 3);
        let ProduceDecision::Append(pending) = p.check_batch(&batch)? else {
            unreachable!("a first batch is no duplicate");
        };
        let offset = p.next_offset(); // the broker appends the batch at this offset
        p.complete_append(pending, offset)?;
        let end = p.next_offset();
        p.advance_high_watermark(end);
        assert_eq!(
            p.last_stable_offset(),
            0,
            "the open transaction holds readers back"
        );
    }

    let end = coordinator
        .end_txn(EndTxnRequest {
            version: 5,
            transactional_id: "app".into(),
            producer_id,
            producer_epoch: epoch,
            committed: true,
        })
        .await;
    assert!(end.error.is_none(), "EndTxn: {}", end.error);

    let state = coordinator.transaction_completed("app").await;
    assert_eq!(state, Ok(TxnState::CompleteCommit));
    let lso = broker.orders.lock().last_stable_offset();
    assert_eq!(lso, 4, "3 records and the COMMIT marker are readable");
    println!("committed: last stable offset of orders-0 is {lso}");
    coordinator.shutdown().await;
    Ok(())
}
