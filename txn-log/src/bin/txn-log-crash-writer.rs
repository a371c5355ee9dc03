//! Test helper for `tests/sled.rs` (crash consistency): not a user tool.
//!
//! `txn-log-crash-writer <dir> <cycle> <writers>` opens a `SledTxnLog` in `<dir>`, claims log
//! partition 0 with coordinator epoch `cycle + 1`, then runs `<writers>` threads that append in
//! a loop until the process is killed. Each acknowledged operation is printed on its own line
//! (stdout is line-buffered), only after the call resolved `Ok`:
//!
//! ```text
//! claimed <epoch>
//! ack <cycle> <writer> <seq>          batch of 3 records c<cycle>-w<writer>-<seq>-{0,1,2}
//!                                     plus an overwrite of w<writer>-last with <seq>
//! block <first> <len>                 a producer id block
//! ```
//!
//! Record contents are a pure function of the ids (see `expected_record`), so the parent can
//! check that nothing is torn.

use txn_log::mem::block_on;
use txn_log::{
    CoordinatorEpoch, LogEntry, LogPartition, ProducerId, SledTxnLog, TransactionalId, TxnLog,
};

#[path = "crash_writer/record.rs"]
mod record;

use record::expected_record;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (dir, cycle, writers) = match &args[..] {
        [_, dir, cycle, writers] => (
            dir.clone(),
            cycle.parse::<i64>().expect("cycle"),
            writers.parse::<i64>().expect("writers"),
        ),
        _ => {
            eprintln!("usage: txn-log-crash-writer <dir> <cycle> <writers>");
            std::process::exit(2);
        }
    };
    let log = SledTxnLog::open_path(&dir).expect("open");
    let epoch = CoordinatorEpoch(i32::try_from(cycle + 1).expect("epoch"));
    block_on(log.claim(LogPartition(0), epoch)).expect("claim");
    // `println!` holds the stdout lock for the whole line, and stdout flushes at each newline.
    println!("claimed {}", epoch.0);
    std::thread::scope(|s| {
        for w in 0..writers {
            let log = &log;
            s.spawn(move || {
                for seq in 0i64.. {
                    let base = (cycle * 1_000 + w) * 1_000_000 + seq * 3;
                    let mut batch: Vec<LogEntry> = (0..3)
                        .map(|k| {
                            let id = format!("c{cycle}-w{w}-{seq}-{k}");
                            LogEntry::upsert(
                                TransactionalId::new(id).unwrap(),
                                expected_record(base + k),
                            )
                        })
                        .collect();
                    batch.push(LogEntry::upsert(
                        TransactionalId::new(format!("w{w}-last")).unwrap(),
                        expected_record(seq),
                    ));
                    block_on(log.append(LogPartition(0), epoch, batch)).expect("append");
                    println!("ack {cycle} {w} {seq}");
                    if seq % 16 == 0 {
                        let b = block_on(log.allocate_block(100, ProducerId(0))).expect("allocate");
                        println!("block {} {}", b.first.0, b.len);
                    }
                }
            });
        }
    });
}
