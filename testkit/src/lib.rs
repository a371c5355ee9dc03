//! The test kit: the one Kafka test client of this repository (on the vendored kafka-protocol
//! and `markers::wire`'s connection: a negotiating connection, a pool of plain connections by
//! address, wire helpers), the one scriptable fake broker, and the reading of a started
//! server's announcement from its stdout. The e2e tests, the fault harness, the daemon's tests
//! and txn-bench use them; the real clients (librdkafka, kafka-python, Java) and refbroker stay
//! the references.

pub mod blocking;
pub mod client;
pub mod fake_broker;
pub mod http;
pub mod pool;
pub mod process;
pub mod requests;
pub mod wire;
