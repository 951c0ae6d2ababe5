//! The container a process runs in, read from its cgroup path (`/proc/PID/cgroup`, see
//! cgroups(7)): the runtimes name a container's cgroup after its 64-hex id, and the kubelet
//! puts a pod's containers under a cgroup named after the pod's UID (`kubepods…pod<UID>`).
//!
//! The layouts recognised, with the systemd cgroup driver and with cgroupfs:
//! - Kubernetes: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID with
//!   _>.slice/cri-containerd-<ID>.scope` (`crio-<ID>.scope`, `docker-<ID>.scope`), or
//!   `/kubepods/burstable/pod<UID>/<ID>`;
//! - Docker: `/system.slice/docker-<ID>.scope`, `/docker/<ID>`;
//! - Podman: `/machine.slice/libpod-<ID>.scope`, and under a user's slice for rootless ones;
//! - containerd without Kubernetes (nerdctl): `/<namespace>/<ID>`.
//!
//! A runtime's monitor (`libpod-conmon-<ID>`, `crio-conmon-<ID>`) is not the container.

pub use crate::report::model::watch::Container;

use super::kubelet::KubeletLogs;

/// Length of a container id as the runtimes make it (256 bits in hex).
const ID_LEN: usize = 64;

/// The container `pid` runs in, `None` outside any (or when its cgroup cannot be read: the
/// process has gone, or /proc hides it).
pub fn of_pid(pid: u32) -> Option<Container> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse(&text)
}

/// Names the containers of processes, with their pods' names where the node shows them.
#[derive(Debug, Default)]
pub struct Containers {
    kubelet: KubeletLogs,
}

impl Containers {
    /// The container `pid` runs in, as [`of_pid`] reads it, with its pod's names.
    pub fn of_pid(&mut self, pid: u32) -> Option<Container> {
        let mut container = of_pid(pid)?;
        if let Some(uid) = &container.pod_uid {
            container.pod = self.kubelet.names(&container.id, uid);
        }
        Some(container)
    }
}

/// The container named by a `/proc/PID/cgroup` text: the unified hierarchy's line (`0::PATH`)
/// first, then the v1 hierarchies' in order.
pub fn parse(cgroup: &str) -> Option<Container> {
    let paths = cgroup.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        let id = fields.next()?;
        let _controllers = fields.next()?;
        Some((id == "0", fields.next()?))
    });
    let (unified, v1): (Vec<_>, Vec<_>) = paths.partition(|(unified, _)| *unified);
    unified
        .into_iter()
        .chain(v1)
        .find_map(|(_, path)| from_path(path))
}

/// The container of one cgroup path: its deepest component naming a container id.
fn from_path(path: &str) -> Option<Container> {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let (at, runtime, id) = components
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, c)| container_component(c).map(|(runtime, id)| (i, runtime, id)))?;
    let kubernetes = components.iter().any(|c| c.starts_with("kubepods"));
    let pod_uid = kubernetes
        .then(|| components[..at].iter().rev().find_map(|c| pod_uid(c)))
        .flatten();
    let runtime = match runtime {
        // A bare id under kubepods is the kubelet's cgroupfs layout: the runtime is not named.
        "" if kubernetes => "kubernetes",
        // `/docker/<ID>`, `/<namespace>/<ID>`.
        "" => match components.get(at.wrapping_sub(1)) {
            Some(&"docker") => "docker",
            _ => "container",
        },
        named => named,
    };
    Some(Container {
        runtime,
        id: id.to_string(),
        pod_uid,
        pod: None,
    })
}

/// The runtime and id a component names: `cri-containerd-<ID>.scope`, `<ID>`, ...; `None`
/// for anything else, a runtime's monitor included.
fn container_component(component: &str) -> Option<(&'static str, &str)> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    const PREFIXES: [(&str, &str); 5] = [
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("docker-", "docker"),
        ("libpod-", "podman"),
        ("containerd-", "containerd"),
    ];
    let (runtime, id) = PREFIXES
        .iter()
        .find_map(|(prefix, runtime)| name.strip_prefix(prefix).map(|id| (*runtime, id)))
        .unwrap_or(("", name));
    is_hex_id(id).then_some((runtime, id))
}

