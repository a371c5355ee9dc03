//! Model 6, producer-id blocks under concurrent allocation and restart.
//!
//! Two engines of one coordinator process share a `ProducerIdAllocator` and each take two
//! ids the way `Engine` does (`next_id`, then `begin_refill`; a refill is the shell's
//! `TxnLog::allocate_block` followed by `add_block`, or `refill_failed` on error). Blocks hold
//! two ids, so the threads race refills. The log is a `MemTxnLog` in manual-durability mode
//! (the refilling thread makes its block durable itself, a separate step). Concurrently the
//! log restarts (`MemTxnLog::crash`: a block not yet durable is lost and its call fails) and a
//! second coordinator process, with an allocator of its own, takes two ids from the same log.
//!
//! Invariant: no producer id is handed out twice, across both allocators and the restart.
#![cfg(txn_loom)]

use coordinator::ProducerIdAllocator;
use txn_log::mem::{Durability, poll_once};
use txn_log::{MemTxnLog, ProducerId};

const BLOCK: u32 = 2;

/// The shell's refill: reserve a block in the log, wait until it is durable, add it.
fn refill(alloc: &ProducerIdAllocator, log: &MemTxnLog) {
    let Ok((block, ticket)) = log.allocate_block_sync(BLOCK, ProducerId(0)) else {
        return alloc.refill_failed();
    };
    log.make_durable();
    match poll_once(&mut log.wait_durable(ticket)) {
        Some(Ok(())) => alloc
            .add_block(block)
            .unwrap_or_else(|e| panic!("the log returned an overlapping block: {e}")),
        _ => alloc.refill_failed(),
    }
}

/// One id, as an engine takes it (two tries: the first may find the allocator empty).
fn take(alloc: &ProducerIdAllocator, log: &MemTxnLog) -> Option<ProducerId> {
    for _ in 0..2 {
        let id = alloc.next_id();
        if alloc.begin_refill() {
            refill(alloc, log);
        }
        if id.is_some() {
            return id;
        }
    }
    None
}

#[test]
fn pid_blocks() {
    loom_tests::builder().check(|| {
        let log = MemTxnLog::with_durability(Durability::Manual);
        let shared = ProducerIdAllocator::new();
        let engine = |alloc: ProducerIdAllocator, log: MemTxnLog| {
            loom::thread::spawn(move || vec![take(&alloc, &log), take(&alloc, &log)])
        };
        let e1 = engine(shared.clone(), log.clone());
        let e2 = engine(shared.clone(), log.clone());
        let restart = {
            let log = log.clone();
            loom::thread::spawn(move || {
                log.crash();
                let other = ProducerIdAllocator::new();
                vec![take(&other, &log), take(&other, &log)]
            })
        };
        let mut ids = e1.join().expect("engine 1");
        ids.extend(e2.join().expect("engine 2"));
        ids.extend(restart.join().expect("restarted process"));
        let ids: Vec<ProducerId> = ids.into_iter().flatten().collect();
        loom_tests::assert_unique(&ids, "producer id");
    });
}
