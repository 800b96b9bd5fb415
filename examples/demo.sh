#!/usr/bin/env bash
# The main job: run the example jobs through a real worker, on real input
# (the Go toolchain's own source tree), and check each ends as its file says
# (labels.expect). Called by `make demo` after building paddock and the hooks.
# The temporary state directory is removed on exit unless KEEP_STATE=1 or
# the demo failed; then it is kept and its path printed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
paddock="$root/bin/paddock"
config="$root/examples/config.toml"

state=$(mktemp -d "${TMPDIR:-/tmp}/paddock-demo.XXXXXX")
export PADDOCK_STATE_DIR="$state"
GOROOT=$(go env GOROOT)
export GOROOT # passed to jobs by env_passthrough in examples/config.toml
worker_pid=
cleanup() {
  rc=$?
  if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  if [ "$rc" != 0 ]; then
    echo "demo: state directory kept for a look: $state"
  elif [ "${KEEP_STATE:-}" = 1 ]; then
    echo "demo: state directory kept (KEEP_STATE=1): $state"
  else
    rm -rf -- "$state"
  fi
}
trap cleanup EXIT

echo "== state directory: $state (removed on success; KEEP_STATE=1 keeps it)"
echo "== paddock probe"
"$paddock" probe || echo "(the sandbox is unusable here: confined jobs will fail closed)"

echo
echo "== paddock policy set examples/policy.toml (the hook chain and the ceilings)"
# The policy pins each module by sha256: fill in the digests of the
# modules `make hooks` just built, beside the policy so its relative paths
# still resolve.
policy="$root/examples/.policy.demo.toml"
sed -e "s/SHA256-OF-denylist.wasm/$(sha256sum bin/hooks/denylist.wasm | cut -d' ' -f1)/" \
    -e "s/SHA256-OF-tighten.wasm/$(sha256sum bin/hooks/tighten.wasm | cut -d' ' -f1)/" \
    examples/policy.toml > "$policy"
"$paddock" --config "$config" policy set "$policy"
rm -f -- "$policy"
"$paddock" --config "$config" policy show

echo
echo "== paddock check examples/jobs/hooks.toml (the hook chain, nothing runs)"
"$paddock" --config "$config" check examples/jobs/hooks.toml || true

echo
echo "== starting a worker (log: $state/worker.log)"
"$paddock" --config "$config" worker --concurrency 2 2>"$state/worker.log" &
worker_pid=$!

echo "== submitting examples/jobs/*.toml"
ids=$("$paddock" --config "$config" submit examples/jobs/*.toml | cut -f1)
echo "$(echo "$ids" | wc -w) jobs submitted"
"$paddock" --config "$config" wait --timeout 15m $ids >/dev/null || true

echo
echo "== paddock ls"
"$paddock" --config "$config" ls --limit 0

echo
echo "== what the hooks did (paddock show)"
for name in fetch-with-curl git-version-tightened; do
  "$paddock" --config "$config" show "$name" | grep -E '^(job|state|reason)|hook ' || true
done
echo
echo "== the fence at work (paddock show write-into-etc)"
"$paddock" --config "$config" show write-into-etc | grep -E '^(job|state|reason)|reason' || true
echo
echo "== an answer (paddock logs biggest-packages)"
"$paddock" --config "$config" logs biggest-packages

kill -TERM "$worker_pid"
wait "$worker_pid" || true
worker_pid=

# Every job must have ended in the state its labels.expect names.
status=0
for want in succeeded failed denied; do
  expected=$("$paddock" --config "$config" ls --limit 0 --label expect=$want --json | grep -c '"id"' || true)
  got=$("$paddock" --config "$config" ls --limit 0 --label expect=$want --state $want --json | grep -c '"id"' || true)
  printf '%-10s expected %2d, ended so %2d\n' "$want" "$expected" "$got"
  [ "$expected" = "$got" ] || status=1
done
if [ -e "$HOME/paddock-demo-escape.txt" ]; then
  echo "FENCE BREACH: $HOME/paddock-demo-escape.txt exists"; status=1
fi
if [ "$status" = 0 ]; then echo "demo: every job ended as its file says"; else echo "demo: some jobs did not end as expected (worker log: $state/worker.log)"; fi
exit $status
