//! Throughput of the participant's producer state (prints numbers, asserts nothing).
//!
//! ```sh
//! cargo run --release -p markers --no-default-features --example participant_bench
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use markers::participant::{
    BatchHeader, Marker, ParticipantConfig, PartitionState, ProduceDecision, TxnVersion,
};
use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};

fn report(name: &str, ops: u64, elapsed: Duration) {
    let per_sec = ops as f64 / elapsed.as_secs_f64();
    let ns = elapsed.as_nanos() as f64 / ops as f64;
    println!("{name:<48} {ops:>10} ops  {per_sec:>14.0} ops/s  {ns:>8.1} ns/op");
}

fn state() -> PartitionState {
    PartitionState::new(ParticipantConfig::default(), 0)
}

fn produce(p: &mut PartitionState, h: &BatchHeader) {
    match p.check_batch(h) {
        Ok(ProduceDecision::Append(pending)) => {
            let at = p.next_offset();
            p.complete_append(pending, at).expect("recorded");
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn marker(pid: ProducerId, epoch: i16, result: TxnResult, tv: TxnVersion) -> Marker {
    Marker {
        producer_id: pid,
        producer_epoch: ProducerEpoch(epoch),
        coordinator_epoch: CoordinatorEpoch(1),
        result,
        txn_version: tv,
    }
}

fn apply(p: &mut PartitionState, m: &Marker) {
    let pending = p.check_marker(m).expect("accepted");
    let at = p.next_offset();
    p.complete_marker(pending, at, 0).expect("recorded");
}

fn main() {
    const PRODUCERS: i64 = 1_000;
    const N: u64 = 2_000_000;

    // Idempotent produce: check + complete, round-robin over 1000 producers.
    let mut p = state();
    let mut seq = vec![0i32; PRODUCERS as usize];
    let t = Instant::now();
    for i in 0..N {
        let k = (i % PRODUCERS as u64) as usize;
        let h = BatchHeader::idempotent(ProducerId(k as i64), ProducerEpoch(0), seq[k], 10);
        produce(&mut p, &h);
        seq[k] += 10;
    }
    report(
        "produce check+complete (1000 idempotent producers)",
        N,
        t.elapsed(),
    );

    // Duplicate detection: a retry of one of the last 5 batches.
    let t = Instant::now();
    for i in 0..N {
        let k = (i % PRODUCERS as u64) as usize;
        let h = BatchHeader::idempotent(ProducerId(k as i64), ProducerEpoch(0), seq[k] - 20, 10);
        let _ = black_box(p.check_batch(&h).expect("duplicate"));
    }
    report("duplicate check", N, t.elapsed());

    // Transactions: 4 transactional batches + 1 marker each, TV2 (epoch bump per txn), 1/4 aborts.
    let mut p = state();
    let mut epoch = vec![0i16; PRODUCERS as usize];
    const TXNS: u64 = 400_000;
    let t = Instant::now();
    let mut markers_time = Duration::ZERO;
    for i in 0..TXNS {
        let k = (i % PRODUCERS as u64) as usize;
        let pid = ProducerId(k as i64);
        for b in 0..4 {
            produce(
                &mut p,
                &BatchHeader::transactional(pid, ProducerEpoch(epoch[k]), b * 5, 5),
            );
        }
        let result = if i % 4 == 0 {
            TxnResult::Abort
        } else {
            TxnResult::Commit
        };
        let m = marker(pid, epoch[k] + 1, result, TxnVersion::V2);
        let tm = Instant::now();
        apply(&mut p, &m);
        markers_time += tm.elapsed();
        epoch[k] += 1;
        if epoch[k] > 30_000 {
            epoch[k] = 0;
        }
        p.advance_high_watermark(p.next_offset());
    }
    let total = t.elapsed();
    report("txn (4 batches + marker + hw) per second", TXNS, total);
    report("  of which marker check+complete", TXNS, markers_time);
    println!(
        "  aborted index: {} entries, LSO {}",
        p.aborted_index_len(),
        p.last_stable_offset()
    );

    // read_committed query over the aborted index (a 1000-offset fetch at random positions).
    let end = p.next_offset();
    const Q: u64 = 1_000_000;
    let t = Instant::now();
    let mut found = 0usize;
    for i in 0..Q {
        let from = (i.wrapping_mul(2_654_435_761) % end as u64) as i64;
        found += p.read_committed(from, from + 1000).aborted.len();
    }
    report("read_committed(from, from+1000) query", Q, t.elapsed());
    black_box(found);

    // Control batch encoding.
    let m = marker(ProducerId(7), 3, TxnResult::Commit, TxnVersion::V0);
    let mut pp = state();
    let pending = pp.check_marker(&m).expect("accepted");
    const E: u64 = 1_000_000;
    let t = Instant::now();
    let mut log = BytesMut::new();
    for i in 0..E {
        let bytes = pending
            .control_batch(i as i64, 0, 0)
            .encode()
            .expect("encodes");
        if i < 200_000 {
            log.extend_from_slice(&bytes);
        }
        black_box(bytes);
    }
    report("control batch encode", E, t.elapsed());

    // Replay: 200k control batches from bytes (decode + apply).
    let log = log.freeze();
    let t = Instant::now();
    let replayed =
        PartitionState::replay_log(ParticipantConfig::default(), 0, log).expect("replays");
    report("replay control batches from bytes", 200_000, t.elapsed());
    black_box(replayed.next_offset());
}
