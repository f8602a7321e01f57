#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/vm/two-node/rsh-test.sh - rsh.py on the host's loopback, no VM
# (a few seconds): output and exit status come back whole, a command
# killed by a signal reports 128+N, a client that goes away takes its
# command with it, no server is status 255, --stop ends the server.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rsh=$here/rsh.py
work=$(mktemp -d "${TMPDIR:-/tmp}/rsh-test.XXXXXX")
export RSH_PORT=
for p in $(shuf -i 20000-60000 -n 20); do
	if [ -z "$(ss -Htln "sport = :$p")" ]; then RSH_PORT=$p; break; fi
done
[ -n "$RSH_PORT" ] || { echo "rsh-test: no free port" >&2; exit 2; }
"$rsh" serve 127.0.0.1 "$RSH_PORT" > "$work/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
passed=0
failed=0
check() {
	if [ "$2" = "$3" ]; then
		echo "rsh-test: $1: ok"
		passed=$((passed + 1))
	else
		echo "rsh-test: $1: FAIL: got '$2', expected '$3'"
		failed=$((failed + 1))
	fi
}

RSH_WAIT=10 "$rsh" 127.0.0.1 true
check "server up" "$?" 0

out=$("$rsh" 127.0.0.1 'printf "%s\n" one two;' 'exit 3')
check "exit status" "$?" 3
check "output" "$out" $'one\ntwo'

"$rsh" 127.0.0.1 seq 1 300000 > "$work/seq"
check "300000 lines, status" "$?" 0
seq 1 300000 | cmp - "$work/seq" > /dev/null
check "300000 lines, bytes" "$?" 0

"$rsh" 127.0.0.1 'kill -9 $$'
check "killed by SIGKILL" "$?" 137

# The command writes its sleeper's pid, then waits; the client is killed.
"$rsh" 127.0.0.1 "sleep 300 & echo \$! > $work/pid; wait" &
client=$!
for _ in $(seq 50); do [ -s "$work/pid" ] && break; sleep 0.1; done
sleeper=$(cat "$work/pid" 2>/dev/null)
{ kill -9 "$client"; wait "$client"; } 2>/dev/null
if [ -n "$sleeper" ]; then
	for _ in $(seq 50); do kill -0 "$sleeper" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$sleeper" 2>/dev/null
	check "client gone, command killed (pid $sleeper)" "$?" 1
else
	check "client gone, command killed" "the command never started" "started"
fi

# A port that refuses for sure: bound by a holder of our own that never
# listens (a connect gets a reset), so nothing else can listen there
# meanwhile, as it could on any port picked by number.
python3 -c 'import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
time.sleep(600)' > "$work/closed-port" &
holder=$!
for _ in $(seq 50); do [ -s "$work/closed-port" ] && break; sleep 0.1; done
closed_port=$(cat "$work/closed-port")
if [ -n "$closed_port" ]; then
	RSH_PORT=$closed_port "$rsh" 127.0.0.1 true 2> "$work/noserver.err"
	check "no server (port $closed_port, bound and not listening)" "$?" 255
else
	check "no server" "no port bound to try" "a port"
fi
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

"$rsh" --stop 127.0.0.1
check "stop" "$?" 0
for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
kill -0 "$server" 2>/dev/null
check "server ended" "$?" 1

echo "rsh-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
