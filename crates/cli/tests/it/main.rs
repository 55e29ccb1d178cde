//! The `tessera` binary's integration tests, in one test binary (one link,
//! one place for shared helpers). Run one group with
//! `cargo test -p tessera --test it kill`.

mod check;
mod choose;
mod cli;
mod common;
mod fidelity;
mod gc;
mod inspect;
mod kill;
mod lab;
mod mfdedup;
mod mount;
mod online;
mod remote;
mod rewrite;
mod seal;
mod snapshots;
mod torture;
