package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The checkpoint the export tests read: "weight" F32 [4, 3] saved as two chunks (rows 0-1 and rows 2-3), "bias"
// F64 [3] whole, and the metadata "framework".
var exportWeightShape = []uint64{4, 3}

const exportBiasLength = 3

// saveExportSource saves that checkpoint from one rank and returns its path.
func saveExportSource(t *testing.T) string {
	t.Helper()
	state := newTestState(t)
	rows := exportWeightShape[0] / 2
	for _, first := range []uint64{0, rows} {
		data := newTestBuffer(t, DtypeF32, int(rows*exportWeightShape[1]))
		copy(data.Float32s(), exportWeightRows(first, first+rows))
		if err := state.AddTensor(TensorShard{Key: "weight", Dtype: DtypeF32, GlobalShape: exportWeightShape,
			LocalShape: []uint64{rows, exportWeightShape[1]}, GlobalOffset: []uint64{first, 0}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	bias := newTestBuffer(t, DtypeF64, exportBiasLength)
	for i := range bias.Float64s() {
		bias.Float64s()[i] = biasValue(uint64(i))
	}
	if err := state.AddTensor(TensorShard{Key: "bias", Dtype: DtypeF64, GlobalShape: []uint64{exportBiasLength},
		Data: bias}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "checkpoint")
	request, err := singleRankContext(t).Save(state, path, &SaveOptions{Metadata: map[string]string{"framework": "go"}})
	if err != nil {
		t.Fatal(err)
	}
	defer request.Close()
	if err := request.Wait(0); err != nil {
		t.Fatal(err)
	}
	return path
}

// exportWeightRows are the row-major values of rows [first, end) of the weight.
func exportWeightRows(first, end uint64) []float32 {
	var values []float32
	for row := first; row < end; row++ {
		for col := uint64(0); col < exportWeightShape[1]; col++ {
			values = append(values, weightValue(row, col))
		}
	}
	return values
}

// safetensorsEntry is one tensor of a safetensors header.
type safetensorsEntry struct {
	Dtype       string    `json:"dtype"`
	Shape       []uint64  `json:"shape"`
	DataOffsets [2]uint64 `json:"data_offsets"`
}

// safetensorsFile is a safetensors file read back: its header's tensors and metadata, and its data.
type safetensorsFile struct {
	tensors  map[string]safetensorsEntry
	metadata map[string]string
	data     []byte
}

// readSafetensors parses the file at path: the 8-byte little-endian length of the JSON header, the header, then
// the data, which ckpt starts at a multiple of 4096 bytes.
func readSafetensors(t *testing.T, path string) safetensorsFile {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(content) < 8 {
		t.Fatalf("%s: %d bytes, no header length", path, len(content))
	}
	dataStart := 8 + binary.LittleEndian.Uint64(content)
	if dataStart > uint64(len(content)) || dataStart%4096 != 0 {
		t.Fatalf("%s: the data starts at %d of %d bytes, expected a multiple of 4096", path, dataStart, len(content))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(content[8:dataStart], &header); err != nil {
		t.Fatalf("%s: the header: %v", path, err)
	}
	file := safetensorsFile{tensors: map[string]safetensorsEntry{}, data: content[dataStart:]}
	for key, value := range header {
		if key == "__metadata__" {
			err = json.Unmarshal(value, &file.metadata)
		} else {
			var entry safetensorsEntry
			err = json.Unmarshal(value, &entry)
			file.tensors[key] = entry
		}
		if err != nil {
			t.Fatalf("%s: %q: %v", path, key, err)
		}
	}
	return file
}

// tensor checks that `key` has `dtype` and `shape` and returns its data.
func (f safetensorsFile) tensor(t *testing.T, key, dtype string, shape []uint64) []byte {
	t.Helper()
	entry, ok := f.tensors[key]
	if !ok || entry.Dtype != dtype || !reflect.DeepEqual(entry.Shape, shape) {
		t.Fatalf("tensor %q: %+v (present: %v), expected %s %v", key, entry, ok, dtype, shape)
	}
	if entry.DataOffsets[0] > entry.DataOffsets[1] || entry.DataOffsets[1] > uint64(len(f.data)) {
		t.Fatalf("tensor %q: offsets %v outside the %d bytes of data", key, entry.DataOffsets, len(f.data))
	}
	return f.data[entry.DataOffsets[0]:entry.DataOffsets[1]]
}

func littleEndianF32(values []float32) []byte {
	out := make([]byte, 0, 4*len(values))
	for _, value := range values {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(value))
	}
	return out
}

func TestExportWritesEachTensorWholeWithItsDtypeShapeAndBytes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.safetensors")
	if err := Export(saveExportSource(t), out, nil); err != nil {
		t.Fatal(err)
	}
	file := readSafetensors(t, out)
	if want := map[string]string{"format": "pt", "framework": "go"}; !reflect.DeepEqual(file.metadata, want) {
		t.Errorf("metadata %v, expected %v", file.metadata, want)
	}
	weight := littleEndianF32(exportWeightRows(0, exportWeightShape[0]))
	if got := file.tensor(t, "weight", "F32", exportWeightShape); !bytes.Equal(got, weight) {
		t.Errorf("weight bytes %x, expected %x", got, weight)
	}
	var bias []byte
	for i := uint64(0); i < exportBiasLength; i++ {
		bias = binary.LittleEndian.AppendUint64(bias, math.Float64bits(biasValue(i)))
	}
	if got := file.tensor(t, "bias", "F64", []uint64{exportBiasLength}); !bytes.Equal(got, bias) {
		t.Errorf("bias bytes %x, expected %x", got, bias)
	}
	if len(file.data) != len(weight)+len(bias) {
		t.Errorf("%d bytes of data, expected %d", len(file.data), len(weight)+len(bias))
	}
}

func TestExportConvertsF32ToBF16OnRequestHalvingTheData(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.safetensors")
	if err := Export(saveExportSource(t), out, &ExportOptions{Keys: []string{"weight"}, Dtype: DtypeBF16}); err != nil {
		t.Fatal(err)
	}
	file := readSafetensors(t, out)
	if _, ok := file.tensors["bias"]; ok || len(file.tensors) != 1 {
		t.Errorf("tensors %v, expected only weight", file.tensors)
	}
	// Every weight value has at most 8 significant bits, so its BF16 is exactly the top half of its F32 bits.
	var bf16 []byte
	for _, value := range exportWeightRows(0, exportWeightShape[0]) {
		bf16 = binary.LittleEndian.AppendUint16(bf16, uint16(math.Float32bits(value)>>16))
	}
	if got := file.tensor(t, "weight", "BF16", exportWeightShape); !bytes.Equal(got, bf16) {
		t.Errorf("weight bytes %x, expected %x", got, bf16)
	}
	if want := int(product(exportWeightShape)) * 2; len(file.data) != want {
		t.Errorf("%d bytes of data, expected %d", len(file.data), want)
	}
}

func TestExportOfAKeyTheCheckpointLacksFailsWithNotFound(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.safetensors")
	err := Export(saveExportSource(t), out, &ExportOptions{Keys: []string{"absent"}})
	var ckptErr *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ckptErr) || !strings.Contains(ckptErr.Message, "absent") {
		t.Errorf("Export = %v, expected ErrNotFound naming absent", err)
	}
	if _, statErr := os.Stat(out); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("a failed export left %s (%v)", out, statErr)
	}
}

