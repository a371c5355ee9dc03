//! loom model of `MemTxnLog`'s epoch fence.
//!
//! Property: a coordinator claiming epoch 2 while the old one (epoch 1) appends concurrently —
//! once `claim(2)` has resolved, no epoch-1 append lands; an epoch-1 append that resolved `Ok`
//! is in the log (unless the new owner removed it), and a fenced one left nothing behind. Also
//! that the async methods run under loom with the runtime-free `block_on`.
#![cfg(txn_loom)]

use loom::sync::Arc;
use loom_tests::PARTITION as P;
use txn_log::mem::block_on;
use txn_log::{
    CoordinatorEpoch, LogEntry, MemTxnLog, ProducerEpoch, ProducerId, TransactionalId, TxnLog,
    TxnRecord, TxnState,
};

fn rec() -> TxnRecord {
    TxnRecord {
        state: TxnState::Ongoing,
        txn_start_ms: 0,
        client_txn_version: txn_log::TxnVersion::V2,
        ..TxnRecord::initialized(ProducerId(1), ProducerEpoch(0), 1000, 0)
    }
}

#[test]
fn claim_fences_a_concurrent_stale_append() {
    loom_tests::builder().check(|| {
        let log = Arc::new(MemTxnLog::new());
        block_on(log.claim(P, CoordinatorEpoch(1))).unwrap();
        let old = {
            let log = log.clone();
            loom::thread::spawn(move || {
                let id = TransactionalId::new("old").unwrap();
                block_on(log.append(P, CoordinatorEpoch(1), vec![LogEntry::upsert(id, rec())]))
            })
        };
        block_on(log.claim(P, CoordinatorEpoch(2))).unwrap();
        // The claim has resolved: from here on, epoch 1 is fenced.
        let late = block_on(log.append(P, CoordinatorEpoch(1), Vec::new()));
        assert!(late.unwrap_err().is_fenced());
        let raced = old.join().unwrap();
        let loaded = block_on(log.load(P)).unwrap();
        assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(2)));
        match raced {
            Ok(()) => assert_eq!(loaded.records.len(), 1),
            Err(e) => {
                assert!(e.is_fenced(), "{e:?}");
                assert!(loaded.records.is_empty());
            }
        }
        // Crash keeps exactly the same state (Immediate mode: everything acknowledged is durable).
        log.crash();
        assert_eq!(block_on(log.load(P)).unwrap(), loaded);
    });
}
