# Integration tests: the C examples on several ranks through ckpt-launch (and once through mpirun), and the ckpt
# command-line tool on the checkpoints they write. Each example exits non-zero unless every element it checks
# matches. They need the examples (CKPT_BUILD_EXAMPLES).
if(NOT CKPT_BUILD_EXAMPLES)
  return()
endif()

set(CKPT_EXAMPLE_CHECKPOINTS ${CMAKE_CURRENT_BINARY_DIR}/example-checkpoints)

# Saving refuses an existing checkpoint, so every ctest run starts from an empty directory.
add_test(NAME examples_clean_checkpoints COMMAND ${CMAKE_COMMAND} -E rm -rf ${CKPT_EXAMPLE_CHECKPOINTS})
set_tests_properties(examples_clean_checkpoints PROPERTIES FIXTURES_SETUP example_checkpoints)

# ckpt_example_test(NAME RANKS FIXTURES COMMAND...): COMMAND on RANKS ranks, after the setup of FIXTURES (a list).
# Peers give up well before ctest's timeout, so a hang is reported by the library, naming the rank.
function(ckpt_example_test name ranks fixtures)
  ckpt_mp_test(${name} ${ranks} ${ARGN})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "example_checkpoints;${fixtures}"
                                          ENVIRONMENT CKPT_TIMEOUT_MS=60000)
endfunction()

foreach(ranks 1 2 4)
  ckpt_example_test(example_basic_${ranks}_ranks ${ranks} ""
                    $<TARGET_FILE:example_basic> ${CKPT_EXAMPLE_CHECKPOINTS}/basic-${ranks})
endforeach()

# reshard: TP=2 x DP=2 save on 4 ranks, then loads with other splits on 2, 3 and 5 ranks.
set(reshard_checkpoint ${CKPT_EXAMPLE_CHECKPOINTS}/reshard)
ckpt_example_test(example_reshard_save_4_ranks 4 "" $<TARGET_FILE:example_reshard> save ${reshard_checkpoint})
set_tests_properties(example_reshard_save_4_ranks PROPERTIES FIXTURES_SETUP reshard_checkpoint)
foreach(ranks 2 3 5)
  ckpt_example_test(example_reshard_load_${ranks}_ranks ${ranks} reshard_checkpoint
                    $<TARGET_FILE:example_reshard> load ${reshard_checkpoint})
endforeach()

# dist_optimizer: flattened ranges saved on 3 ranks, loaded as flattened ranges on 2 and as whole tensors on 1.
set(optimizer_checkpoint ${CKPT_EXAMPLE_CHECKPOINTS}/dist_optimizer)
ckpt_example_test(example_dist_optimizer_save_3_ranks 3 ""
                  $<TARGET_FILE:example_dist_optimizer> save ${optimizer_checkpoint})
set_tests_properties(example_dist_optimizer_save_3_ranks PROPERTIES FIXTURES_SETUP optimizer_checkpoint)
ckpt_example_test(example_dist_optimizer_load_dp_2_ranks 2 optimizer_checkpoint
                  $<TARGET_FILE:example_dist_optimizer> load-dp ${optimizer_checkpoint})
ckpt_example_test(example_dist_optimizer_load_full_1_rank 1 optimizer_checkpoint
                  $<TARGET_FILE:example_dist_optimizer> load-full ${optimizer_checkpoint})

# The basic example under OpenMPI's launcher: the library reads OMPI_COMM_WORLD_*; the store address comes by -x.
find_program(CKPT_MPIRUN mpirun)
if(CKPT_MPIRUN)
  add_test(NAME example_basic_mpirun_2_ranks
           COMMAND sh -c [=[
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
port=$("$1" --free-port) || exit 1
rm -rf "$3"
exec "$0" --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x "MASTER_PORT=$port" -x "CKPT_STORE_PORT=$port" "$2" "$3"
]=] ${CKPT_MPIRUN} $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:example_basic> ${CKPT_EXAMPLE_CHECKPOINTS}/basic-mpirun)
  set_tests_properties(example_basic_mpirun_2_ranks PROPERTIES TIMEOUT 120 ENVIRONMENT CKPT_TIMEOUT_MS=60000)
endif()

