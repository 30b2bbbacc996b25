//! The Qdrant server binary started on loopback, for tests and benchmarks: one node, or a Raft
//! cluster of several, each on free ports with its own storage folder. mnemo itself never
//! starts a Qdrant server: it talks to one (`mnemo-qdrant`).
//!
//! The binary is `MNEMO_QDRANT_BIN`, or `../shared/qdrant/qdrant` beside the checkout (no
//! registry ships a Qdrant server). [`binary`] says why it cannot be used; a test hands that
//! to [`require`](crate::require), which skips it, or fails it under `CI=true`. Nodes die
//! with the thread that started them (and with this value), so a failed test leaves no
//! server behind.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to answer `/readyz`.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The Qdrant server binary, or why there is none to use.
pub fn binary() -> Result<PathBuf, String> {
    let path = match std::env::var_os("MNEMO_QDRANT_BIN") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/qdrant/qdrant"),
    };
    match path.is_file() {
        true => Ok(path),
        false => Err(format!(
            "no Qdrant server binary at {} (set MNEMO_QDRANT_BIN to one)",
            path.display()
        )),
    }
}

/// One node's ports and process.
#[derive(Debug)]
pub struct Node {
    /// REST port (readiness checks).
    pub http_port: u16,
    /// gRPC port: what `qdrant-client` talks to.
    pub grpc_port: u16,
    /// Peer-to-peer port (clusters only).
    pub p2p_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Qdrant nodes on loopback, stopped when dropped.
#[derive(Debug)]
pub struct LocalQdrant {
    binary: PathBuf,
    nodes: Vec<Node>,
}

impl LocalQdrant {
    /// Starts `nodes` nodes (1 for a single server; more form a Raft cluster) with storage
    /// under `dir/nodeN/`, and waits until each answers.
    pub fn start(dir: &Path, nodes: usize) -> Result<Self, String> {
        let binary = binary()?;
        let mut local = Self {
            binary,
            nodes: Vec::new(),
        };
        let count = nodes.max(1);
        let mut ports = free_ports(3 * count)?.into_iter();
        for n in 1..=count {
            let mut port = || ports.next().expect("three ports per node");
            let node = Node {
                http_port: port(),
                grpc_port: port(),
                p2p_port: port(),
                dir: dir.join(format!("node{n}")),
                child: None,
            };
            local.nodes.push(node);
        }
        for n in 0..count {
            local.launch(n, count > 1)?;
        }
        Ok(local)
    }

    /// The gRPC URL of node `n` (from 0).
    pub fn grpc_url(&self, n: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[n].grpc_port)
    }

    /// The REST URL of node `n` (from 0).
    pub fn http_url(&self, n: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[n].http_port)
    }

    /// `GET path` on node `n`'s REST API: the status and the body, or `None` when it does
    /// not answer (tests and benchmarks read what the gRPC client does not show, such as a
    /// collection's optimiser status).
    pub fn rest_get(&self, n: usize, path: &str) -> Option<(u16, String)> {
        rest_get(self.nodes[n].http_port, path)
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never, once started).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The process id of node `n`, while it runs.
    pub fn pid(&self, n: usize) -> Option<u32> {
        self.nodes[n].child.as_ref().map(Child::id)
    }

    /// Kills node `n` at once (SIGKILL, as a crash would).
    pub fn kill(&mut self, n: usize) {
        if let Some(mut child) = self.nodes[n].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `n` again on its ports and storage, and waits until it answers.
    pub fn restart(&mut self, n: usize) -> Result<(), String> {
        self.kill(n);
        let cluster = self.nodes.len() > 1;
        self.launch(n, cluster)
    }

    fn launch(&mut self, n: usize, cluster: bool) -> Result<(), String> {
        let node = &self.nodes[n];
        let storage = node.dir.join("storage");
        std::fs::create_dir_all(&storage)
            .map_err(|e| format!("cannot create {}: {e}", storage.display()))?;
        let log = std::fs::File::create(node.dir.join("qdrant.log"))
            .map_err(|e| format!("cannot create the log in {}: {e}", node.dir.display()))?;
        let mut command = Command::new(&self.binary);
        command
            .current_dir(&node.dir)
            .env("QDRANT__SERVICE__HOST", "127.0.0.1")
            .env("QDRANT__SERVICE__HTTP_PORT", node.http_port.to_string())
            .env("QDRANT__SERVICE__GRPC_PORT", node.grpc_port.to_string())
            .env("QDRANT__STORAGE__STORAGE_PATH", &storage)
            .env(
                "QDRANT__STORAGE__SNAPSHOTS_PATH",
                node.dir.join("snapshots"),
            )
            .env("QDRANT__TELEMETRY_DISABLED", "true")
            .env("QDRANT__LOG_LEVEL", "WARN")
            .arg("--disable-telemetry")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if cluster {
            command
                .env("QDRANT__CLUSTER__ENABLED", "true")
                .env("QDRANT__CLUSTER__P2P__PORT", node.p2p_port.to_string())
                .arg("--uri")
                .arg(format!("http://127.0.0.1:{}", node.p2p_port));
            // Every node but the first joins through the first; the first restarts on its
            // own Raft state.
            if n > 0 {
                command
                    .arg("--bootstrap")
                    .arg(format!("http://127.0.0.1:{}", self.nodes[0].p2p_port));
            }
        }
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        self.nodes[n].child = Some(child);
        self.wait_ready(n)
    }

    fn wait_ready(&mut self, n: usize) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < READY_WITHIN {
            if let Some(Ok(Some(status))) = self.nodes[n].child.as_mut().map(Child::try_wait) {
                return Err(format!(
                    "Qdrant node {} exited ({status}): {}",
                    n + 1,
                    self.log_tail(n)
                ));
            }
            let node = &self.nodes[n];
            if ready(node.http_port) && TcpStream::connect(("127.0.0.1", node.grpc_port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err(format!(
            "Qdrant node {} did not answer within {READY_WITHIN:?}: {}",
            n + 1,
            self.log_tail(n)
        ))
    }

    /// The end of node `n`'s log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.nodes[n].dir.join("qdrant.log")).unwrap_or_default();
        let start = log.len().saturating_sub(600);
        log.get(start..).unwrap_or(&log).trim().to_owned()
    }
}

impl Drop for LocalQdrant {
    fn drop(&mut self) {
        for n in 0..self.nodes.len() {
            self.kill(n);
        }
    }
}

/// `n` distinct free loopback ports: all are held until all are chosen, so none repeats.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("no free loopback port: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// Whether the node's REST port answers `GET /readyz` with 200.
fn ready(port: u16) -> bool {
    rest_get(port, "/readyz").is_some_and(|(status, _)| status == 200)
}

/// `GET path` on a REST port of this machine: the status and the body, or `None` when the
/// port does not answer (within a second per read).
fn rest_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Some((status, body.to_owned()))
}

/// The node gets SIGKILL when the thread that started it ends, so a test that panics or is
/// killed leaves no server running.
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own attributes.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
