# The ckpt tool's verbs on the checkpoints of tests/cli/make_checkpoints.c: listings (objects, metadata keys, a
# manager's root), --json, cat --npy and the float8 formats read back by numpy and ml_dtypes, diff of two layouts
# and of a changed element, --help and usage errors. (tests/examples.cmake runs the older verbs on the reshard
# example's checkpoint.)

find_package(Python3 COMPONENTS Interpreter)
set(CKPT_CLI_CHECKPOINTS ${CMAKE_CURRENT_BINARY_DIR}/cli-checkpoints)

add_executable(cli_make_checkpoints ${CMAKE_CURRENT_SOURCE_DIR}/cli/make_checkpoints.c)
target_link_libraries(cli_make_checkpoints PRIVATE ckpt)
set_target_properties(cli_make_checkpoints PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF)
target_compile_options(cli_make_checkpoints PRIVATE -Wall -Wextra)

# Saving refuses an existing checkpoint, so every ctest run starts from an empty directory.
add_test(NAME cli_make_checkpoints
         COMMAND sh -c [=[rm -rf "$1" && exec "$0" "$1"]=] $<TARGET_FILE:cli_make_checkpoints> ${CKPT_CLI_CHECKPOINTS})
set_tests_properties(cli_make_checkpoints PROPERTIES TIMEOUT 60 FIXTURES_SETUP cli_checkpoints)

# ckpt_tool_test(NAME SCRIPT): the sh SCRIPT passes by exiting 0, or skips by exiting 77 after saying why, with
# $0 = the ckpt tool, $1 = the directory make_checkpoints filled, $2 = the Python interpreter. A script that writes
# does so under "$1/$name", its own.
function(ckpt_tool_test name script)
  add_test(NAME ${name} COMMAND sh -c "${script}" $<TARGET_FILE:ckpt_cli> ${CKPT_CLI_CHECKPOINTS}
                                ${Python3_EXECUTABLE} ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 60 FIXTURES_REQUIRED cli_checkpoints SKIP_RETURN_CODE 77)
endfunction()

ckpt_tool_test(ckpt_ls_lists_objects_and_metadata_keys [=[
out=$("$0" ls "$1/rows") || exit 1
echo "$out"
echo "$out" | grep -q "2 objects, 2 common entries" &&
echo "$out" | grep -Eq "^  rng +\[2\] +24$" &&
echo "$out" | grep -Eq "^  tokenizer +\[\] +7$" &&
echo "$out" | grep -Eq "^  seed +8 B +0x2a000000ff001000$" &&
echo "$out" | sed -n '/^metadata/,$p' | grep -qx "  run" &&
echo "$out" | sed -n '/^metadata/,$p' | grep -qx "  layout"
]=])

ckpt_tool_test(ckpt_ls_lists_a_manager_root_and_changes_nothing [=[
root="$1/$3"
rm -rf "$root" && cp -r "$1/root" "$root" || exit 1
mkdir "$root/step-000000000030.tmp-4242" "$root/step-000000000040" || exit 1
echo partial > "$root/step-000000000030.tmp-4242/part"
echo step-000000000020 > "$root/latest.tmp-77"
before=$(find "$root" -exec ls -ld --time-style=full-iso {} + | sort)
out=$("$0" ls "$root") || exit 1
echo "$out"
test "$before" = "$(find "$root" -exec ls -ld --time-style=full-iso {} + | sort)" || { echo "ls changed $root"; exit 1; }
echo "$out" | grep -q "latest -> step 20$" &&
echo "$out" | grep -Eq "^ +10 +[0-9]+ B$" &&
echo "$out" | grep -Eq "^ +20 +[0-9]+ B +latest$" &&
echo "$out" | grep -Eq "^  step-000000000030\.tmp-4242 +8 B$" &&
echo "$out" | grep -Eq "^  step-000000000040 +0 B$" &&
echo "$out" | grep -Eq "^  latest\.tmp-77 +18 B$" || exit 1
# A pointer to a step that did not commit: a load takes the newest committed step, and ls says so.
echo step-000000000040 > "$root/latest"
"$0" ls "$root" | grep -q "latest -> step 20 (the .latest. pointer names step 40, not committed" || exit 1
rm -rf "$root"
]=])

