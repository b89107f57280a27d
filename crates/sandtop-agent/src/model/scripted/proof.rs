//! The scripted model's proof of what it is, in a leaf of its own so that
//! `model` (the trait that hands it out) and `scripted` (the one model
//! that makes it) do not import each other.

/// Proof that the model asking is the offline scripted one: its field is
/// private and its constructor visible to `scripted` alone, so only
/// [`super::ScriptedModel`] makes one. The runner puts its model's proof
/// (or none) into every question it asks the operator, and
/// `--approve-scripted-checks` approves a question only when it carries
/// one, so the flag cannot approve a real model's checks whatever the CLI
/// lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptedOnly(());

impl ScriptedOnly {
    pub(super) fn new() -> ScriptedOnly {
        ScriptedOnly(())
    }
}
