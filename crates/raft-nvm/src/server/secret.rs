//! Secrets read from files: the cluster secret that peers authenticate with (the
//! challenge-response of the transport's Hello, see [`crate::server::net::transport`]) and
//! the password RESP clients must give (`AUTH`, as Redis's `requirepass`).
//!
//! A secret never has a default and never comes from a command line (where `ps`
//! shows it): [`Secret::from_file`] reads it from a file that must be a regular
//! file (a FIFO or a device is refused before it is opened, so a start never hangs
//! on one), readable by its owner only (no permission bits for group or other, as
//! `ssh` demands of a private key), not empty and at most [`MAX_SECRET_LEN`] bytes.
//! One trailing line break (`\n` or `\r\n`) is not part of the secret, so
//! `head -c 32 /dev/urandom | base64 > secret` works as expected.
//!
//! A [`Secret`]'s `Debug` output never shows its bytes, and comparisons with it run
//! in time independent of where the bytes differ.

use std::fmt;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The longest secret accepted, in bytes (a line break after it excluded).
pub const MAX_SECRET_LEN: usize = 4096;

/// The length of a challenge nonce and of an HMAC-SHA256 tag.
pub(crate) const TAG_LEN: usize = 32;

/// A shared secret: the cluster secret or a RESP password. Cheap to clone.
#[derive(Clone)]
pub struct Secret(Arc<[u8]>);

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The path could not be examined or read.
    #[error("secret file {path:?}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The path names a FIFO, a socket, a device or a directory.
    #[error("secret file {path:?} is not a regular file (it is {kind})")]
    NotRegularFile {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Group or other have permissions on the file.
    #[error(
        "secret file {path:?} has mode {mode:04o}: group and other must have no access (chmod 600)"
    )]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secret is empty (a line break alone counts as empty).
    #[error("secret {}is empty", origin(.path))]
    Empty {
        /// The file, if it came from one.
        path: Option<PathBuf>,
    },
    /// The secret is longer than [`MAX_SECRET_LEN`].
    #[error("secret {}is longer than {MAX_SECRET_LEN} bytes", origin(.path))]
    TooLong {
        /// The file, if it came from one.
        path: Option<PathBuf>,
    },
}

/// `file "..." ` for an error message, or nothing.
fn origin(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("in file {p:?} "))
        .unwrap_or_default()
}

impl Secret {
    /// A secret of these bytes.
    ///
    /// # Errors
    ///
    /// [`SecretError::Empty`] and [`SecretError::TooLong`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Secret, SecretError> {
        Self::checked(bytes.into(), None)
    }

    fn checked(bytes: Vec<u8>, path: Option<&Path>) -> Result<Secret, SecretError> {
        if bytes.is_empty() {
            return Err(SecretError::Empty {
                path: path.map(Path::to_path_buf),
            });
        }
        if bytes.len() > MAX_SECRET_LEN {
            return Err(SecretError::TooLong {
                path: path.map(Path::to_path_buf),
            });
        }
        Ok(Secret(bytes.into()))
    }

    /// Reads a secret from `path` (see the module docs for what is refused).
    /// Nothing is written, and a FIFO or device is refused without being opened.
    ///
    /// # Errors
    ///
    /// A [`SecretError`] naming the file.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let io = |source| SecretError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Follows symlinks (secrets mounted by an orchestrator often are), and
        // looks before opening: opening a FIFO for reading blocks until a writer
        // comes.
        let meta = std::fs::metadata(path).map_err(io)?;
        Self::check_file(path, &meta)?;
        // O_NONBLOCK: should the path be swapped for a FIFO after the check, the
        // open still does not block; the check below then refuses it.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io)?;
        let opened = file.metadata().map_err(io)?;
        Self::check_file(path, &opened)?;
        if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
            return Err(io(std::io::Error::other(
                "the file changed while it was being opened",
            )));
        }
        let mut bytes = Vec::new();
        // A line break may follow the longest secret.
        let limit = MAX_SECRET_LEN as u64 + 3;
        file.by_ref()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        Self::checked(bytes, Some(path))
    }

    fn check_file(path: &Path, meta: &std::fs::Metadata) -> Result<(), SecretError> {
        if !meta.file_type().is_file() {
            return Err(SecretError::NotRegularFile {
                path: path.to_path_buf(),
                kind: crate::storage::ondisk::kind_of(meta.file_type()),
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Permissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        Ok(())
    }

    /// Whether `candidate` is this secret, compared in constant time (the hashes
    /// of both are compared, so not even the length leaks through timing).
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let mine = Sha256::digest(&self.0);
        let theirs = Sha256::digest(candidate);
        bool::from(mine.as_slice().ct_eq(theirs.as_slice()))
    }

    /// The keyed MAC over a Hello's challenge and fields.
    /// (HMAC takes keys of any length, so this is never `None` in practice.)
    fn hello_hmac(&self, nonce: &[u8; TAG_LEN], hello: &HelloFields) -> Option<Hmac<Sha256>> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).ok()?;
        mac.update(nonce);
        mac.update(&hello.from.to_le_bytes());
        mac.update(&hello.to.to_le_bytes());
        mac.update(&hello.cluster.to_le_bytes());
        // The address too: a tag must not let anyone on the path redirect the
        // answers to a node it names.
        match hello.reply_to.ip() {
            IpAddr::V4(ip) => {
                mac.update(&[4]);
                mac.update(&ip.octets());
            }
            IpAddr::V6(ip) => {
                mac.update(&[6]);
                mac.update(&ip.octets());
            }
        }
        mac.update(&hello.reply_to.port().to_le_bytes());
        Some(mac)
    }

    /// HMAC-SHA256(secret, nonce ‖ from ‖ to ‖ cluster ‖ reply_to), the integers
    /// little-endian and the address as its family (4 or 6), octets and port: a
    /// dialler's answer to an acceptor's challenge.
    pub(crate) fn hello_tag(
        &self,
        nonce: &[u8; TAG_LEN],
        hello: &HelloFields,
    ) -> Option<[u8; TAG_LEN]> {
        let tag = self.hello_hmac(nonce, hello)?.finalize().into_bytes();
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(&tag);
        Some(out)
    }

    /// Whether `tag` is [`Secret::hello_tag`] of these fields (constant time).
    pub(crate) fn verify_hello(
        &self,
        nonce: &[u8; TAG_LEN],
        hello: &HelloFields,
        tag: &[u8],
    ) -> bool {
        self.hello_hmac(nonce, hello)
            .is_some_and(|mac| mac.verify_slice(tag).is_ok())
    }
}

