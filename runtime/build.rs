//! With the `mpi` feature, compiles a few lines of C that hand the MPI implementation's
//! macro constants (`MPI_IN_PLACE`) to Rust, with the same compiler `mpi-sys` uses.

fn main() {
    println!("cargo:rerun-if-changed=src/distributed/mpi_shim.c");
    #[cfg(feature = "mpi")]
    mpi_shim();
}

#[cfg(feature = "mpi")]
fn mpi_shim() {
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => {
            for e in errs {
                println!("cargo:warning=looking for MPI: {e}");
            }
            panic!(
                "the `mpi` feature needs an MPI installation (Debian: apt-get install \
                 libopenmpi-dev openmpi-bin libclang-dev)"
            );
        }
    };
    let mut build = cc::Build::new();
    build.file("src/distributed/mpi_shim.c");
    match lib.mpicc {
        Some(mpicc) => {
            build.compiler(mpicc);
        }
        None => {
            for inc in &lib.include_paths {
                build.include(inc);
            }
        }
    }
    build.compile("ferrograd_mpi_shim");
}
