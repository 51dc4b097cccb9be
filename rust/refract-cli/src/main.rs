//! The `refract` command-line tool.

use clap::error::ErrorKind;
use clap::Parser;
use refract_cli::args::Cli;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => exit_on_usage_error(e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(refract_cli::commands::run(cli.command)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Help and version print as clap renders them; every other command-line
/// error is one line (clap's first), e.g. `error: invalid value '-5' for
/// '--target-rows <TARGET_ROWS>': must be an integer of at least 1`.
fn exit_on_usage_error(error: clap::Error) -> ! {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    let rendered = error.render().to_string();
    let line = rendered
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("error: invalid command line");
    eprintln!("{line} (see --help)");
    std::process::exit(2);
}
