//! `watch` names the container and the pod of the process behind a stall: a real server
//! (python3 http.server, which stalls on keep-alive answers) is moved into a cgroup this test
//! creates in the unified hierarchy, at a path laid out as the kubelet and containerd lay out a
//! pod's container (`kubepods.slice/…-pod<UID>.slice/cri-containerd-<ID>.scope`); its real
//! stalls on loopback are watched, by capture and (where BPF runs) by the kernel, and each
//! event must carry the container id, the pod UID and the names the kubelet's log files give
//! (the pod's namespace and name, the container's), in JSON, in text and in the metrics.
//! Needs root (cgroups, captures, ptrace).

mod support;

use std::time::Duration;

use serde_json::Value;
use support::cgroup::{self, FakeContainer};
use support::python_http::PythonServer;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// `tcpstall watch ARGS --duration 4 --metrics 127.0.0.1:0` while the server answers keep-alive
/// requests: the printed output and the metrics scraped at the end of the requests.
fn watch_while_stalling(server: &PythonServer, args: &[&str]) -> (String, String) {
    let what = format!("watch {args:?}");
    let (watch, metrics_addr) = support::watch_with_metrics(args, 4);
    // Two connections of six requests: each answer after a connection's first is held.
    server.requests(6);
    server.requests(6);
    // The printer names the owner after the stall: its series comes a moment later.
    let scraped = support::scrape_until(&metrics_addr, Duration::from_secs(10), |text| {
        text.contains("tcpstall_watch_process_stalls_total{") && text.contains("python3")
    });
    let (status, stdout, stderr) = watch.finish(Duration::from_secs(20), &what);
    assert!(
        status.success() || status.code() == Some(1),
        "{what}: {status}\n{stderr:?}"
    );
    (stdout, scraped)
}

/// The server's stall events of a JSON run.
fn server_stalls(stdout: &str, pid: u32) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "nagle_delayed_ack" && e["pid"].as_u64() == Some(pid.into()))
        .collect()
}

fn assert_named(events: &[Value], container: &FakeContainer, runtime: &str, what: &str) {
    assert!(!events.is_empty(), "{what}: no stall of the server");
    for e in events {
        assert_eq!(e["container_id"], container.id.as_str(), "{what}: {e}");
        assert_eq!(e["pod_uid"], container.pod_uid.as_str(), "{what}: {e}");
        assert_eq!(e["container_runtime"], runtime, "{what}: {e}");
        let (namespace, pod, name) = cgroup::NAMES;
        assert_eq!(e["pod_namespace"], namespace, "{what}: {e}");
        assert_eq!(e["pod_name"], pod, "{what}: {e}");
        assert_eq!(e["container_name"], name, "{what}: {e}");
    }
}

fn assert_labelled(metrics: &str, container: &FakeContainer, what: &str) {
    let short = &container.id[..12];
    let series = metrics
        .lines()
        .find(|l| {
            l.starts_with("tcpstall_watch_process_stalls_total{")
                && l.contains(&format!("container=\"{short}\""))
                && l.contains(&format!("pod_uid=\"{}\"", container.pod_uid))
                && l.contains(&format!("namespace=\"{}\"", cgroup::NAMES.0))
                && l.contains(&format!("pod=\"{}\"", cgroup::NAMES.1))
                && l.contains("kind=\"nagle_delayed_ack\"")
                && l.contains("held_side=\"server\"")
        })
        .unwrap_or_else(|| panic!("{what}: no series of the container:\n{metrics}"));
    let count: f64 = series
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a value");
    assert!(count >= 1.0, "{what}: {series}");
}

#[test]
fn a_stall_in_a_kubernetes_container_names_the_container_and_the_pod() {
    support::require_root("cgroups, captures and the owners' /proc");
    let _serial = support::serial();
    // Declared first, dropped last: the server has ended when the cgroup goes.
    let container = FakeContainer::create();
    let server = PythonServer::start();
    container.enter(server.pid());
    let filter = format!("port {}", server.port);

    let (stdout, metrics) = watch_while_stalling(&server, &["-i", "lo", "--json", &filter]);
    let events = server_stalls(&stdout, server.pid());
    assert_named(&events, &container, "containerd", "capture");
    assert_labelled(&metrics, &container, "capture");

    // Text: the container's short id, the pod's names and UID, the container's name.
    let (text, _) = watch_while_stalling(&server, &["-i", "lo", &filter]);
    let (namespace, pod, name) = cgroup::NAMES;
    let line = format!(
        "container: {} (containerd), pod {namespace}/{pod} (UID {}), container {name}",
        &container.id[..12],
        container.pod_uid
    );
    assert!(text.contains(&line), "no `{line}` in:\n{text}");

    // The kernel's view, where BPF runs here.
    let probe = ["watch", "--kernel", "--json", "--duration", "0.1"];
    match support::bpf_unavailable(BIN, &probe) {
        Some(why) => support::skip(format!("the --kernel part: {why}")),
        None => {
            let (stdout, metrics) = watch_while_stalling(&server, &["--kernel", "--json"]);
            let events = server_stalls(&stdout, server.pid());
            assert_named(&events, &container, "containerd", "--kernel");
            assert_labelled(&metrics, &container, "--kernel");
        }
    }
}

#[test]
fn a_host_process_is_in_no_container() {
    support::require_root("captures and the owners' /proc");
    let _serial = support::serial();
    let server = PythonServer::start();
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", server.pid())).expect("cgroup");
    if own.contains("kubepods") || own.contains("docker") || own.contains("containerd") {
        support::skip(format!(
            "the tests run inside a container ({own}): no host process to watch"
        ));
        return;
    }
    let filter = format!("port {}", server.port);
    let (stdout, metrics) = watch_while_stalling(&server, &["-i", "lo", "--json", &filter]);
    let events = server_stalls(&stdout, server.pid());
    assert!(!events.is_empty(), "no stall of the server:\n{stdout}");
    for e in &events {
        assert!(e["container_id"].is_null(), "{e}");
        assert!(e["pod_uid"].is_null(), "{e}");
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tcpstall_watch_process_stalls_total{")
                && l.contains("command=\"python3")
                && l.contains("container=\"\"")),
        "{metrics}"
    );
}
