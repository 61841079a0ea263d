package ckpt

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
)

const progressElements = 1 << 20 // 4 MB of F32

// recorder keeps every progress report; a save's come from two threads.
type recorder struct {
	mu      sync.Mutex
	reports []Progress
}

func (r *recorder) report(p Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, p)
}

// phases lists the phases in the order they came, each once, and checks that Done never shrinks within a phase.
func (r *recorder) phases(t *testing.T) []Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	var seen []Phase
	for i, p := range r.reports {
		if p.Done > p.Total || (i > 0 && r.reports[i-1].Phase == p.Phase && p.Done < r.reports[i-1].Done) {
			t.Errorf("report %d of %v is out of order", i, r.reports)
		}
		if len(seen) == 0 || seen[len(seen)-1] != p.Phase {
			seen = append(seen, p.Phase)
		}
	}
	return seen
}

func (r *recorder) last() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reports[len(r.reports)-1]
}

// progressState registers one F32 tensor "x" of progressElements elements.
func progressState(t *testing.T, data *Buffer) *State {
	state := newTestState(t)
	shape := []uint64{progressElements}
	if err := state.AddTensor(TensorShard{Key: "x", Dtype: DtypeF32, GlobalShape: shape, LocalShape: shape,
		GlobalOffset: []uint64{0}, Data: data}); err != nil {
		t.Fatal(err)
	}
	return state
}

func samePhases(got, want []Phase) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func TestRequestStatsOfAFinishedSaveAddUpAndOutliveClose(t *testing.T) {
	ctx := singleRankContext(t)
	data := newTestBuffer(t, DtypeF32, progressElements)
	request, err := ctx.Save(progressState(t, data), filepath.Join(t.TempDir(), "c"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := request.Wait(0); err != nil {
		t.Fatal(err)
	}
	stats, err := request.Stats()
	if err != nil {
		t.Fatal(err)
	}
	bytes := uint64(data.Size())
	if !stats.Committed || stats.StateBytes != bytes || stats.BytesToWrite != bytes || stats.BytesStaged != bytes ||
		stats.BytesWritten != bytes || stats.BytesCommitted != bytes || stats.FilesWritten < 1 {
		t.Errorf("stats of a committed %d-byte save: %+v", bytes, stats)
	}
	if stats.BlockingNs != stats.PlanningNs+stats.StagingNs ||
		stats.TotalNs != stats.BlockingNs+stats.WritingNs+stats.CommittingNs || stats.GBps() <= 0 {
		t.Errorf("the phases do not add up: %+v", stats)
	}
	request.Close()
	if after, err := request.Stats(); err != nil || after != stats {
		t.Errorf("after Close: %+v, %v; expected the final %+v", after, err, stats)
	}
}

func TestInPlaceSaveIsDurableWhenSaveReturns(t *testing.T) {
	ctx := singleRankContext(t)
	dir := filepath.Join(t.TempDir(), "c")
	// x: F32 [1000], y: I64 [3, 7], z: F64 [5].
	fill := func(x, y, z *Buffer) {
		xs, ys, zs := x.Float32s(), y.Int64s(), z.Float64s()
		for i := range xs {
			xs[i] = float32(i)*0.5 - 3
		}
		for i := range ys {
			ys[i] = int64(i*i) - 40
		}
		for i := range zs {
			zs[i] = float64(i) * 1.25
		}
	}
	register := func(x, y, z *Buffer) *State {
		state := newTestState(t)
		for _, shard := range []TensorShard{
			{Key: "x", Dtype: DtypeF32, GlobalShape: []uint64{1000}, Data: x},
			{Key: "y", Dtype: DtypeI64, GlobalShape: []uint64{3, 7}, Data: y},
			{Key: "z", Dtype: DtypeF64, GlobalShape: []uint64{5}, Data: z},
		} {
			shard.LocalShape, shard.GlobalOffset = shard.GlobalShape, make([]uint64, len(shard.GlobalShape))
			if err := state.AddTensor(shard); err != nil {
				t.Fatal(err)
			}
		}
		return state
	}
	x, y, z := newTestBuffer(t, DtypeF32, 1000), newTestBuffer(t, DtypeI64, 21), newTestBuffer(t, DtypeF64, 5)
	fill(x, y, z)
	request, err := ctx.Save(register(x, y, z), dir, &SaveOptions{InPlace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer request.Close()
	stats, err := request.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.BytesToWrite == 0 || stats.BytesWritten != stats.BytesToWrite {
		t.Errorf("an in-place save when Save returned: %+v", stats)
	}
	if err := request.Wait(0); err != nil {
		t.Fatal(err)
	}

	x2, y2, z2 := newTestBuffer(t, DtypeF32, 1000), newTestBuffer(t, DtypeI64, 21), newTestBuffer(t, DtypeF64, 5)
	if err := ctx.Load(register(x2, y2, z2), dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]*Buffer{{x, x2}, {y, y2}, {z, z2}} {
		if !bytes.Equal(pair[0].Bytes(), pair[1].Bytes()) {
			t.Errorf("loaded %v, saved %v", pair[1].Bytes(), pair[0].Bytes())
		}
	}
}

func TestStatsWhileTheSaveIsHeldInCommittingShowItUncommitted(t *testing.T) {
	ctx := singleRankContext(t)
	data := newTestBuffer(t, DtypeF32, progressElements)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func(p Progress) {
		if p.Phase == PhaseCommitting {
			once.Do(func() { close(held) })
			<-release // on the library's save thread: the save cannot commit until released
		}
	}
	request, err := ctx.Save(progressState(t, data), filepath.Join(t.TempDir(), "c"), &SaveOptions{Progress: hold})
	if err != nil {
		t.Fatal(err)
	}
	defer request.Close()
	<-held
	running, err := request.Stats()
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if running.Committed || running.BytesCommitted != 0 || running.BytesWritten != uint64(data.Size()) {
		t.Errorf("a save held before its commit: %+v", running)
	}
	if err := request.Wait(0); err != nil {
		t.Fatal(err)
	}
}

func TestSaveAndLoadProgressRunThroughTheirPhases(t *testing.T) {
	ctx := singleRankContext(t)
	dir := filepath.Join(t.TempDir(), "c")
	data := newTestBuffer(t, DtypeF32, progressElements)
	var saving recorder
	request, err := ctx.Save(progressState(t, data), dir, &SaveOptions{Progress: saving.report})
	if err != nil {
		t.Fatal(err)
	}
	if err := request.Wait(0); err != nil {
		t.Fatal(err)
	}
	request.Close()
	bytes := uint64(data.Size())
	want := []Phase{PhasePlanning, PhaseStaging, PhaseWriting, PhaseCommitting, PhaseCommitted}
	if got := saving.phases(t); !samePhases(got, want) {
		t.Errorf("save phases %v, expected %v", got, want)
	}
	if last := saving.last(); last != (Progress{PhaseCommitted, bytes, bytes}) {
		t.Errorf("the save's last report: %+v", last)
	}

	var loading recorder
	loaded := newTestBuffer(t, DtypeF32, progressElements)
	if err := ctx.Load(progressState(t, loaded), dir, &LoadOptions{Progress: loading.report}); err != nil {
		t.Fatal(err)
	}
	want = []Phase{PhasePlanning, PhaseReading, PhaseLoaded}
	if got := loading.phases(t); !samePhases(got, want) {
		t.Errorf("load phases %v, expected %v", got, want)
	}
	if last := loading.last(); last != (Progress{PhaseLoaded, bytes, bytes}) || last.Phase.String() != "loaded" {
		t.Errorf("the load's last report: %+v", last)
	}
}
