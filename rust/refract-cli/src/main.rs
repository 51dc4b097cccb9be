//! The `refract` command-line tool.

use clap::error::ErrorKind;
use clap::Parser;
use refract_cli::args::Cli;

/// Threads for blocking file I/O (local stores read and write on them). Each
/// keeps its own allocator arena, so an unbounded pool (tokio's default is 512)
/// holds memory that grows with the work done. The process uses the system
/// allocator: with this bound it kept an ivf_flat build over 8M rows at
/// 360 MB and a 2M-row compaction at 150 MB, where mimalloc held 843 MB and
/// 250 MB (docs/benchmarks.md, ivf_flat build memory).
const BLOCKING_THREADS: usize = 16;

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
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    quiet_panics();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let storage = cli.storage_options.iter().cloned().collect();
        runtime.block_on(refract_cli::commands::run(cli.command, &storage))
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        Err(payload) => {
            eprintln!("error: internal failure: {}", panic_text(payload.as_ref()));
            std::process::exit(1);
        }
    }
}

/// Panics a reader catches (Lance decoding damaged bytes) become `Corrupt`
/// errors; the default hook would still print a multi-line report naming a
/// dependency's source file first. The report goes to the log instead
/// (`RUST_LOG=debug`), and an uncaught one ends `main` with one line.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        tracing::debug!(location = ?info.location(), "panic: {}", panic_text(info.payload()));
    }));
}

/// The first line of a panic's message.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    text.lines().next().unwrap_or_default().to_string()
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
    eprintln!("{} (see --help)", first_line(&error.render().to_string()));
    std::process::exit(2);
}

/// The first line of clap's rendered error; when it ends with a colon, the
/// indented list under it is joined on, so `error: the following required
/// arguments were not provided:` names the arguments.
fn first_line(rendered: &str) -> String {
    let mut lines = rendered.lines().skip_while(|line| line.trim().is_empty());
    let Some(first) = lines.next() else {
        return "error: invalid command line".to_string();
    };
    if !first.ends_with(':') {
        return first.to_string();
    }
    let listed: Vec<&str> = lines
        .take_while(|line| line.starts_with(' ') && !line.trim().is_empty())
        .map(str::trim)
        .collect();
    format!("{first} {}", listed.join(", "))
}
