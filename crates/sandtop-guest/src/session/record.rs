//! A session's record (`session.json`): what it runs, by backend.
//!
//! [`SessionRecord`] holds one [`BackendRecord`], a tagged enum, so a
//! record cannot name one backend and carry another's parts, or none.
//! On disk it keeps the flat form earlier versions wrote (`"backend":
//! "docker"` beside a `"docker": {...}` object); reading one checks that
//! the named backend's part, and only that one, is present.

use sandtop_protocol::Size;
use serde::{Deserialize, Serialize};

/// Which backend runs a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A hardened Docker container (the default).
    Docker,
    /// Xvfb and sandtopd as processes on this host: no isolation at all.
    Local,
    /// A QEMU virtual machine from the same root filesystem (`make
    /// guest-vm`): no network device, the daemon over virtio-serial.
    Qemu,
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Docker => "docker",
            BackendKind::Local => "local",
            BackendKind::Qemu => "qemu",
        })
    }
}

/// What a local session runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalRecord {
    /// The daemon's pid; it leads its own process group (Xvfb and the
    /// window manager are in it).
    pub pid: i32,
}

/// What a Docker session runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerRecord {
    pub container_id: String,
    pub container_name: String,
    pub image: String,
}

/// How QEMU runs the guest's CPU ([`Accel::pick`] chooses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Linux's KVM.
    Kvm,
    /// macOS's Hypervisor.framework (Apple silicon: an aarch64 guest).
    Hvf,
    /// Software emulation: works anywhere, many times slower.
    Tcg,
}

/// What a QEMU session runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QemuRecord {
    /// QEMU's pid (it leads its own process group).
    pub pid: i32,
    /// The host end of the link's pid.
    pub link_pid: i32,
    pub accel: Accel,
}

/// What the session's backend runs: exactly one backend's part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendRecord {
    Local(LocalRecord),
    Docker(DockerRecord),
    Qemu(QemuRecord),
}

impl BackendRecord {
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendRecord::Local(_) => BackendKind::Local,
            BackendRecord::Docker(_) => BackendKind::Docker,
            BackendRecord::Qemu(_) => BackendKind::Qemu,
        }
    }
}

/// A session's record (`session.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RecordFile", into = "RecordFile")]
pub struct SessionRecord {
    pub name: String,
    pub screen: Size,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
    /// What the backend runs.
    pub guest: BackendRecord,
    /// The network policy; absent means `none`.
    pub network: Option<sandtop_egress::service::EgressConfig>,
    /// The egress proxy's pid, for `allow` and `ask`.
    pub egress_pid: Option<i32>,
}

impl SessionRecord {
    /// Which backend runs the session.
    pub fn backend(&self) -> BackendKind {
        self.guest.kind()
    }

    pub fn local(&self) -> Option<&LocalRecord> {
        match &self.guest {
            BackendRecord::Local(l) => Some(l),
            _ => None,
        }
    }

    pub fn docker(&self) -> Option<&DockerRecord> {
        match &self.guest {
            BackendRecord::Docker(d) => Some(d),
            _ => None,
        }
    }

    pub fn qemu(&self) -> Option<&QemuRecord> {
        match &self.guest {
            BackendRecord::Qemu(q) => Some(q),
            _ => None,
        }
    }
}

/// `session.json` as written: the backend's name and its part beside it.
#[derive(Serialize, Deserialize)]
struct RecordFile {
    name: String,
    backend: BackendKind,
    screen: Size,
    created_unix: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    local: Option<LocalRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    docker: Option<DockerRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qemu: Option<QemuRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    network: Option<sandtop_egress::service::EgressConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    egress_pid: Option<i32>,
}

impl TryFrom<RecordFile> for SessionRecord {
    type Error = String;

    fn try_from(f: RecordFile) -> Result<SessionRecord, String> {
        let guest = match (f.backend, f.local, f.docker, f.qemu) {
            (BackendKind::Local, Some(l), None, None) => BackendRecord::Local(l),
            (BackendKind::Docker, None, Some(d), None) => BackendRecord::Docker(d),
            (BackendKind::Qemu, None, None, Some(q)) => BackendRecord::Qemu(q),
            (kind, l, d, q) => {
                let present: Vec<&str> = [
                    l.is_some().then_some("local"),
                    d.is_some().then_some("docker"),
                    q.is_some().then_some("qemu"),
                ]
                .into_iter()
                .flatten()
                .collect();
                return Err(format!(
                    "session record of backend `{kind}` holds {}: it needs the `{kind}` part alone",
                    if present.is_empty() {
                        "no backend part".to_string()
                    } else {
                        format!("the part(s) {}", present.join(", "))
                    }
                ));
            }
        };
        Ok(SessionRecord {
            name: f.name,
            screen: f.screen,
            created_unix: f.created_unix,
            guest,
            network: f.network,
            egress_pid: f.egress_pid,
        })
    }
}

impl From<SessionRecord> for RecordFile {
    fn from(r: SessionRecord) -> RecordFile {
        let backend = r.backend();
        let (mut local, mut docker, mut qemu) = (None, None, None);
        match r.guest {
            BackendRecord::Local(l) => local = Some(l),
            BackendRecord::Docker(d) => docker = Some(d),
            BackendRecord::Qemu(q) => qemu = Some(q),
        }
        RecordFile {
            name: r.name,
            backend,
            screen: r.screen,
            created_unix: r.created_unix,
            local,
            docker,
            qemu,
            network: r.network,
            egress_pid: r.egress_pid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file keeps the flat form; a record naming one backend with
    /// another's part, or none, or two, is refused when read.
    #[test]
    fn the_file_form_round_trips_and_mismatched_parts_are_refused() {
        let rec = SessionRecord {
            name: "s".into(),
            screen: Size::new(1280, 800),
            created_unix: 7,
            guest: BackendRecord::Docker(DockerRecord {
                container_id: "abc".into(),
                container_name: "sandtop-s".into(),
                image: "sandtop-guest:latest".into(),
            }),
            network: None,
            egress_pid: None,
        };
        let v = serde_json::to_value(&rec).unwrap();
        assert_eq!(v["backend"], "docker");
        assert_eq!(v["docker"]["container_id"], "abc");
        assert!(v.get("local").is_none() && v.get("qemu").is_none() && v.get("guest").is_none());
        assert_eq!(
            serde_json::from_value::<SessionRecord>(v.clone()).unwrap(),
            rec
        );
        assert_eq!(rec.backend(), BackendKind::Docker);
        assert!(rec.docker().is_some() && rec.local().is_none() && rec.qemu().is_none());

        let mut wrong = v.clone();
        wrong["backend"] = "local".into();
        let e = serde_json::from_value::<SessionRecord>(wrong)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("backend `local` holds the part(s) docker"),
            "{e}"
        );
        let mut none = v.clone();
        none.as_object_mut().unwrap().remove("docker");
        let e = serde_json::from_value::<SessionRecord>(none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no backend part"), "{e}");
        let mut two = v;
        two["local"] = serde_json::json!({"pid": 3});
        let e = serde_json::from_value::<SessionRecord>(two)
            .unwrap_err()
            .to_string();
        assert!(e.contains("local, docker"), "{e}");
    }
}
