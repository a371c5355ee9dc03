//! Engine tests: exact-effect handler tests, the scenario catalogue (the
//! scenarios of Kafka's `TransactionCoordinatorTest` and `TransactionStateManagerTest` that apply here, numbered S1-S1xx; each test's doc comment says what it checks), a randomized model test, and Apache Kafka's coordinator bugs as regression scenarios
//! (`kafka_bugs`, one test per JIRA case), and KIP-939's two-phase commit (`two_phase_commit`). All run with `--no-default-features`, except the
//! KAFKA-19999 scenario, which needs the participant of `markers` (`--features embed`).

mod fixture;
mod handlers;
mod kafka_bugs;
mod model;
mod parking;
mod refused_markers;
mod scenarios;
mod two_phase_commit;
