//! The Grafana dashboard (packaging/grafana/tcpstall.json) and the alerting rules
//! (packaging/prometheus/tcpstall-rules.yml) against a real Prometheus (Debian's package): it
//! scrapes a running `tcpstall watch --metrics` and, where BPF runs, `tcpstall watch --kernel
//! --metrics`, on loopback ports, while python3 http.server (in a cgroup laid out as a
//! Kubernetes pod's container) stalls for real on loopback. Then every panel's query, through
//! Prometheus's HTTP API, must return data, and the stall alert must be raised (pending: its
//! `for: 10m` outlasts any test) with its expression true. Needs root (captures, cgroups).

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cgroup::FakeContainer;
use support::python_http::PythonServer;
use support::KillOnDrop;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// A port free on loopback now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// `GET path` on 127.0.0.1:port, HTTP/1.0: the body, or `None` when the server does not
/// answer 200.
fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus, started on a free loopback port with its own storage; killed when dropped.
struct Prometheus {
    _child: KillOnDrop,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Scrapes `targets` every second as the job tcpstall-watch, evaluates the shipped rules
    /// every second.
    fn start(targets: &[String]) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("tcpstall-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("prometheus directory");
        let rules = repo("packaging/prometheus/tcpstall-rules.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: [\"{}\"]\n\
             scrape_configs:\n  - job_name: tcpstall-watch\n    \
             static_configs: [{{targets: [{}]}}]\n",
            rules.display(),
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("config");
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus runs");
        let prometheus = Prometheus {
            _child: KillOnDrop(child),
            port,
            dir,
        };
        prometheus.wait_for("ready", Duration::from_secs(30), || {
            get(port, "/-/ready").is_some()
        });
        prometheus
    }

    /// An instant query's result (the `data.result` array); panics on an API error.
    fn query(&self, expr: &str) -> Vec<Value> {
        let body = get(
            self.port,
            &format!("/api/v1/query?query={}", url_encode(expr)),
        )
        .unwrap_or_else(|| panic!("prometheus did not answer {expr}"));
        let answer: Value = serde_json::from_str(&body).expect("the API answers JSON");
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Polls `done` every 250 ms for at most `limit`.
    fn wait_for(&self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "prometheus: not {what} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every panel's queries, with the dashboard's variables as Grafana fills them for the job
/// tcpstall-watch, all nodes, and a range covering the test.
fn panel_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo("packaging/grafana/tcpstall.json"))
        .expect("the dashboard reads");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("a title").to_string();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} has no query");
        for target in targets {
            let expr = target["expr"]
                .as_str()
                .expect("a PromQL expression")
                .replace("$job", "tcpstall-watch")
                .replace("$instance", ".*")
                .replace("$__rate_interval", "1m")
                .replace("$__range", "10m");
            assert!(!expr.contains('$'), "{title}: a variable left in {expr}");
            queries.push((title.clone(), expr));
        }
    }
    queries
}

/// Stalls per connection: each keep-alive answer after the first waits for the client's
/// delayed ACK (~40 ms).
const REQUESTS: usize = 31;
const CONNECTIONS: usize = 4;

