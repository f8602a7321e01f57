//! Generates the core's view of `c-shim/knem_core.h`: the `knem_shim_*`
//! declarations, `struct knem_core_stats` and the `KNEM_CORE_*` constants.
//! The header is the contract; nothing here re-declares it by hand.

use std::env;
use std::path::PathBuf;

fn main() {
    let header = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../c-shim/knem_core.h")
        .canonicalize()
        .expect("c-shim/knem_core.h is missing");
    println!("cargo:rerun-if-changed={}", header.display());

    let bindings = bindgen::Builder::default()
        .header(header.to_str().expect("non-UTF-8 path"))
        // Outside __KERNEL__ the header takes its integer types from
        // stdint.h; the layout is the kernel's (LP64), so parse it as the
        // host would (the kernel target has no libc headers).
        .clang_arg(format!("--target={}", env::var("HOST").unwrap()))
        .use_core()
        .ctypes_prefix("core::ffi")
        .allowlist_function("knem_shim_.*")
        .allowlist_type("knem_core_stats")
        .allowlist_var("KNEM_CORE_.*")
        .derive_default(true)
        .derive_debug(true)
        .derive_eq(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on c-shim/knem_core.h");

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("knem_core.rs");
    bindings.write_to_file(out).expect("cannot write bindings");
}
