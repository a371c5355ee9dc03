//! Transaction markers: the coordinator-side writer that delivers COMMIT/ABORT control records
//! to every participant partition, and the participant-side state a broker embeds.
//!
//! - [`participant`] (broker side, pure and synchronous, builds without the `net` feature): the
//!   per-partition producer state a broker embeds — idempotent-produce checks (duplicates,
//!   sequences, epochs), marker application with Kafka's producer- and coordinator-epoch
//!   fencing, control batches in Kafka's exact format, the last stable offset and the
//!   aborted-transaction index for read_committed fetches, rebuild by replay, and staged
//!   transactional offset commits for `__consumer_offsets`. See `docs/markers.md`.
#![forbid(unsafe_code)]

pub mod participant;

#[cfg(feature = "net")]
pub mod wire;
pub mod writer;
