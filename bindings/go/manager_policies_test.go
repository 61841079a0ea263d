package ckpt

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
)

// saveStep saves a one-entry state as step through manager, and waits for it.
func saveStep(t *testing.T, manager *Manager, step uint64, opts *SaveOptions) error {
	t.Helper()
	state := newTestState(t)
	if err := state.AddCommon("step", []byte(fmt.Sprint(step))); err != nil {
		t.Fatal(err)
	}
	request, err := manager.Save(state, step, opts)
	if err != nil {
		return err
	}
	defer request.Close()
	return request.Wait(0)
}

func TestKeepBestKeepsTheLowestLossesAndTheNewestAndMetricsReadBack(t *testing.T) {
	ctx := singleRankContext(t)
	root := filepath.Join(t.TempDir(), "run")
	manager, err := ctx.OpenManager(root, &ManagerOptions{KeepBest: 2, BestMode: BestMin})
	if err != nil {
		t.Fatal(err)
	}
	for _, saved := range []struct {
		step uint64
		loss float64
	}{{1, 0.9}, {2, 0.2}, {3, 0.5}, {4, 0.1}, {5, 0.7}} {
		loss := saved.loss
		opts := &SaveOptions{Metrics: fmt.Sprintf(`{"loss":%v}`, loss), BestValue: &loss}
		if err := saveStep(t, manager, saved.step, opts); err != nil {
			t.Fatalf("step %d: %v", saved.step, err)
		}
	}
	manager.Close() // waits for its retention
	reader, err := ctx.OpenManager(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if steps, err := reader.Steps(); err != nil || !reflect.DeepEqual(steps, []uint64{2, 4, 5}) {
		t.Errorf("Steps = %v, %v; expected [2 4 5]", steps, err)
	}
	if metrics, err := reader.Metrics(4); err != nil || metrics != `{"loss":0.1}` {
		t.Errorf("Metrics(4) = %q, %v", metrics, err)
	}
	if _, err := reader.Metrics(3); !errors.Is(err, ErrNotFound) {
		t.Errorf("Metrics of a removed step = %v, expected ErrNotFound", err)
	}
}

func TestMetricsThatAreNoJSONObjectAreRefused(t *testing.T) {
	manager, err := singleRankContext(t).OpenManager(filepath.Join(t.TempDir(), "run"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Close()
	if err := saveStep(t, manager, 1, &SaveOptions{Metrics: "[1, 2]"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a save with metrics [1, 2] = %v, expected ErrInvalidArgument", err)
	}
}
