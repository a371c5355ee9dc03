//! Loom facade: shared-state primitives come from here, never from `std::sync` directly.
//!
//! Under `--cfg txn_loom` these are loom's model-checked types; otherwise std's. `Mutex::lock`
//! does not poison: a panic while holding the lock is already a bug that aborts the test.

#[cfg(not(txn_loom))]
#[allow(clippy::disallowed_types)]
mod imp {
    pub use std::sync::Arc;
    pub use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};

    /// A mutex whose `lock` returns the guard directly (no poisoning).
    #[derive(Debug, Default)]
    pub struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        /// Creates a new mutex holding `value`.
        pub fn new(value: T) -> Self {
            Self(std::sync::Mutex::new(value))
        }

        /// Locks the mutex, ignoring poisoning.
        pub fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}

#[cfg(txn_loom)]
mod imp {
    pub use loom::sync::Arc;
    pub use loom::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};

    /// A mutex whose `lock` returns the guard directly (no poisoning).
    #[derive(Debug, Default)]
    pub struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        /// Creates a new mutex holding `value`.
        pub fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        /// Locks the mutex, ignoring poisoning.
        pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}

pub use imp::*;
