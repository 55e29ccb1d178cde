pub mod bench;
