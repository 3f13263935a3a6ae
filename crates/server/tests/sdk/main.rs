//! Integration tests: the real server on loopback HTTP, driven by the AWS SDK for Rust.

mod harness;

mod errors;
mod leases;
mod long_poll;
mod messages;
mod queues;
