//! Builds the in-box agent as a static executable for this driver to embed
//! (`include_bytes!`); see agent/build_static.rs.in.

include!("../../agent/build_static.rs.in");

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    build_static_agent(&manifest_dir.join("../.."));
}
