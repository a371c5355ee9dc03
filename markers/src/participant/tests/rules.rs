//! One test per participant rule.
