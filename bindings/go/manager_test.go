package ckpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestManagerOnTwoRanksKeepsTheLastTwoStepsAndResumesFromTheLatest(t *testing.T) {
	if err := runRanks("manager", 2, filepath.Join(t.TempDir(), "run")); err != nil {
		t.Fatal(err)
	}
}

func TestManagerLoadLatestOfAnEmptyRootIsNotFound(t *testing.T) {
	ctx := singleRankContext(t)
	manager, err := ctx.OpenManager(filepath.Join(t.TempDir(), "run"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Close()
	if _, err := manager.ResumeStep(); !errors.Is(err, ErrNotFound) {
		t.Errorf("ResumeStep of an empty root = %v, expected ErrNotFound", err)
	}
	state := newTestState(t)
	if _, err := manager.LoadLatest(state, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadLatest of an empty root = %v, expected ErrNotFound", err)
	}
}

func TestASecondManagerOnARootIsRefusedUntilTheFirstCloses(t *testing.T) {
	root := filepath.Join(t.TempDir(), "run")
	first, err := singleRankContext(t).OpenManager(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := singleRankContext(t)
	if _, err := other.OpenManager(root, nil); !errors.Is(err, ErrAlreadyExists) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("a second OpenManager on a held root = %v, expected ErrAlreadyExists naming this pid", err)
	}
	first.Close()
	second, err := other.OpenManager(root, nil)
	if err != nil {
		t.Fatalf("OpenManager after the holder closed: %v", err)
	}
	second.Close()
}

func TestContextCloseClosesItsManagers(t *testing.T) {
	ctx := singleRankContext(t)
	manager, err := ctx.OpenManager(filepath.Join(t.TempDir(), "run"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx.Close()
	if _, err := manager.Latest(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Latest after the context's Close = %v, expected ErrInvalidArgument", err)
	}
	manager.Close()
}

func TestStatsCountCommittedSavesBytesAndReusedPlans(t *testing.T) {
	ctx := singleRankContext(t)
	dir := t.TempDir()
	saveScalar(t, ctx, filepath.Join(dir, "first"))
	state := newTestState(t)
	scalar := newTestBuffer(t, DtypeF64, 1)
	if err := state.AddTensor(TensorShard{Key: "scalar", Dtype: DtypeF64, Data: scalar}); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Load(state, filepath.Join(dir, "first"), nil); err != nil {
		t.Fatal(err)
	}
	first, err := ctx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if first.SavesCommitted < 1 || first.BytesWritten == 0 || first.BytesRead == 0 || first.ArenaBytes == 0 {
		t.Errorf("after a save and a load: %+v", first)
	}
	saveScalar(t, ctx, filepath.Join(dir, "second"))
	second, err := ctx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if second.PlansReused != first.PlansReused+1 || second.SavesCommitted != first.SavesCommitted+1 {
		t.Errorf("a second save of the same structure: %+v, then %+v", first, second)
	}
}

func TestIOWorkersArenaAndTransportOptionsReachTheContext(t *testing.T) {
	ctx, err := NewContext(Options{Rank: 0, WorldSize: 1, IOWorkers: InProcessIO, ArenaBytes: testArenaBytes,
		Transport: TransportNone})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	stats, err := ctx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.IOWorkers != 0 || stats.ArenaBytes != testArenaBytes || stats.Transport != TransportNone {
		t.Errorf("stats = %+v, expected no worker process, a %d-byte arena and transport none", stats, testArenaBytes)
	}
}

func TestTransportNamesAndOutOfRangeValues(t *testing.T) {
	if TransportUCX.String() != "ucx" || Transport(42).String() != "Transport(42)" {
		t.Errorf("names: %v, %v", TransportUCX, Transport(42))
	}
	for _, opts := range []Options{{IOWorkers: -2}, {Transport: Transport(42)}} {
		if _, err := NewContext(opts); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("NewContext(%+v) = %v, expected ErrInvalidArgument", opts, err)
		}
	}
}

// The manager test's tensor: rank r holds rows [2r, 2r + 2) of "weight" F32 [2 * world, managedColumns].
const (
	managedRowsPerRank = 2
	managedColumns     = 3
)

func managedValue(step uint64, row, column int) float32 {
	return float32(step*1000) + float32(row*managedColumns+column)
}

// saveThreeStepsKeepTwo is the "manager" role: it saves steps 1, 2, 3 with keep-last-2 retention, then checks the
// latest step, the retention and a resume from the latest.
func saveThreeStepsKeepTwo(ctx *Context, root string) error {
	manager, err := ctx.OpenManager(root, &ManagerOptions{KeepLast: 2})
	if err != nil {
		return err
	}
	defer manager.Close()
	if _, err := manager.Latest(); !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("Latest of a new root = %v, expected ErrNotFound", err)
	}
	for step := uint64(1); step <= 3; step++ {
		if err := saveManagedStep(ctx, manager, step); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	if latest, err := manager.Latest(); latest != 3 || err != nil {
		return fmt.Errorf("Latest = %d, %v; expected 3", latest, err)
	}
	// Rank 0 removes step 1 in the background, after the save's request has finished.
	deadline := time.Now().Add(30 * time.Second)
	for {
		steps, err := manager.Steps()
		if err == nil && len(steps) == 2 && steps[0] == 2 && steps[1] == 3 {
			break
		}
		if err != nil || time.Now().After(deadline) {
			return fmt.Errorf("Steps = %v, %v; expected [2 3] within 30 s", steps, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := checkRetainedSteps(manager); err != nil {
		return err
	}
	return checkResumeFromLatest(ctx, manager)
}

func saveManagedStep(ctx *Context, manager *Manager, step uint64) error {
	state, err := NewState()
	if err != nil {
		return err
	}
	defer state.Close()
	rows, err := NewBufferFor(DtypeF32, managedRowsPerRank*managedColumns)
	if err != nil {
		return err
	}
	defer rows.Close()
	firstRow := managedRowsPerRank * ctx.Rank()
	for i := range rows.Float32s() {
		rows.Float32s()[i] = managedValue(step, firstRow+i/managedColumns, i%managedColumns)
	}
	shard := TensorShard{Key: "weight", Dtype: DtypeF32,
		GlobalShape:  []uint64{uint64(managedRowsPerRank * ctx.WorldSize()), managedColumns},
		LocalShape:   []uint64{managedRowsPerRank, managedColumns},
		GlobalOffset: []uint64{uint64(firstRow), 0}, Data: rows}
	if err := state.AddTensor(shard); err != nil {
		return err
	}
	if err := state.AddCommon("step", stepBytes(step)); err != nil {
		return err
	}
	request, err := manager.Save(state, step, nil)
	if err != nil {
		return err
	}
	defer request.Close()
	return request.Wait(0)
}

func checkRetainedSteps(manager *Manager) error {
	for step, kept := range map[uint64]bool{1: false, 2: true, 3: true} {
		path, err := manager.StepPath(step)
		if err != nil {
			return err
		}
		if _, err := os.Stat(path); (err == nil) != kept {
			return fmt.Errorf("step %d at %s: kept %v expected, stat says %v", step, path, kept, err)
		}
	}
	if path, _ := manager.StepPath(3); filepath.Base(path) != "step-000000000003" {
		return fmt.Errorf("step 3 lives in %s, expected a directory step-000000000003", path)
	}
	return nil
}

func checkResumeFromLatest(ctx *Context, manager *Manager) error {
	rows := managedRowsPerRank * ctx.WorldSize()
	state, err := NewState()
	if err != nil {
		return err
	}
	defer state.Close()
	weight, err := NewBufferFor(DtypeF32, rows*managedColumns)
	if err != nil {
		return err
	}
	defer weight.Close()
	if err := state.AddTensor(TensorShard{Key: "weight", Dtype: DtypeF32,
		GlobalShape: []uint64{uint64(rows), managedColumns}, Data: weight}); err != nil {
		return err
	}
	if step, err := manager.ResumeStep(); err != nil || step != 3 {
		return fmt.Errorf("ResumeStep = %d, %v; expected step 3", step, err)
	}
	step, err := manager.LoadLatest(state, nil)
	if err != nil || step != 3 {
		return fmt.Errorf("LoadLatest = %d, %v; expected step 3", step, err)
	}
	for i, got := range weight.Float32s() {
		if want := managedValue(3, i/managedColumns, i%managedColumns); got != want {
			return fmt.Errorf("weight element %d = %v after resuming, expected %v", i, got, want)
		}
	}
	common, err := state.Common("step")
	if err != nil || len(common) != 8 || binary.LittleEndian.Uint64(common) != 3 {
		return fmt.Errorf("common step = %v, %v; expected 3", common, err)
	}
	return nil
}
