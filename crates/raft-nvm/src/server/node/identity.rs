//! Which cluster, and which member, a node's data belongs to.
//!
//! A cluster's id is fixed when it is founded: a hash of the operator's cluster
//! token and the founding members ([`NodeConfig::cluster_id`](super::NodeConfig::cluster_id)).
//! Each member keeps it in a small file beside its store, `<store>.cluster`, and
//! its own node id in another, `<store>.node`, both written (atomically) before a
//! new store is created. The node sends the cluster id in every transport Hello,
//! and peers of another cluster are refused.
//!
//! On start, with the store present:
//! - a restart ([`StartMode::Existing`]) uses the recorded cluster id, whatever
//!   the configuration says now (membership may change after founding);
//! - a node told to bootstrap or join over a store recorded for *another* cluster
//!   refuses to start ([`NodeError::OtherCluster`]) and writes nothing: that data
//!   is another cluster's;
//! - a node whose id is not the one recorded beside the store refuses to start
//!   ([`NodeError::OtherNode`]) and writes nothing, whatever the mode: that store
//!   holds another member's log and votes, and running it under this id would
//!   make one member count twice;
//! - a store from before these files existed adopts the configured ids, once the
//!   store opened (so a start refused for another reason writes nothing).
//!
//! Both files are checked to be regular files before they are read.

use std::path::{Path, PathBuf};

use super::NodeError;
use crate::consensus::replica::{sibling, Engine, StartMode};

/// The first line of the cluster file, before the id in hexadecimal.
const MAGIC: &str = "raft-nvm cluster ";

/// The node file's text, before the id in decimal.
const NODE_MAGIC: &str = "raft-nvm node ";

/// Where the id of the store at `store` is kept.
pub(crate) fn cluster_path(store: &Path) -> PathBuf {
    sibling(store, ".cluster")
}

/// Where the node id of the store at `store` is kept.
pub(crate) fn node_path(store: &Path) -> PathBuf {
    sibling(store, ".node")
}

/// The text of the file at `path`, if it exists; anything but a regular file
/// there is refused before it is opened, and so is a file larger than an id
/// file can be.
fn read_text(path: &Path) -> Result<Option<String>, NodeError> {
    let bad = |e: &dyn std::fmt::Display| NodeError::Identity(format!("{}: {e}", path.display()));
    if !crate::storage::ondisk::regular_file(path).map_err(|e| bad(&e))? {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::open(path).map_err(|e| bad(&e))?, 64),
        &mut bytes,
    )
    .map_err(|e| bad(&e))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The recorded cluster id, if the file exists.