# Every --json output parses, and holds what the text shows; a failed verify is a result too (exit status 1).
ckpt_tool_test(ckpt_json_output_parses [=[
exec "$2" - "$0" "$1" <<'EOF'
import json, subprocess, sys
tool, root = sys.argv[1], sys.argv[2]
def run(*args, code=0):
    done = subprocess.run([tool, *args], capture_output=True, text=True)
    assert done.returncode == code, (args, done.returncode, done.stderr)
    return json.loads(done.stdout)
listing = run("ls", "--json", "--chunks", root + "/rows")
assert [o["key"] for o in listing["objects"]] == ["rng", "tokenizer"], listing["objects"]
assert listing["objects"][0]["grid"] == [2] and listing["objects"][0]["bytes"] == 24
assert listing["metadata"] == ["run", "layout"]
weights = [t for t in listing["tensors"] if t["key"] == "weights"][0]
assert weights["shape"] == [37, 24] and weights["dtype"] == "F32" and len(weights["chunks"]) == 2, weights
steps = run("ls", "--json", root + "/root")
assert [s["step"] for s in steps["steps"]] == [10, 20] and steps["latest"] == 20 and steps["uncommitted"] == []
assert run("verify", "--json", root + "/rows") == {"path": root + "/rows", "ok": True}
missing = run("verify", "--json", root + "/missing", code=1)
assert missing["ok"] is False and missing["status"] == "CKPT_E_NOT_FOUND", missing
assert run("meta", "--json", root + "/rows", "layout", "run") == {"layout": "rows", "run": "cli-test"}
diff = run("diff", "--json", root + "/rows", root + "/flipped", code=1)
assert diff["equal"] is False and diff["only_in_a"] == [] and diff["only_in_b"] == []
different = [t for t in diff["tensors"] if t["result"] != "equal"]
assert different == [{"key": "weights", "result": "different", "dtype": "F32", "shape": [37, 24],
                      "elements": 888, "differing_elements": 1, "max_abs_difference": 0.25}], different
assert run("diff", "--json", root + "/rows", root + "/columns")["equal"] is True
EOF
]=])

# Each dtype numpy knows, a box, and a 0-d tensor: np.load gives the shape, and the bytes cat --raw writes; the
# data starts 64-byte aligned. BF16 has no numpy dtype: refused, and no file is left.
ckpt_tool_test(ckpt_cat_npy_reads_back_in_numpy [=[
"$2" -c "import numpy" 2>/dev/null || { echo "$2 lacks numpy: not run"; exit 77; }
work="$1/$3"
rm -rf "$work" && mkdir -p "$work" || exit 1
for spec in weights "weights 3:2,7:5" steps scalar mask c64 f16; do
  name=$(echo "$spec" | tr ' :,' '___')
  "$0" cat --npy "$work/$name.npy" "$1/rows" $spec || exit 1
  "$0" cat --raw "$1/rows" $spec > "$work/$name.raw" || exit 1
done
"$0" cat --npy "$work/half.npy" "$1/rows" half 2> "$work/err"
test $? -eq 2 && grep -q "numpy has no dtype for BF16" "$work/err" && test ! -e "$work/half.npy" ||
  { cat "$work/err"; exit 1; }
"$2" - "$work" <<'EOF' || exit 1
import numpy as np, sys
work = sys.argv[1]
expected = {"weights": ((37, 24), np.float32), "weights_3_2_7_5": ((2, 5), np.float32), "steps": ((5,), np.int64),
            "scalar": ((), np.float64), "mask": ((7,), np.bool_), "c64": ((3,), np.complex64),
            "f16": ((6, 5), np.float16)}
for name, (shape, dtype) in expected.items():
    array = np.load(f"{work}/{name}.npy")
    raw = open(f"{work}/{name}.raw", "rb").read()
    data_offset = 10 + int.from_bytes(open(f"{work}/{name}.npy", "rb").read(10)[8:10], "little")
    assert array.shape == shape and array.dtype == dtype, (name, array.shape, array.dtype)
    assert array.tobytes() == raw and data_offset % 64 == 0, name
assert np.load(f"{work}/weights_3_2_7_5.npy")[0, 0] == (3 * 24 + 7) * 0.5 - 100
EOF
rm -rf "$work"
]=])

