//! The Docker backend (being written; see the guest issue).

use anyhow::bail;

use super::{Backend, StartRequest};
use crate::channel::Connect;
use crate::session::{SessionDir, SessionRecord};

/// The Docker backend.
#[derive(Debug, Clone)]
pub struct DockerBackend;

impl DockerBackend {
    /// Connects to the Docker engine.
    pub async fn connect() -> anyhow::Result<DockerBackend> {
        bail!("the docker backend is not available in this build yet; use --backend local")
    }
}

impl Backend for DockerBackend {
    async fn start(&self, _dir: &SessionDir, _req: &StartRequest) -> anyhow::Result<SessionRecord> {
        bail!("the docker backend is not available in this build yet")
    }
    async fn stop(&self, _dir: &SessionDir, _rec: &SessionRecord) -> anyhow::Result<()> {
        bail!("the docker backend is not available in this build yet")
    }
    async fn connector(
        &self,
        _dir: &SessionDir,
        _rec: &SessionRecord,
    ) -> anyhow::Result<Box<dyn Connect>> {
        bail!("the docker backend is not available in this build yet")
    }
    async fn alive(&self, _dir: &SessionDir, _rec: &SessionRecord) -> bool {
        false
    }
    async fn logs(&self, _dir: &SessionDir, _rec: &SessionRecord) -> anyhow::Result<String> {
        bail!("the docker backend is not available in this build yet")
    }
}
