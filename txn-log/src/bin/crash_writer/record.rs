//! The record the crash writer stores for each producer id, shared with the test that checks
//! what survived (`tests/sled.rs`, through `#[path]`).

use txn_log::{ProducerEpoch, ProducerId, TopicPartition, TxnRecord, TxnState};

/// The record the writer stores for `pid` (the parent recomputes it to detect torn records).
pub(crate) fn expected_record(pid: i64) -> TxnRecord {
    let epoch = ProducerEpoch(i16::try_from(pid % 30_000).unwrap_or(0));
    TxnRecord {
        prev_producer_id: ProducerId(pid ^ 0x5555),
        state: TxnState::Ongoing,
        partitions: (0..=i32::try_from(pid % 7).unwrap_or(0))
            .map(|p| TopicPartition::new(format!("topic-{pid}"), p))
            .collect(),
        txn_start_ms: pid,
        client_txn_version: txn_log::TxnVersion::V2,
        ..TxnRecord::initialized(ProducerId(pid), epoch, 60_000, pid * 2)
    }
}