# The text of every code of the float8 formats and of float4_e2m1fn is the value ml_dtypes gives it.
ckpt_tool_test(ckpt_cat_prints_every_float8_code_as_ml_dtypes_reads_it [=[
"$2" -c "import ml_dtypes" 2>/dev/null || { echo "$2 lacks ml_dtypes: not run"; exit 77; }
exec "$2" - "$0" "$1/rows" <<'EOF'
import ml_dtypes, numpy as np, subprocess, sys
tool, checkpoint = sys.argv[1], sys.argv[2]
formats = {"f8.e4m3": "float8_e4m3fn", "f8.e5m2": "float8_e5m2", "f8.e4m3fnuz": "float8_e4m3fnuz",
           "f8.e5m2fnuz": "float8_e5m2fnuz", "f8.e4m3b11fnuz": "float8_e4m3b11fnuz", "f8.e3m4": "float8_e3m4",
           "f8.e4m3_ieee": "float8_e4m3", "f8.e8m0": "float8_e8m0fnu", "f4.e2m1": "float4_e2m1fn"}
for key, name in formats.items():
    text = subprocess.run([tool, "cat", checkpoint, key], check=True, capture_output=True, text=True).stdout
    printed = np.array(text.split(), dtype=np.float32)
    codes = 16 if key.startswith("f4") else 256
    expected = np.arange(codes, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float32)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(printed), nan), key
    assert np.array_equal(printed[~nan], expected[~nan]), key
    assert np.array_equal(np.signbit(printed[~nan]), np.signbit(expected[~nan])), key
EOF
]=])

ckpt_tool_test(ckpt_cat_prints_and_writes_common_entries [=[
test "$("$0" cat "$1/rows" config)" = "lr=0.1" &&
test "$("$0" cat "$1/rows" seed)" = "2a000000ff001000" &&
test "$("$0" cat --raw "$1/rows" seed | od -An -tx1 | tr -d ' \n')" = "2a000000ff001000" || exit 1
"$0" cat "$1/rows" config 0:1
test $? -eq 2 || exit 1
"$0" cat "$1/rows" no-such-key
test $? -eq 1
]=])

# The same values saved as row blocks and as column blocks: equal, read in whole tensors or in windows as small as
# 64 bytes (a part of one row) or one element.
ckpt_tool_test(ckpt_diff_of_two_layouts_is_equal [=[
for window in "" --window=64 "--window 1"; do
  out=$("$0" diff $window "$1/rows" "$1/columns") || { echo "$out"; echo "diff $window: exit $?"; exit 1; }
  test "$(echo "$out" | grep -c ": equal$")" -eq 16 || { echo "$out"; exit 1; }
  echo "$out" | tail -n 1 | grep -qx "the tensors are equal" || exit 1
done
]=])

ckpt_tool_test(ckpt_diff_reports_the_changed_element [=[
for window in "" --window=64; do
  out=$("$0" diff $window "$1/rows" "$1/flipped")
  code=$?
  echo "$out"
  test $code -eq 1 || { echo "exit $code, expected 1"; exit 1; }
  test "$(echo "$out" | grep -v ": equal$" | sed 1,2d)" = "weights: max abs difference 0.25 (1 of 888 elements differ)
the tensors differ" || exit 1
done
]=])

# Safetensors on one side: exported tensors compare equal, those left out are only in A, and a tensor exported
# in another dtype is reported as such.
ckpt_tool_test(ckpt_diff_compares_a_checkpoint_with_safetensors [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work" || exit 1
"$0" export --keys=weights,steps,half "$1/rows" "$work/same.safetensors" >/dev/null || exit 1
"$0" export --keys weights,half --dtype f32 "$1/rows" "$work/f32.safetensors" >/dev/null || exit 1
out=$("$0" diff "$1/rows" "$work/same.safetensors")
test $? -eq 1 || { echo "$out"; exit 1; }
echo "$out" | grep -qx "weights: equal" && echo "$out" | grep -qx "steps: equal" &&
echo "$out" | grep -qx "half: equal" && echo "$out" | grep -qx "only in A: scalar" || { echo "$out"; exit 1; }
out=$("$0" diff "$work/same.safetensors" "$work/f32.safetensors")
test $? -eq 1 || { echo "$out"; exit 1; }
echo "$out" | grep -qx "half: dtype BF16 in A, F32 in B" && echo "$out" | grep -qx "only in A: steps" ||
  { echo "$out"; exit 1; }
rm -rf "$work"
]=])

