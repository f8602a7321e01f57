//! Generates the core's view of `c-shim/knem_core.h`: the `knem_shim_*`
//! declarations, `struct knem_core_stats` and the `KNEM_CORE_*` constants.
//! The header is the contract; nothing here re-declares it by hand.
//!
//! It also records the header's SHA-256 in the object (`knem_core_abi`):
//! the kernel build refuses a prebuilt core made from another header, whose
//! calls would not match the shim's.

use sha2::{Digest, Sha256};
use std::env;
use std::fmt::Write;
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

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out_dir.join("knem_core.rs"))
        .expect("cannot write bindings");

    // The marker c-shim/Kbuild looks for in knem_core.prebuilt, NUL-ended.
    let text = std::fs::read(&header).expect("cannot read c-shim/knem_core.h");
    let mut marker = String::from("knem_core.h sha256 ");
    for b in Sha256::digest(&text) {
        write!(marker, "{b:02x}").unwrap();
    }
    let abi = format!(
        "#[no_mangle]\n#[used]\npub static knem_core_abi: [u8; {}] = *b\"{marker}\\0\";\n",
        marker.len() + 1
    );
    std::fs::write(out_dir.join("knem_core_abi.rs"), abi).expect("cannot write knem_core_abi.rs");
}
