package ckpt

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jobIdentityVariables name the job for the memory tier; the library takes the first one set and not empty.
var jobIdentityVariables = []string{"CKPT_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}

// anonymousJob leaves the test's process without a job identity, whatever the environment running the tests
// says, until the test ends.
func anonymousJob(t *testing.T) {
	t.Helper()
	for _, name := range jobIdentityVariables {
		t.Setenv(name, "")
	}
}

// jobWithAgent gives the test's process a job identity of its own and a fresh memory root for its agent; once the
// test ends (after the contexts it made are closed), the agent is stopped and the root removed.
func jobWithAgent(t *testing.T) {
	t.Helper()
	jobID := fmt.Sprintf("go-memory-tier-%d-%d", os.Getpid(), time.Now().UnixNano())
	parent := "/dev/shm"
	if info, err := os.Stat(parent); err != nil || !info.IsDir() {
		parent = os.TempDir()
	}
	shmRoot, err := os.MkdirTemp(parent, "ckpt-go-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopAgent(jobID)
		os.RemoveAll(shmRoot)
	})
	anonymousJob(t)
	t.Setenv("CKPT_JOB_ID", jobID)
	t.Setenv("CKPT_AGENT_SHM_ROOT", shmRoot)
	t.Setenv("CKPT_AGENT_IDLE_S", "60") // should stopping it fail, the agent still leaves soon
}

// stopAgent sends SIGTERM to the job's agent, then waits up to 5 s for it to leave.
// withoutSanitizer keeps the sanitizer runtime that the ASan build preloads into the tests away from cmd (pkill
// and pgrep deadlock at start with it).
func withoutSanitizer(cmd *exec.Cmd) *exec.Cmd {
	for _, variable := range os.Environ() {
		if !strings.HasPrefix(variable, "LD_PRELOAD=") {
			cmd.Env = append(cmd.Env, variable)
		}
	}
	return cmd
}

func stopAgent(jobID string) {
	pattern := "ckpt-agent --job-id " + jobID + " "
	withoutSanitizer(exec.Command("pkill", "-TERM", "-f", pattern)).Run()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if withoutSanitizer(exec.Command("pgrep", "-f", pattern)).Run() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expectJobIDError checks that err is the library's ErrInvalidArgument naming CKPT_JOB_ID.
func expectJobIDError(t *testing.T, what string, err error) {
	t.Helper()
	var ckptErr *Error
	if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &ckptErr) ||
		!strings.Contains(ckptErr.Message, "CKPT_JOB_ID") {
		t.Errorf("%s without a job identity = %v, expected ErrInvalidArgument naming CKPT_JOB_ID", what, err)
	}
}

func scalarState(t *testing.T) *State {
	t.Helper()
	state := newTestState(t)
	data := newTestBuffer(t, DtypeF64, 1)
	if err := state.AddTensor(TensorShard{Key: "scalar", Dtype: DtypeF64, Data: data}); err != nil {
		t.Fatal(err)
	}
	return state
}

func TestSaveToMemoryWithoutAJobIdentityNamesCKPT_JOB_ID(t *testing.T) {
	anonymousJob(t)
	ctx := singleRankContext(t)
	dir := t.TempDir()
	for _, tier := range []Tier{TierMemory, TierBoth} {
		request, err := ctx.Save(scalarState(t), filepath.Join(dir, "c"), &SaveOptions{Tier: tier})
		if request != nil {
			request.Close()
		}
		expectJobIDError(t, fmt.Sprintf("Save with tier %d", tier), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c")); !os.IsNotExist(err) {
		t.Errorf("the refused saves left %s (stat: %v)", filepath.Join(dir, "c"), err)
	}
}

func TestMemoryTierManagerWithoutAJobIdentityNamesCKPT_JOB_ID(t *testing.T) {
	anonymousJob(t)
	ctx := singleRankContext(t)
	manager, err := ctx.OpenManager(filepath.Join(t.TempDir(), "run"), &ManagerOptions{MemoryTier: true})
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Close()
	request, err := manager.Save(scalarState(t), 1, nil)
	if request != nil {
		request.Close()
	}
	expectJobIDError(t, "Manager.Save with MemoryTier", err)
	if steps, err := manager.Steps(); err != nil || len(steps) != 0 {
		t.Errorf("Steps after the refused save = %v, %v; expected none", steps, err)
	}
}

func TestAnUnknownTierIsRefused(t *testing.T) {
	ctx := singleRankContext(t)
	path := filepath.Join(t.TempDir(), "c")
	request, err := ctx.Save(scalarState(t), path, &SaveOptions{Tier: TierBoth + 1})
	if request != nil {
		request.Close()
	}
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown tier 3") {
		t.Errorf("Save with tier 3 = %v, expected ErrInvalidArgument naming the tier", err)
	}
}

func TestStorageEveryNeedsTheMemoryTier(t *testing.T) {
	ctx := singleRankContext(t)
	root := filepath.Join(t.TempDir(), "run")
	if _, err := ctx.OpenManager(root, &ManagerOptions{StorageEvery: 2}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "MemoryTier") {
		t.Errorf("OpenManager with StorageEvery alone = %v, expected ErrInvalidArgument naming MemoryTier", err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the refused options created %s (stat: %v)", root, err)
	}
}

func TestMemoryTierManagerResumesFromMemoryTheStepStorageNeverSaw(t *testing.T) {
	jobWithAgent(t)
	root := filepath.Join(t.TempDir(), "run")
	options := &ManagerOptions{MemoryTier: true, StorageEvery: 2}
	trainer := singleRankContext(t)
	manager, err := trainer.OpenManager(root, options)
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Close()
	for step := uint64(1); step <= 3; step++ {
		if err := saveManagedStep(trainer, manager, step); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	stepTwo, err := manager.StepPath(2)
	if err != nil {
		t.Fatal(err)
	}
	waitForFile(t, filepath.Join(stepTwo, "MANIFEST")) // written by the agent
	// One manager holds a root at a time: the trainer's lets it go, while its context stays attached.
	manager.Close()

	// The trainer stays attached while a fresh context resumes: a job that ended cleanly lets its agent go.
	resumed := singleRankContext(t)
	fresh, err := resumed.OpenManager(root, options)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := checkResumeFromLatest(resumed, fresh); err != nil {
		t.Fatal(err)
	}
	for _, step := range []uint64{1, 3} {
		path, err := fresh.StepPath(step)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("step %d reached storage at %s (stat: %v)", step, path, err)
		}
	}
	if latest, err := fresh.Latest(); latest != 2 || err != nil {
		t.Errorf("Latest = %d, %v; expected storage's latest step, 2", latest, err)
	}
	if resume, err := fresh.ResumeStep(); resume != 3 || err != nil {
		t.Errorf("ResumeStep = %d, %v; expected step 3, held in memory alone", resume, err)
	}
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}
