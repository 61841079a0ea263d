package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The test binary re-executes itself as the ranks of a job: these variables select a rank's role and directory.
const (
	roleVariable = "CKPT_GO_TEST_ROLE"
	dirVariable  = "CKPT_GO_TEST_DIR"
)

// testArenaBytes is the staging arena of every test context: the default (an eighth of the machine's memory)
// costs seconds of page setup per context, and the tests stage a few KiB.
const testArenaBytes = 64 << 20

// childRoles are the jobs a re-executed test binary can run as one rank.
var childRoles = map[string]func(ctx *Context, dir string) error{
	"save":                   saveTwoRankLayout,
	"save-checking-replicas": saveTwoRankLayoutCheckingReplicas,
	"load-columns":           loadByColumns,
	"load-whole":             loadWhole,
	"manager":                saveThreeStepsKeepTwo,
}

// testRoot holds every checkpoint that the tests write; TestMain removes it.
var testRoot string

func TestMain(m *testing.M) {
	if role := os.Getenv(roleVariable); role != "" {
		os.Exit(runChildRole(role, os.Getenv(dirVariable)))
	}
	var err error
	if testRoot, err = os.MkdirTemp("", "ckpt-go-test-"); err != nil {
		fmt.Fprintln(os.Stderr, "cannot create the test directory:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(testRoot)
	os.Exit(code)
}

// runChildRole runs one rank of a multi-process test and returns its exit code.
func runChildRole(role, dir string) int {
	run, ok := childRoles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown test role %q\n", role)
		return 2
	}
	ctx, err := NewContextFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("RANK"), err)
		return 1
	}
	defer ctx.Close()
	if err := run(ctx, dir); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d of %d, %s: %v\n", ctx.Rank(), ctx.WorldSize(), role, err)
		return 1
	}
	return 0
}

// freePort finds a TCP port that is free now, at random below Linux's ephemeral range (32768 on): a port from that
// range can be handed to another socket's connection before the job's rank 0 binds it.
func freePort() (int, error) {
	random := rand.New(rand.NewSource(time.Now().UnixNano() ^ int64(os.Getpid())))
	for attempt := 0; attempt < 1000; attempt++ {
		port := 10000 + random.Intn(32768-10000)
		listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			listener.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("cannot find a free port below 32768")
}

// runRanks runs `role` on `ranks` processes of this test binary, as a launcher would, and returns an error with
// every failed rank's output. A failed rank stops the others; the whole job has a deadline.
func runRanks(role string, ranks int, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port, err := freePort()
	if err != nil {
		return err
	}
	outputs := make([]bytes.Buffer, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for rank := 0; rank < ranks; rank++ {
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), roleVariable+"="+role, dirVariable+"="+dir, "RANK="+strconv.Itoa(rank),
			"WORLD_SIZE="+strconv.Itoa(ranks), "LOCAL_RANK="+strconv.Itoa(rank), "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port), "CKPT_STORE_PORT="+strconv.Itoa(port), "CKPT_TIMEOUT_MS=30000",
			"CKPT_ARENA_BYTES="+strconv.Itoa(testArenaBytes))
		cmd.Stdout = &outputs[rank]
		cmd.Stderr = &outputs[rank]
		if errs[rank] = cmd.Start(); errs[rank] != nil {
			cancel()
			continue
		}
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			if errs[rank] = cmd.Wait(); errs[rank] != nil {
				cancel()
			}
		}(rank)
	}
	wg.Wait()
	var report bytes.Buffer
	for rank, err := range errs {
		if err != nil {
			fmt.Fprintf(&report, "%s: rank %d of %d failed (%v):\n%s\n", role, rank, ranks, err, outputs[rank].String())
		}
	}
	if report.Len() > 0 {
		return errors.New(report.String())
	}
	return nil
}

var (
	saveOnce sync.Once
	savedDir string
	saveErr  error
)

// savedCheckpoint is the checkpoint that two ranks save once for every test that reads it.
func savedCheckpoint(t *testing.T) string {
	t.Helper()
	saveOnce.Do(func() {
		savedDir = filepath.Join(testRoot, "two-ranks")
		saveErr = runRanks("save", 2, savedDir)
	})
	if saveErr != nil {
		t.Fatalf("the two-rank save failed: %v", saveErr)
	}
	return savedDir
}
