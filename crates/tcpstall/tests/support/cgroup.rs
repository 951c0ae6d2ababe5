//! A pod's container as the kubelet and containerd lay out its cgroup, made for a test in the
//! unified hierarchy (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/
//! cri-containerd-<ID>.scope`), a real process moved into it, and the pod's log directory and
//! the container's log link the kubelet makes under /var/log (`pods/<namespace>_<pod>_<UID>/`,
//! `containers/<pod>_<namespace>_<container>-<ID>.log`). Needs root.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the unified (v2) cgroup hierarchy is mounted: /sys/fs/cgroup on a v2 host,
/// /sys/fs/cgroup/unified on a hybrid one.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(fields[1]))
    })
}

/// A pod's container cgroup made for the test, removed (deepest first) when dropped; its
/// processes must have ended by then.
pub struct FakeContainer {
    mount: PathBuf,
    /// From the hierarchy's root down to the container's scope.
    levels: Vec<PathBuf>,
    /// The container's id, 64 hex digits.
    pub id: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// The kubelet's log files made for it, removed when dropped (files first, then the
    /// directories made, deepest first).
    logs: Vec<PathBuf>,
}

/// The pod's namespace, its name and the container's name the kubelet's log files give.
pub const NAMES: (&str, &str, &str) = ("shop", "web-7d4b9c-x2x5q", "server");

impl FakeContainer {
    /// Creates it, with ids new to this run.
    pub fn create() -> FakeContainer {
        let mount = cgroup2_mount().expect("a cgroup2 hierarchy is mounted");
        // Ids unique to this run, in the runtimes' forms: 64 hex digits; a UUID.
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ u128::from(std::process::id());
        let hex = format!(
            "{:032x}{:032x}",
            seed,
            seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        );
        let id = hex[hex.len() - 64..].to_string();
        let u = &hex[..32];
        let pod_uid = format!(
            "{}-{}-{}-{}-{}",
            &u[..8],
            &u[8..12],
            &u[12..16],
            &u[16..20],
            &u[20..]
        );
        let slice_uid = pod_uid.replace('-', "_");
        let names = [
            "kubepods.slice".to_string(),
            "kubepods-burstable.slice".to_string(),
            format!("kubepods-burstable-pod{slice_uid}.slice"),
            format!("cri-containerd-{id}.scope"),
        ];
        let mut levels = Vec::new();
        let mut path = mount.clone();
        for name in names {
            path = path.join(name);
            if !path.exists() {
                std::fs::create_dir(&path)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
                levels.push(path.clone());
            }
        }
        let mut container = FakeContainer {
            mount,
            levels,
            id,
            pod_uid,
            logs: Vec::new(),
        };
        container.kubelet_logs();
        container
    }

    /// The pod's log directory and the container's log link, as the kubelet makes them.
    fn kubelet_logs(&mut self) {
        let (namespace, pod, name) = NAMES;
        let pods = Path::new("/var/log/pods");
        let containers = Path::new("/var/log/containers");
        let pod_dir = pods.join(format!("{namespace}_{pod}_{}", self.pod_uid));
        for dir in [
            pods.to_path_buf(),
            containers.to_path_buf(),
            pod_dir.clone(),
            pod_dir.join(name),
        ] {
            if !dir.exists() {
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
                self.logs.push(dir);
            }
        }
        let log = pod_dir.join(name).join("0.log");
        std::fs::write(&log, "").expect("the container's log");
        let link = containers.join(format!("{pod}_{namespace}_{name}-{}.log", self.id));
        std::os::unix::fs::symlink(&log, &link).expect("the container's log link");
        self.logs.push(log);
        self.logs.push(link);
    }

    fn scope(&self) -> &Path {
        self.levels.last().expect("the scope was created")
    }

    /// Moves `pid` into the container's cgroup.
    pub fn enter(&self, pid: u32) {
        std::fs::write(self.scope().join("cgroup.procs"), pid.to_string())
            .expect("the pid moves into the cgroup");
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
        assert!(cgroup.contains(&self.id), "{cgroup}");
    }
}

impl Drop for FakeContainer {
    fn drop(&mut self) {
        // Anything left inside goes back to the root, then the directories go, deepest first.
        if let Ok(procs) = std::fs::read_to_string(self.scope().join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(self.mount.join("cgroup.procs"), pid);
            }
        }
        for level in self.levels.iter().rev() {
            let _ = std::fs::remove_dir(level);
        }
        for made in self.logs.iter().rev() {
            let _ = if made.is_dir() && !made.is_symlink() {
                std::fs::remove_dir(made)
            } else {
                std::fs::remove_file(made)
            };
        }
    }
}