func TestExportSharedByTwoPartsWritesEachFileOnce(t *testing.T) {
	checkpoint, out := saveExportSource(t), filepath.Join(t.TempDir(), "hf")
	first := filepath.Join(out, "model-00001-of-00002.safetensors")
	second := filepath.Join(out, "model-00002-of-00002.safetensors")
	index := filepath.Join(out, "model.safetensors.index.json")
	// One byte per file at most: each tensor gets a file of its own, in key order (bias, then weight).
	if err := Export(checkpoint, out, &ExportOptions{MaxShardBytes: 1, PartIndex: 0, PartCount: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(second); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("part 0 of 2 wrote the second file (%v)", err)
	}
	if err := Export(checkpoint, out, &ExportOptions{MaxShardBytes: 1, PartIndex: 1, PartCount: 2}); err != nil {
		t.Fatal(err)
	}
	readSafetensors(t, first).tensor(t, "bias", "F64", []uint64{exportBiasLength})
	readSafetensors(t, second).tensor(t, "weight", "F32", exportWeightShape)
	var indexJSON struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if content, err := os.ReadFile(index); err != nil || json.Unmarshal(content, &indexJSON) != nil {
		t.Fatalf("the index: %v", err)
	}
	want := map[string]string{"bias": filepath.Base(first), "weight": filepath.Base(second)}
	if !reflect.DeepEqual(indexJSON.WeightMap, want) {
		t.Errorf("weight_map %v, expected %v", indexJSON.WeightMap, want)
	}
}

func TestExportWithNoShardLimitWritesOneFileToADirectory(t *testing.T) {
	out := filepath.Join(t.TempDir(), "hf")
	if err := Export(saveExportSource(t), out, &ExportOptions{MaxShardBytes: NoShardLimit}); err != nil {
		t.Fatal(err)
	}
	if file := readSafetensors(t, filepath.Join(out, "model.safetensors")); len(file.tensors) != 2 {
		t.Errorf("tensors %v, expected weight and bias", file.tensors)
	}
}

func TestExportOptionsOutOfRangeAreRefused(t *testing.T) {
	for _, opts := range []ExportOptions{{MaxShardBytes: -2}, {PartIndex: 2, PartCount: 2}, {PartIndex: 1},
		{PartCount: -1}, {Keys: []string{"nul\x00key"}}} {
		if err := Export("unused", "unused.safetensors", &opts); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Export with %+v = %v, expected ErrInvalidArgument", opts, err)
		}
	}
}
