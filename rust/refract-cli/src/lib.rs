//! The `refract` command-line tool as a library, so its commands can be tested
//! in-process. `main.rs` only parses arguments and reports errors.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod args;
pub mod commands;
pub mod duration;
pub mod output;
pub mod ranges;
pub mod settings;
pub mod synthetic;
