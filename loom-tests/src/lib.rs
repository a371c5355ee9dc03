//! loom models of fencing, failover recovery and the reaper. Every model lives in `tests/` and
//! compiles only under `--cfg txn_loom`; they drive the production types, not copies.
#![forbid(unsafe_code)]
