//! One suite of use cases run through every front end: the CLI, the
//! module (its C ABI from a Python host), MCP (`tinybox mcp`) and the HTTP
//! API (`tinybox serve`'s `/v1`). Each use case is written once
//! (frontends/cases.rs) over `tinybox_tests::frontends::FrontEnd`; each
//! test here is one use case through one front end, so a failure names
//! both: exec bytes, binary files both ways, cancellation checked in this
//! machine's /proc, cleanup after remove and when a server ends with a
//! command in flight, core's refusals word for word with the store
//! unchanged, and an unknown box id. Live on namespace boxes (bwrap);
//! the floor refusal on passthrough. What a front end cannot offer is
//! named in its `LACKS` list (ADR 0039).

#[path = "frontends/cases.rs"]
mod cases;

use cases::Verb;
use tinybox_tests::{have, skip};

/// Whether bwrap is here; the visible skip when it is not.
fn namespace(test: &str) -> bool {
    if have("bwrap") {
        return true;
    }
    skip(test, "bwrap is not installed (apt-get install bubblewrap)");
    false
}

/// The tests of one front end: `$start(sandbox)` makes it; `$lacks` are
/// the verbs it does not offer.
macro_rules! through {
    ($front:ident, $start:path, $lacks:expr) => {
        mod $front {
            use super::*;

            const LACKS: &[Verb] = $lacks;

            fn test(case: &str) -> String {
                format!("frontends::{}::{case}", stringify!($front))
            }

            #[test]
            fn exec_bytes_come_back_exactly() {
                if namespace(&test("exec_bytes_come_back_exactly")) {
                    cases::exec_bytes_come_back_exactly(&mut $start("namespace"));
                }
            }

            #[test]
            fn binary_files_round_trip() {
                if namespace(&test("binary_files_round_trip")) {
                    cases::binary_files_round_trip(&mut $start("namespace"), LACKS);
                }
            }

            #[test]
            fn a_cancelled_command_is_gone() {
                if namespace(&test("a_cancelled_command_is_gone")) {
                    cases::a_cancelled_command_is_gone(&mut $start("namespace"));
                }
            }

            #[test]
            fn a_removed_box_is_gone() {
                if namespace(&test("a_removed_box_is_gone")) {
                    cases::a_removed_box_is_gone(&mut $start("namespace"));
                }
            }

            #[test]
            fn ending_with_a_command_in_flight() {
                if namespace(&test("ending_with_a_command_in_flight")) {
                    cases::ending_with_a_command_in_flight(&mut $start("namespace"), LACKS);
                }
            }

            #[test]
            fn a_snapshot_the_box_cannot_take_is_refused() {
                if namespace(&test("a_snapshot_the_box_cannot_take_is_refused")) {
                    cases::a_snapshot_the_box_cannot_take_is_refused(&mut $start("namespace"), LACKS);
                }
            }

            #[test]
            fn a_floor_the_sandbox_cannot_meet_is_refused() {
                cases::a_floor_the_sandbox_cannot_meet_is_refused(&mut $start("passthrough"));
            }

            #[test]
            fn an_unknown_box_is_one_line_naming_it() {
                cases::an_unknown_box_is_one_line_naming_it(&mut $start("passthrough"));
            }
        }
    };
}

through!(cli, tinybox_tests::frontends::cli::CliFront::start, &[Verb::ListDir, Verb::EndWithInFlight]);
through!(module, tinybox_tests::frontends::module::ModuleFront::start, &[Verb::EndWithInFlight]);
through!(mcp, tinybox_tests::frontends::mcp::McpFront::start, &[Verb::Snapshot]);
through!(http, tinybox_tests::frontends::http::HttpFront::start, &[]);
