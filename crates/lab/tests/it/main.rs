//! The lab's integration tests, in one test binary.

mod experiments;
mod reproduce;
mod runner;