ckpt_tool_test(ckpt_help_of_every_verb_exits_0 [=[
out=$("$0" --help) || exit 1
for verb in ls verify cat meta diff export import version; do
  echo "$out" | grep -Eq "^  $verb " || { echo "--help does not list $verb"; exit 1; }
  "$0" $verb --help | grep -q "^Usage: ckpt $verb" || { echo "ckpt $verb --help failed"; exit 1; }
done
echo "$out" | grep -q "Exit status: 0 on success; 1 if" && echo "$out" | grep -q "2 on usage errors"
]=])

ckpt_tool_test(ckpt_cli_usage_errors_exit_2 [=[
for args in "diff $1/rows" "cat --raw --npy x $1/rows weights" "cat $1/rows weights 0:1" "cat $1/rows weights 0:38,0:1" \
            "cat --npy x $1/rows seed" "export --part=2/2 $1/rows o" "export --max-shard-size=5XB $1/rows o" \
            "diff --window=0 $1/rows $1/rows" "meta $1/rows" "verify --chunks $1/rows" "ls $1/rows $1/rows"; do
  "$0" $args 2>/dev/null
  code=$?
  test "$code" -eq 2 || { echo "ckpt $args exited $code, expected 2"; exit 1; }
done
]=])

# A full disk fails the export with CKPT_E_NO_SPACE and leaves no file, not even its temporary (root: a 4 KiB tmpfs,
# where the header's page alone fills it).
ckpt_tool_test(ckpt_export_to_a_full_disk_fails_and_leaves_nothing [=[
dir="$1/$3"
rm -rf "$dir" && mkdir -p "$dir/small" || exit 1
mount -t tmpfs -o size=4k tmpfs "$dir/small" 2>/dev/null || { echo "cannot mount a tmpfs (needs root): not run"; exit 77; }
trap 'umount "$dir/small"' EXIT
"$0" export --keys=weights "$1/rows" "$dir/small/hf" 2>"$dir/err"
code=$?
cat "$dir/err"
test "$code" -eq 1 && grep -q "NO_SPACE" "$dir/err" && test -z "$(ls -A "$dir/small/hf")"
]=])

# Import reads its source as a load does (tools/cli_convert.cc): checksums checked, files opened beneath the source
# without following links, never a FIFO. A failure names the tensor and the file, and the save never starts: no
# checkpoint, not even a temporary directory, is left where the import would have saved.
ckpt_tool_test(ckpt_import_of_a_checkpoint_keeps_its_tensors [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work" || exit 1
"$0" import "$1/tensors" "$work/copy" >/dev/null || exit 1
"$0" verify "$work/copy" && "$0" diff "$1/tensors" "$work/copy" | tail -n 1 | grep -qx "the tensors are equal" &&
test "$("$0" meta "$work/copy" layout)" = tensors || exit 1
rm -rf "$work"
]=])

# --compress stores the copy compressed (format 3), and it still holds the same tensors.
ckpt_tool_test(ckpt_import_compress_keeps_its_tensors [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work" || exit 1
"$0" import --compress "$1/tensors" "$work/copy" >/dev/null || exit 1
"$0" verify "$work/copy" && "$0" diff "$1/tensors" "$work/copy" | tail -n 1 | grep -qx "the tensors are equal" &&
"$0" ls --json "$work/copy" | "$2" -c "import json, sys; sys.exit(json.load(sys.stdin)['format'] != '3.0')" || exit 1
rm -rf "$work"
]=])

