//! The memory tier through the safe API: a save's tier and a manager's memory tier options reach the library, and
//! a manager resumes from the node agent's memory. The job's identity comes from the environment, so each test runs
//! this binary again as a one-rank job with the environment it needs (see common::run_ranks_with_env), entering
//! through `rank_process`.

mod common;

use std::env;
use std::ffi::CStr;
use std::fs;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ckpt::{ErrorKind, LoadOptions, LoadState, Manager, ManagerOptions, SaveOptions, SaveState, Shard, Tier};
use common::*;

const SAVE_WITHOUT_JOB_ID: &str = "save-to-memory-without-job-id";
const RESUME_FROM_MEMORY: &str = "resume-from-memory";
const JOB_IDENTITY_VARIABLES: [&str; 3] = ["CKPT_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"];
const LENGTH: u64 = 16;

#[test]
#[ignore = "entry point of the rank processes that the other tests spawn"]
fn rank_process() {
    let role = match env::var(ROLE_VAR) {
        Ok(role) => role,
        Err(_) => return,
    };
    let dir = PathBuf::from(env::var_os(DIR_VAR).expect("the test's directory"));
    match role.as_str() {
        SAVE_WITHOUT_JOB_ID => save_without_job_id(&dir),
        RESUME_FROM_MEMORY => resume_from_memory(&dir),
        other => panic!("unknown role {}", other),
    }
}

/// The values of "weight" saved at `step`.
fn weight_at(step: u64) -> Vec<f32> {
    (0..LENGTH).map(|i| (step * 1000 + i) as f32).collect()
}

/// Asserts that `outcome` failed with CKPT_E_INVALID_ARGUMENT naming CKPT_JOB_ID.
fn assert_needs_job_id<T>(outcome: ckpt::Result<T>, what: &str) {
    let error = outcome.err().unwrap_or_else(|| panic!("{what}: a save to memory without a job identity succeeded"));
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{what}: {error}");
    assert!(error.message().contains("CKPT_JOB_ID"), "{what}: {error}");
}

fn save_without_job_id(dir: &Path) {
    let ctx = solo_builder().create().unwrap();
    let weight = weight_at(1);
    for tier in [Tier::Memory, Tier::Both] {
        let mut state = SaveState::new().unwrap();
        state.add_tensor(&Shard::new(WEIGHT, &[LENGTH]), &weight).unwrap();
        assert_needs_job_id(ctx.save(&mut state, dir.join("c"), &SaveOptions::new().tier(tier)), "Context::save");
    }
    assert!(!dir.join("c").exists(), "the refused save left {}", dir.join("c").display());

    let manager = Manager::open(&ctx, dir.join("run"), &ManagerOptions::new().memory_tier(true)).unwrap();
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &[LENGTH]), &weight).unwrap();
    assert_needs_job_id(manager.save(&mut state, 1, &SaveOptions::new()), "Manager::save");
    assert_eq!(manager.steps().unwrap(), Vec::<u64>::new());
}

fn save_step(manager: &Manager<'_>, step: u64) {
    let weight = weight_at(step);
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &[LENGTH]), &weight).unwrap();
    state.add_common(STEP_KEY, &step.to_le_bytes()).unwrap();
    let mut request = manager.save(&mut state, step, &SaveOptions::new()).unwrap();
    request.wait().unwrap_or_else(|e| panic!("step {}: {}", step, e));
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn resume_from_memory(root: &Path) {
    let options = ManagerOptions::new().memory_tier(true).storage_every(2);
    let trainer = solo_builder().create().unwrap();
    let manager = Manager::open(&trainer, root, &options).unwrap();
    for step in 1..=3 {
        save_step(&manager, step);
    }
    wait_for_file(&manager.step_path(2).unwrap().join("MANIFEST")); // written by the agent
    // One manager holds a root at a time: the trainer's lets it go, while its context stays attached.
    drop(manager);

    // The trainer stays attached while a fresh context resumes: a job that ended cleanly lets its agent go.
    let resumed = solo_builder().create().unwrap();
    let fresh = Manager::open(&resumed, root, &options).unwrap();
    assert_eq!(fresh.resume_step().unwrap(), Some(3), "the step held in memory alone");
    let mut weight = vec![0f32; LENGTH as usize];
    {
        let mut state = LoadState::new().unwrap();
        state.add_tensor(&Shard::new(WEIGHT, &[LENGTH]), &mut weight).unwrap();
        assert_eq!(fresh.load_latest(&mut state, &LoadOptions::new()).unwrap(), Some(3));
        assert_eq!(state.common(STEP_KEY).unwrap(), &3u64.to_le_bytes()[..]);
    }
    assert_eq!(weight, weight_at(3));
    assert!(!fresh.step_path(3).unwrap().exists(), "step 3 reached storage");
    assert!(!fresh.step_path(1).unwrap().exists(), "step 1 reached storage");
    assert_eq!(fresh.latest().unwrap(), Some(2), "storage's latest step");
}

