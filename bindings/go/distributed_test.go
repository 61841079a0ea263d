package ckpt

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveOnTwoRanksCommitsACheckpoint(t *testing.T) {
	reader := openSaved(t)
	info, err := reader.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.WorldSize != 2 || info.TensorCount != 3 || info.CommonCount != 1 || info.MetadataCount != 1 {
		t.Errorf("info = %+v, expected world 2, 3 tensors, 1 common entry, 1 metadata entry", info)
	}
	if err := reader.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestSaveOnTwoRanksCheckingReplicasCommitsAndLoadsWhole(t *testing.T) {
	dir := filepath.Join(testRoot, "two-ranks-checking-replicas")
	if err := runRanks("save-checking-replicas", 2, dir); err != nil {
		t.Fatal(err)
	}
	if err := runRanks("load-whole", 1, dir); err != nil {
		t.Fatal(err)
	}
}

func TestLoadOnThreeRanksReshardsByColumns(t *testing.T) {
	if err := runRanks("load-columns", 3, savedCheckpoint(t)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadOnOneRankReadsEverythingWhole(t *testing.T) {
	if err := runRanks("load-whole", 1, savedCheckpoint(t)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadOfMissingKeyFailsWithMismatchNamingTheKey(t *testing.T) {
	dir := savedCheckpoint(t)
	ctx := singleRankContext(t)
	state := newTestState(t)
	data := newTestBuffer(t, DtypeF32, 2)
	if err := state.AddTensor(TensorShard{Key: "no.such.tensor", Dtype: DtypeF32, GlobalShape: []uint64{2},
		Data: data}); err != nil {
		t.Fatal(err)
	}
	err := ctx.Load(state, dir, &LoadOptions{UnexpectedKeys: StrictIgnore})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "no.such.tensor") {
		t.Errorf("Load = %v, expected a mismatch naming no.such.tensor", err)
	}
}

func TestLoadIgnoringMissingKeysSucceeds(t *testing.T) {
	dir := savedCheckpoint(t)
	ctx := singleRankContext(t)
	state := newTestState(t)
	data := newTestBuffer(t, DtypeF32, 2)
	if err := state.AddTensor(TensorShard{Key: "no.such.tensor", Dtype: DtypeF32, GlobalShape: []uint64{2},
		Data: data}); err != nil {
		t.Fatal(err)
	}
	options := &LoadOptions{MissingKeys: StrictIgnore, UnexpectedKeys: StrictIgnore}
	if err := ctx.Load(state, dir, options); err != nil {
		t.Errorf("Load = %v, expected the missing key to be ignored", err)
	}
}

func TestSaveOverCommittedCheckpointFailsWithAlreadyExists(t *testing.T) {
	ctx := singleRankContext(t)
	dir := filepath.Join(t.TempDir(), "ckpt")
	saveScalar(t, ctx, dir)
	state := newTestState(t)
	_, err := ctx.Save(state, dir, nil)
	if !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second Save = %v, expected ErrAlreadyExists", err)
	}
}

func TestSaveRequestReportsCompletion(t *testing.T) {
	ctx := singleRankContext(t)
	state := newTestState(t)
	if err := state.AddCommon("step", stepBytes(7)); err != nil {
		t.Fatal(err)
	}
	request, err := ctx.Save(state, filepath.Join(t.TempDir(), "ckpt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := request.Wait(0); err != nil {
		t.Errorf("Wait = %v", err)
	}
	if done, err := request.Test(); !done || err != nil {
		t.Errorf("Test = %v, %v; expected done without error", done, err)
	}
	request.Close()
	if _, err := request.Test(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Test after Close = %v, expected ErrInvalidArgument", err)
	}
}

func TestIncrementalSaveWritesOnlyTheChangedTensorAndLoadsTheNewValues(t *testing.T) {
	ctx := singleRankContext(t)
	root := t.TempDir()
	full, changes := filepath.Join(root, "a"), filepath.Join(root, "b")
	weight, bias := newTestBuffer(t, DtypeF32, 1<<20), newTestBuffer(t, DtypeF64, 5)
	for i := range weight.Float32s() {
		weight.Float32s()[i] = float32(i)
	}
	for i := range bias.Float64s() {
		bias.Float64s()[i] = float64(i) - 2.5
	}
	if err := saveWeightAndBias(t, ctx, full, weight, bias, &SaveOptions{Incremental: true}); err != nil {
		t.Fatal(err)
	}
	for i := range bias.Float64s() {
		bias.Float64s()[i] *= 2
	}
	incremental := &SaveOptions{Incremental: true, Base: full}
	if err := saveWeightAndBias(t, ctx, changes, weight, bias, incremental); err != nil {
		t.Fatal(err)
	}
	writtenInFull, writtenChanges := directoryBytes(t, filepath.Join(full, "data")),
		directoryBytes(t, filepath.Join(changes, "data"))
	if writtenChanges*100 >= writtenInFull {
		t.Errorf("the incremental save wrote %d bytes, the full one %d", writtenChanges, writtenInFull)
	}

	weightBack, biasBack := newTestBuffer(t, DtypeF32, 1<<20), newTestBuffer(t, DtypeF64, 5)
	state := newTestState(t)
	for _, shard := range weightAndBias(weightBack, biasBack) {
		if err := state.AddTensor(shard); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctx.Load(state, changes, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(weightBack.Bytes(), weight.Bytes()) || !bytes.Equal(biasBack.Bytes(), bias.Bytes()) {
		t.Errorf("the incremental checkpoint loads other values: bias %v, expected %v", biasBack.Float64s(),
			bias.Float64s())
	}

	refused := filepath.Join(root, "c")
	err := saveWeightAndBias(t, ctx, refused, weight, bias, &SaveOptions{Base: full})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "CKPT_SAVE_INCREMENTAL") {
		t.Errorf("a Base without Incremental: %v, expected ErrInvalidArgument naming CKPT_SAVE_INCREMENTAL", err)
	}
	if _, err := os.Stat(refused); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused save left %s: %v", refused, err)
	}
}

// weightLike is a weight-like value: small, of both signs, spread over a few binary orders of magnitude.
func weightLike(i uint64) float32 {
	h := (i + 1) * 0x9E3779B97F4A7C15
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 32
	return float32((float64(h%20001) - 10000.0) * 1e-6)
}

// compressible is "w" (2 MiB of BF16 weights), "m" (2 MiB of F32 weights) and "ids" (2 MiB of I32 in a repeating
// pattern), each [512, 1024] but "w" [1024, 1024].
type compressible struct{ w, m, ids *Buffer }

func newCompressible(t *testing.T) compressible {
	const elements = 512 * 1024
	c := compressible{newTestBuffer(t, DtypeBF16, 2*elements), newTestBuffer(t, DtypeF32, elements),
		newTestBuffer(t, DtypeI32, elements)}
	for i := range c.w.Uint16s() {
		c.w.Uint16s()[i] = uint16(math.Float32bits(weightLike(uint64(i))) >> 16)
	}
	for i := range c.m.Float32s() {
		c.m.Float32s()[i] = weightLike(uint64(i + 2*elements))
	}
	for i := range c.ids.Int32s() {
		c.ids.Int32s()[i] = int32(i * 7 % 1000)
	}
	return c
}

func (c compressible) bytes() int64 { return int64(c.w.Size() + c.m.Size() + c.ids.Size()) }

// shards are the whole tensors over c's Buffers, "w"'s flagged compressed if compressW.
func (c compressible) shards(compressW bool) []TensorShard {
	return []TensorShard{
		{Key: "w", Dtype: DtypeBF16, GlobalShape: []uint64{1024, 1024}, Compress: compressW, Data: c.w},
		{Key: "m", Dtype: DtypeF32, GlobalShape: []uint64{512, 1024}, Data: c.m},
		{Key: "ids", Dtype: DtypeI32, GlobalShape: []uint64{512, 1024}, Data: c.ids},
	}
}

// save saves c as dir with options and waits for the commit.
func (c compressible) save(t *testing.T, ctx *Context, dir string, compressW bool, options *SaveOptions) error {
	t.Helper()
	state := newTestState(t)
	for _, shard := range c.shards(compressW) {
		if err := state.AddTensor(shard); err != nil {
			t.Fatal(err)
		}
	}
	request, err := ctx.Save(state, dir, options)
	if err != nil {
		return err
	}
	defer request.Close()
	return request.Wait(0)
}

// checkLoadsExactly loads dir into fresh Buffers and compares every byte with c's.
func (c compressible) checkLoadsExactly(t *testing.T, ctx *Context, dir string) {
	t.Helper()
	back := compressible{newTestBuffer(t, DtypeBF16, c.w.Size()/2), newTestBuffer(t, DtypeF32, c.m.Size()/4),
		newTestBuffer(t, DtypeI32, c.ids.Size()/4)}
	state := newTestState(t)
	for _, shard := range back.shards(false) {
		if err := state.AddTensor(shard); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctx.Load(state, dir, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.w.Bytes(), c.w.Bytes()) || !bytes.Equal(back.m.Bytes(), c.m.Bytes()) ||
		!bytes.Equal(back.ids.Bytes(), c.ids.Bytes()) {
		t.Errorf("%s loads other values", dir)
	}
}

// formatMajor is the format of the checkpoint at dir, as its reader says.
func formatMajor(t *testing.T, dir string) uint32 {
	t.Helper()
	reader, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	info, err := reader.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Verify(); err != nil {
		t.Errorf("verify %s: %v", dir, err)
	}
	return info.FormatMajor
}

func TestCompressedSaveLoadsExactlyAsFormat3InFewerBytesAndIsRefusedInPlace(t *testing.T) {
	ctx := singleRankContext(t)
	root := t.TempDir()
	c := newCompressible(t)
	plain, all, wOnly := filepath.Join(root, "plain"), filepath.Join(root, "all"), filepath.Join(root, "w")
	for _, save := range []struct {
		dir       string
		compressW bool
		options   *SaveOptions
	}{{plain, false, nil}, {all, false, &SaveOptions{Compress: true}}, {wOnly, true, nil}} {
		if err := c.save(t, ctx, save.dir, save.compressW, save.options); err != nil {
			t.Fatal(err)
		}
		c.checkLoadsExactly(t, ctx, save.dir)
	}
	if format := formatMajor(t, plain); format >= 3 {
		t.Errorf("an uncompressed checkpoint is format %d", format)
	}
	if formatAll, formatW := formatMajor(t, all), formatMajor(t, wOnly); formatAll != 3 || formatW != 3 {
		t.Errorf("compressed checkpoints are format %d and %d, expected 3", formatAll, formatW)
	}
	plainBytes, allBytes, wOnlyBytes := directoryBytes(t, filepath.Join(plain, "data")),
		directoryBytes(t, filepath.Join(all, "data")), directoryBytes(t, filepath.Join(wOnly, "data"))
	if plainBytes != c.bytes() || allBytes >= c.bytes()*3/4 {
		t.Errorf("%d bytes of data: %d written, %d compressed", c.bytes(), plainBytes, allBytes)
	}
	// BF16 weights shrink by about 1.5x: "w" alone saves a sixth of its bytes or more.
	if plainBytes-wOnlyBytes <= int64(c.w.Size())/6 || allBytes >= wOnlyBytes {
		t.Errorf("\"w\" compressed alone: %d bytes, against %d uncompressed and %d all compressed", wOnlyBytes,
			plainBytes, allBytes)
	}

	refused := filepath.Join(root, "in-place")
	err := c.save(t, ctx, refused, false, &SaveOptions{Compress: true, InPlace: true})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "CKPT_SAVE_COMPRESS") {
		t.Errorf("Compress with InPlace: %v, expected ErrInvalidArgument naming CKPT_SAVE_COMPRESS", err)
	}
	if _, err := os.Stat(refused); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused save left %s: %v", refused, err)
	}
	// A shard's flag alone is no refusal: a save in place stores the tensor as it is.
	inPlace := filepath.Join(root, "w-in-place")
	if err := c.save(t, ctx, inPlace, true, &SaveOptions{InPlace: true}); err != nil {
		t.Fatal(err)
	}
	if format := formatMajor(t, inPlace); format >= 3 {
		t.Errorf("a save in place is format %d", format)
	}
	c.checkLoadsExactly(t, ctx, inPlace)
}

// weightAndBias are the shards of a whole "weight" (F32, 64 rows of 64 KiB) and "bias" (F64 [5]).
func weightAndBias(weight, bias *Buffer) []TensorShard {
	return []TensorShard{
		{Key: "weight", Dtype: DtypeF32, GlobalShape: []uint64{64, 1 << 14}, Data: weight},
		{Key: "bias", Dtype: DtypeF64, GlobalShape: []uint64{5}, Data: bias},
	}
}

// saveWeightAndBias saves weightAndBias as `dir` with `options` and waits for the commit.
func saveWeightAndBias(t *testing.T, ctx *Context, dir string, weight, bias *Buffer, options *SaveOptions) error {
	t.Helper()
	state := newTestState(t)
	for _, shard := range weightAndBias(weight, bias) {
		if err := state.AddTensor(shard); err != nil {
			t.Fatal(err)
		}
	}
	request, err := ctx.Save(state, dir, options)
	if err != nil {
		return err
	}
	defer request.Close()
	return request.Wait(0)
}

// directoryBytes is the size of every file under `dir`.
func directoryBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(_ string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() {
			return err
		}
		info, err := entry.Info()
		if err == nil {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

func TestContextCloseFreesUnclosedRequests(t *testing.T) {
	ctx := singleRankContext(t)
	state := newTestState(t)
	request, err := ctx.Save(state, filepath.Join(t.TempDir(), "ckpt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx.Close()
	if err := request.Wait(0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Wait after the context's Close = %v, expected ErrInvalidArgument", err)
	}
	request.Close()
}

func TestSingleRankContextReportsItsIdentity(t *testing.T) {
	ctx := singleRankContext(t)
	if ctx.Rank() != 0 || ctx.WorldSize() != 1 || ctx.LocalRank() != 0 {
		t.Errorf("rank %d, world %d, local %d; expected 0, 1, 0", ctx.Rank(), ctx.WorldSize(), ctx.LocalRank())
	}
}

func TestContextOptionsOutOfRangeAreRefused(t *testing.T) {
	for _, opts := range []Options{{Rank: 2, WorldSize: 2}, {Rank: 1}, {StorePort: 70000}, {Timeout: -1}} {
		if _, err := NewContext(opts); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("NewContext(%+v) = %v, expected ErrInvalidArgument", opts, err)
		}
	}
}

func TestClosedContextRefusesCalls(t *testing.T) {
	ctx := singleRankContext(t)
	ctx.Close()
	if err := ctx.Load(newTestState(t), savedCheckpoint(t), nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Load on a closed context = %v, expected ErrInvalidArgument", err)
	}
}

// singleRankContext is a one-rank job in this process, whatever the environment says.
func singleRankContext(t *testing.T) *Context {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := NewContext(Options{Rank: 0, WorldSize: 1, StoreHost: "127.0.0.1", StorePort: port,
		ArenaBytes: testArenaBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

func newTestState(t *testing.T) *State {
	t.Helper()
	state, err := NewState()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { state.Close() })
	return state
}

func newTestBuffer(t *testing.T, dtype Dtype, elements int) *Buffer {
	t.Helper()
	b, err := NewBufferFor(dtype, elements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// saveScalar saves a checkpoint holding one F64 scalar.
func saveScalar(t *testing.T, ctx *Context, dir string) {
	t.Helper()
	state := newTestState(t)
	data := newTestBuffer(t, DtypeF64, 1)
	data.Float64s()[0] = 2.5
	if err := state.AddTensor(TensorShard{Key: "scalar", Dtype: DtypeF64, Data: data}); err != nil {
		t.Fatal(err)
	}
	request, err := ctx.Save(state, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer request.Close()
	if err := request.Wait(0); err != nil {
		t.Fatal(err)
	}
}

func openSaved(t *testing.T) *Reader {
	t.Helper()
	reader, err := Open(savedCheckpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	return reader
}
