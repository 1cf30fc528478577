#!/usr/bin/env bash
# Runs the test suite (installing everything first when needed): ruff, then pytest.
#
#   bash scripts/test.sh [TIER] [pytest arguments]
#
# TIER: all (the default: README's and CI's command), unit (tests/unit: no subprocess, no training, under two
# minutes: the fast loop), integration (tests/integration: real runs, several processes) or slurm (tests/slurm: the
# local cluster). Arguments after it go to each pytest session.
#
# As root on Linux with apt, a local Slurm cluster (scripts/local_slurm.sh) is brought up first and stopped at the
# end, also on failure or Ctrl-C; SLURM_CONF and PRIMUS_REQUIRE_SLURM=1 are then exported, so the Slurm tests fail
# rather than skip. A cluster that already ran before (a developer's) is used and left running. Elsewhere, or with
# PRIMUS_LOCAL_SLURM=0, one warning line is printed and the Slurm tests skip with a reason.
#
# Sessions side by side (each prints its own summary; the exit status is non-zero when any fails):
# - the unit tier starts no process, so it runs as two sessions sharing its modules, one per core;
# - `all` with a cluster runs the Slurm tier (it mostly waits on the cluster) in the background beside the unit
#   tier, then the integration tier's tests that measure no time as two sessions side by side (one after the unit
#   tier, one after the Slurm tier; a session takes the next module the other has not: tests/integration/conftest.py,
#   each reports what it ran); the integration tests marked `timing` (tokens/s, timeouts of seconds) run last, alone.
# `scripts/test.sh integration` runs the whole integration tier in one session.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
# the suite starts a Python process a thousand times: let them reuse compiled modules (a machine may disable it)
unset PYTHONDONTWRITEBYTECODE

tier=all
case "${1:-}" in
  all|unit|integration|slurm) tier="$1"; shift ;;
esac

echo "[test] ruff check" >&2
"$root/.venv/bin/ruff" check --quiet "$root"

slurm="$root/scripts/local_slurm.sh"
slurm_stop_at_exit=0
# shellcheck disable=SC2317  # called by the EXIT trap
stop_slurm() {
  if (( slurm_stop_at_exit )); then
    slurm_stop_at_exit=0
    bash "$slurm" down >&2 || echo "[test] warning: stopping the local Slurm cluster failed" >&2
  fi
}
trap stop_slurm EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ "$tier" == unit || "$tier" == integration ]]; then
  :  # these tiers need no cluster
elif [[ "${PRIMUS_LOCAL_SLURM:-1}" == 0 ]]; then
  echo "[test] warning: PRIMUS_LOCAL_SLURM=0: no local Slurm cluster; the Slurm tests skip" >&2
