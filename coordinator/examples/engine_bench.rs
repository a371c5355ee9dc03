//! In-process engine benchmark: prints numbers, asserts nothing.
//!
//! `cargo run --release -p coordinator --no-default-features --example engine_bench`
//!
//! Driven by `coordinator::testing::EngineHarness`. Markers are acknowledged immediately.
//! Appends are acknowledged immediately too (the pure state machine: validation, record
//! building, transition asserts, effect plumbing), and then a second run sends them through
//! `txn_log::MemTxnLog` (Immediate durability: the log's epoch check, record versioning and
//! its live/durable copies, no disk).

use std::time::Instant;

use coordinator::testing::{Appends, EngineHarness, Markers};
use coordinator::{
    AddPartitionsToTxnRequest, AddPartitionsTxn, Config, EndTxnRequest, InitProducerIdRequest,
    ProducerIdAllocator, Request, Response,
};
use txn_log::{
    CoordinatorEpoch, LogPartition, MemTxnLog, ProducerEpoch, ProducerId, ProducerIdBlock,
    TopicPartition,
};

fn run(label: &str, appends: Appends) {
    let ids: Vec<String> = (0..10_000).map(|i| format!("txn-{i}")).collect();
    let config = Config {
        transaction_state_log_num_partitions: 1,
        ..Config::default()
    };
    // One block up front; the engine asks for the next at 90 % (Kafka's prefetch), and the
    // harness adds it at once, so InitProducerId never sees an empty allocator.
    let alloc = ProducerIdAllocator::with_block(ProducerIdBlock {
        first: ProducerId(0),
        len: 1000,
    })
    .expect("valid");
    let log = MemTxnLog::new();
    // The log hands out blocks after the one above.
    log.allocate_block_sync(1000, ProducerId(0))
        .expect("first block");
    let mut d = EngineHarness::new(log, LogPartition(0), config, alloc)
        .with_appends(appends)
        .with_markers(Markers::AckAtOnce);
    d.load(CoordinatorEpoch(1)).expect("claim and load");
    d.drive();
    let parts = vec![
        TopicPartition::new("orders", 0),
        TopicPartition::new("orders", 1),
    ];
    let rounds = 10;
    let start = Instant::now();
    let mut cycles = 0u64;
    for _ in 0..rounds {
        for id in &ids {
            let Response::InitProducerId(r) = d.call(Request::InitProducerId(
                InitProducerIdRequest::new_producer(4, id, 60_000),
            )) else {
                panic!("wrong response")
            };
            assert!(r.error.is_none(), "{r:?}");
            let (pid, epoch) = (r.producer_id, r.producer_epoch);
            let _ = d.call(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest::add(
                3, id, pid, epoch, &parts,
            )));
            let _ = d.call(Request::EndTxn(EndTxnRequest {
                version: 5,
                transactional_id: id.clone(),
                producer_id: pid,
                producer_epoch: epoch,
                committed: true,
            }));
            cycles += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("engine_bench [{label}]: {} ids, {rounds} rounds", ids.len());
    println!(
        "  full init/add/end/complete cycles: {cycles} in {secs:.3} s = {:.0} cycles/s",
        cycles as f64 / secs
    );
    println!(
        "  durable transitions (appends applied): {} = {:.0} transitions/s",
        d.appended(),
        d.appended() as f64 / secs
    );
    println!(
        "  committed: {}, live ids: {}",
        d.engine().metrics().transactions_committed,
        d.engine().records().count()
    );
    let start = Instant::now();
    let n = 200_000u64;
    for i in 0..n {
        let id = &ids[(i % ids.len() as u64) as usize];
        let _ = d.call(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            version: 5,
            transactions: vec![AddPartitionsTxn {
                transactional_id: id.clone(),
                producer_id: ProducerId(0),
                producer_epoch: ProducerEpoch(0),
                verify_only: true,
                partitions: parts.clone(),
            }],
        }));
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "  verify-only AddPartitionsToTxn (no write): {:.0} requests/s",
        n as f64 / secs
    );
}

fn main() {
    run("appends acked in-process", Appends::Unlogged);
    run("appends through MemTxnLog", Appends::Immediate);
}