# A context that cannot be created has no rank yet: the message says what is wrong, never "rank -1".
add_test(NAME example_context_error_names_no_rank
         COMMAND sh -c [=[
out=$(RANK=5 WORLD_SIZE=2 "$0" /tmp/ckpt-never-written 2>&1) && exit 1
echo "$out"
echo "$out" | grep -q "RANK=5 is out of range" && ! echo "$out" | grep -q "rank -1"
]=] $<TARGET_FILE:example_basic>)
set_tests_properties(example_context_error_names_no_rank PROPERTIES TIMEOUT 30)

# The ckpt tool on the reshard checkpoint. ckpt_cli_test(NAME SCRIPT [NO_CHECKPOINT]): the sh SCRIPT passes by
# exiting 0, with $0 = the ckpt tool and $1 = the checkpoint's path (saved first unless NO_CHECKPOINT).
function(ckpt_cli_test name script)
  add_test(NAME ${name} COMMAND sh -c "${script}" $<TARGET_FILE:ckpt_cli> ${reshard_checkpoint})
  set_tests_properties(${name} PROPERTIES TIMEOUT 60)
  if(NOT "NO_CHECKPOINT" IN_LIST ARGN)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "example_checkpoints;reshard_checkpoint")
  endif()
endfunction()

ckpt_cli_test(ckpt_verify_accepts_a_saved_checkpoint [=[
out=$("$0" verify "$1") && echo "$out" && echo "$out" | grep -q "^OK"
]=])

ckpt_cli_test(ckpt_ls_lists_tensors_common_and_metadata [=[
out=$("$0" ls --chunks "$1") || exit 1
echo "$out"
echo "$out" | grep -q "saved by 4 ranks" &&
echo "$out" | grep -Eq "^  attn\.qkv +F32 +\[8, 6\] +[0-9]+ +192$" &&
echo "$out" | grep -Eq "^  mlp\.out +F64 +\[6, 10\] +[0-9]+ +480$" &&
echo "$out" | grep -Eq "^  embed +I32 +\[8, 4\] +[0-9]+ +128$" &&
echo "$out" | grep -Eq "^  step +8 B" &&
echo "$out" | sed -n '/^metadata/,$p' | grep -qx "  layout"
]=])

ckpt_cli_test(ckpt_cat_prints_a_box [=[
out=$("$0" cat "$1" embed 2:1,0:4) || exit 1
echo "$out"
echo "$out" | awk 'NF == 4 && $2 == $1 + 1 && $3 == $1 + 2 && $4 == $1 + 3 { ok = 1 } END { exit !(ok && NR == 1) }'
]=])

ckpt_cli_test(ckpt_meta_prints_the_value [=[
test "$("$0" meta "$1" layout)" = tp2-dp
]=])

ckpt_cli_test(ckpt_verify_rejects_a_truncated_data_file [=[
copy="$1-truncated"
rm -rf "$copy" && cp -r "$1" "$copy" || exit 1
file=$(find "$copy" -type f ! -name MANIFEST | head -n 1)
test -n "$file" || { echo "no data file in $copy"; exit 1; }
: > "$file"
"$0" verify "$copy"
code=$?
rm -rf "$copy"
test "$code" -eq 1
]=])

ckpt_cli_test(ckpt_missing_checkpoint_exits_1 [=[
"$0" ls "$1-does-not-exist"
test $? -eq 1
]=] NO_CHECKPOINT)

ckpt_cli_test(ckpt_usage_errors_exit_2 [=[
for args in "" "ls" "verify" "cat $1" "bogus $1" "ls --bogus $1" "export $1" "export --dtype=x $1 o" "import $1"; do
  "$0" $args
  code=$?
  test "$code" -eq 2 || { echo "ckpt $args exited $code, expected 2"; exit 1; }
done
]=] NO_CHECKPOINT)

