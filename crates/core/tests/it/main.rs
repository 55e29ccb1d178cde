//! The core crate's integration tests, one binary (one link, one process
//! start) with a module per area. Run one area with
//! `cargo test -p tessera-core --test it gc::`.

mod common;

mod azure;
mod azure_azurite;
mod check;
mod gc;
mod gc_physical;
mod gc_rewrite;
mod gcs;
mod hostile;
mod interleave;
mod kept_index;
mod kept_table;
mod lazy;
mod mfdedup;
mod model;
mod ondisk;
mod online;
mod parallel;
mod rclone;
mod repository;
mod restore_cache;
mod restore_pipeline;
mod rewrite;
mod s3;
mod s3_minio;
mod seal;
mod sftp;
mod stream_read;
mod sweep;
mod tree;