#[test]
fn every_panel_has_data_and_the_stall_alert_is_raised_on_a_real_stall() {
    support::require_root("captures, cgroups and the owners' /proc");
    let _serial = support::serial();
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prometheus is missing (Debian package prometheus; scripts/install-deps)");
    }
    let container = FakeContainer::create();
    let server = PythonServer::start();
    container.enter(server.pid());
    let filter = format!("port {}", server.port);

    let (capture, capture_addr) = support::watch_with_metrics(&["-i", "lo", &filter], 120);
    let probe = ["watch", "--kernel", "--json", "--duration", "0.1"];
    let kernel = match support::bpf_unavailable(BIN, &probe) {
        Some(why) => {
            support::skip(format!("the watch --kernel target: {why}"));
            None
        }
        None => Some(support::watch_with_metrics(&["--kernel"], 120)),
    };
    let mut targets = vec![capture_addr.clone()];
    targets.extend(kernel.as_ref().map(|(_, addr)| addr.clone()));
    let prometheus = Prometheus::start(&targets);
    prometheus.wait_for("scraping every target", Duration::from_secs(30), || {
        prometheus.query("up{job=\"tcpstall-watch\"} == 1").len() == targets.len()
    });

    for _ in 0..CONNECTIONS {
        server.requests(REQUESTS);
    }
    // Every watch has counted the server's stalls, and Prometheus has scraped them.
    let stalls_seen = (REQUESTS - 1) * CONNECTIONS / 2;
    prometheus.wait_for("seeing the stalls", Duration::from_secs(30), || {
        let per_target = prometheus.query(&format!(
            "sum by (instance) (tcpstall_watch_stalls_total{{kind=\"nagle_delayed_ack\",\
             held_side=\"server\"}}) >= {stalls_seen}"
        ));
        per_target.len() == targets.len()
    });
    // The owners' series come from the printer, a moment after the stall.
    prometheus.wait_for("seeing the container", Duration::from_secs(15), || {
        !prometheus
            .query(&format!(
                "tcpstall_watch_process_stalls_total{{container=\"{}\"}}",
                &container.id[..12]
            ))
            .is_empty()
    });

    for (title, expr) in panel_queries() {
        let result = prometheus.query(&expr);
        assert!(!result.is_empty(), "panel {title:?}: no data for {expr}");
    }
    // The panels show the stall itself, not only series at zero.
    let positive = |expr: &str| {
        prometheus
            .query(&format!("({expr}) > 0"))
            .into_iter()
            .map(|r| r["metric"].clone())
            .collect::<Vec<Value>>()
    };
    let by_kind = positive(
        "sum by (kind, held_side) (rate(tcpstall_watch_stalls_total{job=\"tcpstall-watch\"}[1m]))",
    );
    assert!(
        by_kind
            .iter()
            .any(|m| m["kind"] == "nagle_delayed_ack" && m["held_side"] == "server"),
        "{by_kind:?}"
    );
    let containers = positive(
        "sum by (namespace, pod, container, pod_uid) (increase(tcpstall_watch_process_stalls_total{container!=\"\"}[10m]))",
    );
    let (namespace, pod, _) = support::cgroup::NAMES;
    assert!(
        containers
            .iter()
            .any(|m| m["container"] == container.id[..12]
                && m["pod_uid"] == container.pod_uid.as_str()
                && m["namespace"] == namespace
                && m["pod"] == pod),
        "{containers:?}"
    );
    let sources: Vec<String> = prometheus
        .query("tcpstall_watch_info")
        .iter()
        .filter_map(|r| r["metric"]["source"].as_str().map(str::to_string))
        .collect();
    assert!(sources.contains(&"capture".to_string()), "{sources:?}");
    if kernel.is_some() {
        assert!(sources.contains(&"kernel".to_string()), "{sources:?}");
    }

    // The alert: its expression is true for the stalls of each watch, and the rule has raised
    // it (pending until its `for: 10m` has passed).
    let firing_expr = "tcpstall:watch_stalls:rate1m{job=\"tcpstall-watch\",\
                       kind!=\"nagle_ack_paced\"} > 10";
    prometheus.wait_for(
        "evaluating the stall rule true",
        Duration::from_secs(20),
        || !prometheus.query(firing_expr).is_empty(),
    );
    prometheus.wait_for("raising TcpStallsFrequent", Duration::from_secs(20), || {
        prometheus
            .query("ALERTS{alertname=\"TcpStallsFrequent\"}")
            .iter()
            .any(|a| {
                a["metric"]["kind"] == "nagle_delayed_ack"
                    && a["metric"]["held_side"] == "server"
                    && a["metric"]["alertstate"] == "pending"
            })
    });
    // No drop happened: that alert stays quiet.
    assert!(prometheus
        .query("ALERTS{alertname=\"TcpStallWatchDroppingPackets\"}")
        .is_empty());
    drop(prometheus);
    drop(capture);
    drop(kernel);
}
