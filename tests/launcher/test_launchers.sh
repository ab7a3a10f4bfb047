#!/usr/bin/env bash
# braidCommInitFromEnv under the launchers people use: torchrun (standalone), Open MPI's mpirun,
# MPICH's mpirun (hydra, PMI_RANK/PMI_SIZE), Slurm's srun (only inside an allocation), and the
# variables srun and a PMI launcher set, exported by hand (no Slurm here). Each case runs
# all_reduce_perf (it initializes from the environment, validates its results) on 3 ranks and checks
# the exit status, the rank count, one distinct pid per rank and zero wrong values.
# A launcher that is not installed skips its case with the reason; exit 77 if every case skipped.
# Usage: test_launchers.sh path/to/all_reduce_perf
set -uo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 path/to/all_reduce_perf" >&2
  exit 2
fi
PERF=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
NP=3
ARGS=(-b 8 -e 1M -f 32 -n 3 -w 1 -c 1)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Whatever launched us must not leak into the cases (the real srun case gets it back).
export -p >"$TMP/outer-env"
outer_slurm_job=${SLURM_JOB_ID:-}
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(BRAID_[A-Z_]*\|RANK\|WORLD_SIZE\|LOCAL_RANK\|MASTER_[A-Z]*\|OMPI_[A-Za-z_]*\|PMIX_[A-Z_]*\|PMI_[A-Z_]*\|SLURM_[A-Z_]*\|TORCHELASTIC_[A-Z_]*\)=.*/\1/p')
export BRAID_TIMEOUT=30 BRAID_SOCKET_IFNAME=lo

passed=0 failed=0 skipped=0

