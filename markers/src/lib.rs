//! Transaction markers: the coordinator-side writer that delivers COMMIT/ABORT control records
//! to every participant partition, and the participant-side state a broker embeds.
#![forbid(unsafe_code)]

pub mod participant;

#[cfg(feature = "net")]
pub mod wire;
pub mod writer;
