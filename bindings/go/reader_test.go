package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"testing"
)

func TestReaderListsTensorsInKeyOrder(t *testing.T) {
	tensors, err := openSaved(t).Tensors()
	if err != nil {
		t.Fatal(err)
	}
	want := []TensorInfo{
		{Key: "bias", Dtype: DtypeF64, Shape: biasShape},
		{Key: "moments", Dtype: DtypeF32, Shape: momentsShape},
		{Key: "weight", Dtype: DtypeF32, Shape: weightShape},
	}
	if len(tensors) != len(want) {
		t.Fatalf("tensors = %+v, expected %d", tensors, len(want))
	}
	for i, tensor := range tensors {
		if tensor.Key != want[i].Key || tensor.Dtype != want[i].Dtype || !reflect.DeepEqual(tensor.Shape, want[i].Shape) ||
			tensor.ChunkCount == 0 {
			t.Errorf("tensor %d = %+v, expected %+v with chunks", i, tensor, want[i])
		}
	}
}

func TestReaderChunksOfRowSplitTensorCoverItsRows(t *testing.T) {
	chunks, err := openSaved(t).Chunks("weight")
	if err != nil {
		t.Fatal(err)
	}
	var rows uint64
	for _, chunk := range chunks {
		if len(chunk.Shape) != 2 || chunk.Shape[1] != weightShape[1] || chunk.File == "" ||
			chunk.ByteLength != product(chunk.Shape)*4 {
			t.Errorf("chunk %+v does not hold whole F32 rows", chunk)
		}
		rows += chunk.Shape[0]
	}
	if rows != weightShape[0] {
		t.Errorf("chunks %+v hold %d rows, expected %d", chunks, rows, weightShape[0])
	}
}

func TestReaderChunksOfUnknownTensorFailWithNotFound(t *testing.T) {
	if _, err := openSaved(t).Chunks("absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Chunks = %v, expected ErrNotFound", err)
	}
}

func TestReaderReadBoxAcrossChunksIntoBuffer(t *testing.T) {
	offset, shape := []uint64{2, 1}, []uint64{2, 3} // rows 2 and 3 lie in different ranks' chunks
	dst := newTestBuffer(t, DtypeF32, int(product(shape)))
	if err := openSaved(t).ReadBox("weight", offset, shape, dst.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := checkBox("weight", dst.Float32s(), offset, shape,
		func(at []uint64) float32 { return weightValue(at[0], at[1]) }); err != nil {
		t.Error(err)
	}
}

func TestReaderReadBoxIntoGoMemory(t *testing.T) {
	dst := make([]byte, 8*biasShape[0])
	if err := openSaved(t).ReadBox("bias", []uint64{0}, biasShape, dst); err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < biasShape[0]; i++ {
		if got := math.Float64frombits(binary.LittleEndian.Uint64(dst[8*i:])); got != biasValue(i) {
			t.Errorf("bias[%d] = %v, expected %v", i, got, biasValue(i))
		}
	}
}

func TestReaderReadBoxOfWrongSizeFailsWithInvalidArgument(t *testing.T) {
	err := openSaved(t).ReadBox("bias", []uint64{0}, biasShape, make([]byte, 3))
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ReadBox = %v, expected ErrInvalidArgument", err)
	}
}

func TestReaderCommonAndMetadata(t *testing.T) {
	reader := openSaved(t)
	if step, err := reader.Common("step"); err != nil || !bytes.Equal(step, stepBytes(savedStep)) {
		t.Errorf("Common(step) = %x, %v; expected %x", step, err, stepBytes(savedStep))
	}
	entries, err := reader.CommonEntries()
	if err != nil || len(entries) != 1 || !bytes.Equal(entries["step"], stepBytes(savedStep)) {
		t.Errorf("CommonEntries = %v, %v; expected only step", entries, err)
	}
	if framework, err := reader.Metadata("framework"); err != nil || framework != savedFramework {
		t.Errorf("Metadata(framework) = %q, %v; expected %q", framework, err, savedFramework)
	}
	if _, err := reader.Metadata("absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Metadata(absent) = %v, expected ErrNotFound", err)
	}
	metadata, err := reader.MetadataEntries()
	if err != nil || len(metadata) != 1 || metadata[0] != [2]string{"framework", savedFramework} {
		t.Errorf("MetadataEntries = %v, %v; expected only framework", metadata, err)
	}
}

func TestOpenOfMissingDirectoryFailsWithNotFound(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "absent"))
	var ckptErr *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ckptErr) || ckptErr.Message == "" {
		t.Errorf("Open = %v, expected ErrNotFound with a message", err)
	}
}

func TestClosedReaderRefusesCalls(t *testing.T) {
	reader, err := Open(savedCheckpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	reader.Close()
	reader.Close()
	if _, err := reader.Info(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Info after Close = %v, expected ErrInvalidArgument", err)
	}
}
