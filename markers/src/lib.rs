//! Transaction markers: the coordinator-side writer that delivers COMMIT/ABORT control records
//! to every participant partition, and the participant-side state a broker embeds.
//!
//! - [`participant`] (broker side, pure and synchronous, builds without the `net` feature): the
//!   per-partition producer state a broker embeds — idempotent-produce checks (duplicates,
//!   sequences, epochs), marker application with Kafka's producer- and coordinator-epoch
//!   fencing, control batches in Kafka's exact format, the last stable offset and the
//!   aborted-transaction index for read_committed fetches, rebuild by replay, and staged
//!   transactional offset commits for `__consumer_offsets`. See `docs/markers.md`.
//!
//! - [`apply`]: markers in the participant's own types for a broker that hosts the coordinator
//!   (`MarkerApplier` on `(TopicPartition, Marker)`, typed results), and the one conversion
//!   from and to `WriteTxnMarkers`.
//!
//! Re-exports, so a broker implementing the writer's traits needs neither crate itself:
//! [`kafka_protocol`] (crates.io's kafka-protocol 0.18.0 with decoders that check every claimed
//! length against the bytes left, vendored as the package `txn-kafka-protocol`: the types of
//! `WriteTxnMarkers` in `LocalMarkerHandler` and of `wire`) and, with `net`, the
//! [`async_trait`](macro@async_trait) attribute of `LeaderResolver`, `MarkerTransport` and
//! `LocalMarkerHandler` (and of `txn_log::TxnLog`).
#![forbid(unsafe_code)]

/// The Kafka protocol library of this crate's messages: crates.io's kafka-protocol 0.18.0 with
/// bounded decoders, vendored by this workspace as the package `txn-kafka-protocol`. Use it (or
/// `coordinator::kafka_protocol`, the same crate) rather than depending on kafka-protocol from
/// crates.io, whose 0.18.0 aborts the process on a 14-byte frame claiming a huge array.
pub use kafka_protocol;

/// The attribute macro of the async traits a broker implements (`writer::LeaderResolver`,
/// `writer::MarkerTransport`, `writer::LocalMarkerHandler`, `txn_log::TxnLog`).
#[cfg(feature = "net")]
pub use async_trait::async_trait;

/// Kafka's error codes: the workspace's one error-code type (`txn_log::ErrorCode`, also
/// `coordinator::ErrorCode`), which every typed error here converts to (`code()`).
pub use txn_log::ErrorCode;

pub mod apply;
pub mod participant;

#[cfg(feature = "net")]
pub mod verify;
#[cfg(feature = "net")]
pub mod wire;
pub mod writer;
