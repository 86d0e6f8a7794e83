//! Prints the C header of the module's exported symbols on stdout, so
//! `tinybox-module-header > module/include/tinybox.h` regenerates the
//! committed copy (tests/tests/module_header.rs checks they agree).

fn main() -> std::io::Result<()> {
    let mut out = Vec::new();
    tinybox_module::ffi::write_header(&mut out)?;
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out)
}
