//! # refract-optimize
//!
//! Table maintenance: compaction planning and execution that preserves order and
//! always converges under source budgets, stable-partition rewrites,
//! `remap_indices` to catch index segments up, and `trim_fri` to drain history.

#![warn(missing_docs)]

pub mod compaction;
pub mod fri;
pub mod maintain;
pub mod remap;
pub mod rewrite_threads;
pub mod trim;
