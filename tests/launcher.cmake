# Tests of the local launcher, ckpt-launch. Each runs a short sh script with $0 set to the launcher; the ranks are
# small sh commands, so these tests need nothing from libckpt.

# ckpt_launcher_test(NAME SCRIPT): passes if the sh SCRIPT exits 0.
function(ckpt_launcher_test name script)
  add_test(NAME ${name} COMMAND sh -c "${script}" $<TARGET_FILE:ckpt-launch>)
  set_tests_properties(${name} PROPERTIES TIMEOUT 30)
endfunction()

ckpt_launcher_test(launcher_sets_rank_environment [=[
out=$("$0" -n 3 -- sh -c '
  test "$WORLD_SIZE" = 3 && test "$LOCAL_RANK" = "$RANK" && test "$LOCAL_WORLD_SIZE" = 3 &&
  test "$MASTER_ADDR" = 127.0.0.1 && test "$MASTER_PORT" -gt 0 && echo "rank $RANK port $MASTER_PORT"') || exit 1
echo "$out"
ranks=$(echo "$out" | cut -d" " -f1,2 | sort | tr "\n" " ")
ports=$(echo "$out" | cut -d" " -f4 | sort -u | wc -l)
test "$ranks" = "rank 0 rank 1 rank 2 " && test "$ports" -eq 1
]=])

ckpt_launcher_test(launcher_uses_the_given_port [=[
out=$("$0" -n 1 --port 23456 -- sh -c 'echo "$MASTER_PORT"') && test "$out" = 23456
]=])

ckpt_launcher_test(launcher_node_names_set_node_and_local_ranks [=[
out=$("$0" -n 3 --node-names a,a,b -- sh -c 'echo "$RANK $CKPT_NODE_NAME $LOCAL_RANK $LOCAL_WORLD_SIZE"') || exit 1
echo "$out"
test "$(echo "$out" | sort | tr "\n" "|")" = "0 a 0 2|1 a 1 2|2 b 0 1|"
]=])

ckpt_launcher_test(launcher_exits_with_failing_rank_code_and_names_it [=[
out=$("$0" -n 3 --grace 1 -- sh -c 'test "$RANK" = 1 && exit 3
  sleep 20' 2>&1)
code=$?
echo "$out"
test "$code" -eq 3 && echo "$out" | grep -q "rank 1 (pid [0-9]*) exited with code 3"
]=])

ckpt_launcher_test(launcher_reports_killed_rank_as_128_plus_signal [=[
out=$("$0" -n 2 --grace 1 -- sh -c 'test "$RANK" = 0 && kill -KILL $$
  sleep 20' 2>&1)
code=$?
echo "$out"
test "$code" -eq 137 && echo "$out" | grep -q "rank 0 (pid [0-9]*) was killed by signal 9"
]=])

ckpt_launcher_test(launcher_timeout_stops_ranks_and_exits_124 [=[
start=$(date +%s)
"$0" -n 2 --timeout 1 --grace 1 -- sleep 20
code=$?
elapsed=$(( $(date +%s) - start ))
test "$code" -eq 124 && test "$elapsed" -lt 10
]=])

ckpt_launcher_test(launcher_forwards_sigterm_to_ranks [=[
marks=$(mktemp -d) || exit 1
"$0" -n 2 -- sh -c "trap 'touch $marks/\$RANK; exit 0' TERM
  sleep 20 & wait" &
launcher=$!
sleep 1
kill -TERM "$launcher"
wait "$launcher"
code=$?
ls "$marks"
test "$code" -eq 143 && test -e "$marks/0" && test -e "$marks/1"
result=$?
rm -rf "$marks"
exit "$result"
]=])

ckpt_launcher_test(launcher_missing_program_exits_127 [=[
"$0" -n 2 -- /nonexistent/program
test $? -eq 127
]=])

ckpt_launcher_test(launcher_usage_errors_exit_2 [=[
for args in "" "-n 2" "-n 0 -- true" "-n 2 --node-names a -- true" "--bogus -n 1 -- true"; do
  "$0" $args
  code=$?
  test "$code" -eq 2 || { echo "ckpt-launch $args exited $code, expected 2"; exit 1; }
done
]=])

ckpt_launcher_test(launcher_free_port_prints_a_port [=[
port=$("$0" --free-port) && test "$port" -gt 0 && test "$port" -lt 65536
]=])