elif [[ "$(uname -s)" != Linux || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[test] warning: no local Slurm cluster (needs root, Linux and apt); the Slurm tests skip" >&2
else
  # a cluster with any daemon running was started by someone else before us: use it, leave it running
  slurm_status="$(bash "$slurm" status 2>/dev/null || true)"
  if [[ "$slurm_status" == *" running "* ]]; then
    slurm_was_running=1
  else
    slurm_was_running=0
    slurm_stop_at_exit=1   # set before `up`: a partial bring-up is cleaned up too
  fi
  if bash "$slurm" up >/dev/null; then
    export SLURM_CONF="${PRIMUS_SLURM_HOME:-/var/tmp/primus-slurm}/etc/slurm.conf"
    export PRIMUS_REQUIRE_SLURM=1
    (( slurm_was_running )) && echo "[test] using the running local Slurm cluster (left running)" >&2
  else
    echo "[test] warning: the local Slurm cluster did not come up (see above); the Slurm tests skip" >&2
  fi
fi

rc=0
python="$root/.venv/bin/python"
# a tier that a -k or -m filter leaves empty (pytest's exit 5) fails nothing
tier_pytest() { local code=0; "$python" -m pytest "$@" || code=$?; (( code == 5 )) && code=0; return "$code"; }

# Sessions in the background: `beside NAME COMMAND...` starts one, its output into a file; `collect NAME` waits
# for it, prints the output under a heading and returns its status.
declare -A beside_pid=() beside_out=()
beside() {
  local name="$1"; shift
  beside_out[$name]="$(mktemp "${TMPDIR:-/tmp}/primus-test-tier.XXXXXX")"
  "$@" >"${beside_out[$name]}" 2>&1 &
  beside_pid[$name]=$!
}
collect() {
  local name="$1" code=0
  wait "${beside_pid[$name]}" || code=$?
  unset "beside_pid[$name]"
  echo "[test] $name" >&2
  cat "${beside_out[$name]}"
  rm -f "${beside_out[$name]}"
  (( code == 5 )) && code=0
  return "$code"
}
# shellcheck disable=SC2317  # called by the EXIT trap
stop_tiers() {
  local pid out
  for pid in "${beside_pid[@]}"; do kill "$pid" 2>/dev/null || true; done
  for out in "${beside_out[@]}"; do rm -f "$out"; done
  [[ -n "${share:-}" ]] && rm -rf "$share"
  [[ -n "${unit_share:-}" ]] && rm -rf "$unit_share"
  stop_slurm
}
trap stop_tiers EXIT

# The unit tier as two sessions side by side (it starts no process: one session keeps one core busy), sharing its
# modules: each takes the next one the other has not (tests/helpers/module_share.py), so that both end together.
unit_tier() {
  unit_share="$(mktemp -d "${TMPDIR:-/tmp}/primus-test-unit-share.XXXXXX")"
  beside "unit tier, the modules its other session took" env PRIMUS_TEST_SHARE="$unit_share" \
    "$python" -m pytest "$root/tests/unit" "$@"
  PRIMUS_TEST_SHARE="$unit_share" tier_pytest "$root/tests/unit" "$@" || rc=$?
  collect "unit tier, the modules its other session took" || rc=$?
  rm -rf "$unit_share"
  unit_share=""
}

# The Slurm tier, then this session's share of the integration tier's tests that measure no time (run in the
# background: a TERM stops the pytest it waits for).
slurm_then_integration() {
  local pid="" code=0 first=0
  trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; exit 143' TERM
  "$python" -m pytest "$root/tests/slurm" "$@" & pid=$!
  wait "$pid" || first=$?
  (( first == 5 )) && first=0
  echo "[test] integration tier, the modules this session took (the other session runs beside it)" >&2
  PRIMUS_TEST_TIMING=skip PRIMUS_TEST_SHARE="$share" "$python" -m pytest "$root/tests/integration" "$@" & pid=$!
  wait "$pid" || code=$?
  (( code == 5 )) && code=0
  (( first )) && code=$first
  return "$code"
}

case "$tier" in
  unit)
    echo "[test] unit tier, the modules this session took (the other session runs beside it)" >&2
    unit_tier "$@" ;;
  all)
    if [[ -n "${SLURM_CONF:-}" ]]; then
      share="$(mktemp -d "${TMPDIR:-/tmp}/primus-test-share.XXXXXX")"
      beside "slurm tier, then integration tier (the modules that session took)" slurm_then_integration "$@"
      echo "[test] unit tier, the modules this session took (its other session and the slurm tier run beside it)" >&2
      unit_tier "$@"
      echo "[test] integration tier but its timing tests, the modules this session took (the slurm tier or the" \
           "other integration session runs beside it)" >&2
      PRIMUS_TEST_TIMING=skip PRIMUS_TEST_SHARE="$share" tier_pytest "$root/tests/integration" "$@" || rc=$?
      collect "slurm tier, then integration tier (the modules that session took)" || rc=$?
      echo "[test] integration tier: its timing tests, alone" >&2
      PRIMUS_TEST_TIMING=only tier_pytest "$root/tests/integration" "$@" || rc=$?
    else
      echo "[test] unit tier, the modules this session took (the other session runs beside it)" >&2
      unit_tier "$@"
      echo "[test] integration and slurm tiers" >&2
      tier_pytest "$root/tests/integration" "$root/tests/slurm" "$@" || rc=$?
    fi ;;
  *)
    "$python" -m pytest "$root/tests/$tier" "$@" || rc=$? ;;
esac
exit "$rc"
