package ckpt

import (
	"errors"
	"strings"
	"testing"
)

func TestErrorMatchesSentinelOfItsStatusOnly(t *testing.T) {
	err := error(&Error{Status: StatusCorrupt, Message: "tensor 'w': checksum of block 3 in data/0-0.bin"})
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is misclassifies %v", err)
	}
	if !strings.Contains(err.Error(), "tensor 'w'") {
		t.Errorf("Error() = %q lacks the message", err.Error())
	}
	if !strings.HasPrefix(ErrCorrupt.Error(), "ckpt: CKPT_E_CORRUPT") {
		t.Errorf("a sentinel reads %q, expected the status name", ErrCorrupt.Error())
	}
}

func TestDtypeSizesAndNamesComeFromTheLibrary(t *testing.T) {
	cases := []struct {
		dtype Dtype
		size  int
		name  string
	}{{DtypeBool, 1, "BOOL"}, {DtypeBF16, 2, "BF16"}, {DtypeF32, 4, "F32"}, {DtypeC64, 8, "C64"}, {Dtype(99), 0, "?"}}
	for _, c := range cases {
		if c.dtype.Size() != c.size || c.dtype.String() != c.name {
			t.Errorf("dtype %d: size %d name %q, expected %d %q", int32(c.dtype), c.dtype.Size(), c.dtype, c.size, c.name)
		}
	}
}

func TestBufferViewsAliasTheSameZeroedMemory(t *testing.T) {
	b := newTestBuffer(t, DtypeF32, 3)
	if b.Size() != 12 || len(b.Float32s()) != 3 || len(b.Float64s()) != 1 || b.Float32s()[2] != 0 {
		t.Fatalf("a 3-element F32 buffer has size %d and views of %d and %d", b.Size(), len(b.Float32s()),
			len(b.Float64s()))
	}
	b.Uint32s()[1] = 0x3f800000
	if b.Float32s()[1] != 1 {
		t.Errorf("the F32 view reads %v after writing the bits of 1.0 through the U32 view", b.Float32s()[1])
	}
}

func TestNewBufferForRefusesUnknownDtypeAndNegativeSize(t *testing.T) {
	if _, err := NewBufferFor(Dtype(99), 1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unknown dtype: %v", err)
	}
	if _, err := NewBuffer(-1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative size: %v", err)
	}
}

func TestClosedBufferStaysValidWhileAStateHoldsIt(t *testing.T) {
	state, err := NewState()
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	b := newTestBuffer(t, DtypeF32, 2)
	if err := state.AddTensor(TensorShard{Key: "x", Dtype: DtypeF32, GlobalShape: []uint64{2}, Data: b}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if b.data == nil {
		t.Fatal("Close freed a buffer that an open state still holds")
	}
	if b.Float32s() != nil {
		t.Error("a closed buffer still gives out views")
	}
	state.Close()
	if b.data != nil {
		t.Error("closing the last state holding a closed buffer did not free it")
	}
}

func TestClosedBufferCannotBeRegistered(t *testing.T) {
	b := newTestBuffer(t, DtypeU8, 4)
	b.Close()
	err := newTestState(t).AddTensor(TensorShard{Key: "x", Dtype: DtypeU8, GlobalShape: []uint64{4}, Data: b})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("AddTensor = %v, expected ErrInvalidArgument naming x", err)
	}
}

func TestAddTensorWithWrongDataSizeFailsNamingTheKey(t *testing.T) {
	err := newTestState(t).AddTensor(TensorShard{Key: "layer.7", Dtype: DtypeF32, GlobalShape: []uint64{4},
		Data: newTestBuffer(t, DtypeF32, 3)})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "layer.7") {
		t.Errorf("AddTensor = %v, expected ErrInvalidArgument naming layer.7", err)
	}
}

func TestAddTensorWithMismatchedShapeLengthsIsRefused(t *testing.T) {
	err := newTestState(t).AddTensor(TensorShard{Key: "w", Dtype: DtypeF32, GlobalShape: []uint64{4, 4},
		LocalShape: []uint64{4}, Data: newTestBuffer(t, DtypeF32, 4)})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddTensor = %v, expected ErrInvalidArgument", err)
	}
}

func TestKeyWithNulByteIsRefused(t *testing.T) {
	err := newTestState(t).AddCommon("step\x00hidden", []byte{1})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddCommon = %v, expected ErrInvalidArgument", err)
	}
}

func TestStateCommonOfAbsentKeyFailsWithNotFound(t *testing.T) {
	state := newTestState(t)
	if _, err := state.Common("absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Common = %v, expected ErrNotFound", err)
	}
}

func TestClosedStateRefusesCalls(t *testing.T) {
	state, err := NewState()
	if err != nil {
		t.Fatal(err)
	}
	state.Close()
	state.Close()
	if err := state.AddCommon("step", []byte{1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddCommon after Close = %v, expected ErrInvalidArgument", err)
	}
}

func TestLoadOptionsRefuseUnknownStrictness(t *testing.T) {
	ctx := singleRankContext(t)
	err := ctx.Load(newTestState(t), savedCheckpoint(t), &LoadOptions{MissingKeys: Strictness(9)})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Load = %v, expected ErrInvalidArgument", err)
	}
}
