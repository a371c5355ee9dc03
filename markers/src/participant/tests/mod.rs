//! Tests of the participant across its files: each Kafka rule, the wire format, and a
//! property test over random interleavings.

mod property;
mod rules;