fn is_hex_id(s: &str) -> bool {
    s.len() == ID_LEN && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pod UID a kubelet cgroup names: `kubepods-besteffort-pod<UID, - as _>.slice` (systemd
/// driver) or `pod<UID>` (cgroupfs); a UUID, or 32 hex digits for a static pod (its
/// manifest's hash).
fn pod_uid(component: &str) -> Option<String> {
    let name = component.strip_suffix(".slice").unwrap_or(component);
    let at = name.rfind("pod")?;
    // `pod` begins the component or follows the systemd slice's `-`.
    if at != 0 && !name[..at].ends_with('-') {
        return None;
    }
    let uid = name[at + 3..].replace('_', "-");
    let hex = uid.bytes().filter(u8::is_ascii_hexdigit).count();
    let uuid = uid.len() == 36
        && hex == 32
        && uid
            .char_indices()
            .all(|(i, c)| (c == '-') == matches!(i, 8 | 13 | 18 | 23));
    let static_pod = uid.len() == 32 && hex == 32;
    (uuid || static_pod).then_some(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "8f1e1f9a-3c52-4b6e-9d7a-2f0c5a6b7c8d";

    fn named(cgroup: &str) -> Option<(&'static str, String, Option<String>)> {
        parse(cgroup).map(|c| (c.runtime, c.id, c.pod_uid))
    }

    #[test]
    fn kubernetes_layouts_name_the_container_and_the_pod() {
        let systemd_uid = UID.replace('-', "_");
        for (cgroup, runtime) in [
            (
                format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice/cri-containerd-{ID}.scope\n"),
                "containerd",
            ),
            (
                format!("0::/kubepods.slice/kubepods-pod{systemd_uid}.slice/crio-{ID}.scope\n"),
                "cri-o",
            ),
            (
                format!("12:memory:/kubepods/besteffort/pod{UID}/{ID}\n0::/\n"),
                "kubernetes",
            ),
            // Read from a container with a cgroup namespace of its own: the path is
            // relative to that namespace's root.
            (
                format!("0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_uid}.slice/cri-containerd-{ID}.scope\n"),
                "containerd",
            ),
        ] {
            assert_eq!(
                named(&cgroup),
                Some((runtime, ID.to_string(), Some(UID.to_string()))),
                "{cgroup}"
            );
        }
    }

    #[test]
    fn runtimes_without_kubernetes_name_the_container_only() {
        for (cgroup, runtime) in [
            (format!("0::/system.slice/docker-{ID}.scope\n"), "docker"),
            (format!("4:pids:/docker/{ID}\n0::/\n"), "docker"),
            (format!("0::/machine.slice/libpod-{ID}.scope/container\n"), "podman"),
            (
                format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n"),
                "podman",
            ),
            (format!("0::/default/{ID}\n"), "container"),
        ] {
            assert_eq!(named(&cgroup), Some((runtime, ID.to_string(), None)), "{cgroup}");
        }
    }

    #[test]
    fn hosts_processes_and_runtime_monitors_are_in_no_container() {
        for cgroup in [
            "0::/\n".to_string(),
            "0::/system.slice/nginx.service\n".to_string(),
            "0::/user.slice/user-1000.slice/session-3.scope\n".to_string(),
            format!("0::/machine.slice/libpod-conmon-{ID}.scope\n"),
            // Not 64 hex digits: a name, not an id.
            "0::/system.slice/docker-registry.scope\n".to_string(),
            String::new(),
            "garbage without colons".to_string(),
        ] {
            assert_eq!(named(&cgroup), None, "{cgroup}");
        }
        // A pod's own cgroup (the pause process's parent) names no container.
        assert_eq!(named(&format!("0::/kubepods/pod{UID}\n")), None);
    }

    #[test]
    fn this_process_is_read_without_error() {
        // Whatever it says (a test may run in a container), reading it does not fail loudly.
        let _ = of_pid(std::process::id());
        assert_eq!(of_pid(u32::MAX), None);
    }
}
