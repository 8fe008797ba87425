//! herd's binary: everything is in the library, behind [`herd::cli::main`]
//! (parse, run, exit code).

use std::process::ExitCode;

fn main() -> ExitCode {
    herd::cli::main()
}
