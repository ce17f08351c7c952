//! The crate's modules depend one way. Each module may name (through a
//! `crate::…` path in its code, tests and doc comments aside) only modules
//! below it in [`LAYERS`]; a path naming one above fails this test with the file
//! and the line.
//!
//! Method calls on `DefragHeap` defined in a higher module are not paths, so a
//! grep cannot see them; the rule for those is kept by placing each `impl`
//! block in the module of its concern (open-time recovery, for one, lives in
//! `open.rs`, above everything it finishes).

use std::path::Path;

/// Bottom to top.
const LAYERS: [&str; 16] = [
    "layout",
    "protocol",
    "types",
    "barrier",
    "locks",
    "heap",
    "heal",
    "mark",
    "compact",
    "reached",
    "planning",
    "cycle",
    "open",
    "collector",
    "inspect",
    "fuzzing",
];

/// The `crate::` modules a source names in code (not in comments, not in its
/// unit tests), with the line of each.
fn named_modules(source: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in source.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((n + 1, name));
        }
    }
    out
}

/// Every upward path in `src`, as readable lines.
fn upward_paths(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (rank, module) in LAYERS.iter().enumerate() {
        let file = src.join(format!("{module}.rs"));
        let source =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (line, named) in named_modules(&source) {
            if let Some(above) = LAYERS.iter().position(|m| *m == named) {
                if above > rank {
                    found.push(format!(
                        "{module}.rs:{line} names crate::{named}, a layer above it"
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn modules_name_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let upward = upward_paths(&src);
    assert!(upward.is_empty(), "{}", upward.join("\n"));
}

#[test]
fn every_module_of_the_crate_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && stem != "lib" && !LAYERS.contains(&stem) {
            missing.push(stem.to_string());
        }
    }
    assert!(missing.is_empty(), "modules without a layer: {missing:?}");
}

#[test]
fn an_upward_path_is_found() {
    // The checker itself: a file of the bottom layer naming the top one.
    let dir = tempfile::tempdir().expect("tempdir");
    for module in LAYERS {
        let body = if module == "layout" {
            "use crate::collector::Collector; // upward\n"
        } else {
            "use crate::layout::PAGE;\n"
        };
        std::fs::write(dir.path().join(format!("{module}.rs")), body).expect("write");
    }
    let found = upward_paths(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("layout.rs:1 names crate::collector"));
}