ckpt_cli_test(ckpt_export_and_import_round_trip_the_tensors [=[
work="$1-convert"
rm -rf "$work" && mkdir -p "$work" || exit 1
"$0" export --max-shard-size=300 --keys=attn.qkv,mlp.out "$1" "$work/hf" || exit 1
test -f "$work/hf/model.safetensors.index.json" && test -f "$work/hf/model-00002-of-00002.safetensors" ||
  { ls -l "$work/hf"; echo "expected two shards and an index"; exit 1; }
"$0" import "$work/hf" "$work/native" || exit 1
"$0" verify "$work/native" | grep -q "^OK" || exit 1
for key in attn.qkv mlp.out; do
  test "$("$0" cat --raw "$1" $key | cksum)" = "$("$0" cat --raw "$work/native" $key | cksum)" ||
    { echo "$key differs after export and import"; exit 1; }
  test "$("$0" cat --raw "$1" $key | cksum)" = "$("$0" cat --raw "$work/hf" $key | cksum)" ||
    { echo "$key differs when read from the exported files"; exit 1; }
done
"$0" export "$1" "$work/hf" 2>"$work/err"
test $? -eq 1 && grep -q "ALREADY_EXISTS\|already exists" "$work/err" || { cat "$work/err"; exit 1; }
"$0" export --dtype=bf16 --keys=attn.qkv "$1" "$work/half.safetensors" || exit 1
"$0" ls "$work/half.safetensors" | grep -Eq "^  attn\.qkv +BF16 +\[8, 6\]" || { "$0" ls "$work/half.safetensors"; exit 1; }
"$0" export --dtype=i32 "$1" "$work/bad.safetensors"
test $? -eq 1 || exit 1
rm -rf "$work"
]=])

# reshard across simulated nodes: the manifest records both nodes, and a load on differently named nodes works.
add_test(NAME example_reshard_on_two_nodes
         COMMAND sh -c [=[
checkpoint="$3/reshard-two-nodes"
rm -rf "$checkpoint"
"$0" -n 4 --node-names a,a,b,b -- "$1" save "$checkpoint" || exit 1
"$2" ls "$checkpoint" | grep -q "saved by 4 ranks on 2 nodes" || { echo "the manifest lacks the 2 nodes"; exit 1; }
"$0" -n 3 --node-names x,y,y -- "$1" load "$checkpoint"
]=] $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:example_reshard> $<TARGET_FILE:ckpt_cli> ${CKPT_EXAMPLE_CHECKPOINTS})
set_tests_properties(example_reshard_on_two_nodes PROPERTIES TIMEOUT 120 ENVIRONMENT CKPT_TIMEOUT_MS=60000
                                                             FIXTURES_REQUIRED example_checkpoints)

# memory_tier: 2 ranks train to step 7 and are killed; the agent has step 7 (and step 5) on storage by then; 3 ranks
# resume at step 7 from memory and train to step 12, ending cleanly; the agent writes step 10 and exits.
add_test(NAME example_memory_tier_crash_and_resume
         COMMAND bash -c [=[
set -u
launch=$0 example=$1 root=$2/memory-tier cli=$3
export CKPT_JOB_ID=example-memory-tier-$$ CKPT_AGENT_SHM_ROOT=/dev/shm/ckpt-example-$$ CKPT_TIMEOUT_MS=60000
agent="ckpt-agent --job-id $CKPT_JOB_ID "
trap 'pkill -TERM -f -- "$agent"; sleep 1; pkill -KILL -f -- "$agent"; rm -rf "$CKPT_AGENT_SHM_ROOT"' EXIT
rm -rf "$root" && mkdir -p "$CKPT_AGENT_SHM_ROOT"
"$launch" -n 2 -- "$example" "$root" 7 crash
for i in $(seq 200); do [ -f "$root/step-000000000007/MANIFEST" ] && break; sleep 0.1; done
"$cli" verify "$root/step-000000000005" && "$cli" verify "$root/step-000000000007" || exit 1
out=$("$launch" -n 3 -- "$example" "$root" 12) || exit 1
echo "$out"
echo "$out" | grep -q "resumed at step 7 on 3 ranks" || exit 1
for i in $(seq 200); do pgrep -f -- "$agent" >/dev/null || break; sleep 0.1; done
"$cli" verify "$root/step-000000000010" || exit 1
[ ! -e "$root/step-000000000012" ] && [ ! -e "$root/step-000000000011" ]
]=] $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:example_memory_tier> ${CKPT_EXAMPLE_CHECKPOINTS} $<TARGET_FILE:ckpt_cli>)
set_tests_properties(example_memory_tier_crash_and_resume PROPERTIES TIMEOUT 120
                     FIXTURES_REQUIRED example_checkpoints)
