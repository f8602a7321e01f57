//! Generates the ABI types from `include/knem_io.h`, the single source of truth.

use std::env;
use std::path::PathBuf;

fn main() {
    let header = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../include/knem_io.h")
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

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("knem_io.rs");
    bindings.write_to_file(out).expect("cannot write bindings");
}
