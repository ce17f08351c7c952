//! The crate's layers depend one way, storage <- consensus <- server: this test
//! reads every source file of `src/storage` and `src/consensus` and fails on a
//! path that runs upward.
//!
//! - A storage file may name, under `crate::`, only `crate::storage`; a consensus
//!   file only `crate::storage` and `crate::consensus`. Naming the layer is how the
//!   crate writes its internal paths, so a root re-export (`crate::raft`,
//!   `crate::HOP_TRACE_TARGET`) cannot smuggle an upward dependency past the check.
//!   Doc links count too: a doc that links upward couples the layers' docs.
//! - A `super::` chain may not climb out of the layer (to the crate root and on).
//! - Neither layer names `tokio` in code (comments may speak of the tokio node).

use std::fs;
use std::path::{Path, PathBuf};

/// A layer: its folder under `src/` and the top-level modules its files may name.
struct Layer {
    name: &'static str,
    allowed: &'static [&'static str],
}

const LAYERS: &[Layer] = &[
    Layer {
        name: "storage",
        allowed: &["storage"],
    },
    Layer {
        name: "consensus",
        allowed: &["storage", "consensus"],
    },
];

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
                .path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// How deep the module a file defines sits below the crate root: a file's
/// `super::` chain of this length (or longer) leaves the layer.
fn module_depth(src: &Path, file: &Path) -> usize {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let parts: Vec<_> = rel.components().collect();
    let is_mod = rel.file_name().is_some_and(|n| n == "mod.rs");
    // storage/store.rs is crate::storage::store (depth 2); storage/list/mod.rs is
    // crate::storage::list (depth 2); storage/list/append.rs depth 3.
    if is_mod {
        parts.len() - 1
    } else {
        parts.len()
    }
}

/// The identifier that starts at `s` (letters, digits, `_`).
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Whether `word` occurs in `line` as a whole identifier.
fn names_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + word.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !part(before) && !part(after)
    })
}

/// The part of a line that is code (before a `//` comment; good enough for this
/// crate, whose string literals hold no `//` next to the names checked).
fn code_of(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// The upward references in one file's text, as `line: reason` strings.
fn violations(text: &str, layer: &Layer, depth: usize) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        // `crate::x` and `$crate::x` (in macros) both start at "crate::".
        for (i, _) in line.match_indices("crate::") {
            let prev = line[..i].chars().next_back();
            if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue; // e.g. `other_crate::`
            }
            let name = ident(&line[i + "crate::".len()..]);
            if !layer.allowed.contains(&name) {
                found.push(format!("{n}: names crate::{name}: {}", line.trim()));
            }
        }
        // A chain of `depth` supers reaches the crate root.
        let climb = "super::".repeat(depth);
        if depth > 0 && line.contains(&climb) {
            found.push(format!("{n}: climbs out of the layer: {}", line.trim()));
        }
        if names_word(code_of(line), "tokio") {
            found.push(format!("{n}: names tokio: {}", line.trim()));
        }
    }
    found
}

#[test]
fn imports_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    let mut checked = 0;
    for layer in LAYERS {
        let files = rust_files(&src.join(layer.name));
        assert!(
            files.len() > 3,
            "{}: too few files found; did the layer move?",
            layer.name
        );
        for file in files {
            let text =
                fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            checked += 1;
            for v in violations(&text, layer, module_depth(&src, &file)) {
                all.push(format!("{}:{v}", file.display()));
            }
        }
    }
    assert!(
        all.is_empty(),
        "imports that run upward (storage <- consensus <- server) in {checked} files:\n{}",
        all.join("\n")
    );
}

/// The checker itself catches each kind of upward reference (so a passing run
/// above means something).
#[test]
fn checker_catches_upward_references() {
    let storage = &LAYERS[0];
    let consensus = &LAYERS[1];
    let bad_storage = [
        "use crate::consensus::raft::Entry;",
        "use crate::server::node::Node;",
        "/// see [`crate::consensus::replica::SyncBy`]",
        "use crate::raft::Entry;",
        "    tokio::spawn(async {});",
        "use super::super::consensus::raft;",
    ];
    for line in bad_storage {
        // storage/list/append.rs: depth 3, so three supers leave the layer; the
        // two of the last line leave it from storage/store.rs (depth 2).
        assert!(
            !violations(line, storage, 2).is_empty(),
            "storage missed: {line}"
        );
    }
    for line in [
        "use crate::server::metrics::RequestStats;",
        "let (tx, rx) = tokio::sync::oneshot::channel();",
        "use crate::node::Node;",
    ] {
        assert!(
            !violations(line, consensus, 2).is_empty(),
            "consensus missed: {line}"
        );
    }
    for line in [
        "use crate::storage::store::Store;",
        "use super::layout::Page;",
        "//! the tokio node feeds it ticks",
        "use my_crate::thing;",
    ] {
        assert!(
            violations(line, storage, 2).is_empty(),
            "storage flagged: {line}"
        );
    }
    assert!(violations("use crate::storage::store::Store;", consensus, 3).is_empty());
}
