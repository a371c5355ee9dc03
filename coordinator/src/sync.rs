//! Loom facade: the crate reaches shared-state primitives only through here. It re-exports
//! `txn_log::sync`, which switches to loom's model-checked types under `--cfg txn_loom`.

pub(crate) use txn_log::sync::{Arc, Mutex};
