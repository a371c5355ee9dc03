//! Engine tests: exact-effect handler tests, the scenario catalogue (S-numbers of the
//! the scenarios of Kafka's `TransactionCoordinatorTest` and `TransactionStateManagerTest` that apply here, numbered S1-S1xx; each test's doc comment says what it checks) and a randomized model test. All run with `--no-default-features`.

mod fixture;
mod handlers;
mod model;
mod parking;
mod scenarios;
