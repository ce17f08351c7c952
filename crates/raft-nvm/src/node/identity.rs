//! Which cluster a node's data belongs to.
//!
//! A cluster's id is fixed when it is founded: a hash of the operator's cluster
//! token and the founding members ([`NodeConfig::cluster_id`](super::NodeConfig::cluster_id)).
//! Each member keeps it in a small file beside its store, `<store>.cluster`,
//! written (atomically) before a new store is created. The node sends it in every
//! transport Hello, and peers of another cluster are refused.
//!
//! On start, with the store present:
//! - a restart ([`StartMode::Existing`]) uses the recorded id, whatever the
//!   configuration says now (membership may change after founding);
//! - a node told to bootstrap or join over a store recorded for *another* cluster
//!   refuses to start ([`NodeError::OtherCluster`]) and writes nothing: that data
//!   is another cluster's;
//! - a store from before this file existed adopts the configured id.

use std::path::{Path, PathBuf};

use super::NodeError;
use crate::replica::{sibling, Engine, StartMode};

/// The first line of the file, before the id in hexadecimal.
const MAGIC: &str = "raft-nvm cluster ";

/// Where the id of the store at `store` is kept.
pub(crate) fn cluster_path(store: &Path) -> PathBuf {
    sibling(store, ".cluster")
}

/// The recorded id, if the file exists.
fn read(path: &Path) -> Result<Option<u64>, NodeError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(NodeError::Identity(format!("{}: {e}", path.display()))),
    };
    text.strip_prefix(MAGIC)
        .map(str::trim_end)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .map(Some)
        .ok_or_else(|| {
            NodeError::Identity(format!(
                "{}: not a cluster id file (expected `{MAGIC}<16 hex digits>`)",
                path.display()
            ))
        })
}

/// Records `id` at `path` atomically (the WAL's temporary file, sync, rename and
/// directory sync).
fn write(path: &Path, id: u64) -> Result<(), NodeError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    crate::wal::replace_atomically(dir, path, format!("{MAGIC}{id:016x}\n").as_bytes())
        .map_err(|e| NodeError::Identity(format!("{}: {e}", path.display())))
}

/// The cluster id node `node` runs with (see the module docs), recording it when
/// a store is about to be created. Reads only when the node may not create a
/// store and has none (it will be refused for that).
pub(crate) fn settle(
    engine: &Engine,
    start: StartMode,
    configured: u64,
    node: u16,
) -> Result<u64, NodeError> {
    let path = cluster_path(engine.store_path());
    let has_store = engine
        .has_store()
        .map_err(|e| NodeError::Identity(e.to_string()))?;
    let recorded = read(&path)?;
    match (has_store, recorded) {
        (true, Some(found)) if start != StartMode::Existing && found != configured => {
            Err(NodeError::OtherCluster {
                id: node,
                path,
                found,
                expected: configured,
            })
        }
        (true, Some(found)) => Ok(found),
        (true, None) => {
            write(&path, configured)?;
            Ok(configured)
        }
        (false, _) if start == StartMode::Existing => Ok(recorded.unwrap_or(configured)),
        (false, _) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| NodeError::Identity(format!("{}: {e}", dir.display())))?;
            }
            write(&path, configured)?;
            Ok(configured)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::list::ListOptions;

    fn engine(dir: &Path) -> Engine {
        Engine::List {
            path: dir.join("node1.pool"),
            pool_size: 1 << 20,
            opts: ListOptions::default(),
        }
    }

    #[test]
    fn records_adopts_and_refuses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let e = engine(dir.path());
        let file = cluster_path(e.store_path());
        // A restart without a store writes nothing (it is refused later).
        assert_eq!(settle(&e, StartMode::Existing, 7, 1).expect("settle"), 7);
        assert!(!file.exists());
        // A bootstrap records the id before the store exists.
        assert_eq!(settle(&e, StartMode::Bootstrap, 7, 1).expect("settle"), 7);
        assert_eq!(read(&file).expect("read"), Some(7));
        std::fs::write(e.store_path(), b"a store").expect("fake store");
        // Over a store of cluster 7: a restart keeps 7 whatever is configured; a
        // bootstrap or join of another cluster is refused and changes nothing.
        assert_eq!(settle(&e, StartMode::Existing, 8, 1).expect("settle"), 7);
        for start in [StartMode::Bootstrap, StartMode::Join] {
            assert!(matches!(
                settle(&e, start, 8, 1),
                Err(NodeError::OtherCluster {
                    found: 7,
                    expected: 8,
                    ..
                })
            ));
        }
        assert_eq!(read(&file).expect("read"), Some(7));
        // A store without the file adopts the configured id.
        std::fs::remove_file(&file).expect("remove");
        assert_eq!(settle(&e, StartMode::Existing, 9, 1).expect("settle"), 9);
        assert_eq!(read(&file).expect("read"), Some(9));
        // A damaged file is an error, left as it is.
        std::fs::write(&file, b"garbage").expect("write");
        assert!(matches!(
            settle(&e, StartMode::Existing, 9, 1),
            Err(NodeError::Identity(_))
        ));
        assert_eq!(std::fs::read(&file).expect("read"), b"garbage");
    }
}
