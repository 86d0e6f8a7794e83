//! The shared library is marked NODELETE: `dlclose` leaves it mapped. Its
//! runtime's threads run code in it for the life of the process, so
//! unmapping it under them would crash the host.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