ckpt_tool_test(ckpt_import_refuses_a_flipped_data_bit [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work/out" && cp -r "$1/tensors" "$work/source" || exit 1
"$2" - "$0" "$work/source" <<'EOF' || exit 1
import json, subprocess, sys
tool, source = sys.argv[1], sys.argv[2]
listing = json.loads(subprocess.run([tool, "ls", "--json", "--chunks", source], check=True, capture_output=True).stdout)
chunk = [t for t in listing["tensors"] if t["key"] == "weights"][0]["chunks"][0]
with open(f"{source}/{chunk['file']}", "r+b") as data:
    data.seek(chunk["file_offset"] + 5)
    byte = data.read(1)[0]
    data.seek(chunk["file_offset"] + 5)
    data.write(bytes([byte ^ 0x10]))
EOF
"$0" import "$work/source" "$work/out/copy" 2>"$work/err"
code=$?
cat "$work/err"
test $code -eq 1 && grep -q "tensor 'weights'.*CKPT_E_CORRUPT.*checksum mismatch in file data/" "$work/err" &&
test -z "$(ls -A "$work/out")" || exit 1
rm -rf "$work"
]=])

ckpt_tool_test(ckpt_import_refuses_a_data_directory_linked_outside [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work/out" && cp -r "$1/tensors" "$work/source" || exit 1
mv "$work/source/data" "$work/outside" && ln -s ../outside "$work/source/data" || exit 1
"$0" import "$work/source" "$work/out/copy" 2>"$work/err"
code=$?
cat "$work/err"
test $code -eq 1 && grep -q "CKPT_E_CORRUPT.*symbolic link" "$work/err" && test -z "$(ls -A "$work/out")" || exit 1
rm -rf "$work"
]=])