fn read(path: &Path) -> Result<Option<u64>, NodeError> {
    let Some(text) = read_text(path)? else {
        return Ok(None);
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

/// The recorded node id, if the file exists.
fn read_node(path: &Path) -> Result<Option<u16>, NodeError> {
    let Some(text) = read_text(path)? else {
        return Ok(None);
    };
    text.strip_prefix(NODE_MAGIC)
        .and_then(|rest| rest.strip_suffix('\n'))
        .and_then(|id| id.parse::<u16>().ok())
        .map(Some)
        .ok_or_else(|| {
            NodeError::Identity(format!(
                "{}: not a node id file (expected `{NODE_MAGIC}<id>`)",
                path.display()
            ))
        })
}

/// Records `text` at `path` atomically (the WAL's temporary file, sync, rename and
/// directory sync).
fn write_text(path: &Path, text: &str) -> Result<(), NodeError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    crate::storage::wal::replace_atomically(dir, path, text.as_bytes())
        .map_err(|e| NodeError::Identity(format!("{}: {e}", path.display())))
}

/// Identity files to write once the store opened: those of a store from before
/// they existed.
#[derive(Debug, Default)]
#[must_use = "the adopted ids are written by `record`"]
pub(crate) struct Adopt(Vec<(PathBuf, String)>);

impl Adopt {
    /// Writes them (the store opened: it is this node's).
    pub(crate) fn record(self) -> Result<(), NodeError> {
        for (path, text) in self.0 {
            tracing::info!(path = %path.display(), "recording the store's identity (a store from before it was recorded)");
            write_text(&path, &text)?;
        }
        Ok(())
    }
}

/// The cluster id node `node` runs with (see the module docs), recording both
/// ids when a store is about to be created, and the ids a store from before them
/// adopts (to [`Adopt::record`] once the store opened). Reads only when the node
/// may not create a store and has none (it will be refused for that), or when it
/// refuses.
pub(crate) fn settle(
    engine: &Engine,
    start: StartMode,
    configured: u64,
    node: u16,
) -> Result<(u64, Adopt), NodeError> {
    let store = engine.store_path();
    let path = cluster_path(store);
    let node_file = node_path(store);
    let has_store = engine
        .has_store()
        .map_err(|e| NodeError::Identity(e.to_string()))?;
    let recorded = read(&path)?;
    let recorded_node = read_node(&node_file)?;
    let cluster_text = |id: u64| format!("{MAGIC}{id:016x}\n");
    let node_text = format!("{NODE_MAGIC}{node}\n");
    if has_store {
        if let Some(found) = recorded_node.filter(|&n| n != node) {
            return Err(NodeError::OtherNode {
                id: node,
                path: node_file,
                found,
            });
        }
    }
    let mut adopt = Adopt::default();
    if has_store && recorded_node.is_none() {
        adopt.0.push((node_file.clone(), node_text.clone()));
    }
    match (has_store, recorded) {
        (true, Some(found)) if start != StartMode::Existing && found != configured => {
            Err(NodeError::OtherCluster {
                id: node,
                path,
                found,
                expected: configured,
            })
        }
        (true, Some(found)) => Ok((found, adopt)),
        (true, None) => {
            adopt.0.push((path, cluster_text(configured)));
            Ok((configured, adopt))
        }
        (false, _) if start == StartMode::Existing => {
            Ok((recorded.unwrap_or(configured), Adopt::default()))
        }
        (false, _) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| NodeError::Identity(format!("{}: {e}", dir.display())))?;
            }
            write_text(&path, &cluster_text(configured))?;
            write_text(&node_file, &node_text)?;
            Ok((configured, Adopt::default()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::list::ListOptions;

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
        assert_eq!(settle(&e, StartMode::Existing, 7, 1).expect("settle").0, 7);
        assert!(!file.exists());
        // A bootstrap records the id before the store exists.
        assert_eq!(settle(&e, StartMode::Bootstrap, 7, 1).expect("settle").0, 7);
        assert_eq!(read(&file).expect("read"), Some(7));
        std::fs::write(e.store_path(), b"a store").expect("fake store");
        // Over a store of cluster 7: a restart keeps 7 whatever is configured; a
        // bootstrap or join of another cluster is refused and changes nothing.
        assert_eq!(settle(&e, StartMode::Existing, 8, 1).expect("settle").0, 7);
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
        // A store without the file adopts the configured id, once recorded.
        std::fs::remove_file(&file).expect("remove");
        let (id, adopt) = settle(&e, StartMode::Existing, 9, 1).expect("settle");
        assert_eq!(id, 9);
        assert!(!file.exists(), "nothing written before the store opened");
        adopt.record().expect("record");
        assert_eq!(read(&file).expect("read"), Some(9));
        // A damaged file is an error, left as it is.
        std::fs::write(&file, b"garbage").expect("write");
        assert!(matches!(
            settle(&e, StartMode::Existing, 9, 1),
            Err(NodeError::Identity(_))
        ));
        assert_eq!(std::fs::read(&file).expect("read"), b"garbage");
    }

    #[test]
    fn records_the_node_id_and_refuses_another_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = engine(dir.path());
        let file = node_path(e.store_path());
        let (_, adopt) = settle(&e, StartMode::Bootstrap, 7, 1).expect("settle");
        adopt.record().expect("nothing to adopt");
        assert_eq!(read_node(&file).expect("read"), Some(1));
        std::fs::write(e.store_path(), b"a store").expect("fake store");
        for start in [StartMode::Existing, StartMode::Bootstrap, StartMode::Join] {
            assert!(matches!(
                settle(&e, start, 7, 2),
                Err(NodeError::OtherNode {
                    id: 2,
                    found: 1,
                    ..
                })
            ));
        }
        assert_eq!(std::fs::read(&file).expect("read"), b"raft-nvm node 1\n");
        // A store from before the file adopts this node's id once it opened.
        std::fs::remove_file(&file).expect("remove");
        let (_, adopt) = settle(&e, StartMode::Existing, 7, 2).expect("settle");
        assert!(!file.exists());
        adopt.record().expect("record");
        assert_eq!(read_node(&file).expect("read"), Some(2));
        // A FIFO in its place is refused before it is opened (which would block).
        std::fs::remove_file(&file).expect("remove");
        let status = std::process::Command::new("mkfifo")
            .arg(&file)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        assert!(matches!(
            settle(&e, StartMode::Existing, 7, 2),
            Err(NodeError::Identity(m)) if m.contains("FIFO")
        ));
    }
}
