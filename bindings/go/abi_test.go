package ckpt

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// abiTable is the ABI table that the C build writes (build/abi/ckpt_abi.tsv, from tools/abi_table_source.py).
type abiTable struct {
	structs   map[string][2]uintptr            // name -> size, alignment
	fields    map[string]map[string][2]uintptr // struct -> field -> offset, size
	constants map[string]int64
}

// readABITable reads the table named by CKPT_ABI_TABLE, which ctest sets; `go test` alone cannot check the ABI.
func readABITable(t *testing.T) abiTable {
	path := os.Getenv("CKPT_ABI_TABLE")
	if path == "" {
		t.Skip("CKPT_ABI_TABLE is not set: run through ctest, or point it at build/abi/ckpt_abi.tsv")
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatalf("the ABI table: %v", err)
	}
	defer file.Close()
	table := abiTable{map[string][2]uintptr{}, map[string]map[string][2]uintptr{}, map[string]int64{}}
	number := func(text string) int64 {
		value, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return value
	}
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		cells := strings.Split(lines.Text(), "\t")
		switch {
		case strings.HasPrefix(cells[0], "#"):
		case cells[0] == "struct" && len(cells) == 4:
			table.structs[cells[1]] = [2]uintptr{uintptr(number(cells[2])), uintptr(number(cells[3]))}
			table.fields[cells[1]] = map[string][2]uintptr{}
		case cells[0] == "field" && len(cells) == 5:
			table.fields[cells[1]][cells[2]] = [2]uintptr{uintptr(number(cells[3])), uintptr(number(cells[4]))}
		case cells[0] == "constant" && len(cells) == 3:
			table.constants[cells[1]] = number(cells[2])
		default:
			t.Fatalf("%s: cannot read %q", path, lines.Text())
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return table
}

func TestEveryStructHasTheTablesLayout(t *testing.T) {
	table := readABITable(t)
	seen := map[string]bool{}
	for _, s := range cStructs() {
		seen[s.name] = true
		want, ok := table.structs[s.name]
		if !ok {
			t.Errorf("%s: not in the ABI table", s.name)
			continue
		}
		if got := [2]uintptr{s.size, s.align}; got != want {
			t.Errorf("%s: size and alignment %v here, %v in the table", s.name, got, want)
		}
		for _, f := range s.fields {
			if got, want := [2]uintptr{f.offset, f.size}, table.fields[s.name][f.name]; got != want {
				t.Errorf("%s.%s: offset and size %v here, %v in the table", s.name, f.name, got, want)
			}
		}
		if len(s.fields) != len(table.fields[s.name]) {
			t.Errorf("%s: %d fields here, %d in the table", s.name, len(s.fields), len(table.fields[s.name]))
		}
	}
	for name := range table.structs {
		if !seen[name] {
			t.Errorf("%s: in the ABI table, missing from cStructs", name)
		}
	}
}

func TestEveryConstantHasTheTablesValue(t *testing.T) {
	table := readABITable(t)
	here := cConstants()
	for name, value := range table.constants {
		if got, ok := here[name]; !ok || got != value {
			t.Errorf("%s: %d in the table, %d (present: %v) here", name, value, got, ok)
		}
	}
	for name := range here {
		if _, ok := table.constants[name]; !ok {
			t.Errorf("%s: not in the ABI table", name)
		}
	}
}
