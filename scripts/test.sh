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
# PRIMUS_LOCAL_SLURM=0, one warning line is printed and the Slurm tests skip with a reason.
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
"$root/.venv/bin/python" -m pytest "${paths[@]}" "$@" || rc=$?
exit "$rc"