ckpt_tool_test(ckpt_import_refuses_a_fifo_data_file_at_once [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work/out" && cp -r "$1/tensors" "$work/source" || exit 1
for file in "$work"/source/data/*; do rm "$file" && mkfifo "$file" || exit 1; done
timeout 20 "$0" import "$work/source" "$work/out/copy" 2>"$work/err"
code=$?
cat "$work/err"
test $code -eq 1 && grep -q "CKPT_E_CORRUPT.*not a regular file" "$work/err" && test -z "$(ls -A "$work/out")" ||
  { echo "exit $code, expected 1 (124: it hung)"; exit 1; }
rm -rf "$work"
]=])

# `ls` reads a manager root's `latest` itself, as the manager does: a FIFO (or a link) there is no pointer, and the
# listing neither hangs on it nor follows it.
ckpt_tool_test(ckpt_ls_of_a_root_whose_latest_is_a_fifo_does_not_hang [=[
root="$1/$3"
rm -rf "$root" && cp -r "$1/root" "$root" && rm "$root/latest" && mkfifo "$root/latest" || exit 1
out=$(timeout 20 "$0" ls "$root")
code=$?
echo "$out"
test $code -eq 0 && echo "$out" | grep -q "latest -> step 20 (the .latest. pointer is missing or unreadable" ||
  { echo "exit $code, expected 0 (124: it hung)"; exit 1; }
rm -rf "$root"
]=])

# cat --npy writes a new file as export does, under a temporary name renamed into place without replacing: a link
# planted at OUT is refused and its target untouched, as is an existing file, and no temporary is left.
ckpt_tool_test(ckpt_cat_npy_refuses_a_link_at_the_output [=[
work="$1/$3"
rm -rf "$work" && mkdir -p "$work" && echo precious > "$work/target" && ln -s target "$work/out.npy" || exit 1
"$0" cat --npy "$work/out.npy" "$1/rows" weights 2>"$work/err"
code=$?
cat "$work/err"
test $code -eq 1 && grep -q "out.npy exists" "$work/err" && test "$(cat "$work/target")" = precious || exit 1
"$0" cat --npy "$work/target" "$1/rows" weights 2>/dev/null
test $? -eq 1 && test "$(cat "$work/target")" = precious || exit 1
test "$(ls -A "$work" | tr '\n' ' ')" = "err out.npy target " || { ls -A "$work"; exit 1; }
"$0" cat --npy "$work/new.npy" "$1/rows" weights && test -f "$work/new.npy" && test ! -L "$work/new.npy" || exit 1
rm -rf "$work"
]=])

# Text output escapes what a checkpoint names (tests/cli/make_checkpoints.c's DIR/hostile: escape sequences, line
# breaks, C1 controls, DEL, a backslash): no control byte but each line's own newline reaches the terminal. --json
# gives back every string exactly, and refuses one that is not UTF-8 (here a path) instead of altering it.
ckpt_tool_test(ckpt_text_output_escapes_control_characters [=[
root="$1/$3"
rm -rf "$root" && cp -r "$1/root" "$root" && mkdir "$root/step-000000000030.tmp-$(printf '\033[2J\377')" || exit 1
"$2" - "$0" "$1/hostile" "$root" <<'EOF' || exit 1
import re, subprocess, sys
tool, hostile, root = sys.argv[1], sys.argv[2], sys.argv[3]
keys = ["esc\x1b[31mred\x1b[0m", "line\n  fake  F32  [1]  1  4", "c1\x85nel\x9b2J", "del\x7f back\\slash tab\t cr\r"]
shown = [r"esc\x1b[31mred\x1b[0m", r"line\n  fake  F32  [1]  1  4", r"c1\u0085nel\u009b2J",
         r"del\x7f back\\slash tab\t cr\r"]
def run(*args, code=0):
    done = subprocess.run([tool, *args], capture_output=True)
    assert done.returncode == code, (args, done.returncode, done.stderr)
    for stream in (done.stdout, done.stderr):
        text = stream.decode("utf-8")  # escaped output is always valid UTF-8
        raw = [c for c in text if (c < " " and c != "\n") or "\x7f" <= c <= "\x9f"]
        assert not raw, (args, raw, text)
    return done.stdout.decode(), done.stderr.decode()
listing = run("ls", hostile)[0].splitlines()
tensor_rows = listing[listing.index("tensors") + 2:listing.index("common")]
assert len(tensor_rows) == 4 and all(any(r.startswith(f"  {s}  ") for r in tensor_rows) for s in shown), tensor_rows
common = listing[listing.index("common") + 1:listing.index("common") + 3]
assert re.fullmatch("  " + re.escape(shown[0]) + " +4 B  0x1b5b324a", common[0]), common
assert re.fullmatch("  screen +10 B  0x636c6561720dc29b324a", common[1]), common
assert listing[-4:] == ["  " + s for s in shown], listing
assert run("meta", hostile, *keys)[0] == "\\x1b]0;title\\x07\ntwo\\nlines\n\\u009b31m\nplain\n"
diff = run("diff", hostile, hostile)[0].splitlines()
assert sorted(diff[2:6]) == sorted(s + ": equal" for s in shown), diff
assert run("cat", hostile, "screen")[0] == "636c6561720dc29b324a\n"  # not plain text: hex
assert "'no\\x1bkey'" in run("cat", hostile, "no\x1bkey", code=1)[1]
assert "no\\x1bkey" in run("meta", hostile, "no\x1bkey", code=1)[1]
leftover = [line for line in run("ls", root)[0].splitlines() if ".tmp-" in line]
assert leftover[0].split()[0] == r"step-000000000030.tmp-\x1b[2J\xff", leftover
EOF
rm -rf "$root"
]=])

ckpt_tool_test(ckpt_json_output_gives_back_hostile_keys_exactly [=[
exec "$2" - "$0" "$1/hostile" <<'EOF'
import json, os, re, subprocess, sys
tool, hostile = sys.argv[1], sys.argv[2]
keys = ["esc\x1b[31mred\x1b[0m", "line\n  fake  F32  [1]  1  4", "c1\x85nel\x9b2J", "del\x7f back\\slash tab\t cr\r"]
values = ["\x1b]0;title\x07", "two\nlines", "\x9b31m", "plain"]
def run(*args, code=0):
    done = subprocess.run([tool, *args], capture_output=True)
    assert done.returncode == code, (args, done.returncode, done.stderr)
    assert all(byte < 0x7f for byte in done.stdout), done.stdout  # ASCII: every other character escaped
    return done
listing = json.loads(run("ls", "--json", hostile).stdout)
assert sorted(t["key"] for t in listing["tensors"]) == sorted(keys), listing["tensors"]
assert listing["metadata"] == keys and listing["common"][0]["key"] == keys[0], listing
assert json.loads(run("meta", "--json", hostile, *keys).stdout) == dict(zip(keys, values))
diff = json.loads(run("diff", "--json", hostile, hostile).stdout)
assert sorted(t["key"] for t in diff["tensors"]) == sorted(keys), diff
# A path that is not UTF-8: no JSON rather than a U+FFFD in place of its byte.
bad = os.fsencode(hostile) + b"-\xff"
done = run("verify", "--json", bad, code=1)
assert done.stdout == b"" and re.search(rb"the string at /(path|error) is not valid UTF-8", done.stderr), done
EOF
]=])

# A listing costs what the reader's records cost, not a JSON tree or a row of text per tensor on top (once 1.5 GiB
# for 1.2 million tensors): ls and diff of 100,000 tiny tensors, in --json and in text, peak within the peak of
# `cat` of one of them (the reader alone; twice for diff's two readers) plus the header's size, and list every
# tensor. Peaks are max RSS as wait4 reports them, of children forked while the measuring process is small (a child
# starts with its parent's RSS); sanitizers' shadow memory would make them meaningless.
ckpt_tool_test(ckpt_ls_and_diff_of_many_tensors_stay_within_the_readers_memory [=[
test -z "$CKPT_TEST_SANITIZE" || { echo "-fsanitize=$CKPT_TEST_SANITIZE inflates RSS: not run"; exit 77; }
work="$1/$3"
rm -rf "$work" && mkdir -p "$work" || exit 1
"$2" - "$work/many.safetensors" 100000 <<'EOF' || exit 1
import struct, sys
path, count = sys.argv[1], int(sys.argv[2])
header = "{" + ",".join(f'"layer.{i:06d}.w":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * i},{4 * i + 4}]}}'
                        for i in range(count)) + "}"
with open(path, "wb") as out:
    out.write(struct.pack("<Q", len(header)) + header.encode() + bytes(4 * count))
EOF
"$2" - "$0" "$work" 100000 <<'EOF' || exit 1
import json, os, sys
tool, work, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
weights = f"{work}/many.safetensors"
with open(weights, "rb") as file:
    header_bytes = int.from_bytes(file.read(8), "little")
def run(name, *args):
    """Runs the tool with `args`, its output to work/name; returns its exit status and peak RSS in bytes."""
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(os.open(f"{work}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
            os.execv(tool, [tool, *args])
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024
code, reader = run("cat", "cat", weights, "layer.000000.w")
assert code == 0, code
print(f"header {header_bytes} bytes; cat of one tensor peaks at {reader} bytes")
runs = {"ls.json": (["ls", "--json", weights], 1), "ls.txt": (["ls", weights], 1),
        "diff.json": (["diff", "--json", weights, weights], 2), "diff.txt": (["diff", weights, weights], 2)}
peaks = {name: run(name, *args) for name, (args, _) in runs.items()}  # all before this process reads an output
bounds = {name: readers * reader + header_bytes for name, (_, readers) in runs.items()}
for name, (code, peak) in peaks.items():
    print(f"{name}: exit {code}, peak {peak} bytes, bound {bounds[name]}")
assert all(code == 0 and peak <= bounds[name] for name, (code, peak) in peaks.items())
keys = [f"layer.{i:06d}.w" for i in range(count)]
for name in runs:
    with open(f"{work}/{name}", "rb") as out:
        output = out.read()
    if name.endswith(".json"):
        assert [t["key"] for t in json.loads(output)["tensors"]] == keys, name
    else:
        listed = [line.split()[0].rstrip(b":").decode() for line in output.splitlines() if b"layer." in line]
        assert listed == keys, name
EOF
rm -rf "$work"
]=])
set_property(TEST ckpt_ls_and_diff_of_many_tensors_stay_within_the_readers_memory APPEND PROPERTY ENVIRONMENT
             CKPT_TEST_SANITIZE=${CKPT_SANITIZE})