free_port() {
  local p
  for _ in $(seq 50); do
    # Below the ephemeral range (32768-60999), whose ports outgoing connections take at any time.
    p=$((20000 + RANDOM % 12000))
    # A free TCP port and the one after it (torchrun-style variables make braid listen on MASTER_PORT+1).
    if ! (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null && ! (echo >"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo 29500
}

skip() {
  echo "SKIP $1: $2"
  skipped=$((skipped + 1))
}

# verify NAME RC: checks $TMP/out and $TMP/err of the case just run.
verify() {
  local name=$1 rc=$2 why=""
  local pids
  pids=$(sed -n 's/^#  *Rank  *[0-9]* Pid  *\([0-9]*\) on .*/\1/p' "$TMP/out" | sort -u | wc -l)
  if [[ $rc -ne 0 ]]; then
    why="exit status $rc"
  elif ! grep -q "^# all_reduce_perf: braid .*, $NP ranks$" "$TMP/out"; then
    why="rank 0 did not report $NP ranks"
  elif [[ $pids -ne $NP ]]; then
    why="$pids distinct rank pids, expected $NP"
  elif ! grep -q "^# Out of bounds values : 0 OK" "$TMP/out" || grep -q "wrong values" "$TMP/err"; then
    why="wrong values"
  fi
  if [[ -z $why ]]; then
    echo "ok   $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name: $why"
    sed 's/^/  stdout: /' "$TMP/out" | tail -n 15
    sed 's/^/  stderr: /' "$TMP/err" | tail -n 15
    failed=$((failed + 1))
  fi
}

# --- torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (braid listens on MASTER_PORT+1) --------------------
# torchrun 1.13 on Python 3.11 needs --redirects/--tee (else 'NoneType' object has no attribute 'get').
if ! command -v torchrun >/dev/null; then
  skip torchrun "torchrun not on PATH (package python3-torch)"
else
  timeout 180 torchrun --standalone --nproc_per_node "$NP" --redirects 2 --tee 2 --log_dir "$TMP/torchrun-logs" \
    --no_python "$PERF" "${ARGS[@]}" >"$TMP/out" 2>"$TMP/err"
  verify "torchrun --standalone --nproc_per_node $NP" $?
fi

# --- Open MPI: OMPI_COMM_WORLD_RANK/SIZE, address from BRAID_ROOT ------------------------------------------------
if ! command -v mpirun.openmpi >/dev/null; then
  skip "mpirun (Open MPI)" "mpirun.openmpi not on PATH (package openmpi-bin)"
else
  timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP" -x BRAID_ROOT="127.0.0.1:$(free_port)" \
    -x BRAID_TIMEOUT -x BRAID_SOCKET_IFNAME "$PERF" "${ARGS[@]}" >"$TMP/out" 2>"$TMP/err"
  verify "mpirun.openmpi -np $NP -x BRAID_ROOT" $?
fi

# --- MPICH's hydra: PMI_RANK/PMI_SIZE, address from MASTER_ADDR/MASTER_PORT ---------------------------------------
if ! command -v mpirun.mpich >/dev/null; then
  skip "mpirun (MPICH)" "mpirun.mpich not on PATH (package mpich)"
else
  # Hydra exports no job-wide id: the job names itself with BRAID_JOB_ID.
  timeout 120 mpirun.mpich -np "$NP" -genv MASTER_ADDR 127.0.0.1 -genv MASTER_PORT "$(free_port)" \
    -genv BRAID_JOB_ID "mpich-$$" "$PERF" "${ARGS[@]}" >"$TMP/out" 2>"$TMP/err"
  verify "mpirun.mpich -np $NP -genv MASTER_ADDR/MASTER_PORT/BRAID_JOB_ID" $?
fi

# --- by hand, as a launcher sets them: one process per rank ------------------------------------------------------
# run_by_hand NAME RANKVAR SIZEVAR EXTRA...: rank r gets RANKVAR=r SIZEVAR=NP and EXTRA (with @R@ replaced by r).
run_by_hand() {
  local name=$1 rankvar=$2 sizevar=$3
  shift 3
  local r pids=() rc=0 extra
  for ((r = 0; r < NP; r++)); do
    extra=("${@//@R@/$r}")
    if [[ $r -eq 0 ]]; then
      env "$rankvar=$r" "$sizevar=$NP" "${extra[@]}" timeout 120 "$PERF" "${ARGS[@]}" >"$TMP/out" 2>"$TMP/err" &
    else
      env "$rankvar=$r" "$sizevar=$NP" "${extra[@]}" timeout 120 "$PERF" "${ARGS[@]}" >/dev/null 2>>"$TMP/err.others" &
    fi
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  [[ -f $TMP/err.others ]] && cat "$TMP/err.others" >>"$TMP/err" && rm -f "$TMP/err.others"
  verify "$name" "$rc"
}

# srun exports SLURM_PROCID/SLURM_NTASKS (and SLURM_JOB_ID, SLURM_LOCALID, ...); the address comes from
# MASTER_ADDR/MASTER_PORT, as Slurm scripts set for torch.
port=$(free_port)
run_by_hand "srun-style variables (SLURM_PROCID/SLURM_NTASKS, MASTER_ADDR/PORT)" SLURM_PROCID SLURM_NTASKS \
  SLURM_JOB_ID=$$ SLURM_STEP_ID=0 SLURM_LOCALID=@R@ SLURM_NODEID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
# A PMI launcher: PMI_RANK/PMI_SIZE, and PMI_ID, which MPICH-style PMI sets per process. Such a launcher
# exports no job-wide id, so the job passes BRAID_JOB_ID (mpiexec -genv BRAID_JOB_ID ...).
run_by_hand "PMI variables (PMI_RANK/PMI_SIZE/PMI_ID, BRAID_ROOT, BRAID_JOB_ID)" PMI_RANK PMI_SIZE \
  PMI_ID=@R@ BRAID_ROOT="127.0.0.1:$(free_port)" BRAID_JOB_ID="pmi-$$"

# --- a real srun, inside a Slurm allocation only --------------------------------------------------------------------
if ! command -v srun >/dev/null; then
  skip srun "srun not on PATH (no Slurm here; the srun-style case above sets its variables by hand)"
elif [[ -z $outer_slurm_job ]]; then
  skip srun "not inside a Slurm allocation"
else
  (
    # shellcheck disable=SC1091
    source "$TMP/outer-env"
    timeout 180 srun -n "$NP" --export=ALL,BRAID_ROOT="$(hostname):$(free_port)",BRAID_TIMEOUT=30 \
      "$PERF" "${ARGS[@]}" >"$TMP/out" 2>"$TMP/err"
  )
  verify "srun -n $NP" $?
fi

echo "launchers: $passed passed, $failed failed, $skipped skipped"
if [[ $failed -gt 0 ]]; then exit 1; fi
if [[ $passed -eq 0 ]]; then exit 77; fi
exit 0
