//! The header compiles cleanly as strict C11, the pkg-config file is
//! generated, and the example C program, linked against the static
//! library, passes on teams over CMA and shm.  A C compiler, make and both
//! transports are required (a missing one fails the test).  knem needs the
//! module, which only the VM has: coll/knemrs runs the C API over it in
//! `make interop`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding libknem_rs.a: cargo builds the library's
/// staticlib into the test binary's deps directory (and uplifts it next
/// to it only on `cargo build`, so the copy there may be stale).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    if deps.join("libknem_rs.a").exists() {
        return deps;
    }
    let dir = deps.parent().unwrap().to_path_buf();
    assert!(
        dir.join("libknem_rs.a").exists(),
        "no libknem_rs.a in {} or {}",
        deps.display(),
        dir.display()
    );
    dir
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// The C compiler runs: a C API test without one fails, it does not pass.
fn require_cc() {
    if let Err(e) = Command::new(cc()).arg("--version").output() {
        panic!("no C compiler ({}: {e}); set CC", cc());
    }
}

#[test]
fn header_compiles_strict() {
    require_cc();
    let out = std::env::temp_dir().join(format!("knem_rs_hdr_{}.o", std::process::id()));
    let src = std::env::temp_dir().join(format!("knem_rs_hdr_{}.c", std::process::id()));
    std::fs::write(
        &src,
        "#include <knem_rs.h>\n_Static_assert(sizeof(knem_rs_desc) == 32, \"desc\");\nint main(void){return KNEM_RS_ALG_AUTO;}\n",
    )
    .unwrap();
    let st = Command::new(cc())
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&out);
    assert!(st.success());
}

fn build_example(dir: &Path) -> PathBuf {
    let exe = dir.join(format!("knem-rs-example-{}", std::process::id()));
    let st = Command::new(cc())
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("examples/example.c"))
        .arg(lib_dir().join("libknem_rs.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success(), "example failed to build");
    exe
}

/// The example on CMA and shm, each of which must open here.  knem needs
/// the module, which only the VM has: the C API over knem is what
/// coll/knemrs runs in `make interop`.
#[test]
fn example_runs_on_cma_and_shm() {
    require_cc();
    let exe = build_example(&std::env::temp_dir());
    for kind in [knem_transport::Kind::Cma, knem_transport::Kind::Shm] {
        if let Err(e) = knem_transport::open(kind) {
            panic!("the {kind} transport does not open here: {e}");
        }
        for n in [1, 2, 5] {
            let out = knem_coll::launch::run(n, |_| {
                let mut c = Command::new(&exe);
                c.env(knem_transport::ENV_TRANSPORT, kind.name())
                    .env("KNEM_RS_TIMEOUT", "30");
                c
            })
            .unwrap();
            assert!(
                out.success(),
                "C example on {n} ranks with {kind}: {:?}",
                out.codes
            );
        }
    }
    let _ = std::fs::remove_file(&exe);
}

#[test]
fn pkg_config_file_is_generated() {
    let dir = std::env::temp_dir().join(format!("knem_rs_pc_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(crate_dir())
        .arg("pkgconfig")
        .arg("PREFIX=/opt/knem-rs")
        .status();
    let st = st.unwrap_or_else(|e| panic!("make: {e}"));
    assert!(st.success());
    let pc = std::fs::read_to_string(crate_dir().join("knem_rs.pc")).unwrap();
    assert!(
        pc.contains("prefix=/opt/knem-rs") && pc.contains("-lknem_rs"),
        "{pc}"
    );
    assert!(pc.contains("Version: 0."), "{pc}");
    let _ = std::fs::remove_dir_all(&dir);
}
