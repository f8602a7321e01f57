//! Generates the ABI types from `include/knem_io.h`, the single source of truth.

use std::env;
use std::path::PathBuf;

fn main() {
    let header = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../include/knem_io.h")
        .canonicalize()
        .expect("include/knem_io.h is missing");
    println!("cargo:rerun-if-changed={}", header.display());

    let bindings = bindgen::Builder::default()
        .header(header.to_str().expect("non-UTF-8 path"))
        // The kernel target (x86_64-unknown-none) has no libc headers; the
        // ABI is the same LP64 layout, so parse the header as the host would.
        .clang_arg(format!("--target={}", env::var("HOST").unwrap()))
        .use_core()
        .ctypes_prefix("core::ffi")
        .allowlist_type("knem_.*")
        .allowlist_var("KNEM_.*")
        .default_enum_style(bindgen::EnumVariation::ModuleConsts)
        .derive_default(true)
        .derive_debug(true)
        .derive_eq(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on include/knem_io.h");

    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out.join("knem_io.rs"))
        .expect("cannot write bindings");

    let core_h = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../c-shim/knem_core.h")
        .canonicalize()
        .expect("c-shim/knem_core.h is missing");
    println!("cargo:rerun-if-changed={}", core_h.display());
    let text = std::fs::read_to_string(&core_h).expect("cannot read knem_core.h");
    std::fs::write(out.join("stats.rs"), stats_rs(&stats_of(&text))).expect("cannot write stats");
}

/// The `X(field, "what")` lines of `KNEM_CORE_STATS(X)`, in order.
fn stats_of(header: &str) -> Vec<(String, String)> {
    let start = header
        .find("#define KNEM_CORE_STATS(X)")
        .expect("knem_core.h defines no KNEM_CORE_STATS(X)");
    let mut out = Vec::new();
    for line in header[start..].lines().skip(1) {
        let line = line.trim().trim_end_matches('\\').trim();
        let Some(args) = line.strip_prefix("X(").and_then(|l| l.strip_suffix(')')) else {
            break;
        };
        let (field, what) = args.split_once(',').expect("X(field, what)");
        let what = what.trim().trim_matches('"');
        out.push((field.trim().to_string(), what.to_string()));
    }
    assert!(!out.is_empty(), "KNEM_CORE_STATS(X) lists no counter");
    out
}

/// `STATS` and the `knem_core_stats_fields!` macro over the same list.
fn stats_rs(stats: &[(String, String)]) -> String {
    let mut s = String::from(
        "/// Every counter of `struct knem_core_stats` (`c-shim/knem_core.h`), in\n\
         /// order: its field (and sysfs file) name, and what it counts.\n",
    );
    s += &format!("pub const STATS: [(&str, &str); {}] = [\n", stats.len());
    for (f, w) in stats {
        s += &format!("    ({f:?}, {w:?}),\n");
    }
    s += "];\n\n";
    s += "/// Calls `$m!(field, ...)` with every counter of `struct knem_core_stats`,\n\
          /// in order.\n#[macro_export]\nmacro_rules! knem_core_stats_fields {\n    ($m:ident) => {\n        $m!(";
    s += &stats
        .iter()
        .map(|(f, _)| f.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    s += ");\n    };\n}\n";
    s
}
