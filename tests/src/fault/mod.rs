//! Fault injection and a history checker (see `docs/reliability.md`).
//!
//! - [`proxy`]: a loopback TCP proxy that delays, drops, blackholes and holds one request
//!   class (reordering), controlled at runtime;
//! - [`process`]: start / SIGKILL / SIGSTOP / SIGCONT / restart processes;
//! - [`cluster`]: the daemon and refbrokers, each behind a proxy;
//! - [`client`]: a transactional producer, a read_committed fetcher and a consumer group's
//!   committed offsets over `markers::wire`;
//! - [`history`] and [`checker`]: what happened, and the invariants I1-I5, I8, I9, I11-I14
//!   and W3 exactly-once;
//! - [`audit`]: offline replay of the coordinator's sled log (I12, I13);
//! - [`decisions`]: I10 from the partitions' markers and the coordinator's transition trail;
//! - [`workload`]: seeded, bounded runs of W1, W2, W3, W5 and W6 under a nemesis.

pub mod audit;
pub mod checker;
pub mod client;
pub mod cluster;
pub mod decisions;
pub mod history;
pub mod process;
pub mod proxy;
pub mod workload;
