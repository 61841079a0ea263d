//! Links libckpt. The library is looked up in CKPT_LIB_DIR, else in the project's default build directory
//! (../../build/runtime from this crate) where it holds libckpt.so, else in the libdir of an installed ckpt as
//! `pkg-config --variable=libdir ckpt` reports it (the Debian package's, or a prefix on PKG_CONFIG_PATH). The
//! directory is also put on the rpath of this crate's own test and example binaries, so `cargo test` runs without
//! LD_LIBRARY_PATH.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The libdir that pkg-config knows for ckpt, or None where pkg-config or ckpt.pc is missing.
fn installed_library_dir() -> Option<PathBuf> {
    let output = Command::new("pkg-config").args(["--variable=libdir", "ckpt"]).output().ok()?;
    let dir = String::from_utf8(output.stdout).ok()?;
    let dir = dir.trim();
    if output.status.success() && !dir.is_empty() {
        Some(PathBuf::from(dir))
    } else {
        None
    }
}

fn library_dir() -> PathBuf {
    if let Some(dir) = env::var_os("CKPT_LIB_DIR") {
        return PathBuf::from(dir);
    }
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let build_dir = PathBuf::from(manifest_dir).join("../../build/runtime");
    if build_dir.join("libckpt.so").exists() {
        return build_dir;
    }
    installed_library_dir().unwrap_or(build_dir)
}

fn main() {
    println!("cargo:rerun-if-env-changed=CKPT_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=build.rs");

    let dir = library_dir();
    // An rpath must be absolute to work from any working directory.
    let dir = dir.canonicalize().unwrap_or(dir);
    if !dir.join("libckpt.so").exists() {
        println!(
            "cargo:warning=libckpt.so not found in {}: build the C library, set CKPT_LIB_DIR, or install ckpt where \
             pkg-config finds it",
            dir.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=ckpt");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
