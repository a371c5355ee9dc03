//! The `TxnLog` conformance suite, run against `MemTxnLog` and `SledTxnLog`.
//!
//! Guards every obligation of the trait that can be checked through the trait alone: fencing,
//! `NotClaimed`, atomic batches, tombstones, order, unique producer-id blocks and concurrency.

use txn_log::MemTxnLog;
use txn_log::mem::{Durability, block_on};
use txn_log::suite;

/// One `#[test]` per suite check, for each implementation.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod mem {
            use super::*;
            $(
                #[test]
                fn $name() {
                    block_on(suite::$name(&MemTxnLog::new()));
                }
            )*
        }

        /// `MemTxnLog` in manual durability mode, made durable by a helper thread: checks
        /// that callers really wait for durability and are woken.
        mod mem_manual {
            use super::*;
            $(
                #[test]
                fn $name() {
                    let log = MemTxnLog::with_durability(Durability::Manual);
                    let (stop, stopped) = std::sync::mpsc::channel::<()>();
                    let flusher = {
                        let log = log.clone();
                        std::thread::spawn(move || {
                            while stopped.try_recv().is_err() {
                                log.make_durable();
                                std::thread::yield_now();
                            }
                        })
                    };
                    block_on(suite::$name(&log));
                    stop.send(()).unwrap();
                    flusher.join().unwrap();
                }
            )*
        }

        #[cfg(feature = "sled")]
        mod sled {
            use super::*;
            $(
                #[test]
                fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let log = txn_log::SledTxnLog::open_path(dir.path()).unwrap();
                    block_on(suite::$name(&log));
                    drop(log);
                }
            )*
        }
    };
}

conformance!(
    claim_append_load_round_trip,
    load_of_an_unknown_partition_is_empty,
    stale_append_is_fenced_and_writes_nothing,
    stale_claim_is_fenced_and_equal_or_higher_claims_succeed,
    append_with_an_unclaimed_epoch_is_not_claimed,
    batches_apply_entirely_and_the_last_entry_for_an_id_wins,
    tombstones_remove_ids,
    appends_apply_in_call_order,
    partitions_are_independent,
    producer_id_blocks_never_overlap,
    zero_length_block_is_invalid,
    many_concurrent_appenders_all_land,
    claim_fences_concurrent_appends_of_the_old_epoch,
    empty_append_checks_the_fence,
    blocks_start_at_the_floor_and_never_reuse_ids,
);

/// `run_all` (the entry point for third-party implementations) passes on `MemTxnLog`.
#[test]
fn run_all_passes_on_mem() {
    block_on(suite::run_all(MemTxnLog::new));
}
