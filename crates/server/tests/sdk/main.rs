//! Integration tests: the real server on loopback HTTP, driven by the AWS SDK for Rust.

mod harness;

mod auth;
mod dashboard;

mod dead_letters;
mod durability;
mod errors;
mod fair_queues;
mod fifo;
mod fuzz;
mod grants;
mod hardening;
mod honest_leases;
mod hosts;
mod in_flight_quota;
mod leases;
mod long_poll;
mod messages;
mod query;
mod queues;
mod shapes_fuzz;
mod tls;
