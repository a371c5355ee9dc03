//! In-process engine benchmark: prints numbers, asserts nothing.
//!
//! `cargo run --release -p coordinator --no-default-features --example engine_bench`
//!
//! Markers are acknowledged immediately. Appends are acknowledged immediately too (the pure
//! state machine: validation, record building, transition asserts, effect plumbing), and then a
//! second run sends them through `txn_log::MemTxnLog` (Immediate durability: the log's epoch
//! check, record versioning and its live/durable copies, no disk).

use std::time::Instant;

use coordinator::{
    AddPartitionsToTxnRequest, AddPartitionsTxn, Config, Effect, EndTxnRequest, Engine,
    InitProducerIdRequest, MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator, Request,
    RequestId, Response,
};
use txn_log::{
    CoordinatorEpoch, LoadedPartition, LogPartition, MemTxnLog, ProducerEpoch, ProducerId,
    ProducerIdBlock, TopicPartition,
};

struct Driver {
    eng: Engine,
    alloc: ProducerIdAllocator,
    next_block: i64,
    next_req: u64,
    now: i64,
    transitions: u64,
    last: Option<Response>,
    log: Option<MemTxnLog>,
}

impl Driver {
    /// Executes effects until none are left, acknowledging everything at once.
    fn run(&mut self) {
        while let Some(e) = self.eng.poll_effect() {
            match e {
                Effect::AppendLog {
                    io,
                    partition,
                    coordinator_epoch,
                    entries,
                } => {
                    self.transitions += 1;
                    match &self.log {
                        None => self.eng.handle_append_done(io),
                        Some(log) => match log.append_sync(partition, coordinator_epoch, entries) {
                            Ok(_) => self.eng.handle_append_done(io),
                            Err(e) => self.eng.handle_append_failed(io, e),
                        },
                    }
                }
                Effect::WriteMarkers(request) => self.eng.handle_markers_done(
                    Millis(self.now),
                    MarkerCompletion::of(&request, MarkerOutcome::Completed),
                ),
                Effect::Respond { response, .. } => self.last = Some(response),
                Effect::NeedProducerIds { block_size } => {
                    let first = ProducerId(self.next_block);
                    self.next_block += i64::from(block_size);
                    self.alloc
                        .add_block(ProducerIdBlock {
                            first,
                            len: block_size,
                        })
                        .expect("increasing");
                }
                _ => {}
            }
        }
    }

    fn send(&mut self, req: Request) -> Response {
        self.next_req += 1;
        self.now += 1;
        self.eng
            .handle_request(Millis(self.now), RequestId(self.next_req), req);
        self.run();
        self.last.take().expect("every request is answered")
    }
}

fn run(label: &str, log: Option<MemTxnLog>) {
    let ids: Vec<String> = (0..10_000).map(|i| format!("txn-{i}")).collect();
    let config = Config {
        transaction_state_log_num_partitions: 1,
        ..Config::default()
    };
    // One block up front; the engine asks for the next at 90 % (Kafka's prefetch), and the
    // driver adds it at once, so InitProducerId never sees an empty allocator.
    let alloc = ProducerIdAllocator::with_block(ProducerIdBlock {
        first: ProducerId(0),
        len: 1000,
    })
    .expect("valid");
    let mut eng = Engine::new(LogPartition(0), config, alloc.clone());
    if let Some(log) = &log {
        log.claim_sync(LogPartition(0), CoordinatorEpoch(1))
            .expect("claim");
    }
    eng.handle_load(Millis(0), CoordinatorEpoch(1), LoadedPartition::default());
    let mut d = Driver {
        eng,
        alloc,
        next_block: 1000,
        next_req: 0,
        now: 0,
        transitions: 0,
        last: None,
        log,
    };
    d.run();
    let parts = vec![
        TopicPartition::new("orders", 0),
        TopicPartition::new("orders", 1),
    ];
    let rounds = 10;
    let start = Instant::now();
    let mut cycles = 0u64;
    for _ in 0..rounds {
        for id in &ids {
            let Response::InitProducerId(r) = d.send(Request::InitProducerId(
                InitProducerIdRequest::new_producer(4, id, 60_000),
            )) else {
                panic!("wrong response")
            };
            assert!(r.error.is_none(), "{r:?}");
            let (pid, epoch) = (r.producer_id, r.producer_epoch);
            let _ = d.send(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
                version: 3,
                transactions: vec![AddPartitionsTxn {
                    transactional_id: id.clone(),
                    producer_id: pid,
                    producer_epoch: epoch,
                    verify_only: false,
                    partitions: parts.clone(),
                }],
            }));
            let _ = d.send(Request::EndTxn(EndTxnRequest {
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
        d.transitions,
        d.transitions as f64 / secs
    );
    println!(
        "  committed: {}, live ids: {}",
        d.eng.metrics().transactions_committed,
        d.eng.records().count()
    );
    let start = Instant::now();
    let n = 200_000u64;
    for i in 0..n {
        let id = &ids[(i % ids.len() as u64) as usize];
        let _ = d.send(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
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
    run("appends acked in-process", None);
    run("appends through MemTxnLog", Some(MemTxnLog::new()));
}
