//! The module's ABI surface: exactly the documented symbols are exported,
//! the committed C header is the one safer-ffi generates, and the release
//! contract names every symbol, method and error code the library has.

mod module_support;

use std::collections::BTreeSet;
use std::process::Command;

use module_support::{c_host, library, one, root, run_c_host, tagged, temp};
use tinybox_tests::{bin, have, skip};

const SYMBOLS: [&str; 4] = ["tinybox_abi_version", "tinybox_call", "tinybox_free", "tinybox_manifest"];

#[test]
fn exactly_the_documented_symbols_are_exported() {
    if !have("nm") {
        skip(
            "module_abi::exactly_the_documented_symbols_are_exported",
            "nm is not installed (apt-get install binutils)",
        );
        return;
    }
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(library()).output().expect("run nm");
    assert!(out.status.success(), "nm: {}", String::from_utf8_lossy(&out.stderr));
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    let documented: BTreeSet<String> = SYMBOLS.iter().map(|s| s.to_string()).collect();
    assert_eq!(exported, documented, "nm -D --defined-only lists other symbols than the release contract");
}

#[test]
fn the_committed_header_is_the_generated_one() {
    let out = Command::new(bin("tinybox-module-header")).output().expect("run tinybox-module-header");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let committed = std::fs::read(root().join("module/include/tinybox.h")).expect("module/include/tinybox.h");
    assert!(
        out.stdout == committed,
        "module/include/tinybox.h is out of date: regenerate it with\n  target/debug/tinybox-module-header > module/include/tinybox.h"
    );
    let text = String::from_utf8(committed).unwrap();
    for symbol in SYMBOLS {
        assert!(text.contains(&format!("\n{symbol} (")), "the header does not declare {symbol}");
    }
    // It is a header a C compiler accepts, declaring what the library exports.
    if have("cc") {
        let dir = temp();
        let src = dir.path().join("use.c");
        std::fs::write(
            &src,
            "#include \"tinybox.h\"\nint main(void) { char *s = tinybox_call(\"ls\", \"{}\"); tinybox_free(s); \
             tinybox_free(tinybox_manifest()); return (int)tinybox_abi_version() - 1; }\n",
        )
        .unwrap();
        let out = Command::new("cc")
            .args(["-Wall", "-Werror", "-fsyntax-only", "-I"])
            .arg(root().join("module/include"))
            .arg(&src)
            .output()
            .unwrap();
        assert!(out.status.success(), "the header does not compile: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn the_release_contract_names_every_symbol_method_and_code() {
    let contract = std::fs::read_to_string(root().join("docs/specs/tinybus-module-release.md")).unwrap();
    let shapes = std::fs::read_to_string(root().join("docs/specs/json-shapes.md")).unwrap();
    let dir = temp();
    let Some(host) = c_host("module_abi::the_release_contract_names_every_symbol_method_and_code", dir.path()) else {
        return;
    };
    let out = run_c_host(&host, dir.path(), &["manifest"]);
    assert!(out.status.success());
    let all = tagged(&out.stdout);
    let manifest = one(&all, "manifest");
    assert!(contract.contains("ABI version \"1\""));
    let symbols: Vec<&str> = manifest["symbols"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(symbols, SYMBOLS);
    for symbol in SYMBOLS {
        assert!(contract.contains(&format!("`{symbol}")), "the contract does not document {symbol}");
    }
    for method in manifest["methods"].as_array().unwrap() {
        let m = method.as_str().unwrap();
        assert!(contract.contains(&format!("`{m}`")), "the contract does not document method {m}");
        assert!(shapes.contains(&format!("`{m}`")), "json-shapes.md does not document method {m}");
    }
    for code in manifest["error_codes"].as_array().unwrap() {
        let c = code.as_str().unwrap();
        assert!(contract.contains(&format!("`{c}`")), "the contract does not document error code {c}");
    }
}
