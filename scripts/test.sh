#!/usr/bin/env bash
# Runs the test suite (installing everything first when needed): ruff, then pytest.
#
#   bash scripts/test.sh [TIER] [pytest arguments]
#
# TIER: all (the default: README's and CI's command), unit (tests/unit: no subprocess, no training, under a
# minute: the fast loop), integration (tests/integration: real runs, several processes) or slurm (tests/slurm: the
# local cluster). Arguments after it go to pytest.
#
# As root on Linux with apt, a local Slurm cluster (scripts/local_slurm.sh) is brought up first and stopped at the
# end, also on failure or Ctrl-C; SLURM_CONF and PRIMUS_REQUIRE_SLURM=1 are then exported, so the Slurm tests fail
# rather than skip. A cluster that already ran before (a developer's) is used and left running. Elsewhere, or with
# PRIMUS_LOCAL_SLURM=0, one warning line is printed and the Slurm tests skip with a reason. With a cluster, `all`
# runs the Slurm tier beside the unit tier (it mostly waits on the cluster), then the integration tier.
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
case "$tier" in
  all) paths=("$root/tests") ;;
  *) paths=("$root/tests/$tier") ;;
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
if [[ "$tier" == all && -n "${SLURM_CONF:-}" ]]; then
  # The Slurm tier spends most of its time waiting on the cluster (a node's timeout, a requeue, the queue), the
  # unit tier starts no process: the two run side by side (the Slurm tier's output follows the unit tier's),
  # then the integration tier runs alone. Each pytest session prints its own summary.
  # a tier that a -k or -m filter leaves empty (pytest's exit 5) fails nothing
  tier_pytest() { local code=0; "$python" -m pytest "$@" || code=$?; (( code == 5 )) && code=0; return "$code"; }
  slurm_out="$(mktemp "${TMPDIR:-/tmp}/primus-slurm-tier.XXXXXX")"
  tier_pytest "$root/tests/slurm" "$@" >"$slurm_out" 2>&1 &
  slurm_tier_pid=$!
  # shellcheck disable=SC2317  # called by the EXIT trap
  stop_tiers() { [[ -n "${slurm_tier_pid:-}" ]] && kill "$slurm_tier_pid" 2>/dev/null; stop_slurm; }
  trap stop_tiers EXIT
  echo "[test] unit tier (the slurm tier runs beside it)" >&2
  tier_pytest "$root/tests/unit" "$@" || rc=$?
  slurm_rc=0
  wait "$slurm_tier_pid" || slurm_rc=$?
  slurm_tier_pid=""
  echo "[test] slurm tier" >&2
  cat "$slurm_out"
  rm -f "$slurm_out"
  (( slurm_rc )) && rc=$slurm_rc
  echo "[test] integration tier" >&2
  tier_pytest "$root/tests/integration" "$@" || rc=$?
else
  "$python" -m pytest "${paths[@]}" "$@" || rc=$?
fi
exit "$rc"
