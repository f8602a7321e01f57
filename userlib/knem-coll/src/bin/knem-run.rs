//! knem-run -n N -- prog args: run N copies of prog as a knem-rs team.

use clap::Parser;
use knem_coll::cli::run::Cli;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(t) = &cli.transport {
        if let Err(e) = t.parse::<knem_transport::Kind>() {
            eprintln!("knem-run: {e}");
            return ExitCode::from(2);
        }
    }
    let res = knem_coll::launch::run(cli.n, |_| {
        let mut c = Command::new(&cli.cmd[0]);
        c.args(&cli.cmd[1..]);
        if let Some(t) = &cli.transport {
            c.env(knem_transport::ENV_TRANSPORT, t);
        }
        c
    });
    match res {
        Ok(out) if out.success() => ExitCode::SUCCESS,
        Ok(out) => {
            for (r, c) in out.codes.iter().enumerate().filter(|(_, c)| **c != 0) {
                eprintln!("knem-run: rank {r} exited with status {c}");
            }
            ExitCode::from(out.code().clamp(1, 255) as u8)
        }
        Err(e) => {
            eprintln!("knem-run: {e}");
            ExitCode::from(2)
        }
    }
}
