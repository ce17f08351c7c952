//! What the environment chooses for a pool, read once per open or create, before
//! anything is written: the persistence domain override
//! (`PMKIT_PERSISTENCE_DOMAIN`) and the drain policy (`PMKIT_GROUP_COMMIT`,
//! `PMKIT_DRAIN_SYNC`). Every variable refuses a value it does not accept with
//! [`PoolError::InvalidEnv`], so a create with a typo leaves no file behind.

use std::path::Path;

use super::{domain, DrainPolicy, PersistenceDomain};
use crate::PoolError;

/// The environment's choices for the pool at `path`.
#[derive(Clone, Copy, Debug)]
pub(super) struct EnvChoices {
    /// The forced persistence domain, if any.
    pub domain: Option<PersistenceDomain>,
    /// The drain policy (the default unless a variable changes it).
    pub drain: DrainPolicy,
}

impl EnvChoices {
    /// Reads every variable, naming `path` in an error.
    pub(super) fn read(path: &Path) -> Result<EnvChoices, PoolError> {
        Ok(EnvChoices {
            domain: domain::env_override(path)?,
            drain: DrainPolicy::from_env(path)?,
        })
    }
}
