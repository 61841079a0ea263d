//! Links libckpt. The library is looked up in CKPT_LIB_DIR, else in the project's default build directory
//! (../../build/runtime from this crate). The directory is also put on the rpath of this crate's own test and
//! example binaries, so `cargo test` runs without LD_LIBRARY_PATH.

use std::env;
use std::path::PathBuf;

fn library_dir() -> PathBuf {
    match env::var_os("CKPT_LIB_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let manifest_dir = env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
            PathBuf::from(manifest_dir).join("../../build/runtime")
        }
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=CKPT_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");

    let dir = library_dir();
    // An rpath must be absolute to work from any working directory.
    let dir = dir.canonicalize().unwrap_or(dir);
    if !dir.join("libckpt.so").exists() {
        println!("cargo:warning=libckpt.so not found in {}: build the C library or set CKPT_LIB_DIR", dir.display());
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=ckpt");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
