//! Engine tests: exact-effect handler tests, the scenario catalogue (S-numbers of the
//! reference §6) and a randomized model test. All run with `--no-default-features`.

mod fixture;
mod handlers;
mod model;
mod parking;
mod scenarios;
