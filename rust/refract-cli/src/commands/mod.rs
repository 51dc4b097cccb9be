//! One module per subcommand; [`run`] dispatches.

mod compact;
pub mod data;
mod demo;
pub mod fri;
pub mod index;
mod inspect;
pub mod location;
mod progress;
pub mod retention;
mod verify;

use refract_core::Result;

use refract_table::io::StorageOptions;
use refract_table::VerifyOptions;

use crate::args::{Command, TagAction};
pub use location::Location;

/// Runs one parsed command on datasets configured by `storage` (and the
/// environment), printing its output to stdout.
///
/// # Errors
/// The command's own errors; InvalidInput for `--nearest` without `--vector`
/// (or the reverse) and for `restore` without a target.
pub async fn run(command: Command, storage: &StorageOptions) -> Result<()> {
    let at = |uri: &str| Location::new(uri, storage);
    match command {
        Command::Demo { dir, uri } => demo::run(dir, uri, storage).await,
        Command::Append {
            uri,
            rows,
            fragment_rows,
            start,
            dim,
        } => data::append(&at(&uri), rows, fragment_rows, start, dim).await,
        Command::Delete { uri, filter } => data::delete(&at(&uri), &filter).await,
        Command::Scan {
            uri,
            columns,
            filter,
            limit,
            with_row_address,
            format,
            at: version,
        } => {
            let request = data::ScanRequest {
                columns,
                filter,
                limit,
                with_row_address,
            };
            data::scan(&at(&uri), version.selector().as_ref(), &request, format).await
        }
        Command::Inspect {
            uri,
            json,
            at: version,
        } => inspect::inspect(&at(&uri), version.selector().as_ref(), json).await,
        Command::Versions { uri } => inspect::versions(&at(&uri)).await,
        Command::Verify {
            uri,
            all_versions,
            deep,
            json,
        } => verify::verify(&at(&uri), VerifyOptions { all_versions }, deep, json).await,
        Command::Compact {
            uri,
            options,
            until_noop,
            max_rounds,
            json,
        } => {
            let rounds = if until_noop { Some(max_rounds) } else { None };
            compact::compact(&at(&uri), &options, rounds, json).await
        }
        Command::CompactPlan { uri, options } => compact::compact_plan(&at(&uri), &options).await,
        Command::CompactExec { uri, plan, task } => {
            compact::compact_exec(&at(&uri), &plan, task).await
        }
        Command::CreateIndex {
            uri,
            name,
            column,
            index_type,
            partitions,
        } => index::create(&at(&uri), &name, &column, index_type, partitions).await,
        Command::OptimizeIndices { uri, name } => index::optimize(&at(&uri), name.as_deref()).await,
        Command::Query {
            uri,
            filter,
            nearest,
            vector,
            k,
            nprobes,
            columns,
            explain,
            format,
            at: version,
        } => {
            let nearest = match (nearest, vector) {
                (Some(column), Some(vector)) => Some((column, vector)),
                (None, None) => None,
                _ => {
                    return Err(refract_core::Error::invalid_input(
                        "--nearest and --vector go together",
                    ))
                }
            };
            let request = index::QueryRequest {
                filter,
                nearest,
                k,
                nprobes,
                columns,
            };
            index::query(
                &at(&uri),
                version.selector().as_ref(),
                &request,
                explain,
                format,
            )
            .await
        }
        Command::Partition {
            uri,
            by,
            destinations,
            fragments,
            json,
        } => fri::partition(&at(&uri), &by, destinations, fragments, json).await,
        Command::Fri {
            uri,
            json,
            at: version,
        } => fri::fri(&at(&uri), version.selector().as_ref(), json).await,
        Command::Remap {
            uri,
            name,
            budget_bytes,
            json,
        } => fri::remap(&at(&uri), name, budget_bytes, json).await,
        Command::Trim { uri, json } => fri::trim(&at(&uri), json).await,
        Command::Maintain {
            uri,
            options,
            until_noop,
            max_rounds,
            reindex,
            older_than,
            keep_last,
            json,
        } => {
            let rounds = if until_noop { Some(max_rounds) } else { None };
            let retention = (older_than.is_some() || keep_last.is_some()).then_some({
                refract_table::RetentionPolicy {
                    older_than,
                    keep_last,
                    keep_tagged: true,
                    dry_run: false,
                }
            });
            fri::run_maintain(&at(&uri), &options, rounds, reindex, retention, json).await
        }
        Command::CompactCommit { uri, results, json } => {
            compact::compact_commit(&at(&uri), &results, json).await
        }
        Command::Cleanup {
            uri,
            older_than,
            keep_last,
            dry_run,
            orphans,
            json,
        } => {
            let request = retention::CleanupRequest {
                older_than,
                keep_last,
                dry_run,
                orphans,
            };
            retention::cleanup(&at(&uri), &request, json).await
        }
        Command::Tag { action } => match action {
            TagAction::Create { uri, name, version } => {
                retention::tag_create(&at(&uri), &name, version).await
            }
            TagAction::Delete { uri, name } => retention::tag_delete(&at(&uri), &name).await,
            TagAction::List { uri, json } => retention::tag_list(&at(&uri), json).await,
        },
        Command::Restore { uri, target } => match target.selector() {
            Some(selected) => retention::restore(&at(&uri), &selected).await,
            // clap requires --version or --tag (the `restore_target` group).
            None => Err(refract_core::Error::invalid_input(
                "restore needs --version N or --tag NAME",
            )),
        },
    }
}
