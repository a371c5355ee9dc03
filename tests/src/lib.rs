//! Test harness shared by the integration and end-to-end tests, and the `refbroker` reference
//! broker.
#![forbid(unsafe_code)]

pub mod e2e;
pub mod etcd;
pub mod fault;
pub mod kafka_node;
pub mod kafka_tool;
pub mod refbroker;
pub mod sim;
pub mod txn_steps;
