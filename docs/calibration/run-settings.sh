# Sourced by the calibration sweeps (measure.sh, measure-netns.sh): the environment and the
# loom-perf arguments of one run. run_settings ALGO [LANES] sets the arrays `vars` (for env)
# and `args`: "auto" lets loom choose by its model, "autotune" by measuring at first use
# (LOOM_AUTOTUNE=1), any other name is forced with -A, on LANES lanes where given (> 0). Every
# run uses the sweep's own cache directory, $cache.
run_settings() {
  vars=(LOOM_TIMEOUT_MS=120000 LOOM_CACHE_DIR="$cache")
  args=()
  case $1 in
    auto) ;;
    autotune) vars+=(LOOM_AUTOTUNE=1) ;;
    *)
      args=(-A "$1")
      if ((${2:-0} > 0)); then vars+=(LOOM_LANES="$2"); fi
      ;;
  esac
}
