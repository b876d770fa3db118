//! `sandpit-helper`: the native Linux backend's helper stage alone (see
//! `sandpit::helper_binary_main`). Not a command for people: sandpit starts it.

fn main() -> std::process::ExitCode {
    sandpit::helper_binary_main()
}