/// A job identity of its own and a fresh memory root for its agent; dropping it stops the agent and removes the
/// root.
struct AgentJob {
    job_id: String,
    shm_root: PathBuf,
}

impl AgentJob {
    fn new() -> AgentJob {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        let job_id = format!("rust-memory-tier-{}-{}", std::process::id(), nanos);
        let parent = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { env::temp_dir() };
        let shm_root = parent.join(format!("ckpt-{job_id}"));
        fs::create_dir(&shm_root).unwrap_or_else(|e| panic!("cannot create {}: {e}", shm_root.display()));
        AgentJob { job_id, shm_root }
    }

    fn pattern(&self) -> String {
        format!("ckpt-agent --job-id {} ", self.job_id)
    }
}

impl Drop for AgentJob {
    fn drop(&mut self) {
        // pkill and pgrep must not get the sanitizer runtime that the ASan build preloads into the tests: it
        // deadlocks them at start.
        let _ = Command::new("pkill").env_remove("LD_PRELOAD").args(["-TERM", "-f", &self.pattern()]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && Command::new("pgrep")
                .env_remove("LD_PRELOAD")
                .args(["-f", &self.pattern()])
                .output()
                .map_or(false, |o| o.status.success())
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = fs::remove_dir_all(&self.shm_root);
    }
}

#[test]
fn a_save_to_memory_without_a_job_identity_fails_naming_ckpt_job_id() {
    let temp = TempDir::new();
    fs::create_dir(temp.checkpoint()).unwrap();
    let unset: Vec<(&str, Option<&str>)> = JOB_IDENTITY_VARIABLES.iter().map(|name| (*name, None)).collect();
    run_ranks_with_env(SAVE_WITHOUT_JOB_ID, 1, &temp, &unset);
}

#[test]
fn a_manager_with_the_memory_tier_resumes_from_memory_the_step_storage_never_saw() {
    let temp = TempDir::new();
    let agent = AgentJob::new();
    let shm_root = agent.shm_root.to_str().expect("a UTF-8 temporary directory");
    let job_env = [
        ("CKPT_JOB_ID", Some(agent.job_id.as_str())),
        ("SLURM_JOB_ID", None),
        ("TORCHELASTIC_RUN_ID", None),
        ("CKPT_AGENT_SHM_ROOT", Some(shm_root)),
        ("CKPT_AGENT_IDLE_S", Some("60")), // should stopping it fail, the agent still leaves soon
    ];
    run_ranks_with_env(RESUME_FROM_MEMORY, 1, &temp, &job_env);
}

/// Through `sys`, where any number fits the field: the library refuses a tier it does not know.
#[test]
fn the_library_refuses_a_tier_it_does_not_know() {
    use ckpt::sys;
    // SAFETY: every handle is created before use and freed once; the options outlive the calls.
    unsafe {
        let mut err = ptr::null_mut();
        assert_eq!(sys::ckpt_error_create(&mut err), sys::CKPT_OK);
        let mut ctx_opts = sys::ckpt_context_options::init();
        (ctx_opts.rank, ctx_opts.world_size, ctx_opts.arena_bytes) = (0, 1, TEST_ARENA_BYTES);
        let mut ctx = ptr::null_mut();
        assert_eq!(sys::ckpt_context_create(&ctx_opts, &mut ctx, err), sys::CKPT_OK);
        let mut state = ptr::null_mut();
        assert_eq!(sys::ckpt_state_create(&mut state, err), sys::CKPT_OK);
        let mut opts = sys::ckpt_save_options::init();
        opts.tier = sys::CKPT_TIER_BOTH + 1;
        let mut request = ptr::null_mut();
        let path = b"/nonexistent/ckpt-tier-test\0".as_ptr() as *const c_char;
        let status = sys::ckpt_save(ctx, state, path, &opts, &mut request, err);
        let message = CStr::from_ptr(sys::ckpt_error_message(err)).to_string_lossy().into_owned();
        sys::ckpt_state_free(state);
        sys::ckpt_context_free(ctx);
        sys::ckpt_error_free(err);
        assert_eq!(status, sys::CKPT_E_INVALID_ARGUMENT, "{message}");
        assert!(request.is_null());
        assert!(message.contains("tier 3"), "{message}");
    }
}
