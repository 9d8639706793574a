//! Link-time settings for the `aiperf` binary: an rpath to libtorch, so that the binary starts
//! without LD_LIBRARY_PATH, and a forced link of libtorch_cuda when the libtorch has CUDA
//! (the linker's --as-needed would otherwise drop it and CUDA would read as unavailable);
//! the C shim that gives Rust `MPI_IN_PLACE`, compiled against the MPI headers that rsmpi's
//! build found (the same probe: `MPICC`, `mpicc`, pkg-config); and the C++ shim that puts
//! autograd hooks on the gradient accumulators and reports libtorch's kernel level and build,
//! compiled against libtorch's headers; and the
//! libtorch version of those headers, for `aiperf --version`.

use std::path::Path;

/// Compiles `src/exchange/mpi_in_place.c` against the MPI headers.
fn mpi_shim() {
    println!("cargo:rerun-if-changed=src/exchange/mpi_in_place.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    let mpi = build_probe_mpi::probe().unwrap_or_else(|errors| {
        panic!(
            "MPI not found for the MPI_IN_PLACE shim ({}): install an MPI (Debian: libopenmpi-dev) or set MPICC",
            errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
        )
    });
    let mut build = cc::Build::new();
    for dir in &mpi.include_paths {
        build.include(dir);
    }
    build
        .file("src/exchange/mpi_in_place.c")
        .compile("aiperf_mpi_shim");
}

/// Compiles `src/exchange/grad_hooks.cpp` (autograd hooks), `src/train/kernels.cpp` (CPU
/// autocast, channels-last) and `src/torch_info.cpp` (what libtorch says about its kernels
/// and build) against the libtorch headers beside
/// the library torch-sys links (`lib/../include`, as in libtorch and the PyTorch wheel), with
/// the C++ ABI torch-sys uses (`LIBTORCH_CXX11_ABI`, default 1).
fn hooks_shim(lib: &str) {
    println!("cargo:rerun-if-changed=src/exchange/grad_hooks.cpp");
    println!("cargo:rerun-if-changed=src/torch_info.cpp");
    println!("cargo:rerun-if-changed=src/train/kernels.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let include = Path::new(lib).join("../include");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .file("src/exchange/grad_hooks.cpp")
        .file("src/torch_info.cpp")
        .file("src/train/kernels.cpp")
        .compile("aiperf_grad_hooks");
}

/// The libtorch version of the headers beside `lib` (`TORCH_VERSION_MAJOR/MINOR/PATCH`, in
/// `torch/headeronly/version.h` since 2.13 and `torch/csrc/api/include/torch/version.h`
/// before), or `unknown`.
fn libtorch_version(lib: &str) -> String {
    let include = Path::new(lib).join("../include/torch");
    let headers = ["headeronly/version.h", "csrc/api/include/torch/version.h"];
    for h in headers.map(|h| include.join(h)) {
        println!("cargo:rerun-if-changed={}", h.display());
        let Ok(text) = std::fs::read_to_string(&h) else {
            continue;
        };
        let part = |name: &str| {
            text.lines().find_map(|l| {
                let rest = l.trim().strip_prefix("#define TORCH_VERSION_")?;
                let (key, value) = rest.split_once(char::is_whitespace)?;
                (key == name).then(|| value.trim().to_string())
            })
        };
        if let (Some(a), Some(b), Some(c)) = (part("MAJOR"), part("MINOR"), part("PATCH")) {
            return format!("{a}.{b}.{c}");
        }
    }
    "unknown".into()
}

fn main() {
    mpi_shim();
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!("torch-sys did not export DEP_TCH_LIBTORCH_LIB: the autograd-hook shim needs libtorch's headers and the binary its rpath (build with scripts/dev/cargo, or set LIBTORCH)");
    };
    hooks_shim(&lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=AIPERF_LIBTORCH_LIB={lib}");
    println!(
        "cargo:rustc-env=AIPERF_LIBTORCH_VERSION={}",
        libtorch_version(&lib)
    );
    if Path::new(&lib).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
