//! # tessera-lab
//!
//! Datasets, experiments and reports: every technique runs on the same input
//! with the same metrics, from one experiment file.

pub mod approach;
pub mod azurite;
pub mod bench;
pub mod demo;
pub mod experiment;
pub mod git;
pub mod minio;
pub mod peers;
pub mod report;
pub mod reproduce;
pub mod retention;
pub mod runner;
pub mod scale;
pub mod settle;
pub mod synth;
pub mod tar;
pub mod tracebench;
pub mod tracefile;
pub mod workdir;
