//! The C library carries the transports, teams and collectives (with
//! serde_json, which reads the model file), and none of the command-line
//! tooling crates (argument parsing, progress bars, plots): `nm` finds no
//! symbol of them in libknem_rs.so, and `ldd` lists only the C runtime.

use std::path::PathBuf;
use std::process::Command;

/// libknem_rs.so as cargo built it for this test run (deps directory
/// first: the uplifted copy next to it may be stale).
fn shared_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    for dir in [deps.clone(), deps.parent().unwrap().to_path_buf()] {
        if dir.join("libknem_rs.so").exists() {
            return dir.join("libknem_rs.so");
        }
    }
    panic!("no libknem_rs.so near {}", deps.display());
}

fn output(cmd: &str, arg: &PathBuf) -> String {
    let out = Command::new(cmd)
        .arg(arg)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {} failed", arg.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn no_tooling_crate_is_linked() {
    let lib = shared_lib();
    let syms = output("nm", &lib);
    assert!(
        syms.contains("knem_rs_team_"),
        "nm shows no knem_rs_ symbol"
    );
    // Mangled paths hold each crate name with its length before it.
    for krate in [
        "4clap",
        "10clap_lex",
        "11clap_builder",
        "9indicatif",
        "8plotters",
    ] {
        let hit = syms.lines().find(|l| l.contains(krate));
        assert!(
            hit.is_none(),
            "{} links {krate}: {}",
            lib.display(),
            hit.unwrap()
        );
    }
}

#[test]
fn needs_only_the_c_runtime() {
    let lib = shared_lib();
    let deps = output("ldd", &lib);
    let allowed = [
        "linux-vdso",
        "libgcc_s",
        "libm.so",
        "libc.so",
        "ld-linux",
        "libpthread",
        "libdl",
    ];
    for line in deps.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            allowed.iter().any(|a| line.contains(a)),
            "{} needs {line}",
            lib.display()
        );
    }
}
