//! The Kafka transaction coordinator.
//!
//! Without default features this crate is the pure engine: Kafka's transaction state machine as
//! a synchronous, deterministic core (requests, log outcomes and time in; effects out). The
//! `shell` feature (on by default) adds the tokio shell, the Kafka wire server and the
//! `txn-coordinator` daemon.
#![forbid(unsafe_code)]
