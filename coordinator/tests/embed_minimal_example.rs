//! Runs `examples/embed_minimal.rs` in the suite: the minimal embedding of
//! docs/broker-integration.md commits its transaction and the participant's LSO moves.
#![cfg(feature = "embed")]

#[path = "../examples/embed_minimal.rs"]
mod example;

#[test]
fn the_minimal_embedding_commits_a_transaction() {
    example::main().expect("the example runs to its end");
}
