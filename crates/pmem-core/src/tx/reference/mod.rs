//! Reference structures built on [`crate::tx`]: the workloads of the `tx_bench`
//! benchmark and examples to copy from. Each operation is one transaction, so after
//! a crash a structure holds exactly the operations that completed, plus perhaps the
//! one in flight applied whole.

pub mod pht;

use super::Hint;

/// How an operation's transaction logs what it changes (the NVWA paper's
/// comparison of word, object and hybrid logging).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Logging {
    /// Every write with [`Hint::Word`].
    Word,
    /// Every write with [`Hint::Object`].
    Object,
    /// [`Hint::Word`] for single 8-byte words (heads, counts, links), and
    /// [`Hint::Object`] for anything larger.
    #[default]
    Hybrid,
}

impl Logging {
    /// The hint for a write of `len` bytes.
    pub fn hint_for(self, len: u64) -> Hint {
        match self {
            Logging::Word => Hint::Word,
            Logging::Object => Hint::Object,
            Logging::Hybrid if len <= 8 => Hint::Word,
            Logging::Hybrid => Hint::Object,
        }
    }
}
