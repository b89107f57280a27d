//! The container's create body: the hardening of a Docker guest, the part
//! of this backend most worth reviewing (docs/security.md C1-C12). Every
//! field that loosens isolation is set explicitly to its safe value, so
//! that an engine's defaults cannot change what a guest may do.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};

use super::{DockerBackend, STOP_GRACE_SECS, gc::session_labels};
use crate::StartRequest;
use crate::ids::{GUEST_GID, GUEST_HOSTNAME, GUEST_MOUNT, GUEST_UID, guest_user};
use crate::session::SessionDir;
use crate::session::guest_folder::{GuestFolder, engine_tmpfs_options};
use sandtop_protocol::session::{EGRESS_SOCKET_NAME, EGRESS_SOCKET_PATH, TOKEN_NAME, TOKEN_PATH};

/// A bind mount of `source` at `target`, private propagation.
fn bind(source: std::path::PathBuf, target: &str, read_only: bool) -> Mount {
    Mount {
        typ: Some(MountType::BIND),
        source: Some(source.to_string_lossy().into_owned()),
        target: Some(target.to_string()),
        read_only: Some(read_only),
        bind_options: Some(MountBindOptions {
            propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl DockerBackend {
    /// The container's create body for this process's
    /// [`GuestFolder`] layout: the hardening lives here.
    pub fn create_body(&self, dir: &SessionDir, req: &StartRequest) -> ContainerCreateBody {
        self.create_body_for(dir, req, GuestFolder::for_this_process())
    }

    /// The container's create body with `/run/sandtop` made as `folder`
    /// says: a bind of the host's tmpfs on `guest/`
    /// ([`GuestFolder::HostTmpfs`]), or the engine's tmpfs with the token
    /// and (when the session has an egress proxy, which is then already
    /// listening) the egress socket bound into it read-only, one file each
    /// ([`GuestFolder::EngineTmpfs`], docs/security.md F4).
    pub fn create_body_for(
        &self,
        dir: &SessionDir,
        req: &StartRequest,
        folder: GuestFolder,
    ) -> ContainerCreateBody {
        let l = &self.limits;
        let mut tmpfs = HashMap::from([
            (
                "/tmp".to_string(),
                format!("rw,nosuid,nodev,noexec,size={},mode=1777", l.tmp_bytes),
            ),
            (
                "/home/user".to_string(),
                format!(
                    "rw,nosuid,nodev,noexec,size={},uid={GUEST_UID},gid={GUEST_GID},mode=0700",
                    l.home_bytes
                ),
            ),
        ]);
        let g = dir.guest_path();
        let mounts = match folder {
            GuestFolder::HostTmpfs => vec![bind(g, GUEST_MOUNT, false)],
            GuestFolder::EngineTmpfs => {
                tmpfs.insert(GUEST_MOUNT.to_string(), engine_tmpfs_options());
                let mut m = vec![bind(g.join(TOKEN_NAME), TOKEN_PATH, true)];
                if req.network.mode.uses_proxy() {
                    m.push(bind(g.join(EGRESS_SOCKET_NAME), EGRESS_SOCKET_PATH, true));
                }
                m
            }
        };
        let mut labels = session_labels(&req.name, &dir.path);
        for (k, v) in &self.extra_labels {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let host_config = HostConfig {
            memory: Some(l.memory_bytes),
            memory_swap: Some(l.memory_bytes),
            pids_limit: Some(l.pids),
            nano_cpus: Some(l.nano_cpus),
            shm_size: Some(l.shm_bytes),
            cap_drop: Some(vec!["ALL".to_string()]),
            cap_add: None,
            // Docker's default seccomp profile stays: only no-new-privileges
            // is added, never seccomp=unconfined.
            security_opt: Some(vec!["no-new-privileges:true".to_string()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            // `none` for every mode but `open`: with `allow` and `ask` the
            // only way out is the egress socket in the session folder.
            network_mode: Some(
                if req.network.mode == sandtop_egress::policy::NetworkMode::Open {
                    "bridge"
                } else {
                    "none"
                }
                .to_string(),
            ),
            privileged: Some(false),
            publish_all_ports: Some(false),
            port_bindings: None,
            devices: Some(Vec::new()),
            // tini is PID 1 through the image's ENTRYPOINT.
            init: Some(false),
            ipc_mode: Some("private".to_string()),
            ulimits: Some(vec![ResourcesUlimits {
                name: Some("core".to_string()),
                soft: Some(0),
                hard: Some(0),
            }]),
            mounts: Some(mounts),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_string()),
                config: Some(HashMap::from([
                    ("max-size".to_string(), "5m".to_string()),
                    ("max-file".to_string(), "2".to_string()),
                ])),
            }),
            auto_remove: Some(false),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            // Every guest the same name, as the VM's (guest-vm's
            // sandtop-vm-init): not the container's id, which a shell's
            // prompt shows, so that two guests' screens are the same and
            // a replay matches its recording.
            hostname: Some(GUEST_HOSTNAME.to_string()),
            user: Some(guest_user()),
            env: Some(vec![
                format!("SANDTOP_SCREEN={}", req.screen),
                // Tells the guest's entry whether programs use the egress
                // proxy (the relay at 127.0.0.1:3128).
                format!(
                    "SANDTOP_EGRESS={}",
                    if req.network.mode.uses_proxy() {
                        "proxy"
                    } else {
                        "direct"
                    }
                ),
            ]),
            labels: Some(labels),
            tty: Some(false),
            open_stdin: Some(false),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            stop_signal: Some("SIGTERM".to_string()),
            stop_timeout: Some(i64::from(STOP_GRACE_SECS)),
            host_config: Some(host_config),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use bollard::Docker;
    use sandtop_protocol::Size;

    use super::*;
    use crate::docker::channel::ChannelMode;
    use crate::docker::{READY_TIMEOUT, gc::host_id};
    use crate::limits::Limits;

    /// The create body, as JSON the engine receives, holds the hardening.
    #[tokio::test]
    async fn create_body_is_hardened() {
        // Never contacted: the body is only built and serialized.
        let docker =
            Docker::connect_with_http("http://127.0.0.1:9", 1, bollard::API_DEFAULT_VERSION)
                .unwrap();
        let b = DockerBackend {
            docker,
            image: "img:test".into(),
            limits: Limits::default(),
            channel: ChannelMode::Auto,
            ready_timeout: READY_TIMEOUT,
            extra_labels: Vec::new(),
        };
        let dir = SessionDir {
            name: "abc".into(),
            path: PathBuf::from("/state/sessions/abc"),
        };
        let req = StartRequest {
            name: "abc".into(),
            screen: Size::new(1024, 768),
            network: sandtop_egress::service::EgressConfig::none(),
        };
        let v =
            serde_json::to_value(b.create_body_for(&dir, &req, GuestFolder::HostTmpfs)).unwrap();
        let h = &v["HostConfig"];
        assert_eq!(v["Image"], "img:test");
        assert_eq!(v["User"], "2000000000:2000000000");
        assert_eq!(v["Hostname"], GUEST_HOSTNAME);
        // Nothing of the host's environment, no secret: only these two.
        assert_eq!(
            v["Env"],
            serde_json::json!(["SANDTOP_SCREEN=1024x768", "SANDTOP_EGRESS=direct"])
        );
        assert_eq!(h["NetworkMode"], "none");
        let mut open = req.clone();
        open.network.mode = sandtop_egress::policy::NetworkMode::Open;
        let o =
            serde_json::to_value(b.create_body_for(&dir, &open, GuestFolder::HostTmpfs)).unwrap();
        assert_eq!(o["HostConfig"]["NetworkMode"], "bridge");
        let mut allow = req.clone();
        allow.network.mode = "allow:https://a.test".parse().unwrap();
        let a =
            serde_json::to_value(b.create_body_for(&dir, &allow, GuestFolder::HostTmpfs)).unwrap();
        assert_eq!(
            a["HostConfig"]["NetworkMode"], "none",
            "allow keeps the guest off every network"
        );
        assert_eq!(a["Env"][1], "SANDTOP_EGRESS=proxy");
        assert_eq!(v["Labels"]["sandtop.session"], "abc");
        assert_eq!(v["Labels"]["sandtop.session-dir"], "/state/sessions/abc");
        assert_eq!(v["Labels"]["sandtop.owner-host"], host_id());
        assert_eq!(
            v["Labels"]["sandtop.owner-uid"],
            rustix::process::geteuid().as_raw().to_string()
        );
        assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
        assert!(h.get("CapAdd").is_none() || h["CapAdd"].is_null());
        assert_eq!(
            h["SecurityOpt"],
            serde_json::json!(["no-new-privileges:true"])
        );
        assert_eq!(h["ReadonlyRootfs"], true);
        assert_eq!(h["Privileged"], false);
        assert_eq!(h["NetworkMode"], "none");
        assert_eq!(h["Memory"], h["MemorySwap"]);
        assert!(h["PidsLimit"].as_i64().unwrap() > 0);
        assert!(h["NanoCpus"].as_i64().unwrap() > 0);
        assert!(h["ShmSize"].as_i64().unwrap() > 0);
        assert_eq!(h["Devices"], serde_json::json!([]));
        assert!(h.get("PortBindings").is_none() || h["PortBindings"].is_null());
        for (path, opts) in h["Tmpfs"].as_object().unwrap() {
            let opts = opts.as_str().unwrap();
            for want in ["nosuid", "nodev", "noexec", "size="] {
                assert!(opts.contains(want), "{path}: {opts}");
            }
        }
        let mounts = h["Mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0]["Source"], "/state/sessions/abc/guest");
        assert_eq!(mounts[0]["Target"], "/run/sandtop");
        assert_eq!(mounts[0]["ReadOnly"], false);
        assert!(h["Tmpfs"].get("/run/sandtop").is_none());
        let text = v.to_string();
        assert!(!text.contains("seccomp"), "{text}");
        assert!(!text.contains("OPENAI"), "{text}");
    }

    /// docs/security.md F4: as a user who cannot mount, `/run/sandtop` is the
    /// engine's tmpfs with the same bounds, and the host's `guest/` folder
    /// is never bound whole: only the token, and with an egress proxy its
    /// socket, each read-only.
    #[tokio::test]
    async fn the_engine_layout_binds_no_writable_host_folder() {
        let docker =
            Docker::connect_with_http("http://127.0.0.1:9", 1, bollard::API_DEFAULT_VERSION)
                .unwrap();
        let b = DockerBackend {
            docker,
            image: "img:test".into(),
            limits: Limits::default(),
            channel: ChannelMode::Auto,
            ready_timeout: READY_TIMEOUT,
            extra_labels: Vec::new(),
        };
        let dir = SessionDir {
            name: "abc".into(),
            path: PathBuf::from("/state/sessions/abc"),
        };
        let mut req = StartRequest {
            name: "abc".into(),
            screen: Size::new(1024, 768),
            network: sandtop_egress::service::EgressConfig::none(),
        };
        let v =
            serde_json::to_value(b.create_body_for(&dir, &req, GuestFolder::EngineTmpfs)).unwrap();
        let h = &v["HostConfig"];
        let opts = h["Tmpfs"]["/run/sandtop"].as_str().unwrap();
        for want in [
            "nosuid",
            "nodev",
            "noexec",
            "size=1048576",
            "nr_inodes=64",
            "uid=2000000000",
            "gid=2000000000",
            "mode=0700",
        ] {
            assert!(opts.split(',').any(|o| o == want), "{want}: {opts}");
        }
        let targets = |v: &serde_json::Value| -> Vec<(String, String, bool)> {
            v["HostConfig"]["Mounts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    assert_eq!(m["Type"], "bind");
                    (
                        m["Source"].as_str().unwrap().to_string(),
                        m["Target"].as_str().unwrap().to_string(),
                        m["ReadOnly"].as_bool().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(
            targets(&v),
            vec![(
                "/state/sessions/abc/guest/token".to_string(),
                "/run/sandtop/token".to_string(),
                true
            )]
        );
        req.network.mode = "allow:https://a.test".parse().unwrap();
        let a =
            serde_json::to_value(b.create_body_for(&dir, &req, GuestFolder::EngineTmpfs)).unwrap();
        assert_eq!(
            targets(&a),
            vec![
                (
                    "/state/sessions/abc/guest/token".to_string(),
                    "/run/sandtop/token".to_string(),
                    true
                ),
                (
                    "/state/sessions/abc/guest/egress.sock".to_string(),
                    "/run/sandtop/egress.sock".to_string(),
                    true
                )
            ]
        );
    }
}
