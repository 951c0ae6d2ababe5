//! The Kubernetes manifests (packaging/kubernetes/): validated offline against the Kubernetes
//! API's schemas by `kubernetes-validate` (PyPI; it ships the schemas; scripts/install-deps
//! installs it), strictly (an unknown key is an error), for the newest API it knows and for an
//! older one still common; a misspelt copy is refused (the validator does validate). The
//! ServiceMonitor, a custom resource the validator has no schema for, is checked against the
//! Service it selects; the DaemonSet against what `watch` needs and what the image declares.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/kubernetes")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).expect("the manifest reads")
}

/// kubernetes-validate (on PATH or in ~/.local/bin), or `None` with the reason printed.
fn validator() -> Option<PathBuf> {
    let local = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".local/bin/kubernetes-validate"))
        .filter(|p| p.is_file());
    let candidate = local.unwrap_or_else(|| PathBuf::from("kubernetes-validate"));
    match Command::new(&candidate).arg("--version").output() {
        Ok(out) if out.status.success() => Some(candidate),
        _ => {
            support::skip(
                "kubernetes-validate is missing (PyPI; scripts/install-deps installs \
                 it): the manifests were not validated against the Kubernetes schemas",
            );
            None
        }
    }
}

fn validate(validator: &Path, file: &Path, version: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new(validator);
    cmd.arg("--strict");
    if let Some(v) = version {
        cmd.args(["-k", v]);
    }
    let out = cmd.arg(file).output().expect("kubernetes-validate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn manifests_pass_the_kubernetes_schemas_strictly() {
    let Some(validator) = validator() else { return };
    let file = dir().join("tcpstall.yaml");
    // The newest API the validator knows, and 1.28 (CAP_BPF and CAP_PERFMON need kernels
    // and runtimes of its time).
    for version in [None, Some("1.28.0")] {
        let (ok, text) = validate(&validator, &file, version);
        assert!(ok, "tcpstall.yaml fails {version:?}:\n{text}");
        for resource in [
            "namespace/tcpstall",
            "serviceaccount/tcpstall",
            "daemonset/tcpstall-watch",
            "service/tcpstall-watch",
        ] {
            assert!(
                text.contains(&format!("passed for resource {resource}")),
                "{resource} was not validated ({version:?}):\n{text}"
            );
        }
    }
}

#[test]
fn the_validator_refuses_a_misspelt_daemonset() {
    let Some(validator) = validator() else { return };
    let manifest = read("tcpstall.yaml");
    assert!(manifest.contains("hostPID: true"));
    let bad = std::env::temp_dir().join(format!("tcpstall-k8s-bad-{}.yaml", std::process::id()));
    std::fs::write(&bad, manifest.replace("hostPID: true", "hostPid: true")).expect("write");
    let (ok, text) = validate(&validator, &bad, None);
    let _ = std::fs::remove_file(&bad);
    assert!(!ok, "a misspelt key passed:\n{text}");
    assert!(text.contains("hostPid"), "{text}");
}

/// The values of a one-line YAML flow list after `key: [`, e.g. `add: [BPF, PERFMON]`.
fn flow_list(text: &str, key: &str) -> Vec<String> {
    let open = format!("{key}: [");
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&open))
        .unwrap_or_else(|| panic!("no `{open}...]` line"));
    line[open.len()..]
        .trim_end_matches(']')
        .split(',')
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

#[test]
fn the_daemonset_grants_what_watch_needs_and_nothing_more() {
    let manifest = read("tcpstall.yaml");
    for needed in [
        "hostNetwork: true",
        "hostPID: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "privileged: false",
        "path: /sys/kernel/btf",
        "path: /var/log/containers",
        "path: /var/log/pods",
        "prometheus.io/scrape: \"true\"",
        "prometheus.io/port: \"9465\"",
        "containerPort: 9465",
    ] {
        assert!(manifest.contains(needed), "tcpstall.yaml lacks {needed}");
    }
    assert_eq!(flow_list(&manifest, "drop"), ["ALL"]);
    let mut added = flow_list(&manifest, "add");
    added.sort();
    assert_eq!(
        added,
        ["BPF", "DAC_READ_SEARCH", "NET_RAW", "PERFMON", "SYS_PTRACE"],
        "capabilities added"
    );
    // The image declares the same capabilities for watch and watch --kernel.
    let containerfile = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/container/Containerfile"),
    )
    .expect("Containerfile reads");
    for cap in &added {
        assert!(
            containerfile.contains(&format!("CAP_{cap}")),
            "the Containerfile does not say what CAP_{cap} is for"
        );
    }
    let args = flow_list(&manifest, "args");
    assert_eq!(args[..2], ["watch", "--kernel"], "{args:?}");
    let metrics = args
        .iter()
        .position(|a| a == "--metrics")
        .and_then(|i| args.get(i + 1))
        .expect("--metrics ADDR");
    assert!(metrics.ends_with(":9465"), "{metrics}");
    // The args parse as tcpstall's own (the address is the pod's, filled in by Kubernetes).
    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args.iter().map(|a| a.replace("$(HOST_IP)", "127.0.0.1")))
        .arg("--help")
        .output()
        .expect("tcpstall runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_service_monitor_selects_the_watch_service() {
    let monitor = read("servicemonitor.yaml");
    let manifest = read("tcpstall.yaml");
    let service = manifest
        .split("\n---\n")
        .find(|doc| doc.contains("kind: Service\n"))
        .expect("a Service");
    assert!(service.contains("name: tcpstall-watch"), "{service}");
    assert!(service.contains("- name: metrics"), "{service}");
    for label in [
        "app.kubernetes.io/name: tcpstall",
        "app.kubernetes.io/component: watch",
    ] {
        assert!(
            monitor.contains(label),
            "the ServiceMonitor does not select {label}"
        );
        assert!(service.contains(label), "the Service has no {label}");
    }
    assert!(monitor.contains("- port: metrics"), "{monitor}");
    assert!(monitor.contains("matchNames: [tcpstall]"), "{monitor}");
    assert!(monitor.contains("kind: ServiceMonitor"), "{monitor}");
}
