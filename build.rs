//! Link-time settings for the `aiperf` binary: an rpath to libtorch, so that the binary starts
//! without LD_LIBRARY_PATH, and a forced link of libtorch_cuda when the libtorch has CUDA
//! (the linker's --as-needed would otherwise drop it and CUDA would read as unavailable).

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=torch-sys did not export DEP_TCH_LIBTORCH_LIB; the binary will need LD_LIBRARY_PATH");
        println!("cargo:rustc-env=AIPERF_LIBTORCH_LIB=unknown");
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=AIPERF_LIBTORCH_LIB={lib}");
    if Path::new(&lib).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
