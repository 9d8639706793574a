//! The drawing of which file imports which, and of which module imports which of its
//! siblings, has no circle in any of the four crates (`src/`, `records/src/`, `ir/src/`,
//! `data-prep/src/`; docs/design.md, "Crates and modules"): `scripts/dev/import-cycles` finds
//! none there, and finds the ones planted in crates written here.

use std::path::Path;
use std::process::Command;

fn import_cycles(dirs: &[&Path]) -> std::process::Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/import-cycles"))
        .args(dirs)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs scripts/dev/import-cycles")
}

#[test]
fn no_file_of_any_crate_imports_itself_through_others() {
    let crates = ["src", "records/src", "ir/src", "data-prep/src"];
    let out = import_cycles(&crates.map(Path::new));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for dir in crates {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{dir}: ")) && l.contains("no circle")),
            "{dir} not checked:\n{text}"
        );
    }
}

#[test]
fn a_planted_circle_is_named_file_by_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir(src.join("net")).unwrap();
    let files = [
        ("lib.rs", "pub mod net;\npub mod store;\npub mod leaf;\n"),
        ("net/mod.rs", "pub mod wire;\n"),
        // wire -> store -> wire, through a `use` group and a path in code.
        (
            "net/wire.rs",
            "use crate::{leaf, store::Shelf};\npub struct Frame;\n",
        ),
        ("store.rs", "pub struct Shelf(crate::net::wire::Frame);\n"),
        // A test module's imports do not count.
        (
            "leaf.rs",
            "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::store::Shelf;\n}\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let out = import_cycles(&[src]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("a circle of 2 files: net::wire, store"),
        "{text}"
    );
    assert!(!text.contains("leaf"), "{text}");
}

#[test]
fn circles_through_a_re_export_or_between_sibling_modules_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    for d in ["a", "commands"] {
        std::fs::create_dir(src.join(d)).unwrap();
    }
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod cli;\npub mod commands;\n",
        ),
        // a::inner -> b -> a::Thing, which a re-exports from a::inner.
        ("a/mod.rs", "mod inner;\npub use inner::Thing;\n"),
        ("a/inner.rs", "pub struct Thing(crate::b::Other);\n"),
        (
            "b.rs",
            "pub struct Other;\npub fn f(_: &crate::a::Thing) {}\n",
        ),
        // cli -> commands (its mod.rs) and commands::tools -> cli: no two files import each
        // other, but the two modules do.
        (
            "cli.rs",
            "pub enum Command { Audit(crate::commands::Args) }\n",
        ),
        (
            "commands/mod.rs",
            "pub mod tools;\n#[cfg(test)]\nmod tests;\npub struct Args;\n",
        ),
        ("commands/tools.rs", "use crate::cli::Command;\n"),
        // A test module in its own file does not count.
        ("commands/tests.rs", "use crate::a::Thing;\n"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let out = import_cycles(&[src]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("a circle of 2 files: a::inner, b"), "{text}");
    assert!(
        text.contains("a circle of 2 sibling modules: cli, commands"),
        "{text}"
    );
    assert!(!text.contains("commands::tests"), "{text}");
    // Without the two offending imports, none is left.
    std::fs::write(src.join("b.rs"), "pub struct Other;\n").unwrap();
    std::fs::write(src.join("commands/tools.rs"), "pub fn g() {}\n").unwrap();
    let out = import_cycles(&[src]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("no circle between files or sibling modules"),
        "{text}"
    );
}
