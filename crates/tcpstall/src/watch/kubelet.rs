//! A Kubernetes pod's namespace and name, and its container's name, as the node shows them to a
//! reader of its files: the kubelet links each container's log as
//! `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` and keeps a pod's logs under
//! `/var/log/pods/<namespace>_<pod>_<uid>/` (Kubernetes' "Logging Architecture"; the kubelet's
//! `logSymlink` and `BuildPodLogsDirectory`). Pod, namespace and container names are DNS labels
//! or subdomains, never holding `_`, so the fields split without ambiguity.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

pub use crate::host::owner::PodName;

/// Where the kubelet links containers' logs.
pub const CONTAINER_LOGS: &str = "/var/log/containers";
/// Where the kubelet keeps pods' logs.
pub const POD_LOGS: &str = "/var/log/pods";

/// Containers whose names are remembered at most; past it the memory starts afresh, so a node
/// that runs many short-lived pods keeps a bounded map.
const REMEMBERED: usize = 4096;

/// How long a container not found stays not found: its log link is made as it starts, so one
/// found a moment later is rare, but a later look costs one directory read.
const NOT_FOUND_FOR: Duration = Duration::from_secs(10);

/// Pods' names read from the kubelet's log directories, remembered per container id.
#[derive(Debug)]
pub struct KubeletLogs {
    containers: PathBuf,
    pods: PathBuf,
    known: FxHashMap<String, (Option<PodName>, Instant)>,
}

impl Default for KubeletLogs {
    fn default() -> Self {
        KubeletLogs::at(Path::new(CONTAINER_LOGS), Path::new(POD_LOGS))
    }
}

impl KubeletLogs {
    /// Reads the kubelet's links in `containers` and pod directories in `pods`.
    pub fn at(containers: &Path, pods: &Path) -> KubeletLogs {
        KubeletLogs {
            containers: containers.to_path_buf(),
            pods: pods.to_path_buf(),
            known: FxHashMap::default(),
        }
    }

    /// The names of the pod whose container `id` (64 hex digits) is, with UID `pod_uid`:
    /// from the container's log link, else (the container's name unknown) from the pod's log
    /// directory; `None` when the node shows neither (the directories not mounted, or the
    /// names cut to fit a file name).
    pub fn names(&mut self, id: &str, pod_uid: &str) -> Option<PodName> {
        if let Some((names, when)) = self.known.get(id) {
            if names.is_some() || when.elapsed() < NOT_FOUND_FOR {
                return names.clone();
            }
        }
        let names = self.read(id, pod_uid);
        if self.known.len() >= REMEMBERED {
            self.known.clear();
        }
        self.known
            .insert(id.to_string(), (names.clone(), Instant::now()));
        names
    }

    fn read(&self, id: &str, pod_uid: &str) -> Option<PodName> {
        let entries = |dir: &Path| {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
        };
        entries(&self.containers)
            .find_map(|name| container_link(&name, id))
            .or_else(|| entries(&self.pods).find_map(|name| pod_directory(&name, pod_uid)))
    }
}

/// The names a container's log link `<pod>_<namespace>_<container>-<id>.log` holds, when it
/// is the link of container `id`.
pub fn container_link(file: &str, id: &str) -> Option<PodName> {
    let names = file
        .strip_suffix(".log")?
        .strip_suffix(id)?
        .strip_suffix('-')?;
    let mut fields = names.splitn(3, '_');
    let pod = fields.next().filter(|s| !s.is_empty())?;
    let namespace = fields.next().filter(|s| !s.is_empty())?;
    let container = fields
        .next()
        .filter(|s| !s.is_empty() && !s.contains('_'))?;
    Some(PodName {
        namespace: namespace.to_string(),
        pod: pod.to_string(),
        container: Some(container.to_string()),
    })
}

/// The names a pod's log directory `<namespace>_<pod>_<uid>` holds, when it is the directory
/// of the pod with UID `pod_uid`.
pub fn pod_directory(dir: &str, pod_uid: &str) -> Option<PodName> {
    let names = dir.strip_suffix(pod_uid)?.strip_suffix('_')?;
    let (namespace, pod) = names.split_once('_')?;
    if namespace.is_empty() || pod.is_empty() || pod.contains('_') {
        return None;
    }
    Some(PodName {
        namespace: namespace.to_string(),
        pod: pod.to_string(),
        container: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "8f1e1f9a-3c52-4b6e-9d7a-2f0c5a6b7c8d";

    fn name(namespace: &str, pod: &str, container: Option<&str>) -> PodName {
        PodName {
            namespace: namespace.into(),
            pod: pod.into(),
            container: container.map(str::to_string),
        }
    }

    #[test]
    fn a_container_log_link_names_pod_namespace_and_container() {
        assert_eq!(
            container_link(&format!("web-7d4b9c-x2x5q_shop_nginx-{ID}.log"), ID),
            Some(name("shop", "web-7d4b9c-x2x5q", Some("nginx")))
        );
        // Another container's link, a link cut short, a name that is not a link.
        let other = ID.replace('0', "f");
        assert_eq!(
            container_link(&format!("web_shop_nginx-{other}.log"), ID),
            None
        );
        assert_eq!(container_link(&format!("web_shop_nginx-{ID}"), ID), None);
        assert_eq!(container_link(&format!("web_nginx-{ID}.log"), ID), None);
        assert_eq!(container_link(&format!("_shop_nginx-{ID}.log"), ID), None);
    }

    #[test]
    fn a_pod_log_directory_names_namespace_and_pod() {
        assert_eq!(
            pod_directory(&format!("kube-system_coredns-5d78c9869d-8wq6x_{UID}"), UID),
            Some(name("kube-system", "coredns-5d78c9869d-8wq6x", None))
        );
        assert_eq!(pod_directory(&format!("kube-system_{UID}"), UID), None);
        assert_eq!(
            pod_directory("kube-system_coredns_0000-other-uid", UID),
            None
        );
    }

    #[test]
    fn names_come_from_the_link_then_the_pod_directory_and_are_remembered() {
        let root = tempfile::tempdir().expect("temporary directory");
        let containers = root.path().join("containers");
        let pods = root.path().join("pods");
        std::fs::create_dir_all(pods.join(format!("shop_web-1_{UID}/nginx"))).expect("mkdir");
        std::fs::create_dir_all(&containers).expect("mkdir");
        let mut logs = KubeletLogs::at(&containers, &pods);
        // No link yet: the pod's directory gives its names, not the container's.
        assert_eq!(logs.names(ID, UID), Some(name("shop", "web-1", None)));
        // Directories that are not there: nothing, and no error.
        let mut absent = KubeletLogs::at(&root.path().join("no"), &root.path().join("none"));
        assert_eq!(absent.names(ID, UID), None);
        // A link made later is read once the first answer's memory has lapsed (a fresh map
        // here), and then remembered after the link is gone.
        let link = containers.join(format!("web-1_shop_nginx-{ID}.log"));
        std::os::unix::fs::symlink("/nonexistent", &link).expect("symlink");
        let mut logs = KubeletLogs::at(&containers, &pods);
        assert_eq!(
            logs.names(ID, UID),
            Some(name("shop", "web-1", Some("nginx")))
        );
        std::fs::remove_file(&link).expect("unlink");
        assert_eq!(
            logs.names(ID, UID),
            Some(name("shop", "web-1", Some("nginx")))
        );
    }
}
