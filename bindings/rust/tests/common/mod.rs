//! Helpers shared by the integration tests: temporary directories, the test checkpoint's contents, and runs of
//! this test binary as the ranks of a job.
#![allow(dead_code)] // each test crate uses its own part of these helpers

use std::collections::hash_map::RandomState;
use std::env;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// A fresh directory under the system's temporary directory, removed with its contents on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        loop {
            let name = format!("ckpt-rust-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
            let path = env::temp_dir().join(name);
            match fs::create_dir(&path) {
                Ok(()) => return TempDir(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create {}: {}", path.display(), e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Where a test's checkpoint goes: a path that does not exist yet.
    pub fn checkpoint(&self) -> PathBuf {
        self.0.join("checkpoint")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

// The test checkpoint: "weight" F32 [4, 6], "bias" F64 [5] held whole by every rank, common "step".
pub const WEIGHT: &str = "weight";
pub const WEIGHT_SHAPE: [u64; 2] = [4, 6];
pub const BIAS: &str = "bias";
pub const BIAS_LEN: u64 = 5;
pub const STEP_KEY: &str = "step";
pub const STEP: u64 = 42;

pub fn weight_value(row: u64, column: u64) -> f32 {
    (row * WEIGHT_SHAPE[1] + column) as f32 + 0.25
}

pub fn bias_value(index: u64) -> f64 {
    index as f64 * 1.5 - 2.0
}

/// The row-major values of the weight box rows x columns.
pub fn weight_box(rows: std::ops::Range<u64>, columns: std::ops::Range<u64>) -> Vec<f32> {
    rows.flat_map(|r| columns.clone().map(move |c| weight_value(r, c))).collect()
}

pub fn bias() -> Vec<f64> {
    (0..BIAS_LEN).map(bias_value).collect()
}

/// The staging arena of every test context: the default (an eighth of the machine's memory) costs seconds of page
/// setup per context, and the tests stage a few KiB.
pub const TEST_ARENA_BYTES: u64 = 64 << 20;

/// Options of a one-rank context in this process, whatever the environment says.
pub fn solo_builder() -> ckpt::ContextBuilder {
    ckpt::Context::builder().rank(0).world_size(1).arena_bytes(TEST_ARENA_BYTES)
}

/// Environment variables that select what a rank process does and where.
pub const ROLE_VAR: &str = "CKPT_RUST_TEST_ROLE";
pub const DIR_VAR: &str = "CKPT_RUST_TEST_DIR";
/// The test (in every test crate that spawns ranks) that runs a rank's role; ignored in ordinary runs.
pub const RANK_ENTRY_TEST: &str = "rank_process";

const RANKS_DEADLINE: Duration = Duration::from_secs(90);

/// A TCP port that was free a moment ago, for the job's store: at random below Linux's ephemeral range (32768 on),
/// since a port from that range can be handed to another socket's connection before the job's rank 0 binds it.
fn free_port() -> u16 {
    let random = RandomState::new();
    for attempt in 0u32..1000 {
        let mut hasher = random.build_hasher();
        hasher.write_u32(attempt);
        let port = 10000 + (hasher.finish() % (32768 - 10000)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("cannot find a free port below 32768");
}

/// Changes to the environment of a job's processes: each variable set to a value, or removed (None).
pub type JobEnv<'a> = &'a [(&'a str, Option<&'a str>)];

fn spawn_rank(role: &str, rank: usize, world_size: usize, port: u16, dir: &Path, log: &Path, job_env: JobEnv) -> Child {
    let log_file = fs::File::create(log).expect("create rank log");
    let mut command = Command::new(env::current_exe().expect("current test binary"));
    for (name, value) in job_env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
        .args([RANK_ENTRY_TEST, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, role)
        .env(DIR_VAR, dir)
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world_size.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("CKPT_STORE_PORT", port.to_string())
        .env("CKPT_TIMEOUT_MS", "30000")
        .env("CKPT_ARENA_BYTES", TEST_ARENA_BYTES.to_string())
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("clone rank log"))
        .stderr(log_file)
        .spawn()
        .expect("spawn rank process")
}

/// Waits for every rank, killing all of them once the deadline passes.
fn wait_all(children: &mut [Child]) -> Vec<Option<ExitStatus>> {
    let deadline = Instant::now() + RANKS_DEADLINE;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) && Instant::now() < deadline {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                *status = child.try_wait().expect("wait for rank");
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    for (child, status) in children.iter_mut().zip(statuses.iter()) {
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    statuses
}

/// Runs `role` on `world_size` processes of this test binary, each rank with the launcher's environment, and
/// panics with every rank's output unless all of them succeed.
pub fn run_ranks(role: &str, world_size: usize, temp: &TempDir) {
    run_ranks_with_env(role, world_size, temp, &[]);
}

/// As [`run_ranks`], with `job_env` applied to every rank's environment.
pub fn run_ranks_with_env(role: &str, world_size: usize, temp: &TempDir, job_env: JobEnv) {
    let port = free_port();
    let logs: Vec<PathBuf> =
        (0..world_size).map(|rank| temp.path().join(format!("{}-rank{}.log", role, rank))).collect();
    let mut children: Vec<Child> = (0..world_size)
        .map(|rank| spawn_rank(role, rank, world_size, port, &temp.checkpoint(), &logs[rank], job_env))
        .collect();
    let statuses = wait_all(&mut children);
    if statuses.iter().all(|s| s.map_or(false, |s| s.success())) {
        return;
    }
    let mut report = format!("'{}' on {} ranks failed:\n", role, world_size);
    for (rank, (status, log)) in statuses.iter().zip(&logs).enumerate() {
        let outcome = status.map_or_else(|| "killed after the deadline".to_owned(), |s| s.to_string());
        let output = fs::read_to_string(log).unwrap_or_default();
        report += &format!("--- rank {}: {}\n{}\n", rank, outcome, output);
    }
    panic!("{}", report);
}