/// The fields of a Hello that its tag binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HelloFields {
    /// The dialling node.
    pub from: u16,
    /// The node it means to reach.
    pub to: u16,
    /// The dialler's cluster id.
    pub cluster: u64,
    /// Where the dialler listens.
    pub reply_to: SocketAddr,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn reads_a_private_file_without_its_line_break() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Secret::from_file(&write(dir.path(), "a", b"hunter2\n", 0o600)).expect("read");
        assert!(s.matches(b"hunter2"));
        assert!(!s.matches(b"hunter2\n"));
        assert!(!s.matches(b"hunter"));
        let s = Secret::from_file(&write(dir.path(), "b", b"x y\r\n", 0o400)).expect("read");
        assert!(s.matches(b"x y"));
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
    }

    #[test]
    fn refuses_empty_shared_odd_and_missing_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        assert!(matches!(
            Secret::from_file(&write(d, "empty", b"", 0o600)),
            Err(SecretError::Empty { .. })
        ));
        assert!(matches!(
            Secret::from_file(&write(d, "nl", b"\n", 0o600)),
            Err(SecretError::Empty { .. })
        ));
        let err = Secret::from_file(&write(d, "shared", b"pw", 0o640)).expect_err("0640");
        assert!(matches!(err, SecretError::Permissions { mode: 0o640, .. }));
        assert!(err.to_string().contains("chmod 600"), "{err}");
        assert!(matches!(
            Secret::from_file(&write(d, "other", b"pw", 0o604)),
            Err(SecretError::Permissions { .. })
        ));
        assert!(matches!(
            Secret::from_file(&write(d, "long", &[b'a'; MAX_SECRET_LEN + 1], 0o600)),
            Err(SecretError::TooLong { .. })
        ));
        assert!(matches!(
            Secret::from_file(d),
            Err(SecretError::NotRegularFile {
                kind: "a directory",
                ..
            })
        ));
        assert!(matches!(
            Secret::from_file(&d.join("missing")),
            Err(SecretError::Io { .. })
        ));
        // A name with a line break is quoted, not printed raw.
        let err = Secret::from_file(&d.join("a\nb")).expect_err("missing");
        assert!(!err.to_string().contains('\n'), "{err}");
    }

    #[test]
    fn a_fifo_is_refused_without_hanging() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg("-m")
            .arg("600")
            .arg(&path)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("mkfifo unavailable; skipped");
            return;
        }
        assert!(matches!(
            Secret::from_file(&path),
            Err(SecretError::NotRegularFile { kind: "a FIFO", .. })
        ));
    }

    #[test]
    fn hello_tags_bind_every_field() {
        let s = Secret::new(b"k".to_vec()).expect("secret");
        let other = Secret::new(b"K".to_vec()).expect("secret");
        let nonce = [7u8; TAG_LEN];
        let h = HelloFields {
            from: 1,
            to: 2,
            cluster: 9,
            reply_to: ([127, 0, 0, 1], 7000).into(),
        };
        let tag = s.hello_tag(&nonce, &h).expect("a tag");
        assert!(s.verify_hello(&nonce, &h, &tag));
        assert!(!other.verify_hello(&nonce, &h, &tag));
        assert!(!s.verify_hello(&[8u8; TAG_LEN], &h, &tag));
        for changed in [
            HelloFields { from: 3, ..h },
            HelloFields { to: 3, ..h },
            HelloFields { cluster: 8, ..h },
            HelloFields {
                reply_to: ([127, 0, 0, 2], 7000).into(),
                ..h
            },
            HelloFields {
                reply_to: ([127, 0, 0, 1], 7001).into(),
                ..h
            },
            HelloFields {
                reply_to: "[::ffff:127.0.0.1]:7000".parse().expect("v6"),
                ..h
            },
        ] {
            assert!(!s.verify_hello(&nonce, &changed, &tag), "{changed:?}");
        }
        assert!(!s.verify_hello(&nonce, &h, &tag[..31]));
        assert!(Secret::new(Vec::new()).is_err());
    }
}
