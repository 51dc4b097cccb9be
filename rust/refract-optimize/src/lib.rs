//! # refract-optimize
//!
//! Table maintenance: compaction planning and execution that preserves order and
//! always converges under source budgets, stable-partition rewrites,
//! `remap_indices` to catch index segments up, and `trim_fri` to drain history.
//! Index segment rewrites run on the threads of a
//! [`runtime::MaintenanceRuntime`]: the process's shared one, or one the host
//! creates, sizes and drops.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod compaction;
pub mod fri;
pub mod maintain;
pub mod remap;
mod rewrite_threads;
pub mod runtime;
pub mod trim;
