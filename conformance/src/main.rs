//! `code-runner-conformance`: the hermetic bench and the conformance suite.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = code_runner_conformance::cli::Cli::parse();
    code_runner_conformance::cli::init_tracing_with(
        code_runner_conformance::cli::default_log_level(&cli.command, cli.verbose),
    );
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    rt.block_on(code_runner_conformance::cli::dispatch(cli))
}
