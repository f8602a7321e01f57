//! knem-gen-docs OUTDIR: the man pages and shell completions of the
//! packaged tools (see the library), written under OUTDIR.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out] = args.as_slice() else {
        eprintln!("usage: knem-gen-docs OUTDIR");
        return ExitCode::from(2);
    };
    match knem_gen_docs::generate(&PathBuf::from(out)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("knem-gen-docs: {e}");
            ExitCode::FAILURE
        }
    }
}
