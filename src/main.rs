fn main() -> std::process::ExitCode {
    // The helper stage must run before any thread exists (it forks and unshares).
    sandpit::maybe_run_helper();
    sandpit::cli::main()
}
