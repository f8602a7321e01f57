//! Give libknem_rs.so a soname, so programs linked with -lknem_rs record
//! libknem_rs.so.0 and keep loading it across compatible updates. Bump the
//! number (and the Debian package name, libknem-rs0) on an ABI break.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libknem_rs.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
